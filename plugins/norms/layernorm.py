"""LayerNorm (Ba, Kiros & Hinton 2016), as in GPT-2 (pre) and the original Transformer (post)."""
from torch import nn

from lab.registry import NORMS


@NORMS.register("layernorm", "LayerNorm: subtract the mean, divide by the std, scale and shift")
def layernorm(n_embd: int, eps: float, bias: bool) -> nn.Module:
    return nn.LayerNorm(n_embd, eps=eps, bias=bias)
