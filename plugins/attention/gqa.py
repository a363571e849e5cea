"""Grouped-query attention (Ainslie et al. 2023, "GQA"): `kv_groups` key/value heads, each shared
by a group of query heads. kv_groups = n_head is multi-head attention; kv_groups = 1 is multi-query."""
from lab.registry import ATTENTION
from plugins.attention.mha import CausalSelfAttention


@ATTENTION.register("gqa", "Grouped-query attention: kv_groups key/value heads shared by query groups")
def gqa(n_embd: int, n_head: int, kv_groups: int | None = None, bias: bool = True,
        dropout: float = 0.0):
    return CausalSelfAttention(n_embd, n_head, kv_groups or n_head, bias, dropout)
