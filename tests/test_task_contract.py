"""The task contract from the outside: examples/tasks/tfmr-reverse, a pip package written from
docs/plugins.md's "Writing a task" that imports only lab.task, installed by pip (no index, no
build isolation) into a folder of its own and used through the CLI; and a task that lacks what
the contract requires, refused by name before anything is trained."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "examples" / "tasks" / "tfmr-reverse"


def _install(src: Path, site: Path) -> None:
    if subprocess.run([sys.executable, "-c", "import setuptools"]).returncode:
        pytest.skip("setuptools is not installed, so pip cannot build the package offline")
    built = site.parent / ("build-" + src.name)
    shutil.copytree(src, built)              # pip leaves build/ and *.egg-info beside the source
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                           "--no-build-isolation", "--disable-pip-version-check",
                           "--target", str(site), str(built)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The reverse package installed by pip into a folder of its own: PYTHONPATH to reach it."""
    tmp = tmp_path_factory.mktemp("reverse")
    _install(PACKAGE, tmp / "site")
    return os.pathsep.join([str(tmp / "site"), str(ROOT)])


@pytest.fixture(scope="module")
def lab(site, tmp_path_factory):
    """Run `python -m lab ...` with the reverse package installed, on a store of its own."""
    tmp = tmp_path_factory.mktemp("reverse-cli")
    env = {**os.environ, "PYTHONPATH": site, "LAB_STORE": str(tmp / "store")}

    def run(*args, ok=True):
        done = subprocess.run([sys.executable, "-m", "lab", *args], cwd=tmp, env=env,
                              capture_output=True, text=True, timeout=600)
        assert (done.returncode == 0) == ok, done.stdout[-3000:] + done.stderr[-3000:]
        return done
    return run


def test_the_package_imports_only_the_contract():
    code = (PACKAGE / "src" / "tfmr_reverse" / "task.py").read_text()
    imports = {line.split()[1] for line in code.splitlines() if line.startswith(("from lab", "import lab"))}
    assert imports == {"lab.task"}


def test_a_task_from_the_docs_trains_and_speaks_its_own_score(lab):
    """Listed with its settings; trained from the CLI (the progress line names its metric, the
    checkpoint is kept by it); evaluate reports it by name with its interval and unit; the
    logit lens reads the model."""
    listed = {e["name"]: e for e in json.loads(lab("plugins", "--json").stdout)["task"]}
    assert [p["name"] for p in listed["reverse"]["params"]] == ["min_len", "max_len", "train_words",
                                                                "dev_words"]
    out = lab("train", "--preset", "reverse-small", "--name", "rev",    # the package's own preset
              "--set", "task.train_words=256", "--set", "task.dev_words=24", "--set", "epochs=1").stdout
    line = [s for s in out.splitlines() if s.startswith("epoch 1: dev perplexity")][0]
    assert "dev exact match" in line and " right)" in line and "best, saved" in line, line
    assert "evaluating 24 dev words" in out

    scored = json.loads(lab("evaluate", "--checkpoint", "rev", "--split", "dev", "--n", "20",
                            "--json").stdout)
    match = scored["metrics"]["exact_match"]
    assert scored["task"] == "reverse" and scored["n"] == 20 and scored["unit"] == "words"
    assert 0 <= match["interval"][0] <= match["value"] <= match["interval"][1] <= 1
    assert all("=" in s for s in scored["samples"])
    said = lab("evaluate", "--checkpoint", "rev", "--split", "test", "--n", "20").stdout
    assert said.startswith("rev on test (20 words): exact match ") and "%, " not in said[:30]

    lens = json.loads(lab("lens", "--checkpoint", "rev", "--text", "abc=", "--json").stdout)
    assert lens
    ablated = json.loads(lab("ablate", "--checkpoint", "rev", "--heads", "1.1", "--split", "dev",
                             "--n", "20", "--json").stdout)
    assert ablated["n"] == 20 and "reverse dev words" in json.dumps(ablated), ablated


def test_a_task_from_the_docs_trains_through_the_api_and_the_job_speaks_its_score(site, tmp_path):
    """/start_job takes the package's task and its own settings by name; the worker's job trains
    it, keeps its checkpoint by the task's metric and says so; the checkpoint is the task's."""
    from gradio_client import Client

    from lab.storage import checkpoints
    from tests.conftest import serving
    store = tmp_path / "store"
    with serving(store, tmp_path / "app.log", PYTHONPATH=site) as url:
        client = Client(url, verbose=False)
        queued = client.predict(name="rev-api", preset="tiny", parent="", api_name="/start_job",
                                settings={"task": "reverse", "task.train_words": 128,
                                          "task.dev_words": 16, "epochs": 1, "batch_size": 32,
                                          "early_stop": "exact_match"})
        deadline = time.time() + 240
        while "data-status='done'" not in (shown := client.predict(
                job=str(queued["job"]), api_name="/job_status"))[0]:
            assert time.time() < deadline and "data-status='failed'" not in shown[0], shown[2]
            time.sleep(1)
        assert "dev exact match" in shown[2], shown[2]
        assert "done: best epoch 1 by dev exact match " in shown[2], shown[2]    # kept by it
    ck = checkpoints.load("rev-api", store=store)
    assert ck.meta["task"] == "reverse" and ck.meta["train"]["settings"]["task"]["dev_words"] == 16


BROKEN = '''
from lab.task import TASKS


class Broken:
    def scratch_tokenizer(self, data_dir, cfg):
        raise AssertionError("never asked")


@TASKS.register("broken", "a task without prepare", objectives=("lm",),
                keep_best={"perplexity": {"score": "dev_perplexity", "higher": False}})
def broken():
    return Broken()
'''


def test_a_task_that_lacks_what_the_contract_requires_is_refused_by_name(tmp_path):
    site = tmp_path / "site"
    (site / "broken_task-0.1.dist-info").mkdir(parents=True)
    (site / "broken_task.py").write_text(BROKEN)
    (site / "broken_task-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: broken-task\nVersion: 0.1\n")
    (site / "broken_task-0.1.dist-info" / "entry_points.txt").write_text(
        "[tfmr_lab.plugins]\nbroken = broken_task\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
           "LAB_STORE": str(tmp_path / "store")}
    done = subprocess.run([sys.executable, "-m", "lab", "train", "--preset", "tiny", "--name", "b",
                           "--set", "task=broken"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("error: task plugin 'broken' (package broken_task) has no "
                                   "prepare(): a task provides scratch_tokenizer, prepare "
                                   "(docs/plugins.md)"), done.stderr
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").iterdir())


def test_the_docs_section_names_the_whole_contract_and_shows_the_package_s_own_code():
    import re

    import lab.task
    page = (ROOT / "docs" / "plugins.md").read_text()
    section = page[page.index("## Writing a task"):page.index("## Writing a third-party plugin package")]
    assert not [n for n in lab.task.__all__ if f"`{n}" not in section and n != "Task"]
    assert all(f"`{m}(" in section for m in lab.task.REQUIRED)
    shown = re.search(r"```python\n(.*?)```", section, re.S).group(1).splitlines()
    code = iter((PACKAGE / "src" / "tfmr_reverse" / "task.py").read_text().splitlines())
    assert all(any(line == c for c in code) for line in shown if line.strip()), \
        "the docs' ReverseTask is not the package's, line for line"
