"""Learned absolute position embeddings, as in GPT-2 (Radford et al. 2019): `wpe`."""
import torch
from torch import nn

from lab.registry import POSITIONAL


class LearnedPositional(nn.Module):
    """Adds a learned vector per position to the token embeddings."""

    def __init__(self, n_positions: int, n_embd: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_positions, n_embd))

    def embed(self, x, pos):   # x: (B, T, C) token embeddings, pos: (T,) absolute positions
        return x + self.weight[pos]

    def rotate(self, q, k, pos):
        return q, k


@POSITIONAL.register("learned", "Learned absolute position embeddings added to the input (GPT-2)")
def learned(n_positions: int, n_embd: int, head_dim: int, theta: float = 10000.0):
    return LearnedPositional(n_positions, n_embd)
