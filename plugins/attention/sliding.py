"""Sliding-window causal attention (Beltagy et al. 2020, "Longformer"; Mistral 7B): each query sees
itself and the `window - 1` tokens before it, and the KV cache keeps only those keys, so a long
generation holds `window - 1` keys per layer instead of all of them."""
from dataclasses import dataclass, field

from lab.registry import ATTENTION
from plugins.attention.mha import CausalSelfAttention


@dataclass
class SlidingSettings:
    window: int = field(default=16, metadata={
        "help": "tokens each query sees, itself included", "min": 1, "max": 32768})


class SlidingWindowAttention(CausalSelfAttention):
    def __init__(self, n_embd: int, n_head: int, bias: bool, dropout: float, window: int):
        super().__init__(n_embd, n_head, n_head, bias, dropout)
        self.window = window

    def mask_mod(self, q_pos, k_pos):
        return (k_pos <= q_pos) & (q_pos - k_pos < self.window)

    def keep_cache(self, k, v):
        keep = self.window - 1             # the next query sees these and itself
        return k[:, :, k.size(2) - min(keep, k.size(2)):], v[:, :, v.size(2) - min(keep, v.size(2)):]


@ATTENTION.register("sliding", "Sliding-window attention: each token sees the last `window` tokens",
                    settings=SlidingSettings)
def sliding(n_embd: int, n_head: int, bias: bool, dropout: float, settings: SlidingSettings):
    return SlidingWindowAttention(n_embd, n_head, bias, dropout, settings.window)
