"""Caption generation: the lab's batched KV-cache generation (finished rows leave the batch)
against transformers' generate() on identical weights. Greedy outputs must be identical.

Run: .venv/bin/python benchmarks/generate_vs_hf.py [--checkpoint NAME] [--n 256]
(without --checkpoint, a Tfmr-scratch-sized model with random weights)."""
import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import header, lab_and_hf_models, report, timed  # noqa: E402
from lab.inputs import tokenizers  # noqa: E402
from lab.config import DecodeConfig  # noqa: E402
from lab.inputs.data import load_split  # noqa: E402
from lab.modeling.generate import generate  # noqa: E402

EOS = 50256


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=35)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours, hf, name = lab_and_hf_models(args.checkpoint, tmp)
        header(f"generation, {args.n} captions, greedy and top-p, {name}")
        tok = tokenizers.gpt2()
        # prompts: end-of-text + the first two tokens of test captions (equal length, no padding)
        prompts = [[EOS] + ids[:2] for ids in tok.encode_batch(load_split("test")[: args.n])]
        x = torch.tensor(prompts)
        cfg = DecodeConfig(decoder="greedy", max_new_tokens=args.max_new_tokens)
        with torch.no_grad():
            lab_s, ours_out = timed(lambda: generate(ours, prompts, cfg, EOS, batch_size=args.n))
            hf_s, hf_out = timed(lambda: hf.generate(x, attention_mask=torch.ones_like(x),
                                                     max_new_tokens=args.max_new_tokens, do_sample=False,
                                                     eos_token_id=EOS, pad_token_id=EOS))
        hf_new = []
        for row in hf_out[:, x.size(1):].tolist():
            hf_new.append(row[: row.index(EOS)] if EOS in row else row)
        identical = sum(a[0] == b for a, b in zip(ours_out, hf_new))
        cfg_p = DecodeConfig.from_dict({"decoder": "top_p", "top_p": 0.9, "temperature": 1.0,
                                        "max_new_tokens": args.max_new_tokens})
        with torch.no_grad():
            lab_p, _ = timed(lambda: generate(ours, prompts, cfg_p, EOS, batch_size=args.n))
            torch.manual_seed(0)
            hf_p, _ = timed(lambda: hf.generate(x, attention_mask=torch.ones_like(x),
                                                max_new_tokens=args.max_new_tokens, do_sample=True,
                                                top_p=0.9, top_k=0, eos_token_id=EOS, pad_token_id=EOS))
        report(checkpoint=name, captions=args.n, greedy_identical=f"{identical}/{args.n}",
               greedy_lab_s=round(lab_s, 2), greedy_hf_s=round(hf_s, 2),
               greedy_speedup=round(hf_s / lab_s, 2),
               top_p_lab_s=round(lab_p, 2), top_p_hf_s=round(hf_p, 2),
               top_p_speedup=round(hf_p / lab_p, 2))


if __name__ == "__main__":
    main()
