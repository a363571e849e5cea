"""Learned absolute position embeddings, as in GPT-2 (Radford et al. 2019): `wpe`."""
import torch
from torch import nn

from lab.modeling.model import Positional
from lab.registry import POSITIONAL


class LearnedPositional(Positional):
    """Adds a learned vector per position to the token embeddings."""

    def __init__(self, n_positions: int, n_embd: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_positions, n_embd))

    packable = True     # pos (B, T) indexes the table per row

    def embed(self, x, pos):   # x: (B, T, C) token embeddings, pos: (T,) or (B, T) positions
        # F.embedding, not weight[pos]: its backward sums a position's repeats (a packed batch's
        # many position-0s) in a fixed order, so a run repeats bit for bit on the CPU
        return x + nn.functional.embedding(pos, self.weight)


@POSITIONAL.register("learned", "Learned absolute position embeddings added to the input (GPT-2)")
def learned(n_positions: int, n_embd: int):
    return LearnedPositional(n_positions, n_embd)
