"""Fixed sinusoidal position encodings (Vaswani et al. 2017, "Attention Is All You Need", 3.5)."""
import math

import torch

from lab.modeling.model import Positional
from lab.registry import POSITIONAL


class SinusoidalPositional(Positional):
    def __init__(self, n_positions: int, n_embd: int):
        super().__init__()
        pos = torch.arange(n_positions).float()[:, None]
        div = torch.exp(torch.arange(0, n_embd, 2).float() * (-math.log(10000.0) / n_embd))
        table = torch.zeros(n_positions, n_embd)
        table[:, 0::2] = torch.sin(pos * div)
        table[:, 1::2] = torch.cos(pos * div)[:, : n_embd // 2]
        self.register_buffer("table", table, persistent=False)

    packable = True     # pos (B, T) indexes the table per row

    def embed(self, x, pos):
        return x + self.table[pos].to(x.dtype)


@POSITIONAL.register("sinusoidal", "Fixed sine/cosine encodings added to the input (Vaswani 2017)")
def sinusoidal(n_positions: int, n_embd: int):
    return SinusoidalPositional(n_positions, n_embd)
