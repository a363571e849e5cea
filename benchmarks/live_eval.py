"""Live evaluation as the Evaluate tab runs it: a Tfmr-scratch-sized model (random weights, so no
caption ends early) and SmolLM2 (all 30 blocks) on the same 500 test captions, random sampling at
t=1; when the first figures appear and when all of them are in. No peer: the issue's reference
is the time to the first figures (<= 10 s) and the floating-point floor of the whole.

Run: .venv/bin/python benchmarks/live_eval.py [--n 500]"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import header, report  # noqa: E402
from lab import checkpoints, smollm2, tokenizers  # noqa: E402
from lab.config import DecodeConfig  # noqa: E402
from lab.evaluate import evaluate_live  # noqa: E402
from lab.model import build  # noqa: E402
from lab.presets import get  # noqa: E402
from lab.ui.evaluate import FIRST_CHUNK  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args()
    header(f"live evaluation, {args.n} test captions, tfmr-scratch-sized (random weights) + SmolLM2")
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch-random", store=tmp)
        smollm2.import_smollm2("smollm2", store=tmp)
        models = {n: checkpoints.load(n, tmp) for n in ("scratch-random", "smollm2")}
        chunk = max(50, args.n // 10)                 # as the Evaluate tab chooses
        t0, first, done = time.perf_counter(), None, []
        for snap in evaluate_live(models, args.n, DecodeConfig(), chunk=chunk,
                                  first=min(FIRST_CHUNK, chunk)):
            t = time.perf_counter() - t0
            first = first or t
            done.append(snap["done"])
        report(captions=args.n, snapshots_at=done, first_figures_s=round(first, 1), all_s=round(t, 1))


if __name__ == "__main__":
    main()
