"""SwiGLU feed-forward block (Shazeer 2020, "GLU Variants Improve Transformer"), as in Llama."""
from torch import nn
from torch.nn import functional as F

from lab.registry import MLP


class SwiGLU(nn.Module):
    def __init__(self, n_embd: int, n_inner: int, bias: bool, dropout: float):
        super().__init__()
        self.gate_proj = nn.Linear(n_embd, n_inner, bias=bias)
        self.up_proj = nn.Linear(n_embd, n_inner, bias=bias)
        self.down_proj = nn.Linear(n_inner, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)))


@MLP.register("swiglu", "Gated MLP: SiLU(x W_gate) * (x W_up), then W_down (Llama)", matrices=3)
def swiglu(n_embd: int, n_inner: int, bias: bool, dropout: float):
    return SwiGLU(n_embd, n_inner, bias, dropout)
