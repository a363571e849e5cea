"""The GPT-2 feed-forward block: Linear, GELU (tanh approximation), Linear (Radford et al. 2019)."""
from torch import nn
from torch.nn import functional as F

from lab.registry import MLP


class GeluMLP(nn.Module):
    def __init__(self, n_embd: int, n_inner: int, bias: bool, dropout: float):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, n_inner, bias=bias)
        self.c_proj = nn.Linear(n_inner, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


@MLP.register("gelu", "Two linear layers with a GELU between them (GPT-2)", matrices=2)
def gelu(n_embd: int, n_inner: int, bias: bool, dropout: float):
    return GeluMLP(n_embd, n_inner, bias, dropout)
