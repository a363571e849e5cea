"""Training steps on the real corpus: the lab (padding to the batch's longest caption) against
transformers' GPT2LMHeadModel trained the assignment's way (fixed padding to 36), identical initial
weights, Adam lr 1e-4, batch 32, the assignment's masked loss. Reports real (unpadded) tokens per
second and checks that the first step's losses agree.

Run: .venv/bin/python benchmarks/train_vs_hf.py [--steps 30]"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import header, lab_and_hf_models, report  # noqa: E402
from lab import tokenizers  # noqa: E402
from lab.data import assignment_loss, batches, collate, encode_captions, load_split  # noqa: E402

EOS = 50256


def run(model, seqs, steps, pad_to):
    model.train()
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    tokens, losses = 0, []
    it = batches(seqs, 32, EOS, shuffle=True, generator=g)
    first = next(it)                         # warm-up step, not timed
    t0 = None
    for i, batch in enumerate([first] + [next(it) for _ in range(steps)]):
        if pad_to:
            batch = collate([row[: int(m.sum()) + 1].tolist() for row, m in
                             zip(batch.input_ids, batch.loss_mask)], EOS, pad_to=pad_to)
        loss = assignment_loss(model(batch.input_ids).logits, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if i == 0:
            t0 = time.perf_counter()
        else:
            tokens += int(batch.loss_mask.sum())
    return tokens / (time.perf_counter() - t0), losses[0]


@torch.no_grad()
def eval_loss(model, seqs, pad_to):
    """The assignment's loss on the first 32 captions, dropout off: equal weights, equal loss."""
    model.eval()
    batch = collate(seqs[:32], EOS, pad_to=pad_to)
    return assignment_loss(model(batch.input_ids).logits, batch).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours, hf, _ = lab_and_hf_models(None, tmp)
        header(f"training steps, Tfmr-scratch size, batch 32, {args.steps} timed steps each")
        seqs = encode_captions(load_split("train"), tokenizers.gpt2(), 64)
        lab_loss, hf_loss = eval_loss(ours, seqs, None), eval_loss(hf, seqs, 36)
        lab_tps, _ = run(ours, seqs, args.steps, pad_to=None)
        hf_tps, _ = run(hf, seqs, args.steps, pad_to=36)
        report(lab_tokens_per_s=round(lab_tps, 1), hf_fixed36_tokens_per_s=round(hf_tps, 1),
               speedup=round(lab_tps / hf_tps, 2), initial_loss_lab=round(lab_loss, 6),
               initial_loss_hf_fixed36=round(hf_loss, 6))


if __name__ == "__main__":
    main()
