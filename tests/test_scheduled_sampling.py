"""Scheduled sampling (Bengio et al. 2015) for the captions language model: the teacher-forcing
probability's three decays, the parallel mixing of sampled and gold tokens, and a run with it."""
import math

import pytest
import torch

from lab.inputs import data, tokenizers
from lab.training import runs
from lab.config import ConfigError, ModelConfig, TrainConfig
from lab.inputs.data import assignment_loss
from lab.modeling.model import build
from lab.training.train import scheduled_inputs
from plugins.tasks.captions import CaptionsSettings
from plugins.tasks.captions.sampling import teacher_forcing


@pytest.mark.parametrize("kind", ["linear", "exponential", "inverse_sigmoid"])
def test_each_decay_falls_to_its_floor_at_the_last_step(kind):
    cfg = CaptionsSettings(scheduled_sampling=kind, ss_floor=0.25)
    ps = [teacher_forcing(cfg, s, 200) for s in range(0, 201, 10)]
    assert ps[0] > 0.9 and all(a >= b for a, b in zip(ps, ps[1:]))
    assert ps[-1] == pytest.approx(0.25, abs=1e-6)
    assert teacher_forcing(cfg, 10_000, 200) == 0.25                  # never below the floor
    assert teacher_forcing(CaptionsSettings(), 100, 200) == 1.0             # off: always gold


def test_an_explicit_constant_follows_the_papers_formulas():
    assert teacher_forcing(CaptionsSettings(scheduled_sampling="linear", ss_k=100), 40, 1) == pytest.approx(0.6)
    assert teacher_forcing(CaptionsSettings(scheduled_sampling="exponential", ss_k=0.99), 50, 1) == \
        pytest.approx(0.99 ** 50)
    assert teacher_forcing(CaptionsSettings(scheduled_sampling="inverse_sigmoid", ss_k=10), 20, 1) == \
        pytest.approx(10 / (10 + math.exp(2)))


def _batch():
    tok = tokenizers.gpt2()
    seqs = data.encode_captions(["a dog runs on the beach .", "two cats ."], tok, 32)
    return data.collate(seqs, tok.eos_id)


def test_all_gold_is_plain_teacher_forcing_and_none_gold_swaps_every_caption_token():
    torch.manual_seed(0)
    model = build(ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48,
                              vocab_size=50257)).eval()
    batch = _batch()
    gold = scheduled_inputs(model, batch, 1.0)
    assert torch.equal(gold.input_ids, batch.input_ids)
    assert assignment_loss(model(gold.input_ids).logits, gold).item() == pytest.approx(
        assignment_loss(model(batch.input_ids).logits, batch).item(), rel=1e-6)
    torch.manual_seed(1)
    own = scheduled_inputs(model, batch, 0.0)
    counted = batch.loss_mask > 0                        # input positions 1.. of each caption
    changed = own.input_ids[:, 1:] != batch.input_ids[:, 1:]
    assert changed[counted].float().mean() > 0.9          # sampled from 50,257 tokens: nearly all differ
    assert not changed[~counted].any()                    # padding and BOS stay
    assert torch.equal(own.targets[:, :-1], batch.input_ids[:, 1:])    # the targets stay gold


def test_a_run_with_scheduled_sampling_logs_its_probability_and_learns_otherwise(corpus_dir, store):
    from lab.storage import checkpoints
    base = dict(epochs=1, lr=1e-3, max_train=96, max_dev=20, log_every=1,
                batch_size=16)
    model_cfg = ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48)
    events = list(runs.train("ss", model_cfg, TrainConfig(**base, settings={"task": {"scheduled_sampling": "linear"}})))
    forcing = [e["teacher_forcing"] for e in events if e["event"] == "step"]
    assert len(forcing) == 6 and forcing[0] > forcing[-1] and forcing[-1] < 0.2
    list(runs.train("tf", model_cfg, TrainConfig(**base)))
    a, b = (checkpoints.load(n).model.state_dict() for n in ("ss", "tf"))
    assert not all(torch.equal(a[k], b[k]) for k in a)


def test_scheduled_sampling_settings_are_checked():
    for bad, said in (({"task.scheduled_sampling": "cosine"}, "task.scheduled_sampling must be"),
                      ({"task.scheduled_sampling": "linear", "task": "birthplace"},
                       "task plugin 'birthplace' has no setting 'scheduled_sampling'"),
                      ({"task.scheduled_sampling": "exponential", "task.ss_k": 2}, "a rate below 1"),
                      ({"task.scheduled_sampling": "inverse_sigmoid", "task.ss_k": 0.5}, "at least 1"),
                      ({"task.ss_floor": 1.5}, "task.ss_floor must be between")):
        with pytest.raises(ConfigError, match=said):
            TrainConfig.from_dict(bad).validate()


def test_exposure_bias_is_the_loss_gap_after_the_models_own_prefix(corpus_dir, store, capsys):
    """With no prefix the two losses are the same captions scored the same way (gap 0); after
    m sampled tokens the gold continuation is scored at the same positions, paired by caption.
    A model that ignores its input (a zero attention and MLP output: only the position and the
    bias decide) has no gap at all, whatever the prefix."""
    from lab.storage import checkpoints
    from lab import cli
    from lab.evaluation import exposure
    torch.manual_seed(0)
    model = build(ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48,
                              vocab_size=50257)).eval()
    caps = data.load_split("dev", corpus_dir)[:40]
    rows = exposure.measure(model, tokenizers.gpt2(), caps, prefixes=(0, 2, 4))
    assert [r["prefix"] for r in rows] == [0, 2, 4] and rows[0]["captions"] == 40
    assert rows[0]["gap"] == 0 and rows[0]["teacher_forced"] == rows[0]["own_prefix"]
    for r in rows:
        lo, hi = r["gap_ci"]
        assert lo <= r["gap"] <= hi
    blind = build(ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48,
                              vocab_size=50257)).eval()
    with torch.no_grad():
        blind.transformer.wte.weight.zero_()        # every token looks the same: no history
    flat = exposure.measure(blind, tokenizers.gpt2(), caps, prefixes=(4,))
    assert flat[0]["gap"] == pytest.approx(0, abs=1e-5)
    checkpoints.save(model, tokenizers.gpt2(), "m")
    assert cli.main(["exposure", "--checkpoint", "m", "--n", "20"]) == 0
    assert "gold prefix  own prefix  gap [95%]" in capsys.readouterr().out
