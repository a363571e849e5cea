"""Causal multi-head self-attention (Vaswani et al. 2017), with a KV cache and optional weights.

The same module serves grouped-query (Ainslie et al. 2023) and multi-query (Shazeer 2019)
attention: `n_kv_head` key/value heads, each shared by `n_head // n_kv_head` query heads.
Module names follow HF GPT-2 (`c_attn` holds q, k and v fused; `c_proj` is the output).

A masking variant states its mask, not a copy of this forward (torchtune's `mask_mod` in spirit):
a subclass overrides `mask_mod(q_pos, k_pos)`, and `keep_cache(k, v)` when it needs fewer keys.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F

from lab.modeling.model import KVSlot
from lab.modeling.points import Point
from lab.registry import ATTENTION


class CausalSelfAttention(nn.Module):
    packable = True     # takes packed rows: pos (B, T) and segments (lab/modeling/model.py's docstring)

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
        self.hook_z = Point()     # each head's output before c_proj (lab.modeling.points)

    def mask_mod(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """(T, 1) query and (1, S) key positions -> (T, S), True where the query may see the key.
        Plain causal attention: every key up to the query's own position."""
        return k_pos <= q_pos

    def keep_cache(self, k: torch.Tensor, v: torch.Tensor):
        """The keys and values (B, nkv, S, hs) later queries can still need: all of them here."""
        return k, v

    @property
    def keeps_less(self) -> bool:
        """A subclass keeping fewer keys (its own keep_cache) gets plain pairs, not growing slots."""
        return type(self).keep_cache is not CausalSelfAttention.keep_cache

    def forward(self, x, pos, positions, past=None, need_weights=False, segments=None):
        """x: (B, T, C); pos: (T,) absolute positions; positions: the positional module (its
        `rotate` and `attn_bias`); past: cached (k, v), each (B, n_kv_head, S_past, hs), of the
        keys just before pos[0]. Packed rows: pos (B, T) restarting per text and segments (B, T),
        no past; a query sees the keys of its own segment that mask_mod allows. Rows at their own
        positions (continuous batching): pos (B, T) with a past and no segments; each row's keys
        end at its last query, and the columns before its position 0 are not its own.
        Returns (y, kept (k, v), weights (B, nh, T, S) or None)."""
        B, T, C = x.size()
        hs, nh, nkv = self.head_dim, self.n_head, self.n_kv_head
        q, k, v = self.c_attn(x).split([C, nkv * hs, nkv * hs], dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)    # (B, nh, T, hs)
        k = k.view(B, T, nkv, hs).transpose(1, 2)   # (B, nkv, T, hs)
        v = v.view(B, T, nkv, hs).transpose(1, 2)   # (B, nkv, T, hs)
        q, k = positions.rotate(q, k, pos)
        k, v, present = self._with_past(k, v, past)
        mask, plain = self._mask(pos, T, k.size(2), segments, positions, need_weights, q.dtype)
        y, weights = self._attend(q, k, v, mask, plain, need_weights)
        y = self.hook_z(y)                                     # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)       # re-assemble the heads
        return self.resid_dropout(self.c_proj(y)), present, weights

    def _with_past(self, k, v, past):
        """The keys and values to attend to (the cached ones, then these) and the cache entry."""
        if past is not None and not self.keeps_less:    # (B, nkv, S, hs), S = S_past + T: written
            present = KVSlot.extend(past, k, v)         # after the cached keys, in place when it can
            return *present, present
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        return k, v, self.keep_cache(k, v)

    def _mask(self, pos, T: int, S: int, segments, positions, need_weights: bool, dtype):
        """The additive mask (None where plain causal attention needs none: S == T or T == 1)
        and whether the attention is plain causal: mask_mod, a row's own segment or its own
        columns, and the positional bias."""
        if segments is not None:                               # packed: (B, T) each, S == T
            k_pos = pos
            q_at, k_at = pos[:, :, None], pos[:, None, :]
        else:           # the keys end at the last query: (S,), or (B, S) for rows at their own
            k_pos = torch.arange(S, device=pos.device) + (pos[..., -1:] + 1 - S)   # positions
            q_at, k_at = pos[..., :, None], k_pos[..., None, :]
        bias = positions.attn_bias(pos, k_pos)               # (nh, T, S), (B, nh, T, S) or None
        plain = bias is None and pos.dim() == 1 and \
            type(self).mask_mod is CausalSelfAttention.mask_mod
        if plain and (T == 1 or S == T) and not (need_weights and T > 1):
            return None, plain
        allowed = self.mask_mod(q_at, k_at)                            # (T, S) or (B, T, S)
        if segments is not None:
            allowed = (allowed & (segments[:, :, None] == segments[:, None, :]))[:, None]
        elif pos.dim() == 2:        # a row's keys from before its text began are not its own
            allowed = (allowed & (k_at >= 0))[:, None]
        mask = torch.zeros(allowed.shape, dtype=dtype, device=pos.device)
        mask = mask.masked_fill(~allowed, float("-inf"))
        return (mask if bias is None else mask + bias.to(dtype)), plain

    def _attend(self, q, k, v, mask, plain: bool, need_weights: bool):
        """(B, nh, T, hs) outputs of the heads, and the weights when asked for."""
        B, nh, T, hs = q.shape
        nkv, S = k.size(1), k.size(2)
        p = self.dropout if self.training else 0.0
        grouped = nkv != nh     # each KV head serves a contiguous group of query heads (HF's repeat_kv)
        if grouped and mask is not None and T == 1 and not need_weights:
            # one query per row (a decoding step): each KV head's group of query heads reads it
            # as that head's queries, so the keys are read once, without copies
            g = nh // nkv
            if mask.dim() >= 3 and mask.size(-3) == nh:      # a bias per head: (.., nh, 1, S)
                mask = mask.reshape(*mask.shape[:-3], nkv, g, S)
            y = F.scaled_dot_product_attention(q.reshape(B, nkv, g, hs), k, v, attn_mask=mask,
                                               dropout_p=p)
            return y.view(B, nh, T, hs), None
        if grouped and (need_weights or mask is not None):
            # SDPA reads grouped heads without copies only in its unmasked kernels (CUDA's flash
            # kernel takes no mask): copies here, as HF's repeat_kv
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
            grouped = False
        if need_weights:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)     # (B, nh, T, S)
            if mask is not None:
                att = att + mask
            weights = F.softmax(att.float(), dim=-1).to(q.dtype)
            return self.attn_dropout(weights) @ v, weights       # (B, nh, T, hs)
        if plain and S == T:        # grouped KV heads read by SDPA, with no copies
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True,
                                                  enable_gqa=grouped), None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                              enable_gqa=grouped), None


@ATTENTION.register("mha", "Multi-head attention: every query head has its own key/value head")
def mha(n_embd: int, n_head: int, bias: bool, dropout: float):
    return CausalSelfAttention(n_embd, n_head, n_head, bias, dropout)
