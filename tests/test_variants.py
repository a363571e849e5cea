"""The seeds' architecture variants do what they are for, each checked against the plain model
(a test here fails if the variant behaved like plain causal attention with learned positions)."""
import torch
from torch.nn import functional as F

from lab.config import DecodeConfig
from lab.modeling.generate import generate
from lab.modeling.model import build
from tests.conftest import tiny_config


def _sliding(window=4, **over):
    torch.manual_seed(0)
    return build(tiny_config(attention="sliding", settings={"attention": {"window": window}},
                             **over)).eval()


def test_sliding_window_sees_only_the_window():
    model = _sliding(window=4)
    ids = torch.randint(0, 97, (1, 16), generator=torch.Generator().manual_seed(0))
    for w in model(ids, output_attentions=True).attentions:
        q, k = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")
        assert (w[0][:, q - k >= 4] == 0).all() and (w[0][:, (q - k >= 0) & (q - k < 4)] > 0).all()
    # two layers of window 4 reach 2 * 3 tokens back: token 0 cannot move position 7 or later
    changed = ids.clone()
    changed[0, 0] = (changed[0, 0] + 1) % 97
    a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[0, 7:], b[0, 7:])
    assert not torch.allclose(a[0, :7], b[0, :7])
    plain = build(tiny_config()).eval()
    assert not torch.allclose(plain(ids).logits[0, 7:], plain(changed).logits[0, 7:])


def _cache_bytes(model, prompt_len=2, new=40):
    out = model(torch.zeros(1, prompt_len, dtype=torch.long))
    past = out.past_key_values
    for _ in range(new):
        past = model(torch.zeros(1, 1, dtype=torch.long), past_key_values=past).past_key_values
    return sum(k.nbytes + v.nbytes for k, v in past), past.seen


def test_sliding_window_cache_stays_within_the_window():
    """After 42 tokens the cache holds window - 1 keys per layer; the plain model's holds 42."""
    sliding, seen = _cache_bytes(_sliding(window=8, n_positions=64))
    plain, _ = _cache_bytes(build(tiny_config(n_positions=64)).eval())
    per_key = 2 * 2 * 32 * 4                 # layers x (k and v) x width x float32 bytes
    assert seen == 42 and sliding == 7 * per_key and plain == 42 * per_key
    # and generating with the trimmed cache gives what recomputing every prefix gives
    model = _sliding(window=3, n_positions=64)
    (new, _, _), = generate(model, [[96, 5]], DecodeConfig(decoder="greedy", max_new_tokens=30), 96)
    seq = [96, 5]
    with torch.no_grad():
        for _ in range(len(new)):
            seq.append(model(torch.tensor([seq])).logits[0, -1].argmax().item())
    assert new == seq[2:]


def _periodic(g, batch, length, vocab=16):
    """Rows that repeat a random pattern of 2 to 5 tokens: the next token is the one `period`
    back, which needs relative position and nothing else."""
    period = torch.randint(2, 6, (batch,), generator=g)
    base = torch.randint(0, vocab, (batch, 8), generator=g)
    return torch.stack([base[b][torch.arange(length) % period[b]] for b in range(batch)])


def _short_and_long_loss(positional: str, steps=300):
    torch.manual_seed(0)
    model = build(tiny_config(vocab_size=16, n_positions=128, positional=positional))
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):                  # trained on 16 tokens only
        x = _periodic(g, 32, 16)
        loss = F.cross_entropy(model(x).logits[:, :-1].reshape(-1, 16), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        x = _periodic(torch.Generator().manual_seed(1), 64, 128)
        loss = F.cross_entropy(model.eval()(x).logits[:, :-1].reshape(-1, 16), x[:, 1:].reshape(-1),
                               reduction="none").view(64, -1)
    return loss[:, 6:15].mean().item(), loss[:, 16:].mean().item()


def test_alibi_reads_past_its_training_length():
    """Trained on 16 tokens, read on 128: ALiBi's loss on positions 16-127 stays at its loss
    within the training length, where learned positions' grows (they never saw those positions)."""
    short, long = _short_and_long_loss("alibi")
    assert long < 1.1 * short
    short, long = _short_and_long_loss("learned")
    assert long > 1.5 * short


def test_perceiver_squeezes_the_input_through_its_basis():
    """With a basis of 4 rows, input 5 reaches no output after position 5 (rows 0-3 see inputs
    0-3 only); in the plain model every later output depends on it. And it stays causal."""
    torch.manual_seed(0)
    model = build(tiny_config(model="perceiver", n_layer=3,
                              settings={"model": {"bottleneck_dim": 4}})).eval()
    ids = torch.randint(0, 97, (1, 12), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, 5] = (changed[0, 5] + 1) % 97
    a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[0, :5], b[0, :5])           # causal
    assert not torch.allclose(a[0, 5], b[0, 5])              # its own position, by the residual
    torch.testing.assert_close(a[0, 6:], b[0, 6:])           # nothing after it
    plain = build(tiny_config(n_layer=3)).eval()
    assert not torch.allclose(plain(ids).logits[0, 6:], plain(changed).logits[0, 6:])
    # HW5's basis: Xavier-uniform over (1, rows, width), kept through the model's own init
    bound = (6 / (4 * 32 + 32)) ** 0.5
    assert model.basis.shape == (1, 4, 32) and model.basis.abs().max() <= bound
    assert model.basis.abs().max() > 0.5 * bound


def test_perceiver_cross_norm_bottleneck_norms_only_the_bottlenecks_side():
    """HW5's hints: the down-projection normalises the basis (its queries), the up-projection the
    rows (its keys); the text enters both raw. `both` normalises the text's side too."""
    def normed(cross_norm):
        model = build(tiny_config(model="perceiver", n_layer=3, settings={
            "model": {"bottleneck_dim": 4, "cross_norm": cross_norm}})).eval()
        seen = []
        for name in ("down", "up"):
            model.transformer[name].ln_1.register_forward_hook(
                lambda mod, args, out, name=name: seen.append((name, args[0].size(1))))
        model(torch.zeros(1, 12, dtype=torch.long))
        return sorted(seen)
    assert normed("bottleneck") == [("down", 4), ("up", 4)]
    assert normed("both") == [("down", 4), ("down", 12), ("up", 4), ("up", 12)]


def _universal(**settings):
    torch.manual_seed(0)
    return build(tiny_config(model="universal", n_layer=1, settings={"model": settings}))


def test_universal_transformer_shares_one_block_and_halts_per_token():
    model = _universal(max_steps=6).eval()
    plain = build(tiny_config(n_layer=1))
    extra = {"step_emb", "halt.weight", "halt.bias"}
    names = {n for n, _ in model.named_parameters()} - extra
    assert names == {n for n, _ in plain.named_parameters()}     # one block, however many steps
    with torch.no_grad():
        model.halt.weight.normal_(0, 40.0)       # halting that differs from token to token
        model.halt.bias.fill_(-2.0)
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    out = model(ids, output_attentions=True)
    steps = out.per_token["steps"]
    assert steps.shape == (2, 12) and steps.min() >= 1 and steps.max() <= 6
    assert len(set(steps.flatten().tolist())) > 1              # tokens took different counts
    assert len(out.attentions) == int(steps.max())              # one attention layer per step
    assert out.aux_loss > 0
    # the same weights applied fewer times give other outputs: the steps are real computation
    fewer = _universal(max_steps=2).eval()
    state = model.state_dict()
    state["step_emb"] = state["step_emb"][:2]
    fewer.load_state_dict(state)
    assert not torch.allclose(fewer(ids).logits, out.logits)


def test_ponder_cost_trains_tokens_to_take_fewer_steps():
    """The ponder cost is in the training loss: after the same 10 steps from the same start, the
    model trained with it takes fewer steps per token than the one trained without."""
    from lab.inputs.data import Batch
    from lab.training.train import shard_loss
    ids = torch.randint(0, 97, (8, 12), generator=torch.Generator().manual_seed(0))
    batch = Batch(ids, torch.ones(8, 11))
    after = {}
    for cost in (1.0, 0.0):
        model = _universal(max_steps=6, ponder_cost=cost, threshold=0.99)
        with torch.no_grad():
            model.halt.bias.fill_(-1.0)           # start by pondering: 4 steps a token
        assert model(ids).per_token["steps"].mean().item() == 4.0
        opt = torch.optim.Adam(model.parameters(), 3e-2)
        for _ in range(10):
            loss = shard_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
        after[cost] = model(ids).per_token["steps"].mean().item()
    assert after[1.0] < after[0.0] - 0.5


def test_the_attention_tab_shows_the_steps_each_token_took():
    from lab.evaluation import attention_maps
    from lab.inputs import tokenizers
    from lab.ui.attention import groups_markdown
    torch.manual_seed(0)
    tok = tokenizers.gpt2()
    model = build(tiny_config(model="universal", n_layer=1, vocab_size=50257))
    cap = attention_maps.capture(model, tok, "A man on a horse .")
    assert len(cap.per_token["steps"]) == len(cap.tokens) == 7
    shown = groups_markdown(cap)
    assert "**steps per token**: `<bos>` 2, `A` 2" in shown
    from types import SimpleNamespace
    from lab.ui.attention import views
    note = views(cap, SimpleNamespace(name="ut", config=model.config, meta={}), "7 tokens")[0]
    assert "the views' 2 layers are its 1 block(s) at each step they were applied" in note


def _xl(**settings):
    torch.manual_seed(0)
    return build(tiny_config(model="xl", n_layer=1, settings={"model": settings}))


def test_transformer_xl_reads_segments_with_a_memory():
    """One layer, segments of 4, a memory of 4: a query sees back to 4 before its segment's start,
    so token 0 moves nothing from position 8 on (the plain model's every position sees it)."""
    model = _xl(segment_len=4, mem_len=4).eval()
    ids = torch.randint(0, 97, (1, 12), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, 0] = (changed[0, 0] + 1) % 97
    a, b = model(ids).logits, model(changed).logits
    assert not torch.allclose(a[0, 7], b[0, 7])          # position 7: its memory holds token 0
    torch.testing.assert_close(a[0, 8:], b[0, 8:])
    plain = build(tiny_config(n_layer=1)).eval()
    assert not torch.allclose(plain(ids).logits[0, 8:], plain(changed).logits[0, 8:])


def test_transformer_xl_stops_the_gradient_at_its_memory():
    """The loss at the last token of segment 2 gives no gradient to the embeddings of segment 1
    (its memory, read without gradient); in the plain model it reaches every position."""
    def gradients(model):
        ids = torch.randint(0, 97, (1, 8), generator=torch.Generator().manual_seed(0))
        emb = model.transformer.wte(ids).detach().requires_grad_(True)
        handle = model.transformer.wte.register_forward_hook(lambda m, i, o: emb)
        model(ids).logits[0, -1].logsumexp(-1).backward()
        handle.remove()
        return emb.grad[0].abs().sum(-1)                 # per position
    g = gradients(_xl(segment_len=4, mem_len=4).train())
    assert (g[:4] == 0).all() and (g[4:] > 0).all()
    plain = gradients(build(tiny_config(n_layer=1)).train())
    assert (plain > 0).all()


def test_transformer_xl_trains_on_text_longer_than_a_segment():
    """Rows of 32 tokens, 4 segments of 8: the loss falls to about half within 60 steps (a plain
    one-layer model trained the same way falls a little less)."""
    model = _xl(segment_len=8, mem_len=8)
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    losses = []
    for _ in range(60):
        x = _periodic(g, 16, 32, vocab=16)
        loss = F.cross_entropy(model(x).logits[:, :-1].reshape(-1, 97), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.55 * losses[0]


def test_plain_init_is_mingpts_and_scaled_is_gpt2s():
    """init=plain: N(0, init_std) on every linear and embedding, position embeddings at zero (the
    birth-place assignment's minGPT); scaled (the default): GPT-2's, the projections into the
    residual stream narrower by 1/sqrt(2 n_layer)."""
    def std(model, suffix):
        return torch.cat([p.flatten() for n, p in model.named_parameters() if n.endswith(suffix)]).std()

    for family in ("gpt2", "perceiver"):
        torch.manual_seed(0)
        plain = build(tiny_config(model=family, n_layer=8, n_embd=64, init="plain"))
        torch.manual_seed(0)
        scaled = build(tiny_config(model=family, n_layer=8, n_embd=64))
        assert (plain.transformer.wpe.weight == 0).all()
        assert scaled.transformer.wpe.weight.std() > 0.015
        for model, expected in ((plain, 0.02), (scaled, 0.02 / 4)):      # sqrt(2 * 8) = 4
            assert abs(std(model, "c_proj.weight") - expected) < 0.1 * expected
            assert abs(std(model, "c_fc.weight") - 0.02) < 0.002
