"""A decoding step's attention, SDPA's fused CPU kernel (before) against two batched matrix
products (plugins/attention/mha.py's _decode_step, after):
1. the attention alone at a stream's shapes (166 rows, 13 and 36 keys), best of 5 x 200 calls;
2. whole stream steps at 166 rows of a Tfmr-scratch-sized model (random weights) and SmolLM2,
   in one process, 6 rounds of 10 steps each way, alternating.

Run: .venv/bin/python experiments/generation_cpu/session14/decode_attention.py"""
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import plugins.attention.mha as mha  # noqa: E402
from lab import checkpoints, smollm2, tokenizers  # noqa: E402
from lab.config import DecodeConfig  # noqa: E402
from lab.generate import CaptionStream  # noqa: E402
from lab.model import build, recycled_logits  # noqa: E402
from lab.presets import get  # noqa: E402

after = mha._decode_step


def before(q, k, v, mask):
    """What a step ran before: SDPA, grouped heads read as each KV head's queries."""
    B, nh, _, hs = q.shape
    nkv, S = k.size(1), k.size(2)
    g = nh // nkv
    if mask is not None and mask.dim() >= 3 and mask.size(-3) == nh:
        mask = mask.reshape(*mask.shape[:-3], nkv, g, S)
    return F.scaled_dot_product_attention(q.reshape(B, nkv, g, hs), k, v,
                                          attn_mask=mask).view(B, nh, 1, hs)


def best_ms(f, n=200):
    f()
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e3


def alone():
    torch.manual_seed(0)
    for name, nh, nkv in (("GPT-2 (12 heads)", 12, 12), ("SmolLM2 (9 heads, 3 KV)", 9, 3)):
        for S in (13, 36):
            q = torch.randn(166, nh, 1, 64)
            k, v = torch.randn(166, nkv, S + 8, 64)[:, :, :S], torch.randn(166, nkv, S + 8, 64)[:, :, :S]
            mask = torch.zeros(166, 1, 1, S).masked_fill(torch.rand(166, 1, 1, S) < 0.3, float("-inf"))
            mask[..., -1] = 0
            err = (before(q, k, v, mask) - after(q, k, v, mask)).abs().max().item()
            print(f"1. {name}, {S} keys: SDPA {best_ms(lambda: before(q, k, v, mask)):.2f} ms, "
                  f"two products {best_ms(lambda: after(q, k, v, mask)):.2f} ms (largest difference {err:.1e})")


def steps():
    tmp = tempfile.mkdtemp()
    torch.manual_seed(0)
    checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch", store=tmp)
    smollm2.import_smollm2("smollm2", store=tmp)
    for name in ("scratch", "smollm2"):
        ck = checkpoints.load(name, tmp)
        s = CaptionStream(ck.model, ck.tokenizer, 100_000, DecodeConfig())
        s.take(166, 166)
        times = {"before": [], "after": []}
        with torch.no_grad(), recycled_logits():
            for _ in range(6):
                for way, f in (("before", before), ("after", after)):
                    mha._decode_step = f
                    t0 = time.perf_counter()
                    for _ in range(10):
                        s._admit(166)
                        s._step()
                    times[way].append((time.perf_counter() - t0) / 10 * 1e3)
        mha._decode_step = after
        print(f"2. {name}, 166 rows: ms a step, rounds before {[round(t) for t in times['before']]}, "
              f"after {[round(t) for t in times['after']]}; medians {statistics.median(times['before']):.0f} "
              f"-> {statistics.median(times['after']):.0f}; after faster in "
              f"{sum(a < b for a, b in zip(times['after'], times['before']))} of 6 rounds")


if __name__ == "__main__":
    alone()
    steps()
