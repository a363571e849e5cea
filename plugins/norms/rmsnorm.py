"""RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"), as in Llama."""
import torch
from torch import nn

from lab.registry import NORMS


class RMSNorm(nn.Module):
    def __init__(self, n_embd: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n_embd))

    def forward(self, x):
        # computed in float32 as Llama does, so half-precision runs keep the same scale
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


@NORMS.register("rmsnorm", "RMSNorm: divide by the root mean square and scale; no mean, no shift")
def rmsnorm(n_embd: int, eps: float) -> nn.Module:
    return RMSNorm(n_embd, eps=eps)     # no bias: RMSNorm has none by definition
