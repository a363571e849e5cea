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
from lab.errors import Aborted
from lab.evaluation.attention_maps import sequence
from lab.inside.hooks import check_model, hooked
from lab.modeling.generate import GenerationError

MIN_SPAN = 0.5    # logits between the two runs' differences under which a fraction says little
ROW_TOKENS = 4096  # tokens one patched forward pass reads (its copies of the corrupted prompt)


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
          wrong: str | None = None, abort=None, max_tokens: int | None = None, progress=None) -> dict:
    """{"tokens" (clean) and "corrupted_tokens", "answer"/"wrong" tokens, "clean"/"corrupted"
    logit differences, "resid": [block][position] restored fraction, "heads": [block][head]}.
    The patched runs go ROW_TOKENS tokens a forward pass, keeping the last position's logits
    only; abort() is asked before each (True raises Aborted); max_tokens: the most a prompt may
    have (default: the context); progress(done, of): after each block's stream and heads."""
    check_model(model)
    if not clean.strip() or not corrupted.strip():
        raise ConfigError("type a clean prompt and a corrupted one of the same length in tokens")
    (a, shown_a), (b, shown_b) = _prompts(model, tokenizer, clean, corrupted, max_tokens)
    was, t0, dev = model.training, time.time(), next(model.parameters()).device
    model.eval()
    L = len(model.transformer.h)
    resid = [f"blocks.{i}.resid_pre" for i in range(L)]
    zs = [f"blocks.{i}.attn.z" for i in range(L)]
    try:
        xa, xb = torch.tensor([a], device=dev), torch.tensor([b], device=dev)
        with hooked(model, read=resid + zs) as clean_seen:
            la = model(xa, logits_to_keep=1).logits[0, -1].float()     # the last position's only
        lb = model(xb, logits_to_keep=1).logits[0, -1].float()
        right, other = _answers(tokenizer, answer, wrong, la, lb)
        d_clean, d_corrupt = float(la[right] - la[other]), float(lb[right] - lb[other])
        span = d_clean - d_corrupt

        def restored_by(name: str) -> list[float]:
            copies = len(a) if name.endswith("resid_pre") else model.config.n_head
            lg = _patched_logits(model, xb, name, clean_seen[name][0], copies, abort)
            if progress:
                progress((resid + zs).index(name) + 1, 2 * L)
            return ((lg[:, right] - lg[:, other] - d_corrupt) / span).tolist()
        out_resid, out_heads = [restored_by(n) for n in resid], [restored_by(n) for n in zs]
    finally:
        model.train(was)
    strings = tokenizer.token_strings
    return {"tokens": shown_a, "corrupted_tokens": shown_b, "answer": strings([right])[0],
            "wrong": strings([other])[0], "clean": d_clean, "corrupted": d_corrupt,
            "resid": out_resid, "heads": out_heads,
            "layers": [f"block {i + 1}" for i in range(L)], "elapsed_s": time.time() - t0,
            "warning": _warning(span)}


def _patched_logits(model, xb: torch.Tensor, name: str, seen: torch.Tensor, copies: int,
                    abort) -> torch.Tensor:
    """(copies, V): the last position's logits of the corrupted run xb (1, T) where copy c gets
    the clean run's slice c of `name` (`seen`: a position of the stream, or a head), ROW_TOKENS
    tokens a forward pass; abort() is asked before each (True raises Aborted)."""
    step, got = max(1, ROW_TOKENS // xb.size(1)), []
    for first in range(0, copies, step):
        if abort is not None and abort():
            raise Aborted()
        n = min(step, copies - first)
        with hooked(model, replace={name: lambda x, first=first: _slice_each(x, seen, first)}):
            got.append(model(xb.repeat(n, 1), logits_to_keep=1).logits[:, -1].float())
    return torch.cat(got)


def _prompts(model, tokenizer, clean: str, corrupted: str, max_tokens: int | None = None):
    """Each prompt's ids and token strings, refused unless they are as long in tokens (one too
    long is named)."""
    def read(text: str, which: str):
        try:
            return sequence(model, tokenizer, text, max_tokens=max_tokens)
        except GenerationError as e:
            raise GenerationError(f"the {which} prompt: {e}") from None
    a, b = read(clean, "clean"), read(corrupted, "corrupted")
    if len(a[0]) != len(b[0]):
        raise ConfigError(f"the clean prompt is {len(a[0])} tokens and the corrupted one {len(b[0])}: "
                          f"patching needs prompts of equal length in tokens")
    return a, b


def _answers(tokenizer, answer, wrong, clean_logits, corrupted_logits) -> tuple[int, int]:
    """The clean answer's token (named, or the clean run's first choice) and the corrupted one's
    (named, or the corrupted run's first choice other than the clean answer)."""
    right = _answer_id(tokenizer, answer, clean_logits)
    others = corrupted_logits.index_fill(0, torch.tensor([right], device=corrupted_logits.device),
                                         -torch.inf)
    other = _answer_id(tokenizer, wrong, others)
    if right == other:
        raise ConfigError(f"the clean and the corrupted answer are both "
                          f"{tokenizer.token_strings([right])[0]!r}: name two different answers")
    return right, other


def _warning(span: float) -> str | None:
    if abs(span) >= MIN_SPAN:
        return None
    return (f"the clean and corrupted logit differences are only {abs(span):.3f} apart: the "
            f"fractions are ratios of small numbers; choose prompts whose answers differ more")


def _slice_each(x: torch.Tensor, clean: torch.Tensor, first: int = 0) -> torch.Tensor:
    """Copy c of x (the batch's row c) gets clean's slice first + c along x's second axis: a
    position of a residual stream (B, T, C), or a head of z (B, nh, T, hs)."""
    x = x.clone()
    c = torch.arange(x.size(0), device=x.device)
    x[c, c + first] = clean[first:first + x.size(0)]
    return x


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
