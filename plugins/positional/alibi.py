"""ALiBi (Press, Smith & Lewis 2022, "Train Short, Test Long"): no position embeddings; each head
adds `-slope * distance` to its attention scores, so a model trained on short text reads longer
text without meeting a position it has never seen."""
import math

import torch

from lab.modeling.model import Positional
from lab.registry import POSITIONAL


def slopes(n_head: int) -> torch.Tensor:
    """The paper's head slopes: a geometric sequence starting at 2^(-8/n) for n a power of two;
    otherwise those of the nearest lower power of two, then every other one of the next."""
    def power_of_two(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]
    low = 2 ** math.floor(math.log2(n_head))
    out = power_of_two(low)
    if low < n_head:
        out += power_of_two(2 * low)[0::2][:n_head - low]
    return torch.tensor(out)


class ALiBi(Positional):
    def __init__(self, n_head: int):
        super().__init__()
        self.register_buffer("slopes", slopes(n_head)[:, None, None], persistent=False)   # (nh, 1, 1)

    packable = True

    def attn_bias(self, q_pos, k_pos):     # (T,), (S,) -> (nh, T, S); future keys are masked anyway
        distance = (q_pos[..., :, None] - k_pos[..., None, :]).clamp(min=0)
        if distance.dim() == 3:            # packed rows: (B, T), (B, S) -> (B, nh, T, S)
            distance = distance[:, None]
        return -self.slopes * distance.to(self.slopes.dtype)


@POSITIONAL.register("alibi", "ALiBi: a per-head penalty growing with distance, no embeddings "
                              "(reads past its training length)")
def alibi(n_head: int):
    return ALiBi(n_head)
