"""Captions that end at different lengths, decoded as live evaluation decodes them: in the Evaluate
tab's chunks (10, 30, 70, ... captions), each chunk one batch that thins out as its captions end
(the simpler way), against one stream per model whose places are refilled as captions end
(generate.CaptionStream, what live evaluation does). A Tfmr-scratch-sized model with
random weights whose end-of-text is made likely (a fixed logit added at each step, so a caption
ends after `--mean` tokens on average, as the corpus' captions do with their end-of-text), so
that the work is like a trained checkpoint's without needing one. Both ways sample the same
distribution with the same number of captions; the draws differ, so the figure compared is
generated tokens per second.

Run: .venv/bin/python benchmarks/stream_vs_batches.py [--n 500] [--mean 14]"""
import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import header, report  # noqa: E402
from lab.inputs import tokenizers  # noqa: E402
from lab.config import DecodeConfig  # noqa: E402
from lab.evaluation.evaluate import chunk_bounds, stream_width  # noqa: E402
from lab.modeling.generate import CaptionStream, sample_captions  # noqa: E402
from lab.modeling.model import build  # noqa: E402
from lab.presets import get  # noqa: E402
from lab.ui.evaluate import chunks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--mean", type=float, default=14.0, help="mean caption length in tokens")
    args = ap.parse_args()
    header(f"{args.n} captions ending after {args.mean} tokens on average: chunk batches vs a stream")
    tok = tokenizers.gpt2()
    torch.manual_seed(0)
    model = build(get("tfmr-scratch")[0]).eval()
    bias = torch.zeros(tok.vocab_size)      # random logits are near 0: p(eos) ~ e^b / (V + e^b)
    bias[tok.eos_id] = math.log(tok.vocab_size / (args.mean - 1))
    model.lm_head.register_forward_hook(lambda module, a, out: out + bias)
    first, chunk = chunks(args.n)                       # as the Evaluate tab runs it
    bounds = chunk_bounds(args.n, chunk, first)
    sizes = [end - start for start, end in bounds]
    cfg = DecodeConfig()

    def batches():
        out, start = [], 0
        for k in sizes:
            out += sample_captions(model, tok, k, cfg.replace(seed=cfg.seed + start))
            start += k
        return out

    def stream():
        s, out = CaptionStream(model, tok, args.n, cfg), []
        for start, end in bounds:
            out += s.take(end - start, stream_width(start, end, chunk))
        return out
    figures = {"captions": args.n, "chunks": sizes}
    for name, fn in (("batches", batches), ("stream", stream)):
        t0 = time.perf_counter()
        caps = fn()
        t = time.perf_counter() - t0
        tokens = sum(len(c.tokens) + c.finished for c in caps)     # the end-of-text drawn too
        figures[name] = {"s": round(t, 1), "tokens": tokens, "tokens_per_s": round(tokens / t, 1),
                         "mean_length": round(tokens / len(caps), 2)}
    figures["stream_over_batches"] = round(figures["stream"]["tokens_per_s"]
                                           / figures["batches"]["tokens_per_s"], 2)
    report(**figures)


if __name__ == "__main__":
    main()
