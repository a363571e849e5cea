"""Causal multi-head self-attention (Vaswani et al. 2017), with a KV cache and optional weights.

The same module serves grouped-query (Ainslie et al. 2023) and multi-query (Shazeer 2019)
attention: `n_kv_head` key/value heads, each shared by `n_head // n_kv_head` query heads.
Module names follow HF GPT-2 (`c_attn` holds q, k and v fused; `c_proj` is the output).
"""
import math

import torch
from torch import nn
from torch.nn import functional as F

from lab.registry import ATTENTION


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, n_kv_head: int, bias: bool, dropout: float):
        super().__init__()
        assert n_embd % n_head == 0 and n_head % n_kv_head == 0
        self.n_head, self.n_kv_head = n_head, n_kv_head
        self.head_dim = n_embd // n_head
        kv_dim = n_kv_head * self.head_dim
        self.c_attn = nn.Linear(n_embd, n_embd + 2 * kv_dim, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.dropout = dropout

    def forward(self, x, pos, rotate, past=None, need_weights=False):
        """x: (B, T, C); pos: (T,) absolute positions; rotate(q, k, pos) applies rotary positions;
        past: cached (k, v), each (B, n_kv_head, T_past, hs). Returns (y, (k, v), weights or None)."""
        B, T, C = x.size()
        hs, nh, nkv = self.head_dim, self.n_head, self.n_kv_head
        q, k, v = self.c_attn(x).split([C, nkv * hs, nkv * hs], dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)    # (B, nh, T, hs)
        k = k.view(B, T, nkv, hs).transpose(1, 2)   # (B, nkv, T, hs)
        v = v.view(B, T, nkv, hs).transpose(1, 2)   # (B, nkv, T, hs)
        q, k = rotate(q, k, pos)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)      # (B, nkv, S, hs), S = T_past + T
            v = torch.cat([past[1], v], dim=2)
        present = (k, v)
        S = k.size(2)
        if nkv != nh:   # each KV head serves a contiguous group of query heads (HF's repeat_kv)
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
        # query i sits at absolute position S - T + i and may see keys 0 .. S - T + i
        mask = None
        if T > 1:
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        if need_weights:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)     # (B, nh, T, S)
            if mask is not None:
                att = att.masked_fill(~mask, float("-inf"))
            weights = F.softmax(att.float(), dim=-1).to(q.dtype)
            y = self.attn_dropout(weights) @ v                   # (B, nh, T, hs)
        else:
            weights = None
            p = self.dropout if self.training else 0.0
            if mask is not None and S == T:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        y = y.transpose(1, 2).contiguous().view(B, T, C)       # re-assemble the heads
        return self.resid_dropout(self.c_proj(y)), present, weights


@ATTENTION.register("mha", "Multi-head attention: every query head has its own key/value head")
def mha(n_embd: int, n_head: int, kv_groups: int | None = None, bias: bool = True,
        dropout: float = 0.0):
    return CausalSelfAttention(n_embd, n_head, n_head, bias, dropout)
