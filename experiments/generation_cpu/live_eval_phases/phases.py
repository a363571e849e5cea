"""Live evaluation (benchmarks/live_eval.py's work: 500 test captions, a Tfmr-scratch-sized model
with random weights and SmolLM2) timed by phase, stream steps and scoring per model, with each
phase's floating-point floor from a second, FLOP-counted pass at the faster of two measurements
of the 2048 x 2048 product (before the timed pass and after it), and how many rows the steps had.

Run: .venv/bin/python experiments/generation_cpu/live_eval_phases/phases.py [n]"""
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from benchmarks.live_eval import sgemm_rate  # noqa: E402
from lab.storage import checkpoints, smollm2  # noqa: E402
from lab.evaluation import evaluate
from lab.modeling import generate
from lab.inputs import tokenizers
from lab.config import DecodeConfig  # noqa: E402
from lab.modeling.model import build  # noqa: E402
from lab.presets import get  # noqa: E402
from lab.ui.evaluate import chunks  # noqa: E402

STEP, SCORE = generate.CaptionStream._step, evaluate.sentence_nlls


def run(models, n, measure):
    """One live evaluation with each model's steps and scoring wrapped by measure(name, phase, f)."""
    name_of = {id(ck.model): name for name, ck in models.items()}
    generate.CaptionStream._step = lambda self: measure(name_of[id(self.model)], "step",
                                                        lambda: STEP(self), len(self.rows))
    evaluate.sentence_nlls = lambda model, *a, **kw: measure(name_of[id(model)], "score",
                                                             lambda: SCORE(model, *a, **kw))
    first, chunk = chunks(n)
    try:
        for _ in evaluate.evaluate_live(models, n, DecodeConfig(), chunk=chunk, first=first):
            pass
    finally:
        generate.CaptionStream._step, evaluate.sentence_nlls = STEP, SCORE


def benchmark_models() -> dict:
    """The benchmark's pair in a fresh store: a Tfmr-scratch-sized model (random weights, seed 0)
    and SmolLM2."""
    tmp = tempfile.mkdtemp()
    torch.manual_seed(0)
    checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch-random", store=tmp)
    smollm2.import_smollm2("smollm2", store=tmp)
    return {k: checkpoints.load(k, tmp) for k in ("scratch-random", "smollm2")}


def timer():
    """(seconds, rows, timed): `timed` is a `measure` for run() adding each phase's seconds to
    seconds[name, phase] and each step's width to rows[name]."""
    seconds, rows = collections.defaultdict(float), collections.defaultdict(list)

    def timed(name, phase, f, width=None):
        t0 = time.perf_counter()
        out = f()
        seconds[name, phase] += time.perf_counter() - t0
        if width is not None:
            rows[name].append(width)
        return out
    return seconds, rows, timed


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    models = benchmark_models()
    (seconds, rows, timed), flops = timer(), collections.defaultdict(float)

    def counted(name, phase, f, width=None):
        with FlopCounterMode(display=False) as c:
            out = f()
        flops[name, phase] += c.get_total_flops()
        return out

    before = sgemm_rate()
    t0 = time.perf_counter()
    run(models, n, timed)
    total = time.perf_counter() - t0
    after = sgemm_rate()
    rate = max(before, after)
    run(models, n, counted)
    floor = sum(flops.values()) / rate
    print(f"sgemm {before / 1e9:.1f} / {after / 1e9:.1f} GFLOP/s; total {total:.1f} s; "
          f"floor {floor:.1f} s; ratio {total / floor:.2f}")
    for key in sorted(seconds):
        print(f"{key}: {seconds[key]:.1f} s, floor {flops[key] / rate:.1f} s, "
              f"{seconds[key] / (flops[key] / rate):.2f}x")
    print(f"outside steps and scoring: {total - sum(seconds.values()):.1f} s")
    for name, widths in rows.items():
        hist = collections.Counter(min(w // 20 * 20, 200) for w in widths)
        print(name, len(widths), "steps; rows histogram (bins of 20):", sorted(hist.items()))


if __name__ == "__main__":
    main()
