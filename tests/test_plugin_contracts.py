"""Contract tests, parametrized over the registries: a new plugin is tested the moment it exists.

For every model family, norm (pre and post), attention crossed with every positional plugin, and
MLP plugin, each plugin with settings at their defaults and at their lowest allowed values: output
shape, no NaN, a gradient on every parameter, causality, and cached forward == uncached forward.
The hidden contracts the rest of the lab relies on are checked too (the attention's return triple,
`n_kv_head`, the positional hooks being called). For every decoder: valid tokens, seeded
determinism, and cached generation == uncached generation.
"""
import dataclasses

import pytest
import torch

from lab.config import DecodeConfig
from lab.modeling.generate import generate, make_decoder
from lab.modeling.model import Positional, build, offered, part
from lab.registry import ATTENTION, DECODERS, MLP, MODELS, NORMS, POSITIONAL, load_plugins
from tests.conftest import tiny_config

load_plugins()


def _variants(registry, kind: str, name: str) -> list[tuple[str, dict]]:
    """A plugin at its default settings and, when it declares lower bounds for whole-number
    settings (sizes, counts), at their lowest."""
    cls = registry.get(name).settings
    lowest = {f.name: f.metadata["min"] for f in dataclasses.fields(cls)
              if "min" in f.metadata and isinstance(f.metadata["min"], int)} if cls else {}
    out = [("", {})]
    if lowest:
        out.append(("-lowest", {"settings": {kind: lowest}}))
    return out


def _merge(*overrides) -> dict:
    out = {"settings": {}}
    for o in overrides:
        out = {**out, **o, "settings": {**out["settings"], **o.get("settings", {})}}
    return out


def _cases():
    cases = []
    for name in MODELS.names():
        for tag, v in _variants(MODELS, "model", name):
            cases.append(pytest.param(_merge({"model": name}, v), id=f"model-{name}{tag}"))
    for name in NORMS.names():
        for position in ("pre", "post"):
            cases.append(pytest.param({"norm": name, "norm_position": position},
                                      id=f"norm-{name}-{position}"))
    for att in ATTENTION.names():
        for pos in POSITIONAL.names():
            for tag_a, va in _variants(ATTENTION, "attention", att):
                for tag_p, vp in _variants(POSITIONAL, "positional", pos):
                    cases.append(pytest.param(_merge({"attention": att, "positional": pos}, va, vp),
                                              id=f"attention-{att}{tag_a}-x-{pos}{tag_p}"))
    for name in MLP.names():
        cases.append(pytest.param({"mlp": name}, id=f"mlp-{name}"))
    return cases


def _model(overrides):
    torch.manual_seed(0)
    overrides = {**overrides, "dropout": 0.0}
    return build(tiny_config(**overrides)).eval()


def test_model_families_build_their_own_parts():
    """model=llama alone is SmolLM2's kind of decoder; gpt2 is GPT-2's; a named part still wins."""
    from plugins.attention.mha import CausalSelfAttention
    from plugins.mlp.gelu import GeluMLP
    from plugins.mlp.swiglu import SwiGLU
    from plugins.norms.rmsnorm import RMSNorm
    from plugins.positional.learned import LearnedPositional
    from plugins.positional.rotary import RotaryPositional
    llama = build(tiny_config(model="llama", dropout=None))
    block = llama.transformer.h[0]
    assert isinstance(block.ln_1, RMSNorm) and isinstance(block.mlp, SwiGLU)
    assert isinstance(block.attn, CausalSelfAttention) and block.attn.n_kv_head == 2 < block.attn.n_head
    assert isinstance(llama.transformer.wpe, RotaryPositional)
    assert llama.lm_head.weight is llama.transformer.wte.weight and block.attn.c_attn.bias is None
    assert llama.config.dropout == 0.0
    gpt2 = build(tiny_config(model="gpt2", dropout=None))
    block = gpt2.transformer.h[0]
    assert isinstance(block.ln_1, torch.nn.LayerNorm) and isinstance(block.mlp, GeluMLP)
    assert block.attn.n_kv_head == block.attn.n_head and block.attn.c_attn.bias is not None
    assert isinstance(gpt2.transformer.wpe, LearnedPositional)
    assert gpt2.lm_head.weight is not gpt2.transformer.wte.weight and gpt2.config.dropout == 0.1
    mixed = build(tiny_config(model="llama", norm="layernorm", attention="mha"))
    assert isinstance(mixed.transformer.h[0].ln_1, torch.nn.LayerNorm)
    assert isinstance(mixed.transformer.h[0].mlp, SwiGLU)
    assert mixed.transformer.h[0].attn.n_kv_head == 4


@pytest.fixture
def ids():
    return torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("overrides", _cases())
class TestPartContract:
    def test_shape_and_finite(self, overrides, ids):
        logits = _model(overrides)(ids).logits
        assert logits.shape == (2, 12, 97)
        assert torch.isfinite(logits).all()

    def test_gradient_on_every_parameter(self, overrides, ids):
        model = _model(overrides).train()
        loss = torch.nn.functional.cross_entropy(model(ids).logits[:, :-1].reshape(-1, 97),
                                                 ids[:, 1:].reshape(-1))
        loss.backward()
        for name, p in model.named_parameters():
            assert p.grad is not None, f"{name} got no gradient"
            assert p.grad.abs().sum() > 0, f"{name} got an all-zero gradient"

    def test_last_logits_only(self, overrides, ids):
        """logits_to_keep (a prompt read before decoding): the last positions' logits, the same."""
        model = _model(overrides)
        with torch.no_grad():
            full = model(ids).logits
            last = model(ids, logits_to_keep=1)
            torch.testing.assert_close(last.logits, full[:, -1:], atol=1e-5, rtol=0)
            after = model(ids[:, -1:], past_key_values=model(ids[:, :-1]).past_key_values,
                          logits_to_keep=1)
            torch.testing.assert_close(after.logits, full[:, -1:], atol=1e-5, rtol=0)
            torch.testing.assert_close(model(ids, logits_to_keep=3).logits, full[:, -3:],
                                       atol=1e-5, rtol=0)
        with pytest.raises(ValueError, match="labels with logits_to_keep"):
            model(ids, labels=ids, logits_to_keep=1)

    def test_causal(self, overrides, ids):
        model = _model(overrides)
        changed = ids.clone()
        changed[:, 7] = (changed[:, 7] + 1) % 97
        a, b = model(ids).logits, model(changed).logits
        torch.testing.assert_close(a[:, :7], b[:, :7], atol=1e-6, rtol=0)
        assert not torch.allclose(a[:, 7:], b[:, 7:])

    def test_cached_equals_uncached(self, overrides, ids):
        model = _model(overrides)
        full = model(ids).logits
        out = model(ids[:, :5])
        steps, past = [out.logits], out.past_key_values
        for t in range(5, 12):
            out = model(ids[:, t:t + 1], past_key_values=past)
            steps.append(out.logits)
            past = out.past_key_values
        torch.testing.assert_close(torch.cat(steps, 1), full, atol=2e-5, rtol=1e-4)

    def test_attention_weights(self, overrides, ids):
        model = _model(overrides)
        out = model(ids, output_attentions=True)
        torch.testing.assert_close(out.logits, model(ids).logits, atol=2e-5, rtol=1e-4)
        for w in out.attentions:
            assert w.shape == (2, model.config.n_head, 12, 12)
            torch.testing.assert_close(w.sum(-1), torch.ones(2, model.config.n_head, 12))
            assert (w.triu(diagonal=1) == 0).all()

    def test_checkpoint_config_rebuilds_the_same_model(self, overrides, ids):
        """config.json's dict (settings included) builds a model with the same outputs."""
        model = _model(overrides)
        again = build(type(model.config).from_dict(model.config.to_dict())).eval()
        again.load_state_dict(model.state_dict())
        assert again.config == model.config
        torch.testing.assert_close(again(ids).logits, model(ids).logits)


class _Spy(Positional):
    """A positional module recording which hooks the attention calls."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def rotate(self, q, k, pos):
        self.calls.append("rotate")
        return q, k

    def attn_bias(self, q_pos, k_pos):
        self.calls.append("attn_bias")
        return None


@pytest.mark.parametrize("name", ATTENTION.names())
def test_attention_hidden_contract(name):
    """What the model and lab/evaluation/attention_maps.py rely on: n_head and n_kv_head, the (y, (k, v), weights)
    triple with k and v (B, n_kv_head, S, head_dim), and the positional hooks called."""
    cfg = tiny_config(attention=name)
    attn = part(cfg, "attention", **offered(cfg)["attention"]).eval()
    assert attn.n_head == cfg.n_head and cfg.n_head % attn.n_kv_head == 0
    spy = _Spy()
    x = torch.randn(2, 5, cfg.n_embd)
    y, present, weights = attn(x, torch.arange(5), spy, None, True)
    assert y.shape == x.shape and spy.calls.count("rotate") == 1 and "attn_bias" in spy.calls
    k, v = present
    assert k.shape[:2] == v.shape[:2] == (2, attn.n_kv_head) and k.shape[3] == cfg.head_dim
    assert k.shape[2] <= 5 and weights.shape == (2, cfg.n_head, 5, 5)
    assert attn(x, torch.arange(5), spy, None, False)[2] is None


@pytest.mark.parametrize("name", POSITIONAL.names())
def test_positional_hidden_contract(name):
    """A positional module has the three hooks; the ones it does not use change nothing."""
    cfg = tiny_config(positional=name)
    pos = part(cfg, "positional", **offered(cfg)["positional"])
    x, q, k = torch.randn(2, 6, 32), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    p = torch.arange(6)
    assert pos.embed(x, p).shape == x.shape
    assert [t.shape for t in pos.rotate(q, k, p)] == [q.shape, k.shape]
    bias = pos.attn_bias(p, p)
    assert bias is None or bias.shape == (cfg.n_head, 6, 6)


TOKEN_DECODERS = [n for n in DECODERS.names() if not getattr(
    make_decoder(DecodeConfig(decoder=n)), "search", False)]


@pytest.mark.parametrize("decoder", DECODERS.names())
def test_decoder_valid_and_seeded(decoder):
    model = _model({})
    cfg = DecodeConfig.from_dict(dict(decoder=decoder, max_new_tokens=8, seed=3), lenient=True)
    prompts = [[96, 5, 6]] * 4
    a = generate(model, prompts, cfg, eos_id=96, probs=True)
    b = generate(model, prompts, cfg, eos_id=96, probs=True)
    assert a == b
    # probabilities cost a softmax over the vocabulary: only when asked, and never a change of tokens
    assert [(new, fin) for new, _, fin in generate(model, prompts, cfg, eos_id=96)] == \
        [(new, fin) for new, _, fin in a]
    assert all(p == [] for _, p, _ in generate(model, prompts, cfg, eos_id=96))
    for new, probs, finished in a:
        assert len(new) <= 8 and len(probs) == len(new)
        assert all(0 <= t < 97 and t != 96 for t in new)
        assert all(0.0 < p <= 1.0 for p in probs)


@pytest.mark.parametrize("decoder", TOKEN_DECODERS)
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_decoder_cached_equals_uncached(decoder, temperature):
    """Generation with the KV cache picks the same tokens as recomputing the whole prefix."""
    model = _model({})
    cfg = DecodeConfig.from_dict(dict(decoder=decoder, temperature=temperature, top_k=5, top_p=0.8,
                                      max_new_tokens=10, seed=7), lenient=True)
    (new, _, _), = generate(model, [[96, 3]], cfg, eos_id=96)
    choose = make_decoder(cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    seq, naive = [96, 3], []
    with torch.no_grad():
        for _ in range(10):
            tok = choose(model(torch.tensor([seq])).logits[:, -1], g).item()
            if tok == 96:
                break
            naive.append(tok)
            seq.append(tok)
    assert new == naive


def test_top_k_draws_only_from_the_k_likeliest():
    choose = make_decoder(DecodeConfig.from_dict({"decoder": "top_k", "top_k": 3}))
    logits = torch.tensor([[5.0, 4.0, 3.0, 2.9, -1.0, 0.0]]).repeat(500, 1)
    assert set(choose(logits, torch.Generator().manual_seed(0)).tolist()) == {0, 1, 2}


def test_top_p_keeps_the_token_that_crosses_p():
    choose = make_decoder(DecodeConfig.from_dict({"decoder": "top_p", "top_p": 0.6}))
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    drawn = set(choose(probs.log().repeat(2000, 1), torch.Generator().manual_seed(0)).tolist())
    assert drawn == {0, 1}      # 0.5 < 0.6, so the nucleus is {0.5, 0.3}


@pytest.mark.parametrize("cut", [1, 4, 256])
def test_top_p_partial_cut_keeps_the_same_nucleus_as_a_full_sort(cut):
    """Peaked rows are settled inside the cut, flat rows fall back to the full sort; either way the
    nucleus is the one a sort of the whole vocabulary gives."""
    from plugins.decoders.top_p import nucleus_drop
    g = torch.Generator().manual_seed(0)
    scale = torch.tensor([0.1, 1.0, 4.0, 12.0]).repeat_interleave(8)[:, None]
    logits = torch.randn(32, 5000, generator=g) * scale
    for p in (0.3, 0.9, 0.99):
        probs, order = torch.softmax(logits, -1).sort(descending=True)
        before = probs.cumsum(-1) - probs                  # mass strictly before each token
        keep_sorted = before <= p
        keep_sorted[:, 0] = True
        expected = ~keep_sorted.scatter(1, order, keep_sorted)
        assert torch.equal(nucleus_drop(logits, p, cut), expected)


def test_beam_with_one_beam_is_greedy():
    model = _model({})
    greedy = generate(model, [[96, 1]], DecodeConfig(decoder="greedy", max_new_tokens=6), 96)
    beam = generate(model, [[96, 1]], DecodeConfig.from_dict({"decoder": "beam", "num_beams": 1, "max_new_tokens": 6}), 96)
    assert greedy[0][0] == beam[0][0]


def test_finished_rows_leave_the_batch():
    """A finished caption stops costing compute: later steps run on fewer rows."""
    model = _model({})
    with torch.no_grad():   # make token 96 (end of text) likely so rows finish at different times
        model.lm_head.weight[96] += 0.5 * model.transformer.wte.weight.mean(0)
    sizes = []
    hook = model.transformer.wte.register_forward_hook(lambda m, i, o: sizes.append(o.size(0)))
    generate(model, [[96]] * 64, DecodeConfig(decoder="random", max_new_tokens=20, seed=0), 96)
    hook.remove()
    assert sizes[0] == 64 and sizes[-1] < 64 and sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("attention", ["mha", "gqa", "sliding"])
def test_a_cache_grows_in_place_and_a_branch_from_it_is_safe(attention):
    """Continuing a cache writes the new keys in place (no copy of the cache per step); a second
    continuation of the same cache (a branch) must not overwrite the first one's keys."""
    from lab.modeling.model import KVSlot
    model = _model({"attention": attention})
    with torch.no_grad():
        ids = torch.tensor([[96, 5, 6, 7, 8]])
        full = model(ids).logits
        past = model(ids[:, :2]).past_key_values
        a = model(ids[:, 2:3], past_key_values=past).past_key_values
        steps = a
        for t in (3, 4):
            out = model(ids[:, t:t + 1], past_key_values=steps)
            steps = out.past_key_values
        assert torch.allclose(out.logits[:, -1], full[:, -1], atol=1e-5)
        if attention != "sliding":                   # a window keeps plain pairs
            assert isinstance(steps[0], KVSlot) and steps[0].buffers is a[0].buffers
        branch = model(torch.tensor([[9]]), past_key_values=a)          # from the older cache
        assert torch.allclose(branch.logits[:, -1], model(torch.tensor([[96, 5, 6, 9]])).logits[:, -1],
                              atol=1e-5)
        again = model(ids[:, 3:4], past_key_values=a).logits
        assert torch.allclose(again[:, -1], full[:, 3], atol=1e-5)
        # the first continuation's keys are intact after both branches
        on = model(torch.tensor([[10]]), past_key_values=steps).logits
        assert torch.allclose(on[:, -1], model(torch.tensor([[96, 5, 6, 7, 8, 10]])).logits[:, -1], atol=1e-5)


def test_a_drawn_token_follows_the_distribution_and_never_has_probability_zero():
    """lab.modeling.sampling.draw (every sampling decoder's): frequencies within 5 standard errors of
    the probabilities over 200,000 draws, across block edges; zeros never drawn; seeded."""
    from lab.modeling.sampling import BLOCK, draw
    V = 3 * BLOCK + 7
    p = torch.zeros(V)
    at = [0, 1, BLOCK - 1, BLOCK, 2 * BLOCK + 5, V - 1]
    p[at] = torch.tensor([0.05, 0.3, 0.1, 0.25, 0.2, 0.1])
    p[BLOCK + 3: BLOCK + 103] = 0.0001                   # many small ones
    p = p / p.sum()
    n = 200_000
    x = draw(p.expand(n, V), torch.Generator().manual_seed(0))      # no copy of the rows
    freq = torch.bincount(x, minlength=V).double() / n
    assert (freq[p == 0] == 0).all()
    err = (p.double() * (1 - p.double()) / n).sqrt()
    assert ((freq - p.double()).abs() <= 5 * err + 1e-12).all()
    again = draw(p.repeat(50, 1), torch.Generator().manual_seed(3))
    assert torch.equal(again, draw(p.repeat(50, 1), torch.Generator().manual_seed(3)))


def test_sampling_weights_are_softmax_up_to_a_number_per_row_and_recycled():
    """lab.modeling.sampling.weights: softmax(logits / T) times a number per row, -inf logits weigh 0,
    bf16 logits in float32; inside recycled_logits a call writes over the last call's weights."""
    from lab.modeling.model import recycled_logits
    from lab.modeling.sampling import draw, weights
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 3000, generator=g) * 5
    logits[1, :10] = float("-inf")
    for x, T in ((logits, 1.0), (logits, 0.7), (logits.bfloat16(), 2.0)):
        w = weights(x, T)
        want = torch.softmax(x.float() / T, dim=-1)
        assert w.dtype == torch.float32
        assert torch.allclose(w / w.sum(-1, keepdim=True), want, rtol=1e-5, atol=1e-7)
        assert (w[1, :10] == 0).all() and (w.amax(-1) == 1).all()
    with recycled_logits():
        first = weights(logits)
        second = weights(logits + 1.0)
        assert first.data_ptr() == second.data_ptr()
    a, b = weights(logits), weights(logits * 2)          # outside it, each call's own memory
    assert not torch.equal(a, b) and torch.equal(a, weights(logits))
    with pytest.raises(ValueError, match="invalid distribution"):
        draw(weights(torch.full((2, 2058), float("-inf"))))
    needs_grad = logits.clone().requires_grad_()           # a plugin may pass logits with a graph
    assert torch.equal(weights(needs_grad), weights(logits))


def test_a_row_with_nothing_to_draw_is_refused():
    from lab.modeling.sampling import draw
    for bad in (torch.zeros(2, 2058), torch.full((2, 2058), float("nan"))):
        with pytest.raises(ValueError, match="invalid distribution"):
            draw(bad)


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9])
def test_top_p_with_tied_probabilities_keeps_as_many_as_the_sort(p):
    """Equal probabilities at the crossing: as many are kept as a sort would take."""
    from plugins.decoders.top_p import nucleus_drop
    uniform = torch.zeros(1, 50257)
    flat_top = torch.cat([torch.full((1, 1000), 5.0), torch.zeros(1, 9000)], 1)
    for logits in (uniform, flat_top):
        probs = torch.softmax(logits, -1).sort(descending=True).values
        before = probs.cumsum(-1) - probs
        expected = int((before <= p).sum())
        assert int((~nucleus_drop(logits, p, cut=4)).sum()) == expected
