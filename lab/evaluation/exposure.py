"""Exposure bias, measured: a captions model is trained on gold prefixes (teacher forcing) but
writes after its own. For prefixes of growing length m, the per-token loss of the same gold
continuation (the caption's tokens after the first m, and its end) is taken twice: after the gold
first m tokens, and after m tokens the model sampled itself (from BOS, at temperature 1, end of
text not allowed inside the prefix). The gap between the two is what conditioning on its own
history costs the model; scheduled sampling is meant to close it. Paired by caption, with a
bootstrap interval."""
from __future__ import annotations

import torch

from lab.inputs import data, tasks
from lab.config import ConfigError
from lab.evaluation.metrics import bootstrap_indices, percentile_interval
from lab.modeling.sampling import draw

PREFIXES = (0, 1, 2, 4, 8)


@torch.no_grad()
def _sample_prefix(model, bos: int, n: int, m: int, eos: int, g: torch.Generator) -> torch.Tensor:
    """(n, m) tokens sampled from the model after BOS, never end-of-text."""
    x = torch.full((n, 1), bos, dtype=torch.long)
    for _ in range(m):
        logits = model(x, logits_to_keep=1).logits[:, -1].float()
        logits[:, eos] = float("-inf")
        nxt = draw(torch.softmax(logits, -1), g)[:, None]
        x = torch.cat([x, nxt], 1)
    return x[:, 1:]


@torch.no_grad()
def _continuation_nll(model, rows: list[list[int]], start: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed NLL and count of each row's targets from position `start` on (the tokens after the
    prefix, through the first end of text)."""
    batch = data.collate(rows, eos)
    batch.loss_mask[:, :start] = 0
    return data.sentence_nll(model(batch.input_ids).logits, batch)


def measure(model, tokenizer, captions: list[str], prefixes=PREFIXES, seed: int = 0,
            batch_size: int = 64, n_boot: int = 1000) -> list[dict]:
    """One row per prefix length m: captions long enough (more than m tokens), the per-token
    loss of their continuation after the gold prefix and after the model's own, and the gap with
    its 95% interval (bootstrap over captions)."""
    if not captions:
        raise ConfigError("exposure bias needs at least one caption")
    was = model.training
    model.eval()
    eos = tokenizer.eos_id
    seqs = data.encode_captions(captions, tokenizer, model.config.n_positions)
    g = torch.Generator().manual_seed(seed)
    out = []
    try:
        for m in prefixes:
            rows = [s for s in seqs if len(s) - 2 > m]          # bos + caption + eos: m < tokens
            if not rows:
                continue
            gold_nll, own_nll, count = [], [], []
            for i in range(0, len(rows), batch_size):
                part = rows[i:i + batch_size]
                own = _sample_prefix(model, eos, len(part), m, eos, g).tolist() if m else [[]] * len(part)
                swapped = [[s[0]] + o + s[1 + m:] for s, o in zip(part, own)]
                a, n = _continuation_nll(model, part, m, eos)
                b, _ = _continuation_nll(model, swapped, m, eos)
                gold_nll.append(a); own_nll.append(b); count.append(n)
            gold, own, n = torch.cat(gold_nll), torch.cat(own_nll), torch.cat(count)
            per_gold, per_own = gold / n, own / n
            idx = bootstrap_indices(len(per_gold), n_boot, seed)
            gap = per_own - per_gold
            out.append({"prefix": m, "captions": len(rows),      # means over captions
                        "teacher_forced": per_gold.mean().item(), "own_prefix": per_own.mean().item(),
                        "gap": gap.mean().item(), "gap_ci": percentile_interval(gap[idx].mean(1))})
    finally:
        model.train(was)
    return out


def on_split(ck, split: str = "dev", n: int = 500, seed: int = 0,
             data_dir=None) -> tuple[list[dict], int]:
    """measure() on a seeded subset of n texts of a split of what checkpoint `ck` is scored on
    (its task's: the captions, or its dataset's): (rows, texts used)."""
    if not 1 <= n <= 5000:
        raise ConfigError(f"the number of captions must be between 1 and 5000, got {n}")
    caps, _ = tasks.texts([ck], split, data_dir)
    model, tokenizer = ck.model, ck.tokenizer
    caps = [caps[i] for i in data.subset_indices(len(caps), n, seed)]
    return measure(model, tokenizer, caps, seed=seed), len(caps)
