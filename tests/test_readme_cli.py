"""The README's command line quick start, run as written: `source .venv/bin/activate` in the
project, then every other line from a folder of its own, through the installed `lab` command, on a
store holding checkpoints under the names the Getting started panel gives them."""
import os
import re
import subprocess

import pytest

from lab.config import ModelConfig
from lab.inputs import tokenizers
from lab.modeling.model import build
from lab.storage import checkpoints
from tests.conftest import ROOT


def _quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Command line quick start"):text.index("## API quick start")]
    return re.search(r"```\n(.*?)```", section, re.S).group(1).strip().splitlines()


def test_the_quick_start_runs_as_written_from_any_folder(tmp_path, corpus_dir):
    lines = _quick_start()
    assert lines[0].startswith("source .venv/bin/activate")
    assert all(line.startswith("lab ") for line in lines[1:]), lines
    if not (ROOT / ".venv" / "bin" / "lab").exists():
        pytest.fail("make install puts the `lab` command in .venv/bin (pip install -e .)")
    store = tmp_path / "store"
    # the panel's scratch model, the one the lines read (untrained here: they only read it)
    model = build(ModelConfig(model="gpt2", n_layer=2, n_head=2, n_embd=32, n_positions=64))
    checkpoints.save(model, tokenizers.gpt2(), "quick-scratch", store,
                     provenance={"source": "scratch", "task": "captions"})
    assert {w for line in lines for w in re.findall(r"--checkpoint (\S+)", line)} == {"quick-scratch"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = "\n".join([f"cd {ROOT}", lines[0], f"cd {elsewhere}"] +
                       [f"{line} > out.txt 2>&1 || {{ cat out.txt; echo 'FAILED: {line}'; exit 1; }}"
                        for line in lines[1:]])
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(LAB_STORE=str(store), PATH="/usr/bin:/bin")      # the corpus where it is by default
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert (elsewhere / "view.html").stat().st_size > 0
    assert (elsewhere / "smol-ft-hf" / "config.json").exists()
    assert (elsewhere / "smol-ft.gguf").stat().st_size > 0 and (elsewhere / "smol-ft.Modelfile").exists()
    assert {"smol-1-15-30", "smol-ft", "win"} <= set(checkpoints.names(store))
