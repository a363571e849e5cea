"""The decoder-only language model, assembled from injected parts (nanoGPT's manner).

`build(config)` is the only place that touches the registries: the model family's plugin (a
builder) builds each part from its plugin and hands the parts to the modules. Module and parameter
names follow HF GPT-2 (`transformer.wte`, `transformer.h.{i}.attn.c_attn`, `lm_head`), so GPT-2
weights map by name.

What each kind of part is offered (a factory takes the keywords its signature names):
- norm: n_embd, eps, bias
- attention: n_embd, n_head, n_positions, bias, dropout
- positional: n_positions, n_embd, n_head, head_dim
- mlp: n_embd, n_inner, bias, dropout

The contracts a part keeps (tests/test_plugin_contracts.py checks each):
- attention: `forward(x, pos, positions, past, need_weights) -> (y, present, weights)`, where
  `positions` is the positional module (its `rotate` and `attn_bias` are called by the attention),
  `present` the layer's cache entry (k, v) and `weights` (B, n_head, T, S) or None; the module has
  `n_head` and `n_kv_head`.
- positional: `embed(x, pos)`, `rotate(q, k, pos)` and `attn_bias(q_pos, k_pos)` ((n_head, T, S)
  added to the attention scores, or None); `Positional` gives the do-nothing versions.
- packed rows (training reads several texts per row, data.pack): a part declaring `packable =
  True` also takes pos (B, T), restarting at 0 for each text (positional: embed, rotate and
  attn_bias, which then returns (B, n_head, T, S)), and the attention a keyword `segments` (B, T):
  a query sees only keys of its own segment. A model whose parts all declare it packs its
  training batches (TfmrLM.packable); tests/test_packing.py checks the loss and gradients equal
  the padded batch's for every attention and positional plugin. Such a model also decodes rows
  at their own positions from one cache (pos (B, T) with a past, no segments: continuous
  batching, generate.CaptionStream; attn_bias then gets key positions (B, S)).
"""
from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from lab.config import ModelConfig
from lab.modeling.points import Point
from lab.registry import MODELS, REGISTRIES, load_plugins


class KVCache(list):
    """Per layer the attention's cache entry (k, v), each (B, n_kv_head, S, hs), and `seen`: how
    many tokens came before (S may be less, when an attention keeps only a window)."""

    def __init__(self, entries, seen: int):
        super().__init__(entries)
        self.seen = seen

    def select(self, rows: torch.Tensor) -> "KVCache":
        """The cache of some batch rows (a boolean mask or indices), for generation to drop the
        rows that have finished or to reorder beams."""
        return KVCache([(k[rows], v[rows]) for k, v in self], self.seen)


class _Buffers:
    """One layer's keys and values with room after them, and how far they are filled."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, room: int):
        B, h, S, hs = k.shape
        self.k = k.new_empty(B, h, S + room, hs)
        self.v = v.new_empty(B, h, S + room, v.size(-1))
        self.k[:, :, :S], self.v[:, :, :S] = k, v
        self.filled = S


class KVSlot(tuple):
    """A layer's cache entry (k, v) whose keys and values sit in buffers with room to grow:
    continuing it writes the new token's keys and values in place, so a generation step costs its
    token, not a copy of the whole cache (torch.cat per step). The buffers double when full. A
    slot continued twice (a branch from an older cache) copies instead of overwriting what the
    first continuation wrote, so it is always safe; select() copies the rows it keeps."""

    def __new__(cls, buffers: _Buffers, n: int):
        slot = super().__new__(cls, (buffers.k[:, :, :n], buffers.v[:, :, :n]))
        slot.buffers, slot.n = buffers, n
        return slot

    @classmethod
    def extend(cls, past, k: torch.Tensor, v: torch.Tensor) -> "KVSlot":
        """past ((k, v) of the tokens before, a KVSlot or a plain pair) followed by k, v (B, h, T, hs)."""
        T = k.size(2)
        if isinstance(past, KVSlot) and past.buffers.filled == past.n \
                and past.n + T <= past.buffers.k.size(2):
            buf = past.buffers
            buf.k[:, :, past.n:past.n + T], buf.v[:, :, past.n:past.n + T] = k, v
            buf.filled = past.n + T
            return cls(buf, past.n + T)
        S = past[0].size(2)
        buf = _Buffers(past[0], past[1], room=max(S + T, 32))
        buf.k[:, :, S:S + T], buf.v[:, :, S:S + T] = k, v
        buf.filled = S + T
        return cls(buf, S + T)


class Positional(nn.Module):
    """The do-nothing positional hooks; a positional plugin overrides the ones it uses."""
    packable = False    # a plugin taking pos (B, T) for packed rows says so (the module docstring)

    def embed(self, x, pos):           # x: (B, T, C) token embeddings, pos: (T,) absolute positions
        return x

    def rotate(self, q, k, pos):       # q: (B, nh, T, hs), k: (B, nkv, T, hs)
        return q, k

    def attn_bias(self, q_pos, k_pos):  # (T,), (S,) -> (n_head, T, S) added to the scores, or None
        return None


@dataclass
class LMOutput:
    logits: torch.Tensor                      # (B, T, V)
    past_key_values: KVCache | None = None    # per layer (k, v), each (B, n_kv_head, S, hs)
    attentions: list | None = None            # per layer (B, n_head, T, S), when asked for
    loss: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None      # a cost the trainer adds to the loss (ACT's ponder cost)
    per_token: dict | None = None             # name -> (B, T) values the Attention tab shows per token


class PrefixCache(list):
    """Generation's cache for a model that recomputes its whole prefix each step (its outputs for
    old tokens change with new ones, or its cache would be harder than the recompute): the tokens."""

    def __init__(self, ids: torch.Tensor):
        super().__init__([ids])
        self.seen = ids.size(1)

    def select(self, rows) -> "PrefixCache":
        return PrefixCache(self[0][rows])


class Block(nn.Module):
    """One Transformer block; receives its norms, attention and MLP."""

    def __init__(self, ln_1: nn.Module, attn: nn.Module, ln_2: nn.Module, mlp: nn.Module,
                 norm_position: str):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = ln_1, attn, ln_2, mlp
        self.pre_norm = norm_position == "pre"
        # named points (lab.modeling.points): identities that hooks read and replace
        self.hook_resid_pre, self.hook_attn_out, self.hook_resid_mid = Point(), Point(), Point()
        self.hook_mlp_out, self.hook_resid_post = Point(), Point()

    def forward(self, x, pos, positions, past=None, need_weights=False, segments=None):
        packed = {} if segments is None else {"segments": segments}     # packed rows only
        x = self.hook_resid_pre(x)
        if self.pre_norm:    # GPT-2: x + f(norm(x))
            a, present, w = self.attn(self.ln_1(x), pos, positions, past, need_weights, **packed)
            x = self.hook_resid_mid(x + self.hook_attn_out(a))
            x = self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln_2(x))))
        else:                # the original Transformer: norm(x + f(x))
            a, present, w = self.attn(x, pos, positions, past, need_weights, **packed)
            x = self.hook_resid_mid(self.ln_1(x + self.hook_attn_out(a)))
            x = self.hook_resid_post(self.ln_2(x + self.hook_mlp_out(self.mlp(x))))
        return x, present, w


class TfmrLM(nn.Module):
    """Token embedding, positions, blocks, final norm, output layer."""

    def __init__(self, config: ModelConfig, wte: nn.Embedding, wpe: nn.Module,
                 blocks: list[Block], ln_f: nn.Module, lm_head: nn.Linear):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=wte, wpe=wpe, drop=nn.Dropout(config.dropout), h=nn.ModuleList(blocks), ln_f=ln_f,
            hook_embed=Point(), hook_final_norm=Point()))
        self.lm_head = lm_head
        if config.tie_embeddings:
            self.lm_head.weight = self.transformer.wte.weight

    @property
    def packable(self) -> bool:
        """Whether training may pack several texts per row: every part takes packed rows."""
        return getattr(self.transformer.wpe, "packable", False) and all(
            getattr(block.attn, "packable", False) for block in self.transformer.h)

    def forward(self, idx, past_key_values=None, output_attentions=False, labels=None,
                positions=None, segments=None, logits_to_keep: int = 0):
        """idx: (B, T) token ids. past_key_values continue a cached prefix. labels: (B, T) targets
        aligned with idx (shifted inside, -100 ignored), for an HF-style mean loss.
        logits_to_keep: the logits of the last that many positions only (HF's name; 0: all): a
        prompt read before decoding needs its last position's, and the output layer is most of
        the work of reading it. positions and
        segments (B, T): packed rows (data.pack), read whole: each text from position 0, its
        tokens seeing only their own text. positions (B, T) without segments: each row at its own
        positions after its cached keys (continuous batching: a row that started later has fewer
        keys of its own, the cache's earlier columns are not its)."""
        B, T = idx.size()
        packed = segments is not None
        pos, t0 = self._positions(idx, past_key_values, positions, packed, labels)
        wpe = self.transformer.wpe
        x = self.transformer.hook_embed(self.transformer.drop(wpe.embed(self.transformer.wte(idx), pos)))
        presents, attentions = [], []
        for i, block in enumerate(self.transformer.h):
            past = past_key_values[i] if past_key_values else None
            x, present, w = block(x, pos, wpe, past, output_attentions, segments)
            presents.append(present)
            attentions.append(w)
        h = self.transformer
        logits = self.lm_head(h.hook_final_norm(h.ln_f(_last(x, logits_to_keep, labels))))  # (B, T, V)
        return LMOutput(logits, None if packed else KVCache(presents, t0 + T),
                        attentions if output_attentions else None, lm_loss(logits, labels))

    def _positions(self, idx, past_key_values, positions, packed: bool, labels):
        """(the positions of idx's tokens, how many the cache has seen before them): a packed row's
        or a row's own (B, T), or (T,) counted on from the cached keys."""
        T = idx.size(1)
        if packed:
            self._check_packed(positions, past_key_values, labels)
            return positions, 0
        t0 = 0
        if past_key_values:
            t0 = getattr(past_key_values, "seen", None)
            if t0 is None:               # a plain list of (k, v): every key is still there
                t0 = past_key_values[0][0].size(2)
        if positions is not None:       # rows at their own positions (generate.CaptionStream)
            self._check_positions(positions)
            return positions, t0
        if t0 + T > self.config.n_positions:
            raise ValueError(f"sequence of {t0 + T} tokens is longer than the model's context "
                             f"(n_positions={self.config.n_positions})")
        return torch.arange(t0, t0 + T, device=idx.device), t0          # (T,)

    def _check_packed(self, positions, past_key_values, labels) -> None:
        if past_key_values or labels is not None:
            raise ValueError("packed rows are read whole, without a cache, and scored by "
                             "the caller (data.sentence_nll), not with labels")
        self._check_positions(positions)

    def _check_positions(self, positions) -> None:
        if not self.packable:
            raise ValueError("this model's parts do not take packed rows or a position per row "
                             "(model.packable)")
        if int(positions.max()) >= self.config.n_positions:
            raise ValueError(f"a text of {int(positions.max()) + 1} tokens is longer than the "
                             f"model's context (n_positions={self.config.n_positions})")

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


class OutputLayer(nn.Linear):
    """The output layer (hidden -> vocabulary logits), an nn.Linear. Without gradients on the CPU,
    a large vocabulary is multiplied in tiles of 512 rows by 1,024 vocabulary entries, each tile
    written in place into the logits: one product against a whole large matrix (GPT-2's
    50,257 x 768 is 154 MB) runs slower on the CPU than the same work in tiles
    (benchmarks/output_layer.py; figures in docs/benchmarks.md). Each logit is the same dot
    product; only the blocking of the matrix product differs (float rounding).

    Inside `recycled_logits()` each call of that path (of this thread; not with gradients, on a
    GPU or under autocast) writes its logits over the last call's instead of into fresh memory,
    since writing tens of megabytes into new pages costs a noticeable part of a decoding step."""

    ROWS = 512               # rows per tile
    BLOCK = 1024             # vocabulary entries per tile; a vocabulary under 4 blocks: one product

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        w, b = self.weight, self.bias
        if (torch.is_grad_enabled() or w.device.type != "cpu" or h.dtype != w.dtype
                or torch.is_autocast_enabled("cpu")):
            return F.linear(h, w, b)
        x = h.reshape(-1, h.size(-1))
        (M, V), tiled = (x.size(0), w.size(0)), w.size(0) >= 4 * self.BLOCK
        out = recycled(self, M * V, x.dtype, x.device).view(M, V)
        rows, cols = (self.ROWS, self.BLOCK) if tiled else (max(M, 1), V)
        for r in range(0, M, rows):
            for i in range(0, V, cols):
                tile = out[r:r + rows, i:i + cols]
                if b is None:
                    torch.mm(x[r:r + rows], w[i:i + cols].t(), out=tile)
                else:
                    torch.addmm(b[i:i + cols], x[r:r + rows], w[i:i + cols].t(), out=tile)
        return out.view(*h.shape[:-1], V)


_RECYCLING = threading.local()      # .buffers: {owner: flat buffer} inside recycled_logits


def recycled(owner, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """n fresh elements, or inside recycled_logits() the first n of the owner's buffer (an output
    layer's logits, a decoder's sampling weights: what a step writes and is done with before the
    next step asks for the same owner's again)."""
    buffers = getattr(_RECYCLING, "buffers", None)
    if buffers is None:
        return torch.empty(n, dtype=dtype, device=device)
    buf = buffers.get(owner)
    if buf is None or buf.numel() < n or buf.dtype != dtype or buf.device != device:
        buf = buffers[owner] = torch.empty(n, dtype=dtype, device=device)
    return buf[:n]


@contextmanager
def recycled_logits():
    """Within it, each call of an OutputLayer from this thread (its CPU path without gradients)
    writes its logits over the same layer's last logits, and each call of lab.modeling.sampling.weights
    its weights over the last call's (any owner of a `recycled` buffer): for a decoding loop that
    is done with a step's logits before it asks for the next (the logits of an earlier call must
    not be read after a later one). So a decoder plugin reads the logits it is given during its
    call only; one that needs an earlier step's (a repetition penalty, say) keeps a copy."""
    before = getattr(_RECYCLING, "buffers", None)
    _RECYCLING.buffers = {}
    try:
        yield
    finally:
        _RECYCLING.buffers = before


def _last(h: torch.Tensor, logits_to_keep: int, labels) -> torch.Tensor:
    """h (B, T, C): its last logits_to_keep positions (0: all of them)."""
    if not logits_to_keep:
        return h
    if labels is not None:
        raise ValueError("the loss needs every position's logits: labels with logits_to_keep")
    return h[:, -logits_to_keep:]


def lm_loss(logits: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor | None:
    """HF's mean next-token loss: labels (B, T) aligned with the logits, shifted here, -100 ignored."""
    if labels is None:
        return None
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                           ignore_index=-100)


class PrefixLM(TfmrLM):
    """A decoder that reads its whole prefix again for each new token (its outputs for a token may
    change with later ones, or a cache would cost more than the recompute): the families with a
    bottleneck, recurrent steps or segment memory. A subclass writes `run`; `forward` joins the
    cached tokens to the new ones, checks the context and returns the new positions only."""

    def run(self, idx: torch.Tensor, output_attentions: bool):
        """idx (B, T) -> hidden states (B, T, C) before the final norm, attentions (per layer
        (B, nh, T, T), or None) and extras: `aux_loss` and `per_token` {name: (B, T)}."""
        raise NotImplementedError

    packable = False     # its outputs depend on the whole prefix it reads: one text per row

    def forward(self, idx, past_key_values=None, output_attentions=False, labels=None,
                logits_to_keep: int = 0):
        n_new = idx.size(1)
        if past_key_values:
            idx = torch.cat([past_key_values[0], idx], dim=1)
        if idx.size(1) > self.config.n_positions:
            raise ValueError(f"sequence of {idx.size(1)} tokens is longer than the model's context "
                             f"(n_positions={self.config.n_positions})")
        hidden, attentions, extras = self.run(idx, output_attentions)
        new = slice(idx.size(1) - n_new, None)
        logits = self.lm_head(self.transformer.ln_f(_last(hidden[:, new], logits_to_keep, labels)))
        per_token = {k: v[:, new] for k, v in extras.get("per_token", {}).items()} or None
        return LMOutput(logits, PrefixCache(idx),
                        [a[:, :, new] for a in attentions] if output_attentions else None,
                        lm_loss(logits, labels), aux_loss=extras.get("aux_loss"), per_token=per_token)


def _init_weights(model: TfmrLM, std: float) -> None:
    """The config's `init`: scaled (GPT-2's) or plain (minGPT's); biases start at zero, norms at
    their modules' own values."""
    plain = model.config.init == "plain"
    for name, p in model.named_parameters():
        if plain and name.startswith("transformer.wpe."):
            nn.init.zeros_(p)          # minGPT's position embeddings start at zero
        elif p.dim() >= 2:
            # GPT-2's scaled init of the projections that write into the residual stream
            scaled = not plain and name.endswith(("c_proj.weight", "down_proj.weight"))
            nn.init.normal_(p, 0.0, std / math.sqrt(2 * model.config.n_layer) if scaled else std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)


def build(config: ModelConfig) -> TfmrLM:
    """Build the model a config describes (a checked one: lab.config checks a value where it
    enters): its family's builder, every part from its plugin."""
    load_plugins()
    return MODELS.build(config.model, config, settings=config.plugin_settings("model"))


def part(config: ModelConfig, kind: str, **offered) -> nn.Module:
    """One part from the plugin the config names for `kind`, with that plugin's settings."""
    return REGISTRIES[kind].build(getattr(config, kind), settings=config.plugin_settings(kind),
                                  **offered)


def offered(config: ModelConfig) -> dict[str, dict]:
    """What the builder offers each kind of part (the module docstring lists them)."""
    c = config
    return {"norm": dict(n_embd=c.n_embd, eps=c.norm_eps, bias=c.bias),
            "attention": dict(n_embd=c.n_embd, n_head=c.n_head, n_positions=c.n_positions,
                              bias=c.bias, dropout=c.dropout),
            "positional": dict(n_positions=c.n_positions, n_embd=c.n_embd, n_head=c.n_head,
                               head_dim=c.head_dim),
            "mlp": dict(n_embd=c.n_embd, n_inner=c.n_inner or 4 * c.n_embd, bias=c.bias,
                        dropout=c.dropout)}


def assemble(config: ModelConfig) -> TfmrLM:
    """The standard decoder: each part from its plugin, injected into the blocks."""
    c, offer = config, offered(config)

    def norm():
        return part(c, "norm", **offer["norm"])

    blocks = [Block(norm(), part(c, "attention", **offer["attention"]), norm(),
                    part(c, "mlp", **offer["mlp"]), c.norm_position)
              for _ in range(c.n_layer)]
    model = TfmrLM(
        c,
        wte=nn.Embedding(c.vocab_size, c.n_embd),
        wpe=part(c, "positional", **offer["positional"]),
        blocks=blocks,
        ln_f=norm() if c.norm_position == "pre" else nn.Identity(),
        lm_head=OutputLayer(c.n_embd, c.vocab_size, bias=False),
    )
    _init_weights(model, c.init_std)
    return model


def kv_heads(config: ModelConfig) -> int:
    """Key/value heads per layer of the attention the config names: one module built on the meta
    device (no memory), read through the attention contract's `n_kv_head`."""
    load_plugins()
    with torch.device("meta"):
        return part(config, "attention", **offered(config)["attention"]).n_kv_head
