"""SmolLM2 read from its GGUF (transformers de-quantizing it) against the lab's cache of that read,
each in a fresh process, alternating, on an empty cache folder of its own: the first read of a
round fills the cache, the second reads it. Every process loads the model and tokenizer exactly as
`import smollm2` and a fine-tune of the packaged model do (lab.storage.smollm2.load_hf).

Prints, per round, each read's wall and CPU seconds (user + system, the process whole: Python and
the lab's imports included), and the ratio GGUF / cache.

Run: .venv/bin/python benchmarks/smollm2_read.py [--rounds 3]"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import header, report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
READ = "from lab.storage import smollm2; smollm2.load_hf()"


def one_read(cache: str) -> dict:
    """A fresh process's read: wall seconds and its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", READ], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "LAB_CACHE": cache})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    header("SmolLM2: its GGUF read by transformers against the lab's cache of that read")
    rounds = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:
            gguf, kept = one_read(cache), one_read(cache)
        rounds.append({"gguf": gguf, "cache": kept,
                       "wall_ratio": round(gguf["wall_s"] / kept["wall_s"], 2),
                       "cpu_ratio": round(gguf["cpu_s"] / kept["cpu_s"], 2)})
        print(json.dumps(rounds[-1]))
    report(rounds=rounds)


if __name__ == "__main__":
    main()
