"""Continuous batching (generate.CaptionStream): rows that start at different steps share one
cache, each at its own positions. Every caption must come out as if it had been read whole: each
new token's probability equals the one the model gives it reading the caption from its start,
for every family of attention and positions, with captions ending at many lengths."""
import math

import pytest
import torch

from lab.inputs import tokenizers
from lab.config import DecodeConfig
from lab.modeling.generate import CaptionStream, _probs_of, sample_captions
from lab.modeling.model import KVCache, build
from tests.conftest import tiny_config

TOK = tokenizers.gpt2()
PARTS = [dict(), dict(attention="gqa", positional="rotary"),
         dict(attention="sliding", positional="alibi", settings={"attention": {"window": 3}}),
         dict(attention="mqa", positional="sinusoidal")]


def _model(**overrides):
    torch.manual_seed(0)
    model = build(tiny_config(vocab_size=TOK.vocab_size, n_positions=64, **overrides)).eval()
    # end-of-text about one step in ten, so that captions end at many lengths
    bias = torch.zeros(TOK.vocab_size)
    bias[TOK.eos_id] = math.log(TOK.vocab_size / 9)
    model.lm_head.register_forward_hook(lambda module, args, out: out + bias)
    return model


@pytest.mark.parametrize("parts", PARTS, ids=["mha-learned", "gqa-rotary", "sliding-alibi",
                                              "mqa-sinusoidal"])
def test_streamed_captions_have_the_probabilities_of_reading_them_whole(parts, monkeypatch):
    model = _model(**parts)
    stream = CaptionStream(model, TOK, 40, DecodeConfig(max_new_tokens=20), probs=True)
    full, columns, selects = [], [], []
    select = KVCache.select
    monkeypatch.setattr(KVCache, "select", lambda cache, rows: selects.append(
        stream.started < stream.n) or select(cache, rows))
    admit, step = stream._admit, stream._step

    def admitting(width):        # while captions wait, every place is taken
        admit(width)
        if stream.started < stream.n:
            full.append(len(stream.rows) == width)

    def stepping():
        step()
        if stream.past is not None:
            busy = [q for q, i in zip(stream.pos, stream.rows) if i is not None]
            if busy:
                columns.append((stream.past[0][0].size(2), max(busy)))
    stream._admit, stream._step = admitting, stepping
    caps = stream.take(5, 5) + stream.take(10, 10) + stream.take(30, 12)
    assert len(caps) == 40 and stream.take(5, 5) == []
    assert len({len(c.tokens) for c in caps}) > 3            # captions ended at many lengths
    assert len(full) > 10 and all(full)
    # while captions wait, one that ends gives its place to the next without a copy of the cache;
    # rows leave it (a copy) only once nothing is left to start
    assert selects and not any(selects)
    for c in caps:
        new = c.tokens[c.n_prompt:]
        assert c.finished == (len(new) < 20)
        assert c.probs == pytest.approx(_probs_of(model, [TOK.bos_id], new), abs=1e-6)
    if parts.get("attention") != "sliding":      # (a window keeps few columns anyway)
        assert max(cols - need for cols, need in columns) < 32   # old columns are dropped


def test_greedy_streamed_captions_equal_generated_ones_after_a_prompt():
    """A prompt of several tokens is fed one a step while other rows decode."""
    model = _model(attention="gqa", positional="rotary")
    cfg = DecodeConfig(decoder="greedy", max_new_tokens=10)
    stream = CaptionStream(model, TOK, 9, cfg, prompt="a dog on")
    got = stream.take(2, 2) + stream.take(3, 3) + stream.take(4, 4)
    want = sample_captions(model, TOK, 9, cfg, prompt="a dog on")
    assert [g.tokens for g in got] == [w.tokens for w in want]
    assert all(g.text.startswith("a dog on") and g.n_prompt == 3 for g in got)


def test_a_seed_gives_the_same_captions_and_another_seed_others():
    model = _model()

    def captions(seed):
        stream = CaptionStream(model, TOK, 20, DecodeConfig(max_new_tokens=12, seed=seed))
        return [c.tokens for c in stream.take(8, 8) + stream.take(12, 12)]
    assert captions(3) == captions(3) != captions(4)


def test_a_model_reading_its_whole_prefix_streams_through_generate():
    """The Perceiver's outputs depend on the whole prefix: no per-row positions; each take is a
    generate call seeded by where it starts."""
    torch.manual_seed(0)
    model = build(tiny_config(model="perceiver", vocab_size=TOK.vocab_size, n_positions=64)).eval()
    cfg = DecodeConfig(max_new_tokens=6, seed=5)
    stream = CaptionStream(model, TOK, 7, cfg)
    assert not stream.streams
    got = stream.take(3, 3) + stream.take(4, 4)
    want = (sample_captions(model, TOK, 3, cfg) + sample_captions(model, TOK, 4, cfg.replace(seed=8)))
    assert [g.tokens for g in got] == [w.tokens for w in want]
