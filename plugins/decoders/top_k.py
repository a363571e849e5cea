"""Top-k sampling (Fan et al. 2018, "Hierarchical Neural Story Generation")."""
import torch

from lab.registry import DECODERS
from plugins.decoders.random import sample


class TopK:
    def __init__(self, k: int, temperature: float):
        self.k, self.temperature = k, temperature

    def __call__(self, logits, generator=None):
        k = min(self.k, logits.size(-1))
        kth = torch.topk(logits, k, dim=-1).values[:, -1:]          # (B, 1) k-th largest logit
        return sample(logits.masked_fill(logits < kth, float("-inf")), self.temperature, generator)


@DECODERS.register("top_k", "Sample among the k likeliest tokens", uses=("temperature", "top_k"))
def top_k(cfg):
    return TopK(cfg.top_k, cfg.temperature)
