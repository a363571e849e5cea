"""What a web request's budget (lab/ui/work.py MAX_TOKEN_STEPS) buys: token-steps a second, and so
the seconds the most one request may ask takes (the budget, or less where the page's own bounds
stop a way before it), for each way a request decodes, with the tiny preset's
model (random weights: a caption runs to max_new_tokens, the most a request can cost) and, with
--smollm2, SmolLM2-135M (all 30 blocks, imported into a scratch store).

A token-step is one row decoded one step: a caption of a beam search with b beams costs b a step,
a sampled caption 1. Each way is timed on a part of a request at the limit and the rest is
extrapolated from its rate (a request at the limit takes minutes); the load average is printed,
since the machines this runs on are shared.

Run: .venv/bin/python benchmarks/request_budget.py [--smollm2] [--threads N]"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import header, report  # noqa: E402
from lab.config import DecodeConfig  # noqa: E402
from lab.inputs import tokenizers  # noqa: E402
from lab.modeling.generate import CaptionStream, sample_captions  # noqa: E402
from lab.modeling.model import build  # noqa: E402
from lab.presets import get  # noqa: E402
from lab.ui.work import MAX_TOKEN_STEPS  # noqa: E402

TOKENS = 35         # the decoders' default max_new_tokens

# (what, decoder, captions timed, the most the page's bounds let one request ask this way):
# Compare's ways (8 checkpoints x 200 captions, each with its token probabilities shown) and live
# evaluation's stream (Evaluate: 8 checkpoints x 5,000 test captions)
WAYS = [("compare, beam 16", {"decoder": "beam", "num_beams": 16}, 8, 8 * 200 * 16 * TOKENS),
        ("compare, beam 4", {"decoder": "beam", "num_beams": 4}, 24, 8 * 200 * 4 * TOKENS),
        ("compare, top_p 0.9 (the page's)", {"decoder": "top_p", "top_p": 0.9, "temperature": 0.7},
         200, 8 * 200 * TOKENS),
        ("evaluate, random (a stream 500 wide)", {"decoder": "random"}, 1000, 8 * 5000 * TOKENS)]


def rate(model, tok, decoder: dict, captions: int) -> float:
    """Token-steps a second of decoding `captions` captions one way."""
    cfg = DecodeConfig.from_dict({**decoder, "max_new_tokens": TOKENS})
    beams = decoder.get("num_beams", 1)
    t0 = time.perf_counter()
    if decoder["decoder"] == "random":
        CaptionStream(model, tok, captions, cfg).take(captions, 500)
    else:
        sample_captions(model, tok, captions, cfg, probs=True)
    return captions * beams * TOKENS / (time.perf_counter() - t0)


def models(smollm2: bool):
    tok = tokenizers.gpt2()
    torch.manual_seed(0)
    yield "tiny preset (random weights)", build(get("tiny")[0]).eval(), tok
    if smollm2:
        from lab.storage import checkpoints, smollm2 as smol
        with tempfile.TemporaryDirectory() as store:
            smol.import_smollm2("smol", store=store)
            ck = checkpoints.load("smol", store)
            yield "SmolLM2-135M", ck.model.eval(), ck.tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", action="store_true", help="also SmolLM2-135M (about 30 s to import)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    header(f"token-steps a second, and the most one request may ask (at most {MAX_TOKEN_STEPS:,})")
    print(f"# load average before: {os.getloadavg()}")
    figures = {}
    for name, model, tok in models(args.smollm2):
        for what, decoder, captions, most in WAYS:
            if name.startswith("SmolLM2"):
                captions = max(1, captions // 8)
            r = rate(model, tok, decoder, captions)
            most = min(most, MAX_TOKEN_STEPS)
            figures[f"{name}: {what}"] = {"token_steps_per_s": round(r), "most_asked": most,
                                          "its_seconds": round(most / r)}
            print(f"# {name}: {what}: {r:,.0f} token-steps/s; the most one request asks, "
                  f"{most:,}, takes {most / r:,.0f} s", flush=True)
    print(f"# load average after: {os.getloadavg()}")
    report(**figures)


if __name__ == "__main__":
    main()
