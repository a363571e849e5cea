"""Transformer-XL (Dai et al. 2019): text is read segment by segment, each layer attending over its
segment and a memory of the `mem_len` hidden states before it (kept without gradient), with
relative positional encoding: score = (q + u) k + (q + v) W_R R[i - j], R sinusoidal.

Text longer than one segment (a long caption, or wiki.txt) is read as XL reads it: query i sees
keys from `mem_len` before its segment's start up to itself, and the keys and values of earlier
segments are computed from the layer's input with its gradient stopped; the values are those of
the segment-by-segment recurrence, computed for the whole sequence at once. Generation recomputes
the prefix (`PrefixCache`), which gives the same memory a token-by-token run would keep.
The family brings its own attention and positions: the config's must be mha and sinusoidal.
"""
import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from lab.config import ConfigError
from lab.modeling.model import OutputLayer, Positional, PrefixLM, _init_weights, offered, part
from lab.registry import MODELS
from plugins.models.gpt2 import DEFAULTS as GPT2_PARTS


@dataclass
class XLSettings:
    segment_len: int = field(default=16, metadata={
        "help": "tokens read at once; longer text is read segment by segment", "min": 2,
        "max": 32768})
    mem_len: int = field(default=16, metadata={
        "help": "hidden states before the segment each layer keeps as memory", "min": 0,
        "max": 32768})

    def check(self, model) -> None:
        if model.attention != "mha" or model.positional != "sinusoidal":
            raise ConfigError(f"the xl family brings its own attention, relative over segment and "
                              f"memory: attention must be mha and positional sinusoidal, got "
                              f"{model.attention} and {model.positional}")


def sinusoid(n: int, dim: int) -> torch.Tensor:
    """(n, dim): the sine/cosine encoding of distances 0..n-1."""
    pos = torch.arange(n).float()[:, None]
    inv = torch.exp(torch.arange(0, dim, 2).float() * (-math.log(10000.0) / dim))
    table = torch.zeros(n, dim)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv)[:, : dim // 2]
    return table


class RelativeAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, n_positions: int, bias: bool, dropout: float):
        super().__init__()
        self.n_head = self.n_kv_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.r_proj = nn.Linear(n_embd, n_embd, bias=False)           # W_R
        self.u = nn.Parameter(torch.zeros(n_head, n_embd // n_head))  # global content bias
        self.v = nn.Parameter(torch.zeros(n_head, n_embd // n_head))  # global position bias
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("R", sinusoid(n_positions, n_embd), persistent=False)

    def _heads(self, t, B, T):
        return t.view(B, T, self.n_head, -1).transpose(1, 2)         # (B, nh, T, hs)

    def forward(self, x, allowed, is_mem, need_weights=False):
        """x: (B, T, C); allowed, is_mem: (T, T), True where query i may see key j, and where
        key j is memory for query i (before i's segment: no gradient flows back through it)."""
        B, T, C = x.shape
        q, k, v = (self._heads(t, B, T) for t in self.c_attn(x).split(C, dim=2))
        _, k_mem, v_mem = (self._heads(t, B, T) for t in self.c_attn(x.detach()).split(C, dim=2))
        hs = C // self.n_head
        r = self._heads(self.r_proj(self.R[:T])[None], 1, T)[0]      # (nh, T, hs) by distance
        content = torch.where(is_mem, (q + self.u[:, None]) @ k_mem.transpose(-2, -1),
                              (q + self.u[:, None]) @ k.transpose(-2, -1))
        distance = (torch.arange(T, device=x.device)[:, None] - torch.arange(T, device=x.device)
                    ).clamp(min=0).expand(B, self.n_head, T, T)
        position = ((q + self.v[:, None]) @ r.transpose(-2, -1)).gather(-1, distance)
        scores = (content + position) / math.sqrt(hs)
        w = F.softmax(scores.masked_fill(~allowed, float("-inf")).float(), dim=-1).to(q.dtype)
        wd = self.dropout(w)
        y = (wd * ~is_mem) @ v + (wd * is_mem) @ v_mem
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.dropout(self.c_proj(y)), (w if need_weights else None)


class XLBlock(nn.Module):
    def __init__(self, ln_1, attn, ln_2, mlp, norm_position: str):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = ln_1, attn, ln_2, mlp
        self.pre_norm = norm_position == "pre"

    def forward(self, x, allowed, is_mem, need_weights):
        if self.pre_norm:
            a, w = self.attn(self.ln_1(x), allowed, is_mem, need_weights)
            x = x + a
            return x + self.mlp(self.ln_2(x)), w
        a, w = self.attn(x, allowed, is_mem, need_weights)
        x = self.ln_1(x + a)
        return self.ln_2(x + self.mlp(x)), w


class XLLM(PrefixLM):
    points_absent = ("its blocks read each segment with the previous segment's memory: a point "
                     "would stand for two segments at once (lab.modeling.points)")
    def __init__(self, config, wte, blocks, ln_f, lm_head, settings: XLSettings):
        super().__init__(config, wte, Positional(), blocks, ln_f, lm_head)
        self.segment_len, self.mem_len = settings.segment_len, settings.mem_len

    def spans(self, T: int, device):
        """(T, T) masks: query i sees keys from mem_len before its segment's start up to itself;
        the keys before its segment's start are its memory."""
        i = torch.arange(T, device=device)[:, None]
        j = torch.arange(T, device=device)[None, :]
        start = i // self.segment_len * self.segment_len
        return (j <= i) & (j >= start - self.mem_len), j < start

    def run(self, idx, output_attentions):
        h = self.transformer
        allowed, is_mem = self.spans(idx.size(1), idx.device)
        x = h.drop(h.wte(idx))                       # positions enter as relative distances
        attentions = []
        for block in h.h:
            x, w = block(x, allowed, is_mem, output_attentions)
            attentions.append(w)
        return x, attentions if output_attentions else None, {}


@MODELS.register("xl", "Transformer-XL: segment-level recurrence with a memory of mem_len hidden "
                       "states, relative positions (Dai et al. 2019)", settings=XLSettings,
                 defaults={**GPT2_PARTS, "positional": "sinusoidal"})
def xl(config, settings: XLSettings):
    c, offer = config, offered(config)

    def norm():
        return part(c, "norm", **offer["norm"])

    blocks = [XLBlock(norm(), RelativeAttention(c.n_embd, c.n_head, c.n_positions, c.bias, c.dropout),
                      norm(), part(c, "mlp", **offer["mlp"]), c.norm_position)
              for _ in range(c.n_layer)]
    model = XLLM(c, wte=nn.Embedding(c.vocab_size, c.n_embd), blocks=blocks,
                 ln_f=norm() if c.norm_position == "pre" else nn.Identity(),
                 lm_head=OutputLayer(c.n_embd, c.vocab_size, bias=False), settings=settings)
    _init_weights(model, c.init_std)
    return model
