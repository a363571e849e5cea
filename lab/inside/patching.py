"""Activation patching (Meng et al. 2022; Wang et al. 2022): run a corrupted prompt, put one
activation of the clean prompt in its place, and see how much of the clean answer comes back.
The measure is the logit difference at the last position between the clean answer's token and
the corrupted answer's; a patch restores (patched - corrupted) / (clean - corrupted) of it: 0 is
nothing, 1 all. Patched: the residual stream entering each block at each position, and each
head's output (all positions). The prompts must be of equal length in tokens."""
from __future__ import annotations

import time

import torch

from lab.config import ConfigError
from lab.evaluation.attention_maps import sequence
from lab.inside.hooks import check_model, hooked

MIN_SPAN = 0.5    # logits between the two runs' differences under which a fraction says little


def _answer_id(tokenizer, text: str | None, logits: torch.Tensor) -> int:
    """The token of an answer given as text (its first token), or the first choice of `logits`."""
    if not text:
        return int(logits.argmax())
    ids = tokenizer.encode(text)
    if not ids:
        raise ConfigError(f"the answer {text!r} has no tokens")
    return ids[0]


@torch.no_grad()
def patch(model, tokenizer, clean: str, corrupted: str, answer: str | None = None,
          wrong: str | None = None, batch_size: int = 64) -> dict:
    """{"tokens" (clean) and "corrupted_tokens", "answer"/"wrong" tokens, "clean"/"corrupted"
    logit differences, "resid": [block][position] restored fraction, "heads": [block][head]}."""
    check_model(model)
    a, shown_a = sequence(model, tokenizer, clean)
    b, shown_b = sequence(model, tokenizer, corrupted)
    if len(a) != len(b):
        raise ConfigError(f"the clean prompt is {len(a)} tokens and the corrupted one {len(b)}: "
                          f"patching needs prompts of equal length in tokens")
    was = model.training
    model.eval()
    t0 = time.time()
    dev = next(model.parameters()).device
    L, H, T = len(model.transformer.h), model.config.n_head, len(a)
    resid = [f"blocks.{i}.resid_pre" for i in range(L)]
    zs = [f"blocks.{i}.attn.z" for i in range(L)]
    try:
        xa, xb = torch.tensor([a], device=dev), torch.tensor([b], device=dev)
        with hooked(model, read=resid + zs) as clean_seen:
            la = model(xa).logits[0, -1].float()
        lb = model(xb).logits[0, -1].float()
        right = _answer_id(tokenizer, answer, la)
        # unnamed, the corrupted answer is the corrupted prompt's first choice other than the clean one
        other = _answer_id(tokenizer, wrong, lb.index_fill(0, torch.tensor([right], device=dev), -torch.inf))
        if right == other:
            raise ConfigError(f"the clean and the corrupted answer are both "
                              f"{tokenizer.token_strings([right])[0]!r}: name two different answers")
        diff = lambda lg: lg[..., right] - lg[..., other]       # noqa: E731
        d_clean, d_corrupt = float(diff(la)), float(diff(lb))
        span = d_clean - d_corrupt
        frac = lambda lg: ((diff(lg) - d_corrupt) / span).tolist()   # noqa: E731
        out_resid = []
        for i in range(L):                   # copy t of the corrupted run gets the clean position t
            def at_position(x, i=i):
                x = x.clone()
                t = torch.arange(x.size(0), device=x.device)
                x[t, t] = clean_seen[resid[i]][0, :x.size(0)]
                return x
            with hooked(model, replace={resid[i]: at_position}):
                out_resid.append(frac(model(xb.repeat(T, 1)).logits[:, -1].float()))
        out_heads = []
        for i in range(L):                   # copy h gets the clean head h, at every position
            def head_each(z, i=i):
                z = z.clone()
                h = torch.arange(z.size(0), device=z.device)
                z[h, h] = clean_seen[zs[i]][0, :z.size(0)]
                return z
            with hooked(model, replace={zs[i]: head_each}):
                out_heads.append(frac(model(xb.repeat(H, 1)).logits[:, -1].float()))
    finally:
        model.train(was)
    strings = tokenizer.token_strings
    return {"tokens": shown_a, "corrupted_tokens": shown_b, "answer": strings([right])[0],
            "wrong": strings([other])[0], "clean": d_clean, "corrupted": d_corrupt,
            "resid": out_resid, "heads": out_heads,
            "layers": [f"block {i + 1}" for i in range(L)], "elapsed_s": time.time() - t0,
            "warning": (f"the clean and corrupted logit differences are only {abs(span):.3f} apart: "
                        f"the fractions are ratios of small numbers; choose prompts whose answers "
                        f"differ more" if abs(span) < MIN_SPAN else None)}


@torch.no_grad()
def restored(model, tokenizer, clean: str, corrupted: str, points: list[str], right: int,
             other: int) -> float:
    """The fraction restored by patching whole points (every position) from the clean run into the
    corrupted one: 0 with no points, 1 with the last block's output (the tests' known answers)."""
    a, _ = sequence(model, tokenizer, clean)
    b, _ = sequence(model, tokenizer, corrupted)
    dev = next(model.parameters()).device
    model.eval()
    xa, xb = torch.tensor([a], device=dev), torch.tensor([b], device=dev)
    with hooked(model, read=points) as seen:
        la = model(xa).logits[0, -1].float()
    lb = model(xb).logits[0, -1].float()
    with hooked(model, replace={p: (lambda x, p=p: seen[p]) for p in points}):
        lp = model(xb).logits[0, -1].float()
    d = lambda lg: float(lg[right] - lg[other])      # noqa: E731
    return (d(lp) - d(lb)) / (d(la) - d(lb))
