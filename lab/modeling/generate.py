"""Batched generation with a KV cache; decoder plugins choose the tokens.

A sequence that has ended stops costing compute: finished rows leave the batch (and the cache),
so sampling 5,000 captions costs what their real lengths cost, not 5,000 x 35 steps.

A decoder plugin is called as `decoder(logits (B, V), generator) -> (B,) tokens`. The logits it
gets are overwritten by the next step's (model.recycled_logits): it may read them during the call
only, and keeps a copy of anything it needs later.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lab.config import DecodeConfig
from lab.errors import LabError
from lab.errors import Aborted
from lab.modeling.model import KVCache, recycled_logits
from lab.registry import DECODERS, load_plugins


class GenerationError(LabError):
    pass


@dataclass
class Generated:
    tokens: list[int]            # the caption's tokens: prompt text (without BOS) + new tokens
    text: str
    n_prompt: int = 0            # how many of `tokens` came from the prompt
    probs: list[float] = field(default_factory=list)   # p(token) at tau=1 per new token, if asked
    finished: bool = True        # ended with end-of-text (not cut by max_new_tokens)


def make_decoder(cfg: DecodeConfig):
    load_plugins()
    return DECODERS.build(cfg.decoder, settings=cfg.decoder_settings())


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
@recycled_logits()               # a step's logits are done with before the next step's
def _sample_group(model, prompt: torch.Tensor, decoder, max_new: int, eos_id: int, generator,
                  abort=None, want_probs: bool = False):
    """prompt: (B, T0) of equal-length prompts. Returns per row (new ids, probs, finished); the
    probabilities (a softmax over the whole vocabulary each step) only when asked for."""
    B = prompt.size(0)
    out = model(prompt, logits_to_keep=1)
    past, logits = out.past_key_values, out.logits[:, -1]          # logits: (b, V) for active rows
    active = torch.arange(B, device=prompt.device)                 # original row of each active row
    new = [[] for _ in range(B)]
    probs = [[] for _ in range(B)]
    finished = [False] * B
    for step in range(max_new):
        if abort is not None and abort():
            raise Aborted()
        nxt = decoder(logits, generator)                            # (b,)
        p = torch.softmax(logits.float(), dim=-1).gather(1, nxt[:, None]).squeeze(1).tolist() \
            if want_probs else None
        done = nxt == eos_id
        for j, (row, tok, d) in enumerate(zip(active.tolist(), nxt.tolist(), done.tolist())):
            if d:
                finished[row] = True
            else:
                new[row].append(tok)
                if want_probs:
                    probs[row].append(p[j])
        keep = ~done
        if step == max_new - 1 or not keep.any():
            break
        if not keep.all():                                          # shrink the batch and cache
            active, nxt = active[keep], nxt[keep]
            past = past.select(keep)
        out = model(nxt[:, None], past_key_values=past)
        past, logits = out.past_key_values, out.logits[:, -1]
    return new, probs, finished


@torch.no_grad()
def generate(model, prompts: list[list[int]], cfg: DecodeConfig, eos_id: int,
             batch_size: int = 500, abort=None, probs: bool = False,
             done=None) -> list[tuple[list[int], list[float], bool]]:
    """Continue each prompt (token ids, BOS included). Prompts of equal length share a batch.
    probs: also each new token's probability at tau=1 (otherwise an empty list). abort: asked
    before each step (and each searched prompt); True raises Aborted. done: told how many
    prompts are complete after each batch (each prompt, for a search decoder)."""
    decoder = make_decoder(cfg)
    device = _device(model)
    n_ctx = model.config.n_positions
    check_context(max(len(p) for p in prompts), n_ctx)
    was_training = model.training
    model.eval()
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    results: list = [None] * len(prompts)
    try:
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_len.setdefault(len(p), []).append(i)
        for length, rows in sorted(by_len.items()):
            max_new = min(cfg.max_new_tokens, n_ctx - length)
            for s in range(0, len(rows), batch_size):
                chunk = rows[s:s + batch_size]
                if getattr(decoder, "search", False):
                    _search(model, decoder, prompts, chunk, results, max_new, eos_id, abort, probs, done)
                    continue
                prompt = torch.tensor([prompts[i] for i in chunk], device=device)
                new, ps, fin = _sample_group(model, prompt, decoder, max_new, eos_id, generator,
                                             abort, probs)
                for j, i in enumerate(chunk):
                    results[i] = (new[j], ps[j], fin[j])
                if done is not None:
                    done(sum(r is not None for r in results))
    finally:
        model.train(was_training)
    return results


def _search(model, decoder, prompts, chunk, results, max_new, eos_id, abort, probs, done) -> None:
    """A search decoder (beam) drives the model itself, one prompt at a time: results[i] for each
    i of chunk. The model it drives asks abort before each step."""
    device = _device(model)
    driven = model if abort is None else _Asking(model, abort)
    for i in chunk:
        ids = decoder.run(driven, torch.tensor(prompts[i], device=device), max_new, eos_id)
        results[i] = (ids, _probs_of(model, prompts[i], ids) if probs else [], len(ids) < max_new)
        if done is not None:
            done(sum(r is not None for r in results))


class _Asking:
    """A model that asks `abort` before each forward (True raises Aborted): what a search decoder
    drives, so that it stops within a step without knowing why."""

    def __init__(self, model, abort):
        self.model, self.abort = model, abort

    def __call__(self, *args, **kwargs):
        if self.abort():
            raise Aborted()
        return self.model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def rows_per_caption(cfg: DecodeConfig) -> int:
    """How many rows a caption decodes at each step: a search decoder's beams (its `num_beams`),
    one for a decoder that draws a token per row."""
    return max(1, int(getattr(make_decoder(cfg), "num_beams", 1)))


class CaptionStream:
    """Captions sampled as a stream (continuous batching): up to `width` rows decode together and
    a row that ends gives its place to the next caption at once, each row at its own positions in
    one cache (TfmrLM.forward's positions), so the batch stays full while captions end at
    different lengths. `take(k, width)` returns the next k captions in order; captions after them
    that have started carry on into the next take. A prompt is fed one token a step, so rows can
    join at any step. One generator for the whole stream: a seed gives the same captions for the
    same takes. Models whose parts do not take a position per row (`packable`) and search
    decoders use `generate` for each take instead."""

    def __init__(self, model, tokenizer, n: int, cfg: DecodeConfig, prompt: str = "",
                 probs: bool = False):
        self.model, self.tokenizer, self.n, self.want_probs = model, tokenizer, n, probs
        self.prompt_text = prompt
        self.prefix, self.prompt = caption_prompt(tokenizer, prompt)
        n_ctx = model.config.n_positions
        check_context(len(self.prompt), n_ctx)
        self.cfg, self.decoder = cfg, make_decoder(cfg)
        self.max_new = min(cfg.max_new_tokens, n_ctx - len(self.prompt))
        self.streams = getattr(model, "packable", False) and not getattr(self.decoder, "search", False)
        self.generator = torch.Generator(device=_device(model)).manual_seed(cfg.seed)
        self.started = self.returned = 0
        self.rows: list[int] = []            # the caption each batch row decodes
        self.pos: list[int] = []             # the position of each row's next input
        self.next_in: list[int] = []         # each row's next input token
        self.new: dict[int, list[int]] = {}
        self.probs: dict[int, list[float]] = {}
        self.done: dict[int, Generated] = {}
        self.past = None

    @torch.no_grad()
    def take(self, k: int, width: int, abort=None) -> list[Generated]:
        """The next k captions (fewer at the end of the stream), decoding at most `width` rows at
        once (rows already started carry on even when there are more)."""
        want = range(self.returned, min(self.returned + k, self.n))
        if not self.streams:
            cfg = self.cfg.replace(seed=self.cfg.seed + self.returned)
            got = sample_captions(self.model, self.tokenizer, len(want), cfg, self.prompt_text,
                                  abort=abort, probs=self.want_probs) if want else []
            self.returned = want.stop
            return got
        was = self.model.training
        self.model.eval()
        try:
            with recycled_logits():      # a step's logits are done with before the next step's
                while not all(i in self.done for i in want):
                    if abort is not None and abort():
                        raise Aborted()
                    self._admit(width)
                    self._step()
        finally:
            self.model.train(was)
        if self.started == self.n and all(i is None for i in self.rows):
            self.rows, self.pos, self.next_in, self.past = [], [], [], None    # the stream is done
        self.returned = want.stop
        return [self.done.pop(i) for i in want]

    def _admit(self, width: int) -> None:
        """Start captions in the places of captions that ended, then in new rows up to `width`
        busy rows; places left empty leave the batch. A caption taking an old place sees none of
        the keys there: they lie at columns before its position 0 (the attention's own-columns
        rule), so the cache is not copied for it. New rows get columns of zeros."""
        vacant = [r for r, i in enumerate(self.rows) if i is None]
        joining = max(0, min(width - (len(self.rows) - len(vacant)), self.n - self.started))
        grow = max(0, joining - len(vacant))
        places = vacant[:joining] + list(range(len(self.rows), len(self.rows) + grow))
        if grow:
            self.rows += [None] * grow
            self.pos += [0] * grow
            self.next_in += [0] * grow
            if self.past is not None:
                self.past = KVCache([(_more_rows(k, grow), _more_rows(v, grow)) for k, v in self.past],
                                    self.past.seen)
        for r, i in zip(places, range(self.started, self.started + joining)):
            self.rows[r], self.pos[r], self.next_in[r] = i, 0, self.prompt[0]
            self.new[i], self.probs[i] = [], []
        self.started += joining
        if len(vacant) > joining:                   # nothing to start there: the rows leave
            keep = [i is not None for i in self.rows]
            self.rows, self.pos, self.next_in = ([v for v, kp in zip(values, keep) if kp]
                                                 for values in (self.rows, self.pos, self.next_in))
            self.past = None if not self.rows else \
                self.past.select(torch.tensor(keep, device=_device(self.model)))

    def _step(self) -> None:
        """One token for every row; a caption that ends leaves its place empty for _admit."""
        device = _device(self.model)
        x = torch.tensor(self.next_in, device=device)[:, None]
        out = self.model(x, past_key_values=self.past,
                         positions=torch.tensor(self.pos, device=device)[:, None])
        self.past, logits = out.past_key_values, out.logits[:, -1]
        last_prompt = len(self.prompt) - 1
        drawing = [r for r, p in enumerate(self.pos) if p >= last_prompt]    # past the prompt
        drawn, p = [], []
        if drawing:
            chosen = logits[drawing] if len(drawing) < len(self.rows) else logits
            nxt = self.decoder(chosen, self.generator)
            drawn = nxt.tolist()
            if self.want_probs:
                p = torch.softmax(chosen.float(), dim=-1).gather(1, nxt[:, None]).squeeze(1).tolist()
        for j, r in enumerate(drawing):
            i, tok = self.rows[r], drawn[j]
            if tok == self.tokenizer.eos_id:
                self.rows[r] = None
                self._finish(i, finished=True)
                continue
            self.new[i].append(tok)
            if self.want_probs:
                self.probs[i].append(p[j])
            self.next_in[r] = tok
            if len(self.new[i]) == self.max_new:
                self.rows[r] = None
                self._finish(i, finished=False)
        for r, p_r in enumerate(self.pos):
            if p_r < last_prompt:
                self.next_in[r] = self.prompt[p_r + 1]
        self.pos = [q + 1 for q in self.pos]
        self._trim()

    def _finish(self, i: int, finished: bool) -> None:
        toks = self.prefix + self.new.pop(i)
        self.done[i] = Generated(toks, self.tokenizer.decode(toks), len(self.prefix),
                                 self.probs.pop(i), finished)

    def _trim(self) -> None:
        """Drop the cache's oldest columns once no caption's row reaches back to them."""
        busy = [q for q, i in zip(self.pos, self.rows) if i is not None]
        need, cols = max(busy, default=0), self.past[0][0].size(2)
        if not busy:                                # _admit fills the places or drops the rows
            return
        if cols - need >= max(16, cols // 2):
            self.past = KVCache([(k[:, :, cols - need:], v[:, :, cols - need:]) for k, v in self.past],
                                need)


def _more_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """t (B, h, S, hs) with n rows of zeros after it (keys that no query of those rows may see)."""
    return torch.cat([t, t.new_zeros(n, *t.shape[1:])])


def _probs_of(model, prompt: list[int], new: list[int]) -> list[float]:
    """p(token) of each new token given what precedes it, at tau=1."""
    if not new:
        return []
    ids = torch.tensor([prompt + new], device=_device(model))
    p = torch.softmax(model(ids).logits[0, len(prompt) - 1:-1].float(), dim=-1)
    return p.gather(1, ids[0, len(prompt):, None]).squeeze(1).tolist()


MAX_PROMPT_CHARS = 4000      # checked before tokenizing: a huge prompt never reaches the tokenizer
MAX_CAPTIONS = 10_000        # captions one call may ask for


def caption_prompt(tokenizer, prompt: str) -> tuple[list[int], list[int]]:
    """A caption's prompt text -> (its tokens, what the model reads first: BOS and them)."""
    prefix = tokenizer.encode(check_prompt(prompt)) if prompt else []
    bos = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
    if not bos and not prefix:
        raise GenerationError("this model reads a text from its first character (its tokenizer "
                              "has no start token): give a prompt to continue")
    return prefix, bos + prefix


def check_context(length: int, n_ctx: int) -> None:
    if length >= n_ctx:
        raise GenerationError(f"the prompt is {length} tokens; this model's context is {n_ctx} "
                              f"tokens, so a prompt may have at most {n_ctx - 1}")


def check_prompt(prompt: str) -> str:
    if not isinstance(prompt, str):
        raise GenerationError(f"the prompt must be text, got {type(prompt).__name__}")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise GenerationError(f"the prompt is {len(prompt)} characters; at most {MAX_PROMPT_CHARS} "
                              f"are accepted")
    return prompt


def sample_captions(model, tokenizer, n: int, cfg: DecodeConfig, prompt: str = "",
                    batch_size: int = 500, abort=None, probs: bool = False,
                    done=None, prompts: list[str] | None = None) -> list[Generated]:
    """n captions, each starting with `prompt` (may be empty), or row i with prompts[i] (then n
    is their number), decoded as `cfg` says; with probs, each new token's probability too (for a
    display; scoring needs none). abort and done: as generate() takes them."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CAPTIONS:
        raise GenerationError(f"the number of captions must be a whole number from 1 to "
                              f"{MAX_CAPTIONS}, got {n!r}")
    if prompts is not None and len(prompts) != n:
        raise GenerationError(f"{len(prompts)} prompts for {n} captions: give one a caption")
    rows = [caption_prompt(tokenizer, p) for p in prompts] if prompts is not None \
        else [caption_prompt(tokenizer, prompt)] * n
    outs = generate(model, [ids for _, ids in rows], cfg, tokenizer.eos_id, batch_size, abort, probs, done)
    return [Generated(prefix + new, tokenizer.decode(prefix + new), len(prefix), ps, fin)
            for (prefix, _), (new, ps, fin) in zip(rows, outs)]

def kv_bytes_per_token(model, tokens: int = 32) -> float:
    """Bytes the generation cache holds per token after `tokens` tokens (every layer's keys and
    values; a windowed attention keeps fewer, a recomputing family keeps only the ids)."""
    n = min(tokens, model.config.n_positions)
    with torch.no_grad():
        past = model(torch.zeros(1, n, dtype=torch.long, device=next(model.parameters()).device)
                     ).past_key_values
    total = 0
    for entry in past:
        items = entry if isinstance(entry, (tuple, list)) else (entry,)
        total += sum(t.numel() * t.element_size() for t in items if torch.is_tensor(t))
    return total / n
