"""Live evaluation (benchmarks/live_eval.py's work: 500 test captions, a Tfmr-scratch-sized model
with random weights and SmolLM2) with the stream as wide as now (live evaluation's
`stream_width`: the first chunk alone, then `chunk` rows, 166 for 500 captions) against a stream
that takes every remaining caption at once after the first chunk (490 rows), alternating which
runs first, each run timed by phase as in live_eval_phases/phases.py.

Run: .venv/bin/python experiments/generation_cpu/wide_stream/wide_stream.py [rounds]"""
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent / "live_eval_phases"))

import phases  # noqa: E402
from benchmarks.live_eval import sgemm_rate  # noqa: E402
from lab.evaluation import evaluate  # noqa: E402

NOW = evaluate.stream_width


def wide(start, end, chunk):
    """The first chunk alone, then every caption left at once."""
    return end - start if start == 0 else 10 ** 9


def timed_run(models, width):
    """One live evaluation with the given stream width: (total s, {(model, phase): s},
    {model: steps})."""
    evaluate.stream_width = width
    seconds, rows, timed = phases.timer()
    try:
        t0 = time.perf_counter()
        phases.run(models, 500, timed)
        return time.perf_counter() - t0, seconds, {name: len(r) for name, r in rows.items()}
    finally:
        evaluate.stream_width = NOW


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    models = phases.benchmark_models()
    ratios = []
    for r in range(rounds):
        total = {}
        for kind in (("now", "wide") if r % 2 == 0 else ("wide", "now")):
            rate = sgemm_rate()
            total[kind], seconds, steps = timed_run(models, NOW if kind == "now" else wide)
            print(r, kind, f"sgemm {rate / 1e9:.1f} total {total[kind]:.1f}",
                  {f"{m[:7]}/{p}": round(s, 1) for (m, p), s in sorted(seconds.items())},
                  "steps", dict(steps), flush=True)
        ratios.append(total["wide"] / total["now"])
        print("wide/now", round(ratios[-1], 3), flush=True)
    print("ratios", sorted(round(x, 3) for x in ratios))


if __name__ == "__main__":
    main()
