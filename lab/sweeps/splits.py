"""BLEU-4 between the corpus's splits: how alike they are, the ceiling a caption model's BLEU
in a sweep's table is read against (`python -m lab sweep splits`).
"""
from __future__ import annotations

import torch

from lab.evaluation.metrics import References, bootstrap_indices, percentile_interval
from lab.inputs import data
from lab.inputs.tokenizers import gpt2

SEED_SPLIT_BLEU = {("train", "dev"): 0.550, ("train", "test"): 0.611, ("dev", "test"): 0.538}


def split_bleu(data_dir=None, tokens: str = "gpt2", n_boot: int = 1000) -> dict:
    """BLEU-4 of each split against another (all captions of both; GPT-2 tokens as the report):
    how alike the splits are, the ceiling a caption model is read against. Intervals: bootstrap
    over the captions of both sides (per-sentence scores computed once, resampled)."""
    tok = gpt2() if tokens == "gpt2" else None
    splits = {s: data.load_split(s, data_dir) for s in ("train", "dev", "test")}
    toks = {s: tok.encode_batch(c) if tok else [x.split() for x in c] for s, c in splits.items()}
    prepared = {s: References(t) for s, t in toks.items()}
    rows = []
    for (a, b), seed_value in SEED_SPLIT_BLEU.items():
        fwd = torch.tensor(prepared[b].sentence_bleus(toks[a]), dtype=torch.float64)
        bwd = torch.tensor(prepared[a].sentence_bleus(toks[b]), dtype=torch.float64)
        fb = fwd[bootstrap_indices(len(fwd), n_boot, 0)].mean(1)
        bb = bwd[bootstrap_indices(len(bwd), n_boot, 1)].mean(1)
        f, bk = fwd.mean().item(), bwd.mean().item()
        rows.append({"pair": f"{a}-{b}", "captions": f"{len(fwd):,} vs {len(bwd):,}",
                     "forward": f, "backward": bk, "harmonic": 2 * f * bk / (f + bk),
                     "harmonic_ci": percentile_interval(2 * fb * bb / (fb + bb)),
                     "report": seed_value if tokens == "gpt2" else None})
    return {"tokens": tokens, "rows": rows}
