"""Top-p (nucleus) sampling (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration").
As in the assignment, the nucleus is taken after temperature: the smallest set of likeliest tokens
whose probability reaches p, the token that crosses p included.

Sorting the whole vocabulary every step is what made nucleus sampling slow; the nucleus of a trained
model is usually a few dozen tokens, so the likeliest `CUT` are looked at first (a partial top-k).
A row whose nucleus is wider than that (an untrained model's, or a high temperature's) finds the
probability where the running sum crosses p without sorting, by a radix select on the float's bits
(non-negative floats order as their bit patterns): the mass in 4,096 buckets of the top bits, then
the crossing bucket's elements by the next bits, then the last ones, the sums in float64 (faster
than the sort for flat rows: docs/benchmarks.md). The kept set is the one the full sort gives (up
to float rounding of the running sum right at p)."""
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from lab.config import ConfigError
from lab.registry import DECODERS
from plugins.decoders.random import SamplingSettings, sample

CUT = 256


@dataclass
class TopPSettings(SamplingSettings):
    top_p: float = field(default=0.9, metadata={"short": "p",
        "help": "the smallest set of likeliest tokens holding this much probability"})

    def check(self, config) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")


def _keep_sorted(cum: torch.Tensor, p: float) -> torch.Tensor:
    """From cumulative probabilities in descending order: keep a token while the mass before it is
    at most p (so the token that crosses p stays); the likeliest always stays."""
    keep = torch.ones_like(cum, dtype=torch.bool)
    keep[:, 1:] = cum[:, :-1] <= p
    return keep


def nucleus_drop(logits: torch.Tensor, p: float, cut: int = CUT) -> torch.Tensor:
    """(B, V) logits (after temperature) -> (B, V) bool, True for tokens outside the nucleus."""
    probs = torch.softmax(logits, dim=-1)
    top, idx = torch.topk(probs, min(cut, logits.size(-1)), dim=-1)
    cum = top.cumsum(dim=-1)
    drop = torch.ones_like(logits, dtype=torch.bool)
    drop.scatter_(1, idx, ~_keep_sorted(cum, p))
    wide = cum[:, -1] <= p                      # the nucleus may go on past the cut
    if wide.any():
        drop[wide] = ~_nucleus(probs[wide], p)
    return drop


def _nucleus(probs: torch.Tensor, p: float) -> torch.Tensor:
    """(B, V) -> (B, V) bool, the nucleus the full sort gives: every probability above the
    crossing one, and of those equal to it as many as the sort would take (the j-th is kept while
    the mass before it, the mass above plus j of them, is at most p)."""
    if p >= 1.0:
        return torch.ones_like(probs, dtype=torch.bool)
    t, above, ties = crossing(probs, p)
    keep = probs >= t[:, None]
    k = ((p - above) / t.double().clamp_min(1e-300)).floor().clamp(0, probs.size(1)) + 1
    fewer = k < ties                       # more equal ones than the sort takes (a flat row)
    if fewer.any():
        sub, ts = probs[fewer], t[fewer][:, None]
        tie = sub == ts
        keep[fewer] = (sub > ts) | (tie & (tie.cumsum(1) <= k[fewer][:, None]))
    return keep


def _settle(mass, above, found, shift: int, p: float):
    """One radix level: mass (B * n,) per bucket of the bits at `shift` -> the bucket where the
    running sum from the top crosses p joins `found`, the mass of the buckets above it `above`;
    also which bucket that was."""
    suffix = mass.double().view(above.size(0), -1).flip(1).cumsum(1).flip(1)   # at or above each
    at = ((above[:, None] + suffix > p).sum(1) - 1).clamp_(min=0)
    above = above + F.pad(suffix, (0, 1)).gather(1, (at + 1)[:, None])[:, 0]
    return above, found | (at.int() << shift), at


def crossing(probs: torch.Tensor, p: float):
    """(B, V) probabilities, p < 1 -> (B,) each, the crossing probability t (the nucleus holds
    every probability above it and some equal to it), the mass above t, and how many equal t."""
    B = probs.size(0)
    bits = probs.float().contiguous().view(torch.int32)        # bit 31 (the sign) is 0
    probs = bits.view(torch.float32)
    above = torch.zeros(B, dtype=torch.float64, device=probs.device)
    found = torch.zeros(B, dtype=torch.int32, device=probs.device)
    rows = torch.arange(B, dtype=torch.int32, device=probs.device)[:, None]
    mass = torch.bincount(((bits >> 19) + rows * 4096).view(-1), weights=probs.view(-1).double(),
                          minlength=B * 4096)                  # bits 30-19 of every element
    above, found, _ = _settle(mass, above, found, 19, p)
    r, c = ((bits >> 19) == (found >> 19)[:, None]).nonzero(as_tuple=True)
    b, w = bits[r, c], probs[r, c]                              # the crossing bucket's elements
    mass = torch.bincount(r * 4096 + ((b >> 7) & 4095), weights=w.double(), minlength=B * 4096)
    above, found, _ = _settle(mass, above, found, 7, p)        # bits 18-7
    last = (b >> 7) == (found >> 7)[r]
    key = r[last] * 128 + (b[last] & 127)
    mass = torch.bincount(key, weights=w[last].double(), minlength=B * 128)
    above, found, at = _settle(mass, above, found, 0, p)       # bits 6-0: one value per bucket
    ties = torch.bincount(key, minlength=B * 128).view(B, 128).gather(1, at[:, None])[:, 0]
    t = found.view(torch.float32)
    return t, above, ties                      # above: the mass of the buckets above t's


class TopP:
    def __init__(self, p: float, temperature: float):
        self.p, self.temperature = p, temperature

    def __call__(self, logits, generator=None):
        logits = logits.float() / self.temperature
        return sample(logits.masked_fill(nucleus_drop(logits, self.p), float("-inf")), 1.0, generator)


@DECODERS.register("top_p", "Nucleus sampling: the smallest set of tokens holding probability p",
                   settings=TopPSettings)
def top_p(settings: TopPSettings):
    return TopP(settings.top_p, settings.temperature)
