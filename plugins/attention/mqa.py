"""Multi-query attention (Shazeer 2019, "Fast Transformer Decoding"): one key/value head for all."""
from lab.registry import ATTENTION
from plugins.attention.mha import CausalSelfAttention


@ATTENTION.register("mqa", "Multi-query attention: a single key/value head shared by every query head")
def mqa(n_embd: int, n_head: int, bias: bool, dropout: float):
    return CausalSelfAttention(n_embd, n_head, 1, bias, dropout)
