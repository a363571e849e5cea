"""The per-step measurements behind docs/benchmarks.md's "Where a step's time goes besides
products" (run from the project root):
1. writing 50 MB of logits (256 x 50,257 floats) into fresh memory vs into memory written before;
2. the trained checkpoint's prompt step (256 prompts of 3 tokens) with every position's logits
   vs the last position's only (needs `tfmr-scratch` in the store);
3. SmolLM2's caption stream over 500 captions at each chunk's size (the earlier widths:
   10, 20, 40, 80, 160, 166, 24) and at lab.evaluation.evaluate.stream_width's: steps, time,
   a least-squares fit of step time = fixed + per row x rows, and the KV cache's size a step.

Run: .venv/bin/python experiments/generation_cpu/step_overheads/profile_steps.py"""
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from lab.storage import checkpoints, smollm2  # noqa: E402
from lab.inputs import data, tokenizers
from lab.config import DecodeConfig  # noqa: E402
from lab.evaluation.evaluate import chunk_bounds, stream_width  # noqa: E402
from lab.modeling.generate import CaptionStream  # noqa: E402
from lab.ui.evaluate import chunks  # noqa: E402


def best(fn, n=5):
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    kept = torch.empty(256, 50257)
    fresh_ms = 1000 * best(lambda: torch.empty(256, 50257).fill_(0))
    reused_ms = 1000 * best(lambda: kept.fill_(0))
    print(f"1. 50 MB of logits: fresh memory {fresh_ms:.1f} ms, memory written before {reused_ms:.1f} ms")

    model = checkpoints.load("tfmr-scratch").model.eval()
    tok = tokenizers.gpt2()
    prompt = torch.tensor([[tok.eos_id] + ids[:2] for ids in tok.encode_batch(data.load_split("test")[:256])])
    with torch.no_grad():
        all_ms = 1000 * best(lambda: model(prompt))
        last_ms = 1000 * best(lambda: model(prompt, logits_to_keep=1))
    print(f"2. prompt step, 256 x 3 tokens: every position's logits {all_ms:.0f} ms, the last's {last_ms:.0f} ms")

    with tempfile.TemporaryDirectory() as tmp:
        smollm2.import_smollm2("smollm2", store=tmp)
        ck = checkpoints.load("smollm2", tmp)
    first, chunk = chunks(500)
    bounds = chunk_bounds(500, chunk, first)
    schedules = {"each chunk's size": [end - start for start, end in bounds],
                 "stream_width": [stream_width(s, e, chunk) for s, e in bounds]}
    for name, widths in schedules.items():
        stream = CaptionStream(ck.model, ck.tokenizer, 500, DecodeConfig())
        steps, real = [], stream._step

        def timed_step():
            rows, t0 = len(stream.rows), time.perf_counter()
            real()
            cache = sum(k.numel() + v.numel() for k, v in stream.past) * 4 if stream.past else 0
            steps.append((rows, time.perf_counter() - t0, cache))
        stream._step = timed_step
        t0 = time.perf_counter()
        with torch.no_grad():
            for (start, end), width in zip(bounds, widths):
                stream.take(end - start, width)
        total = time.perf_counter() - t0
        rows = torch.tensor([float(r) for r, _, _ in steps])
        secs = torch.tensor([s for _, s, _ in steps])
        fit = torch.linalg.lstsq(torch.stack([torch.ones_like(rows), rows], 1), secs[:, None]).solution
        fixed, per_row = fit[0, 0].item(), fit[1, 0].item()
        print(f"3. SmolLM2 stream, widths {widths}: {len(steps)} steps, {total:.1f} s; "
              f"step = {1000 * fixed:.0f} ms + {1000 * per_row:.2f} ms a row "
              f"(the fixed part: {len(steps) * fixed:.1f} s); KV cache a step: mean "
              f"{sum(c for _, _, c in steps) / len(steps) / 1e6:.0f} MB, "
              f"largest {max(c for _, _, c in steps) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
