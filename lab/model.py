"""The decoder-only language model, assembled from injected parts (nanoGPT's manner).

`build(config)` is the only place that touches the registries: it builds each part from its
plugin and hands the parts to the modules. Module and parameter names follow HF GPT-2
(`transformer.wte`, `transformer.h.{i}.attn.c_attn`, `lm_head`), so GPT-2 weights map by name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from lab.config import ModelConfig


@dataclass
class LMOutput:
    logits: torch.Tensor                      # (B, T, V)
    past_key_values: list | None = None       # per layer (k, v), each (B, n_kv_head, S, hs)
    attentions: list | None = None            # per layer (B, n_head, T, S), when asked for
    loss: torch.Tensor | None = None


class Block(nn.Module):
    """One Transformer block; receives its norms, attention and MLP."""

    def __init__(self, ln_1: nn.Module, attn: nn.Module, ln_2: nn.Module, mlp: nn.Module,
                 norm_position: str):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = ln_1, attn, ln_2, mlp
        self.pre_norm = norm_position == "pre"

    def forward(self, x, pos, rotate, past=None, need_weights=False):
        if self.pre_norm:    # GPT-2: x + f(norm(x))
            a, present, w = self.attn(self.ln_1(x), pos, rotate, past, need_weights)
            x = x + a
            x = x + self.mlp(self.ln_2(x))
        else:                # the original Transformer: norm(x + f(x))
            a, present, w = self.attn(x, pos, rotate, past, need_weights)
            x = self.ln_1(x + a)
            x = self.ln_2(x + self.mlp(x))
        return x, present, w


class TfmrLM(nn.Module):
    """Token embedding, positions, blocks, final norm, output layer."""

    def __init__(self, config: ModelConfig, wte: nn.Embedding, wpe: nn.Module,
                 blocks: list[Block], ln_f: nn.Module, lm_head: nn.Linear):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=wte, wpe=wpe, drop=nn.Dropout(config.dropout), h=nn.ModuleList(blocks), ln_f=ln_f))
        self.lm_head = lm_head
        if config.tie_embeddings:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx, past_key_values=None, output_attentions=False, labels=None):
        """idx: (B, T) token ids. past_key_values continue a cached prefix. labels: (B, T) targets
        aligned with idx (shifted inside, -100 ignored), for an HF-style mean loss."""
        B, T = idx.size()
        t0 = past_key_values[0][0].size(2) if past_key_values else 0
        if t0 + T > self.config.n_positions:
            raise ValueError(f"sequence of {t0 + T} tokens is longer than the model's context "
                             f"(n_positions={self.config.n_positions})")
        pos = torch.arange(t0, t0 + T, device=idx.device)            # (T,)
        wpe = self.transformer.wpe
        x = self.transformer.drop(wpe.embed(self.transformer.wte(idx), pos))   # (B, T, C)
        presents, attentions = [], []
        for i, block in enumerate(self.transformer.h):
            past = past_key_values[i] if past_key_values else None
            x, present, w = block(x, pos, wpe.rotate, past, output_attentions)
            presents.append(present)
            attentions.append(w)
        logits = self.lm_head(self.transformer.ln_f(x))               # (B, T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return LMOutput(logits, presents, attentions if output_attentions else None, loss)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _init_weights(model: TfmrLM, std: float) -> None:
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            # GPT-2's scaled init of the projections that write into the residual stream
            scaled = name.endswith(("c_proj.weight", "down_proj.weight"))
            nn.init.normal_(p, 0.0, std / math.sqrt(2 * model.config.n_layer) if scaled else std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)


def build(config: ModelConfig) -> TfmrLM:
    """Build the model a config describes, every part from its plugin."""
    from lab.registry import MODELS, load_plugins
    load_plugins()
    config.validate()
    return MODELS.build(config.model, config)


def assemble(config: ModelConfig) -> TfmrLM:
    """The standard decoder: build each part from its registry and inject it."""
    from lab.registry import ATTENTION, MLP, NORMS, POSITIONAL
    c = config
    n_inner = c.n_inner or 4 * c.n_embd

    def norm():
        return NORMS.build(c.norm, c.n_embd, eps=c.norm_eps, bias=c.bias)

    blocks = [Block(norm(),
                    ATTENTION.build(c.attention, c.n_embd, c.n_head, kv_groups=c.kv_groups,
                                    bias=c.bias, dropout=c.dropout),
                    norm(),
                    MLP.build(c.mlp, c.n_embd, n_inner, bias=c.bias, dropout=c.dropout),
                    c.norm_position)
              for _ in range(c.n_layer)]
    model = TfmrLM(
        c,
        wte=nn.Embedding(c.vocab_size, c.n_embd),
        wpe=POSITIONAL.build(c.positional, c.n_positions, c.n_embd, c.head_dim, theta=c.rope_theta),
        blocks=blocks,
        ln_f=norm() if c.norm_position == "pre" else nn.Identity(),
        lm_head=nn.Linear(c.n_embd, c.vocab_size, bias=False),
    )
    _init_weights(model, c.init_std)
    return model
