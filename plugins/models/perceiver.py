"""The Perceiver bottleneck of the minGPT assignment (CS224N HW5, after Jaegle et al. 2021): the
first block is a DownProjectBlock, cross-attention from a learned basis of `bottleneck_dim` rows
(Xavier-uniform init) to the input; the middle blocks are causal self-attention blocks on those
rows; the last block is an UpProjectBlock, cross-attention from the input back to the rows.
`cross_norm=bottleneck` normalises only the bottleneck's side of each cross-attention (the basis
going down, the rows coming up), as HW5's hints do; `both` normalises the text's side too.

Causal end to end: row j of the basis attends to inputs 0..j, and output t to rows 0..t, so no
output sees a later input. Inputs after position `bottleneck_dim - 1` reach later outputs only
through their own residual stream: the bottleneck is the point of the variant.

Generation recomputes the whole prefix each step (a new input changes the rows that see it), and
the attention views are token x token: per head, the up-projection's weights times the middle
blocks' times the down-projection's, the share of output t's attention that reaches input s.
"""
import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from lab.config import ConfigError
from lab.modeling.model import Block, OutputLayer, PrefixLM, _init_weights, offered, part
from lab.registry import MODELS
from plugins.models.gpt2 import DEFAULTS as GPT2_PARTS


@dataclass
class PerceiverSettings:
    bottleneck_dim: int = field(default=64, metadata={
        "help": "rows of the learned basis the input is squeezed through (at least 2: one row "
                "sees one input, and its attention has nothing to learn)", "min": 2, "max": 32768})
    cross_norm: str = field(default="both", metadata={
        "help": "what each projection's cross-attention normalises: both (its queries' side and "
                "its keys' side) or bottleneck (only the bottleneck's side, as HW5's hints: the "
                "basis going down, the rows coming up; the text's side enters raw)",
        "choices": ("both", "bottleneck")})

    def check(self, model) -> None:
        if model.n_layer < 2:
            raise ConfigError(f"the perceiver needs n_layer of at least 2 (a down- and an "
                              f"up-projection block), got {model.n_layer}")


class CausalCrossAttention(nn.Module):
    """Queries from one sequence, keys and values from another; query i sees keys 0..i."""

    def __init__(self, n_embd: int, n_head: int, bias: bool, dropout: float):
        super().__init__()
        self.n_head = self.n_kv_head = n_head
        self.query = nn.Linear(n_embd, n_embd, bias=bias)
        self.c_attn = nn.Linear(n_embd, 2 * n_embd, bias=bias)      # keys and values
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x_q, x_kv):
        B, Tq, C = x_q.shape
        Tk, nh = x_kv.size(1), self.n_head
        q = self.query(x_q).view(B, Tq, nh, C // nh).transpose(1, 2)
        k, v = (t.view(B, Tk, nh, C // nh).transpose(1, 2) for t in self.c_attn(x_kv).split(C, 2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // nh)                  # (B, nh, Tq, Tk)
        allowed = torch.ones(Tq, Tk, dtype=torch.bool, device=x_q.device).tril()
        w = F.softmax(att.masked_fill(~allowed, float("-inf")).float(), dim=-1).to(q.dtype)
        y = (self.dropout(w) @ v).transpose(1, 2).reshape(B, Tq, C)
        return self.dropout(self.c_proj(y)), w


class ProjectBlock(nn.Module):
    """HW5's Down- and UpProjectBlock: x_q + cross-attention(norm(x_q), norm(x_kv)), then the MLP;
    `raw` names the side ("q" or "kv") that enters without the norm, if one does."""

    def __init__(self, ln_1, attn, ln_2, mlp, raw: str | None = None):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = ln_1, attn, ln_2, mlp
        self.raw = raw

    def forward(self, x_q, x_kv):
        q = x_q if self.raw == "q" else self.ln_1(x_q)
        a, w = self.attn(q, x_kv if self.raw == "kv" else self.ln_1(x_kv))
        x = x_q + a
        return x + self.mlp(self.ln_2(x)), w


class PerceiverLM(PrefixLM):
    points_absent = ("its middle blocks read the bottleneck's rows, not the text's positions: a "
                     "lens or a patch there has no token to stand for (lab.modeling.points)")
    def __init__(self, config, wte, wpe, down, blocks, up, ln_f, lm_head, bottleneck_dim):
        super().__init__(config, wte, wpe, blocks, ln_f, lm_head)
        self.transformer["down"], self.transformer["up"] = down, up
        self.basis = nn.Parameter(torch.empty(1, bottleneck_dim, config.n_embd))
        nn.init.xavier_uniform_(self.basis)

    def run(self, idx, output_attentions):
        B, T = idx.size()
        h = self.transformer
        pos = torch.arange(T, device=idx.device)
        x = h.drop(h.wpe.embed(h.wte(idx), pos))                          # (B, T, C)
        rows, down_w = h.down(self.basis.expand(B, -1, -1), x)           # (B, m, C), (B, nh, m, T)
        rows_pos = torch.arange(rows.size(1), device=idx.device)
        middle = []
        for block in h.h:
            rows, _, w = block(rows, rows_pos, h.wpe, None, output_attentions)
            middle.append(w)
        x, up_w = h.up(x, rows)                                          # (B, T, C), (B, nh, T, m)
        views = None
        if output_attentions:   # token x token, per head: the down block's up x down, each middle
            flow = up_w         # block's up x (middle ...) x down, and the up block's whole path
            views = [up_w @ down_w]
            for w in middle:
                flow = flow @ w
                views.append(flow @ down_w)
            views.append(views[-1])
        return x, views, {}


@MODELS.register("perceiver", "Perceiver bottleneck (CS224N HW5): down-projection to a learned "
                              "basis, causal blocks on it, up-projection back", settings=PerceiverSettings,
                 defaults=GPT2_PARTS)
def perceiver(config, settings: PerceiverSettings):
    c, offer = config, offered(config)

    def norm():
        return part(c, "norm", **offer["norm"])

    def project(text_side):   # the text's side enters raw when only the bottleneck's is normed
        raw = text_side if settings.cross_norm == "bottleneck" else None
        return ProjectBlock(norm(), CausalCrossAttention(c.n_embd, c.n_head, c.bias, c.dropout),
                            norm(), part(c, "mlp", **offer["mlp"]), raw)

    blocks = [Block(norm(), part(c, "attention", **offer["attention"]), norm(),
                    part(c, "mlp", **offer["mlp"]), c.norm_position) for _ in range(c.n_layer - 2)]
    model = PerceiverLM(c, wte=nn.Embedding(c.vocab_size, c.n_embd),
                        wpe=part(c, "positional", **offer["positional"]), down=project("kv"),
                        blocks=blocks, up=project("q"), ln_f=norm(),
                        lm_head=OutputLayer(c.n_embd, c.vocab_size, bias=False),
                        bottleneck_dim=settings.bottleneck_dim)
    basis = model.basis.detach().clone()
    _init_weights(model, c.init_std)
    with torch.no_grad():              # the basis keeps its Xavier-uniform init
        model.basis.copy_(basis)
    return model
