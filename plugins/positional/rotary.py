"""Rotary position embeddings (Su et al. 2021, "RoFormer"), in Llama's half-split layout."""
from dataclasses import dataclass, field

import torch

from lab.config import ConfigError
from lab.modeling.model import Positional
from lab.registry import POSITIONAL


@dataclass
class RotarySettings:
    theta: float = field(default=10000.0, metadata={
        "help": "the base of the rotation frequencies (Llama 10000, SmolLM2 100000)",
        "min": 1.0, "max": 1e9})

    def check(self, model) -> None:
        if model.head_dim % 2:
            raise ConfigError(f"rotary positions need an even head width; "
                              f"n_embd/n_head = {model.head_dim}")


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryPositional(Positional):
    """Rotates queries and keys by position-dependent angles; adds nothing to the input."""

    def __init__(self, n_positions: int, head_dim: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(n_positions).float(), inv_freq)   # (P, hs/2)
        emb = torch.cat((freqs, freqs), dim=-1)                            # (P, hs)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    packable = True

    def rotate(self, q, k, pos):   # q: (B, nh, T, hs), k: (B, nkv, T, hs), pos: (T,) or (B, T)
        cos, sin = self.cos[pos].to(q.dtype), self.sin[pos].to(q.dtype)   # (T, hs) or (B, T, hs)
        if pos.dim() == 2:                                                 # packed rows
            cos, sin = cos[:, None], sin[:, None]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


@POSITIONAL.register("rotary", "Rotary embeddings applied to queries and keys (RoFormer, Llama)",
                     settings=RotarySettings, legacy_keys={"rope_theta": "theta"})
def rotary(n_positions: int, head_dim: int, settings: RotarySettings):
    return RotaryPositional(n_positions, head_dim, settings.theta)
