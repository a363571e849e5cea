"""Rotary position embeddings (Su et al. 2021, "RoFormer"), in Llama's half-split layout."""
import torch
from torch import nn

from lab.registry import POSITIONAL


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryPositional(nn.Module):
    """Rotates queries and keys by position-dependent angles; adds nothing to the input."""

    def __init__(self, n_positions: int, head_dim: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(n_positions).float(), inv_freq)   # (P, hs/2)
        emb = torch.cat((freqs, freqs), dim=-1)                            # (P, hs)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def embed(self, x, pos):
        return x

    def rotate(self, q, k, pos):   # q: (B, nh, T, hs), k: (B, nkv, T, hs), pos: (T,)
        cos, sin = self.cos[pos].to(q.dtype), self.sin[pos].to(q.dtype)   # (T, hs)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


@POSITIONAL.register("rotary", "Rotary embeddings applied to queries and keys (RoFormer, Llama)")
def rotary(n_positions: int, n_embd: int, head_dim: int, theta: float = 10000.0):
    return RotaryPositional(n_positions, head_dim, theta)
