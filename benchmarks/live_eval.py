"""Live evaluation as the Evaluate tab runs it: a Tfmr-scratch-sized model (random weights, so no
caption ends early) and SmolLM2 (all 30 blocks) on the same 500 test captions, random sampling at
t=1; when the first figures appear and when all of them are in. No peer: the yardsticks are
the time to the first figures (at most 10 s) and the floating-point floor of the whole: the same
evaluation run again under torch's FLOP counter, its floating-point operations divided by this
CPU's rate on a large float32 matrix product (2048 x 2048, measured in the same run before the
timed pass and after the counted one; the faster of the two is the floor's rate, since this
machine's speed drifts 10-20% between runs and a slow moment must not lower the bar).

Run: .venv/bin/python benchmarks/live_eval.py [--n 500] [--no-floor]"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import header, report  # noqa: E402
from lab.storage import checkpoints, smollm2  # noqa: E402
from lab.inputs import tokenizers
from lab.config import DecodeConfig  # noqa: E402
from lab.evaluation.evaluate import evaluate_live  # noqa: E402
from lab.modeling.model import build  # noqa: E402
from lab.presets import get  # noqa: E402
from lab.ui.evaluate import chunks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="skip the second, FLOP-counted pass")
    args = ap.parse_args()
    header(f"live evaluation, {args.n} test captions, tfmr-scratch-sized (random weights) + SmolLM2")
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch-random", store=tmp)
        smollm2.import_smollm2("smollm2", store=tmp)
        models = {n: checkpoints.load(n, tmp) for n in ("scratch-random", "smollm2")}
        first_chunk, chunk = chunks(args.n)           # as the Evaluate tab chooses
        rate_before = sgemm_rate() if args.floor else None
        t0, first, done = time.perf_counter(), None, []
        for snap in evaluate_live(models, args.n, DecodeConfig(), chunk=chunk, first=first_chunk):
            t = time.perf_counter() - t0
            first = first or t
            done.append((snap["done"], round(t, 1)))
        figures = dict(captions=args.n, snapshots_at_s=done, first_figures_s=round(first, 1),
                       all_s=round(t, 1))
        if args.floor:
            from torch.utils.flop_counter import FlopCounterMode
            counter = FlopCounterMode(display=False)
            with counter:
                for _ in evaluate_live(models, args.n, DecodeConfig(), chunk=chunk, first=first_chunk):
                    pass
            rates = (rate_before, sgemm_rate())
            floor = counter.get_total_flops() / max(rates)
            figures |= dict(tflop=round(counter.get_total_flops() / 1e12, 3),
                            sgemm_gflop_per_s_before_after=[round(r / 1e9, 1) for r in rates],
                            floor_s=round(floor, 1), all_over_floor=round(t / floor, 2))
        report(**figures)


def sgemm_rate() -> float:
    """FLOP/s of a 2048 x 2048 float32 matrix product on this CPU (the best of three runs of 10)."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, time.perf_counter() - t0)
    return 10 * 2 * 2048 ** 3 / best


if __name__ == "__main__":
    main()
