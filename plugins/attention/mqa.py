"""Multi-query attention (Shazeer 2019, "Fast Transformer Decoding"): one key/value head for all."""
from lab.registry import ATTENTION
from plugins.attention.mha import CausalSelfAttention


@ATTENTION.register("mqa", "Multi-query attention: a single key/value head shared by every query head")
def mqa(n_embd: int, n_head: int, kv_groups: int | None = None, bias: bool = True,
        dropout: float = 0.0):
    return CausalSelfAttention(n_embd, n_head, 1, bias, dropout)
