"""What keeps live evaluation above 1.5x its floor, measured:

1. Matrix products with the weights coming from memory, as in a decoding step: one activation
   (rows x K) against 30 different weights in turn (so none stays in the cache), GFLOP/s, for
   SmolLM2's and GPT-2's shapes, MKL (F.linear) against oneDNN's linear
   (torch.ops.mkldnn._linear_pointwise, plain and with its weights packed for the batch); and
   this CPU's 2048 x 2048 product, the floor's rate.
2. A SmolLM2 stream step of 166 rows under torch's profiler: the share of its operators' time in
   matrix products, and the largest others.

Run: .venv/bin/python experiments/generation_cpu/sampling_and_scoring/where_the_rest_goes.py"""
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.live_eval import sgemm_rate  # noqa: E402

SHAPES = {"SmolLM2 up/gate": (576, 1536), "SmolLM2 down": (1536, 576), "SmolLM2 q+kv": (576, 960),
          "GPT-2 mlp in": (768, 3072), "GPT-2 output tile": (768, 1024)}


def rate(M, K, N, kind, layers=30):
    a = torch.randn(M, K)
    ws = [torch.randn(N, K) for _ in range(layers)]
    if kind == "oneDNN packed":
        ws = [torch.ops.mkldnn._reorder_linear_weight(w, M) for w in ws]
    run = (lambda w: F.linear(a, w)) if kind == "MKL" else \
        (lambda w: torch.ops.mkldnn._linear_pointwise(a, w, None, "none", [], ""))
    for w in ws:
        run(w)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for w in ws:
            run(w)
        best = min(best, (time.perf_counter() - t0) / layers)
    return round(2 * M * K * N / best / 1e9, 1)


def sgemm():
    return round(sgemm_rate() / 1e9, 1)


def step_profile():
    from torch.profiler import ProfilerActivity, profile

    from lab.storage import checkpoints, smollm2
    from lab.config import DecodeConfig
    from lab.modeling.generate import CaptionStream
    from lab.modeling.model import recycled_logits
    with tempfile.TemporaryDirectory() as tmp:
        smollm2.import_smollm2("smollm2", store=tmp)
        ck = checkpoints.load("smollm2", tmp)
        ck.model.eval()
        stream = CaptionStream(ck.model, ck.tokenizer, 5000, DecodeConfig())
        with torch.no_grad(), recycled_logits():
            for _ in range(15):
                stream._admit(166); stream._step()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(10):
                    stream._admit(166); stream._step()
    ops = sorted(((e.key, e.self_cpu_time_total / 1e3 / 10) for e in prof.key_averages()),
                 key=lambda kv: -kv[1])
    total = sum(ms for _, ms in ops)
    mm = sum(ms for k, ms in ops if k in ("aten::mm", "aten::addmm"))
    print(f"2. SmolLM2 step, 166 rows: operators {total:.0f} ms a step, of which matrix products "
          f"{mm:.0f} ms ({100 * mm / total:.0f}%); the largest others (ms a step):",
          [(k, round(ms, 1)) for k, ms in ops if k not in ("aten::mm", "aten::addmm")][:8])


def main():
    print("1. 2048 x 2048 product:", sgemm(), "GFLOP/s")
    for M in (10, 40, 166, 332):
        for kind in ("MKL", "oneDNN", "oneDNN packed"):
            print(f"1. {M} rows, {kind}:", {name: rate(M, K, N, kind) for name, (K, N) in SHAPES.items()},
                  flush=True)
    print("1. 2048 x 2048 product again:", sgemm(), "GFLOP/s")
    step_profile()


if __name__ == "__main__":
    main()
