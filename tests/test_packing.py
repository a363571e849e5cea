"""Packed rows (data.pack): several captions per row, positions restarting per caption, attention
confined to it. The loss and its gradients must equal the padded batch's, for every attention
and positional plugin (and each at its lowest settings), so packing can be on by default."""
import dataclasses

import pytest
import torch

from lab.inputs.data import assignment_loss, collate, pack, packable, sentence_nll
from lab.modeling.model import Positional, build
from lab.registry import ATTENTION, MODELS, POSITIONAL, load_plugins
from tests.conftest import tiny_config

load_plugins()

LENGTHS = [2, 9, 5, 14, 3, 11, 7, 6]      # captions with their two end-of-text tokens


def _captions(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [[0] + torch.randint(1, 97, (n - 2,), generator=g).tolist() + [0] for n in LENGTHS]


def _settings(registry, kind, name):
    """Default settings, and the lowest whole-number ones (a sliding window of 1)."""
    cls = registry.get(name).settings
    lowest = {f.name: f.metadata["min"] for f in dataclasses.fields(cls)
              if isinstance(f.metadata.get("min"), int)} if cls else {}
    return [({}, "")] + ([({kind: lowest}, "-lowest")] if lowest else [])


def _pairs():
    out = []
    for att in ATTENTION.names():
        for pos in POSITIONAL.names():
            for sa, ta in _settings(ATTENTION, "attention", att):
                for sp, tp in _settings(POSITIONAL, "positional", pos):
                    out.append(pytest.param(dict(attention=att, positional=pos, settings={**sa, **sp}),
                                            id=f"{att}{ta}-x-{pos}{tp}"))
    return out


def _loss_and_grads(model, batch):
    model.zero_grad()
    loss = assignment_loss(model(batch.input_ids, **batch.model_inputs()).logits, batch)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("overrides", _pairs())
def test_packed_loss_and_gradients_equal_the_padded_batch(overrides):
    torch.manual_seed(0)
    model = build(tiny_config(**overrides)).train()
    assert model.packable
    padded = collate(_captions(), pad_id=0)
    packed = pack(padded, row=20)                   # 49 targets: 3 rows, several captions each
    assert packed.input_ids.size(0) == 3 and packed.texts == len(LENGTHS)
    loss, grads = _loss_and_grads(model, padded)
    p_loss, p_grads = _loss_and_grads(model, packed)
    torch.testing.assert_close(p_loss, loss, atol=1e-6, rtol=1e-5)
    assert grads.keys() == p_grads.keys()
    for name in grads:
        torch.testing.assert_close(p_grads[name], grads[name], atol=1e-6, rtol=1e-4, msg=name)


def test_pack_places_every_target_once_with_positions_from_zero():
    padded = collate(_captions(), pad_id=0)
    packed = pack(padded, row=20)
    nll = torch.zeros(packed.input_ids.shape + (97,))
    sums, counts = sentence_nll(nll, packed)          # uniform logits: log 97 per counted target
    assert counts.tolist() == [n - 1 for n in LENGTHS]
    torch.testing.assert_close(sums, counts * torch.log(torch.tensor(97.0)))
    for i, n in enumerate(LENGTHS):
        at = packed.segments == i
        assert at.sum() == n - 1                        # every token but the last
        assert packed.positions[at].tolist() == list(range(n - 1))
        assert packed.input_ids[at].tolist() == padded.input_ids[i, :n - 1].tolist()
        assert packed.targets[at].tolist() == padded.input_ids[i, 1:n].tolist()
    fill = (packed.segments >= 0).sum(1)
    assert int(fill.max() - fill.min()) <= max(LENGTHS)     # longest first into the emptiest row
    assert int((packed.segments < 0).sum()) == packed.input_ids.numel() - sum(LENGTHS) + len(LENGTHS)
    assert packable(padded) and not packable(packed)


def test_one_row_when_the_texts_fit_and_a_long_text_gets_a_row_of_its_own():
    padded = collate(_captions(), pad_id=0)
    assert pack(padded).input_ids.shape == (1, sum(LENGTHS) - len(LENGTHS))
    assert pack(padded, row=4).input_ids.size(1) >= max(LENGTHS) - 1


def test_only_models_whose_parts_all_take_packed_rows_pack():
    for family in MODELS.names():
        model = build(tiny_config(model=family))
        assert model.packable == (family in ("gpt2", "llama")), family

    model = build(tiny_config())
    model.transformer.wpe = Positional()            # a third-party plugin that did not declare it
    assert not model.packable
    batch = pack(collate(_captions(), pad_id=0))
    with pytest.raises(ValueError, match="packed rows"):
        model(batch.input_ids, **batch.model_inputs())


def test_texts_longer_than_a_row_get_rows_of_their_length_and_no_empty_rows():
    def captions(*lengths):
        return collate([[0] + [1] * (n - 2) + [0] for n in lengths], pad_id=0)
    assert pack(captions(300)).input_ids.shape == (1, 299)
    assert pack(captions(*[255] * 8)).input_ids.shape == (8, 254)
    assert pack(captions(200, 200)).input_ids.shape == (2, 199)


@pytest.mark.parametrize("objective", ["span", "qa"])
def test_birth_place_batches_pack_to_the_same_loss_and_gradients(objective):
    """A birth-place example fills the block with pad characters after its text; a question's
    inputs come before its first counted target. Packing keeps the question as uncounted input
    and drops the pads after the last counted target, which no counted position sees."""
    from plugins.tasks.birthplace import core as bp
    tok = bp.tokenizer()
    torch.manual_seed(0)
    model = build(tiny_config(vocab_size=tok.vocab_size, n_positions=bp.BLOCK)).train()
    g = torch.Generator().manual_seed(0)
    padded = (bp.span_batch(bp.wiki()[:12], tok, g) if objective == "span"
              else bp.qa_batch(bp.questions("train")[:12], tok))
    packed = pack(padded)
    assert packed.input_ids.numel() < padded.input_ids.numel() * 2 / 3
    assert packed.loss_mask.sum() == padded.loss_mask.sum()
    if objective == "qa":       # each question is there, before its uncounted targets
        assert (packed.loss_mask == 0).sum() - (packed.segments < 0).sum() > 12 * 20

    def run(batch):
        model.zero_grad()
        loss = bp.token_loss(model(batch.input_ids, **batch.model_inputs()).logits, batch)
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}
    loss, grads = run(padded)
    p_loss, p_grads = run(packed)
    torch.testing.assert_close(p_loss, loss, atol=1e-6, rtol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(p_grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)


def test_scoring_without_gradients_equals_cross_entropy():
    """token_nll's cached-rows path (no gradients, CPU) against cross_entropy: more rows than one
    block of ROWS, ignored targets, a -inf logit elsewhere and at a target, and bf16 logits; a
    target outside the vocabulary is refused; with gradients, cross_entropy's own."""
    from lab.inputs.data import ROWS, token_nll
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2 * ROWS + 5, 1000, generator=g) * 4
    targets = torch.randint(0, 1000, (len(logits),), generator=g)
    logits[3, (targets[3] + 1) % 1000] = float("-inf")
    logits[4, targets[4]] = float("-inf")              # the target itself: an infinite loss
    targets[[0, 9, ROWS]] = -100
    for x in (logits, logits.bfloat16()):
        want = torch.nn.functional.cross_entropy(x.float(), targets, reduction="none")
        with torch.no_grad():
            got = token_nll(x, targets)
        assert got.dtype == torch.float32 and got.shape == want.shape
        assert got[4] == want[4] == float("inf")
        keep = torch.arange(len(got)) != 4
        assert torch.allclose(got[keep], want[keep], rtol=1e-6, atol=1e-5)
        assert (got[[0, 9, ROWS]] == 0).all()
    with torch.no_grad(), pytest.raises(ValueError, match="outside the vocabulary"):
        token_nll(logits, torch.full((len(logits),), -1))
    w, ref = logits[5:].clone().requires_grad_(), logits[5:].clone().requires_grad_()
    token_nll(w, targets[5:]).sum().backward()
    torch.nn.functional.cross_entropy(ref, targets[5:], reduction="none").sum().backward()
    assert torch.equal(w.grad, ref.grad)
