"""Top-p (nucleus) sampling (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration").
As in the assignment, the nucleus is taken after temperature: the smallest set of likeliest tokens
whose probability reaches p, the token that crosses p included."""
import torch

from lab.registry import DECODERS
from plugins.decoders.random import sample


class TopP:
    def __init__(self, p: float, temperature: float):
        self.p, self.temperature = p, temperature

    def __call__(self, logits, generator=None):
        logits = logits.float() / self.temperature
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop_sorted = cum > self.p
        drop_sorted[:, 1:] = drop_sorted[:, :-1].clone()   # keep the token that crosses p
        drop_sorted[:, 0] = False
        drop = drop_sorted.scatter(1, order, drop_sorted)
        return sample(logits.masked_fill(drop, float("-inf")), 1.0, generator)


@DECODERS.register("top_p", "Nucleus sampling: the smallest set of tokens holding probability p",
                   uses=("temperature", "top_p"))
def top_p(cfg):
    return TopP(cfg.top_p, cfg.temperature)
