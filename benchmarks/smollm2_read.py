"""SmolLM2 read from its GGUF three ways, each in a fresh process, alternating: by transformers
(AutoModelForCausalLM and AutoTokenizer with gguf_file, the peer), by the lab's reader
(lab/storage/gguf_read.py: the same tensors and tokens), and from the lab's cache of a first read
(an empty cache folder of its own each round, filled by a first read that is not timed). Every
process loads the model and tokenizer as `import smollm2` and a fine-tune of the packaged model do
(lab.storage.smollm2), nothing kept but the cache.

Prints, per round, each read's wall and CPU seconds (user + system, the process whole: Python and
the lab's imports included), and the ratios transformers / lab reader and lab reader / cache.

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
READS = {
    "transformers": "from lab.storage import smollm2; smollm2.read_with_transformers(smollm2.gguf_path())",
    "lab": "from lab.storage import smollm2; smollm2.load_hf(cached=False)",
    "cache": "from lab.storage import smollm2; smollm2.load_hf()",
}


def one_read(how: str, cache: str) -> dict:
    """A fresh process's read: wall seconds and its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", READS[how]], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "LAB_CACHE": cache})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    header("SmolLM2: its GGUF read by transformers, by the lab's reader, and from the lab's cache")
    rounds = []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:
            one_read("cache", cache)                        # the first read fills it (not timed)
            order = ("transformers", "lab", "cache") if i % 2 == 0 else ("cache", "lab", "transformers")
            got = {how: one_read(how, cache) for how in order}
        got["transformers_over_lab"] = {k: round(got["transformers"][k] / got["lab"][k], 2)
                                        for k in ("wall_s", "cpu_s")}
        got["lab_over_cache"] = {k: round(got["lab"][k] / got["cache"][k], 2) for k in ("wall_s", "cpu_s")}
        rounds.append(got)
        print(json.dumps(rounds[-1]))
    report(rounds=rounds)


if __name__ == "__main__":
    main()
