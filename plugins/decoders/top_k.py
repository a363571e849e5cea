"""Top-k sampling (Fan et al. 2018, "Hierarchical Neural Story Generation")."""
from dataclasses import dataclass, field

import torch

from lab.registry import DECODERS
from plugins.decoders.random import SamplingSettings, sample


@dataclass
class TopKSettings(SamplingSettings):
    top_k: int = field(default=40, metadata={"short": "k", "help": "sample among the k likeliest tokens",
                                             "min": 1, "max": 1_000_000})


class TopK:
    def __init__(self, k: int, temperature: float):
        self.k, self.temperature = k, temperature

    def __call__(self, logits, generator=None):
        k = min(self.k, logits.size(-1))
        kth = torch.topk(logits, k, dim=-1).values[:, -1:]          # (B, 1) k-th largest logit
        return sample(logits.masked_fill(logits < kth, float("-inf")), self.temperature, generator)


@DECODERS.register("top_k", "Sample among the k likeliest tokens", settings=TopKSettings)
def top_k(settings: TopKSettings):
    return TopK(settings.top_k, settings.temperature)
