"""GGUF files the lab writes, run by llama.cpp itself (llama-cpp-python): for a caption model
trained here from scratch (gpt2 family, GPT-2's tokenizer) and SmolLM2-135M imported whole (llama
family, its own tokenizer), the lab's greedy tokens and last-position logits beside llama.cpp's.

    CMAKE_ARGS="-DGGML_NATIVE=OFF" python3 -m venv /tmp/llvenv && /tmp/llvenv/bin/pip install llama-cpp-python==0.3.36
    .venv/bin/python experiments/gguf_llamacpp/run.py /tmp/llvenv/bin/python > experiments/gguf_llamacpp/log.txt
    LAB_STORE=S .venv/bin/python experiments/gguf_llamacpp/run.py /tmp/llvenv/bin/python NAME "PROMPT"

The lab's side runs in this process; llama.cpp's in the given interpreter (its own venv: it is not
one of the lab's dependencies), reading only the .gguf file."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PROMPT = "A man riding a"
NEW = 12

LLAMA_SIDE = r"""
import json, sys
import numpy as np
from llama_cpp import Llama
path, prompt, new = sys.argv[1], sys.argv[2], int(sys.argv[3])
llm = Llama(model_path=path, n_ctx=64, logits_all=True, verbose=False, n_threads=2)
ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
llm.eval(ids)
last = np.array(llm.scores[len(ids) - 1], dtype=np.float64).tolist()
out = []
for _ in range(new):
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    out.append(tok)
    if tok == llm.token_eos():
        break
    llm.eval([tok])
print(json.dumps({"ids": ids, "greedy": out, "last": last}))
"""


def lab_side(ck, prompt: str):
    from lab.config import DecodeConfig
    from lab.modeling.generate import generate
    tok = ck.tokenizer
    ids = [tok.bos_id if tok.bos_id is not None else tok.eos_id] + tok.encode(prompt)
    model = ck.model.eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    last = getattr(out, "logits", out)[0, -1].double()
    (new, _, _), = generate(model, [ids], DecodeConfig(decoder="greedy", max_new_tokens=NEW), tok.eos_id)
    return ids, new + ([tok.eos_id] if len(new) < NEW else []), last      # stopped at end-of-text


def side_by_side(name: str, store, work: Path, llama_python: str, prompt: str, kinds) -> None:
    """The lab's greedy tokens and last logits for `prompt`, then llama.cpp's from each GGUF."""
    from lab.storage import checkpoints, gguf_export
    ck = checkpoints.load(name, store)
    ids, new, last = lab_side(ck, prompt)
    print(f"{name}: {ck.config.model}, {ck.config.n_layer} blocks, tokenizer {ck.tokenizer.kind}; "
          f"the lab: {ids} -> {new} {ck.tokenizer.decode(new)!r}")
    for kind in kinds:
        path = gguf_export.export_gguf(name, work / f"{name}-{kind}.gguf", kind, store)
        done = subprocess.run([llama_python, "-c", LLAMA_SIDE, str(path), prompt, str(NEW)],
                              capture_output=True, text=True, check=True)
        theirs = json.loads(done.stdout.strip().splitlines()[-1])
        gap = (torch.tensor(theirs["last"]) - last).abs().max().item() / last.abs().max().item()
        print(f"  {kind:5s} {path.stat().st_size / 1e6:7.1f} MB  llama.cpp: same tokens in "
              f"{theirs['ids'] == ids}, greedy {sum(a == b for a, b in zip(theirs['greedy'], new))}"
              f"/{len(new)} the lab's, last logits within {gap:.2%} of the largest"
              + ("" if theirs["greedy"] == new else f"; llama.cpp: {ck.tokenizer.decode(theirs['greedy'])!r}"))


def main(llama_python: str, checkpoint: str | None = None, prompt: str = PROMPT) -> None:
    """Without a checkpoint: a caption model trained here and SmolLM2 imported whole, in a new
    store. With one: that checkpoint of $LAB_STORE, continuing `prompt`."""
    from lab.storage.smollm2 import import_smollm2
    work = Path(tempfile.mkdtemp(prefix="gguf-llamacpp-"))
    if checkpoint:
        side_by_side(checkpoint, os.environ.get("LAB_STORE"), work, llama_python, prompt, ("f16", "q8_0"))
        return
    store = work / "store"
    os.environ["LAB_STORE"] = str(store)
    subprocess.run([sys.executable, "-m", "lab", "train", "--preset", "tiny", "--name", "captions",
                    "--set", "max_steps=60"], cwd=ROOT, check=True, capture_output=True)
    import_smollm2("smollm2", None, store)
    for name in ("captions", "smollm2"):
        side_by_side(name, store, work, llama_python, prompt, ("f32", "f16", "q8_0"))


if __name__ == "__main__":
    main(*sys.argv[1:])
