"""Top-p (nucleus) sampling (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration").
As in the assignment, the nucleus is taken after temperature: the smallest set of likeliest tokens
whose probability reaches p, the token that crosses p included.

Sorting the whole vocabulary every step is what made nucleus sampling slow; the nucleus of a trained
model is usually a few dozen tokens, so the likeliest `CUT` are looked at first (a partial top-k) and
only rows whose nucleus is wider than that fall back to the full sort. The kept set is the one the
full sort gives (up to float rounding of the running sum right at p)."""
from dataclasses import dataclass, field

import torch

from lab.config import ConfigError
from lab.registry import DECODERS
from plugins.decoders.random import SamplingSettings, sample

CUT = 256


@dataclass
class TopPSettings(SamplingSettings):
    top_p: float = field(default=0.9, metadata={
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
        top, idx = torch.sort(probs[wide], descending=True, dim=-1)
        drop_sorted = ~_keep_sorted(top.cumsum(dim=-1), p)
        drop[wide] = drop_sorted.scatter(1, idx, drop_sorted)
    return drop


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
