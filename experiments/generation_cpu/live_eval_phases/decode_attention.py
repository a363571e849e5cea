"""A decoding step's attention, SDPA's fused CPU kernel (before, what the lab runs) against two
batched matrix products (after, `two_products` below: a candidate, tried and not kept, because
whole steps showed no gain above the noise):
1. the attention alone at a stream's shapes (166 rows, 13 and 36 keys), best of 5 x 200 calls;
2. whole stream steps at 166 rows of a Tfmr-scratch-sized model (random weights) and SmolLM2,
   in one process, ROUNDS rounds of STEPS steps each way, alternating, the first of each round
   alternating too (the stream moves on each time, its cache staying short), and the median of
   each round's after/before ratio (pairs a few seconds apart, so the machine's drift over the
   run cancels more than in the medians of all rounds).

Run: .venv/bin/python experiments/generation_cpu/live_eval_phases/decode_attention.py [ROUNDS STEPS]
(default 16 4; the kept runs: decode_attention_before_first.txt, 6 rounds of 10 with "before"
always first, and decode_attention_6x10.txt, 6 of 10 alternating). Those runs had the candidate
in plugins/attention/mha.py as `_decode_step`, called from `_attend` on the same condition as
the patch below; it was taken out again afterwards. In those runs "before" was SDPA
called as the lab's _attend calls it for a step, written out in the script; the script now calls
the lab's _attend itself."""
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

import plugins.attention.mha as mha  # noqa: E402
from lab.storage import checkpoints, smollm2  # noqa: E402
from lab.inputs import tokenizers
from lab.config import DecodeConfig  # noqa: E402
from lab.modeling.generate import CaptionStream  # noqa: E402
from lab.modeling.model import build, recycled_logits  # noqa: E402
from lab.presets import get  # noqa: E402


def two_products(q, k, v, mask):
    """q (B, nh, 1, hs), keys and values (B, nkv, S, hs): each KV head's group of query heads read
    as that head's queries, softmax(q k^T / sqrt(hs) + mask) v in two batched products."""
    B, nh, _, hs = q.shape
    nkv, S = k.size(1), k.size(2)
    g = nh // nkv
    att = torch.matmul(q.reshape(B, nkv, g, hs), k.transpose(-2, -1)).mul_(1 / math.sqrt(hs))
    if mask is not None:
        if mask.dim() >= 3 and mask.size(-3) == nh:      # a bias per head: (.., nh, 1, S)
            mask = mask.reshape(*mask.shape[:-3], nkv, g, S)
        att = att.add_(mask)
    return torch.matmul(torch.softmax(att, dim=-1), v).view(B, nh, 1, hs)


LAB_ATTEND = mha.CausalSelfAttention._attend
USE = {"step": None}        # the candidate while it is measured; None: the lab's own _attend


def attend(self, q, k, v, mask, plain, need_weights):
    """The lab's _attend, with a decoding step (one query per row, no weights, no dropout, CPU,
    float32) sent to USE["step"] while one is set."""
    if USE["step"] is not None and q.size(2) == 1 and not need_weights and not self.training \
            and q.dtype == torch.float32:
        return USE["step"](q, k, v, mask), None
    return LAB_ATTEND(self, q, k, v, mask, plain, need_weights)


def lab_step(nh: int, nkv: int):
    """The lab's own attention for a decoding step (CausalSelfAttention._attend, SDPA) of nh query
    and nkv key/value heads, as a function of (q, k, v, mask)."""
    attn = mha.CausalSelfAttention(nh * 64, nh, nkv, bias=False, dropout=0.0).eval()
    return lambda q, k, v, mask: LAB_ATTEND(attn, q, k, v, mask, False, False)[0]


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
            before, after = lab_step(nh, nkv), two_products
            err = (before(q, k, v, mask) - after(q, k, v, mask)).abs().max().item()
            print(f"1. {name}, {S} keys: SDPA {best_ms(lambda: before(q, k, v, mask)):.2f} ms, "
                  f"two products {best_ms(lambda: after(q, k, v, mask)):.2f} ms (largest difference {err:.1e})")


def steps(rounds: int, steps_each: int):
    tmp = tempfile.mkdtemp()
    torch.manual_seed(0)
    checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch", store=tmp)
    smollm2.import_smollm2("smollm2", store=tmp)
    for name in ("scratch", "smollm2"):
        ck = checkpoints.load(name, tmp)
        s = CaptionStream(ck.model, ck.tokenizer, 100_000, DecodeConfig())
        s.take(166, 166)
        times = {"before": [], "after": []}
        mha.CausalSelfAttention._attend = attend
        with torch.no_grad(), recycled_logits():
            for round_ in range(rounds):
                order = (("before", None), ("after", two_products))
                for way, f in order if round_ % 2 == 0 else order[::-1]:    # who goes first alternates
                    USE["step"] = f
                    t0 = time.perf_counter()
                    for _ in range(steps_each):
                        s._admit(166)
                        s._step()
                    times[way].append((time.perf_counter() - t0) / steps_each * 1e3)
        ratios = [a / b for a, b in zip(times["after"], times["before"])]
        print(f"2. {name}, 166 rows: ms a step, rounds before {[round(t) for t in times['before']]}, "
              f"after {[round(t) for t in times['after']]}; medians {statistics.median(times['before']):.0f} "
              f"-> {statistics.median(times['after']):.0f}; after faster in "
              f"{sum(r < 1 for r in ratios)} of {rounds} rounds; median after/before "
              f"{statistics.median(ratios):.3f}")


if __name__ == "__main__":
    alone()
    steps(*(int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (16, 4))
