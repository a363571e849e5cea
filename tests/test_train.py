"""The trainer on the real corpus with a tiny model: mid-epoch dev evaluations draw the curve,
only the end of an epoch saves a checkpoint; per-word dev perplexity relates to per-token."""
import math

import pytest

from lab.storage import checkpoints
from lab.inputs import data, tokenizers
from lab.training import runs
from lab.config import ConfigError, ModelConfig, TrainConfig
from lab.training.progress import format_event


def test_mid_epoch_evaluations_draw_the_curve_but_only_epoch_ends_save(corpus_dir):
    cfg = TrainConfig(epochs=2, lr=1e-3, max_train=320, max_dev=60, eval_every=4,
                      patience=5)
    model_cfg = ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48)
    events = list(runs.train("t", model_cfg, cfg))
    evals = [e for e in events if e["event"] == "eval"]
    # 10 steps an epoch: extra evaluations at 4, 8, 12, 16; the epochs end at 10 and 20
    assert [(e["step"], bool(e.get("mid_epoch"))) for e in evals] == [
        (4, True), (8, True), (10, False), (12, True), (16, True), (20, False)]
    assert not any(e.get("best") for e in evals if e.get("mid_epoch"))
    assert checkpoints.info("t")["metrics"]["epoch"] == 2
    # per word = the same summed NLL over words (+1 for each caption's end) instead of tokens
    dev = data.load_split("dev", corpus_dir)[:60]
    n_tokens = sum(len(s) - 1 for s in data.encode_captions(dev, tokenizers.gpt2(), 48))
    n_words = sum(len(c.split()) + 1 for c in dev)
    for e in evals:
        assert math.log(e["dev_word_perplexity"]) == pytest.approx(
            math.log(e["dev_token_perplexity"]) * n_tokens / n_words, rel=1e-6)


def test_negative_eval_every_is_refused():
    with pytest.raises(ConfigError, match="eval_every must be between 0 and"):
        TrainConfig(eval_every=-5).validate()


# The runs below are about the training loop, not the vocabulary: they train a character-level
# model (CHAR). GPT-2's 50,257-token output layer is 95% of a tiny model's step on the CPU (a
# two-epoch run here: 7.4 s with it, 0.4 s without); the first test keeps GPT-2's tokens.
CHAR = {"tokenizer": "char"}


def _tiny_run(name, epochs, resume=False, should_stop=None, dropout=0.1, **train):
    cfg = TrainConfig(epochs=epochs, lr=1e-3, max_train=320, max_dev=60, patience=5,
                      **{**CHAR, **train})
    model_cfg = ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48, dropout=dropout)
    return list(runs.train(name, None if resume else model_cfg, cfg, resume=resume,
                           should_stop=should_stop))


def _stop_from_call(n, mode="now"):
    """should_stop answering `mode` from its n-th call on. 10 steps an epoch: calls 1-10 come
    before steps 1-10, call 11 between the dev evaluation's batches (60 captions: one batch)."""
    calls = []

    def should_stop():
        calls.append(1)
        return mode if len(calls) >= n else None
    return should_stop


def _same_weights(a, b):
    import torch
    a, b = checkpoints.load(a).model.state_dict(), checkpoints.load(b).model.state_dict()
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """Two uninterrupted epochs with dropout 0.1, in a store of their own."""
    import os
    store = tmp_path_factory.mktemp("straight")
    old = os.environ.get("LAB_STORE")
    os.environ["LAB_STORE"] = str(store)
    try:
        _tiny_run("straight", 2)
    finally:
        os.environ["LAB_STORE"] = old or ""
    assert checkpoints.info("straight", store)["metrics"]["epoch"] == 2    # epoch 2 improved: saved
    return checkpoints.load("straight", store).model.state_dict()


def _equal_to_straight(name, straight):
    import torch
    b = checkpoints.load(name).model.state_dict()
    assert checkpoints.info(name)["metrics"]["epoch"] == 2
    return all(torch.equal(straight[k], b[k]) for k in straight)


def test_resume_after_an_epoch_is_bit_exact_with_dropout(corpus_dir, straight):
    """Stop after epoch 1's checkpoint, resume to 2: the weights of two uninterrupted epochs, bit
    for bit, with dropout on (the random states travel with the optimizer's moments)."""
    events = _tiny_run("halted", 2, should_stop=_stop_from_call(1, "after_checkpoint"))
    assert events[-1]["event"] == "stopped" and events[-1]["saved"]
    assert checkpoints.load_train_state("halted")["epoch"] == 1
    events = _tiny_run("halted", 2, resume=True)
    assert events[1]["event"] == "start" and events[1]["first_epoch"] == 2
    assert [e["epoch"] for e in events if e["event"] == "eval"] == [2]
    assert _equal_to_straight("halted", straight)
    assert checkpoints.info("halted")["source"] == "scratch"
    with pytest.raises(ConfigError, match="already trained 2 of 2 epochs"):
        _tiny_run("halted", 2, resume=True)


def test_stop_now_saves_mid_epoch_and_resume_is_bit_exact(corpus_dir, straight):
    """Stop now at step 4 of epoch 1 keeps where the run stands (no checkpoint yet: no dev score);
    resume trains steps 5-20 and ends with the uninterrupted weights."""
    events = _tiny_run("midway", 2, should_stop=_stop_from_call(5))
    assert events[-1]["event"] == "stopped" and events[-1]["saved"] and events[-1]["step"] == 4
    assert "midway" not in checkpoints.names()
    assert checkpoints.read_train_state(runs.last_dir("midway"))["batches_done"] == 4
    before = checkpoints.read_train_state(runs.last_dir("midway"))["elapsed_s"]
    assert before > 0
    events = _tiny_run("midway", 2, resume=True)
    assert events[1]["first_step"] == 4
    # the job's elapsed time goes on from where the first segment stopped, not from zero
    assert events[1]["elapsed_before"] == before
    assert all(e["elapsed_s"] >= before for e in events if e["event"] in ("step", "done"))
    assert [e["step"] for e in events if e["event"] == "eval"] == [10, 20]
    assert _equal_to_straight("midway", straight)


def test_stop_now_cuts_an_evaluation_short_and_resume_redoes_it(corpus_dir, straight):
    events = _tiny_run("cut", 2, should_stop=_stop_from_call(11))
    assert [e["event"] for e in events[-2:]] == ["eval_aborted", "stopped"]
    assert "cut" not in checkpoints.names()
    events = _tiny_run("cut", 2, resume=True)
    assert [e["step"] for e in events if e["event"] == "step"] == [20]    # no step of epoch 1 again
    assert [e["step"] for e in events if e["event"] == "eval"] == [10, 20]
    assert _equal_to_straight("cut", straight)


def test_periodic_saves_change_nothing_and_never_touch_the_best_checkpoint(corpus_dir, straight,
                                                                             monkeypatch):
    """A save after every step (save_every_minutes tiny) trains the same weights as none; each
    goes to the run's last save, the best checkpoint stays the epoch's; a finished run drops it."""
    written, write_dir = [], checkpoints.write_dir

    def spy(final, model, tok, provenance=None, metrics=None, train_state=None):
        written.append((final.name, train_state["step"], train_state["batches_done"],
                        train_state["saved_by"]))
        return write_dir(final, model, tok, provenance, metrics, train_state)
    monkeypatch.setattr(checkpoints, "write_dir", spy)
    events = _tiny_run("saver", 2, save_every_minutes=1e-9)
    assert [e["step"] for e in events if e["event"] == "saved"] == list(range(1, 21))
    assert all(e["save_s"] > 0 for e in events if e["event"] == "saved")
    assert [w for w in written if w[0] != "last"] == [("saver", 10, 0, "best"), ("saver", 20, 0, "best")]
    assert [w[1:] for w in written if w[0] == "last"] == [
        (step, (step - 1) % 10 + 1, "periodic") for step in range(1, 21)]
    assert _equal_to_straight("saver", straight)
    assert not runs.last_dir("saver").exists()          # finished: the checkpoint is the state


def test_the_progress_line_says_when_the_run_saved_and_where_a_resume_goes_on():
    step = {"event": "step", "epoch": 1, "step": 40, "total_steps": 200, "train_loss": 3.0,
            "tokens_per_s": 100.0, "mfu": None, "elapsed_s": 600, "eta_s": 60}
    assert format_event({**step, "next_save_s": 359.0}).endswith("ETA 1m00s, next save in 5m59s")
    assert format_event({**step, "saved_s_ago": 252.0}).endswith("ETA 1m00s, saved 4m12s ago")
    assert format_event(step).endswith("ETA 1m00s")                  # periodic saves off
    progress = {"event": "progress", "phase": "evaluating", "epoch": 1, "step": 40, "total_steps": 200,
                "dev_items": 60, "unit": "captions", "eta_s": 60, "saved_s_ago": 5.0}
    assert format_event(progress).endswith("evaluating 60 dev captions, ETA 1m00s, saved 0m05s ago")
    start = {"event": "start", "device": "cpu", "epochs": 2, "steps_per_epoch": 10,
             "first_epoch": 1, "first_step": 4, "first_batch": 4, "resumed_from": "periodic"}
    assert format_event(start).endswith("2 epochs x 10 steps; going on from step 4, 4 batches into "
                                        "epoch 1 (its periodic save)")
    assert format_event({**start, "first_epoch": 2, "first_step": 10, "first_batch": 0,
                         "resumed_from": "best"}).endswith("step 10, the start of epoch 2 (its best checkpoint)")
    saved = {"event": "saved", "epoch": 1, "step": 40, "save_s": 0.25}
    assert format_event(saved).startswith("epoch 1 step 40: saved where the run stands in 0.25 s")
    with pytest.raises(ConfigError, match="save_every_minutes must be between 0.0 and"):
        TrainConfig(save_every_minutes=-1).validate()


def test_resume_without_dropout_control(corpus_dir, straight):
    """The comparison has teeth: a run with another dropout ends elsewhere."""
    _tiny_run("other", 2, dropout=0.0)
    assert not _equal_to_straight("other", straight)


def test_a_new_run_never_replaces_a_checkpoint(corpus_dir):
    from lab.modeling.model import build
    checkpoints.save(build(ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48,
                                       vocab_size=50257)), tokenizers.gpt2(), "taken")
    with pytest.raises(checkpoints.CheckpointError, match="'taken' already exists"):
        _tiny_run("taken", 1)


def test_resume_needs_a_training_state(corpus_dir):
    from lab.modeling.model import build
    checkpoints.save(build(ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48,
                                       vocab_size=50257)), tokenizers.gpt2(), "imported")
    with pytest.raises(ConfigError, match="kept no training state"):
        _tiny_run("imported", 2, resume=True)


def test_the_largest_seed_the_setting_allows_trains():
    """A seed is bounded by what the run can use: the largest one allowed trains two epochs (each
    epoch's order is drawn from a seed made from it)."""
    from lab.config import SEED_MAX
    events = _tiny_run("big-seed", 2, seed=SEED_MAX)
    assert [e["epoch"] for e in events if e["event"] == "eval"] == [1, 2]
    with pytest.raises(ConfigError, match="seed"):
        TrainConfig.from_dict({"seed": SEED_MAX + 1})


def test_two_processes_under_torchrun_train_like_one(corpus_dir, tmp_path):
    """DDP over gloo on the CPU: two processes, each half of every batch (the last batch is uneven),
    end with the weights one process gets; only rank 0 speaks and writes."""
    import json
    import os
    import subprocess
    import sys

    import torch
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({
        "model": {"model": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 48,
                  "dropout": 0.0},
        "train": {"epochs": 2, "lr": 1e-3, "batch_size": 8, "max_train": 67,
                  "max_dev": 20, "patience": 5, **CHAR}}))
    store, env = tmp_path / "store", {**os.environ, "OMP_NUM_THREADS": "1"}

    def train(name, *launcher):
        out = subprocess.run([sys.executable, *launcher, "-m", "lab", "--store", str(store), "train",
                              "--config", str(cfg), "--name", name, "--json"],
                             env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

    events = train("two", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
    assert [e["processes"] for e in events if e["event"] == "start"] == [2]
    assert [e["event"] for e in events].count("done") == 1            # one voice
    assert [e["epoch"] for e in events if e["event"] == "eval"] == [1, 2]
    train("one")
    a = checkpoints.load("two", store).model.state_dict()
    b = checkpoints.load("one", store).model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_progress_says_what_the_run_does_and_the_eta_counts_evaluation(corpus_dir, monkeypatch):
    """A line at least every few seconds (here: every step), the evaluation announced with its
    caption count before it starts, the save before it happens; the ETA includes evaluations."""
    from lab.training import progress, train
    monkeypatch.setattr(train, "PROGRESS_EVERY_S", 0.0)
    events = _tiny_run("talkative", 2)
    phases = [(e["phase"], e["step"]) for e in events if e["event"] == "progress"]
    assert ("training", 1) in phases and ("evaluating", 10) in phases and ("saving", 10) in phases
    evaluating = [e for e in events if e["event"] == "progress" and e["phase"] == "evaluating"]
    assert evaluating[0]["dev_items"] == 60 and evaluating[0]["unit"] == "captions"
    order = [(e["event"], e.get("phase")) for e in events if e.get("step") == 10]
    assert order.index(("progress", "evaluating")) < order.index(("eval", None))
    assert order.index(("progress", "saving")) < order.index(("eval", None))
    # after the first evaluation the ETA counts the one left at its measured duration
    eval_s = next(e for e in events if e["event"] == "eval")["eval_s"]
    later = next(e for e in events if e["event"] == "progress" and e["step"] == 11)
    assert later["eta_s"] >= eval_s
    last_eval = next(e for e in events if e["event"] == "progress" and e["phase"] == "evaluating"
                     and e["step"] == 20)
    assert last_eval["eta_s"] > 0          # the last evaluation is still to come, so still counted
    first, fd = evaluating[0], progress.format_duration    # before any save: when the first falls
    assert progress.format_event(first).endswith(f"evaluating 60 dev captions, ETA {fd(first['eta_s'])}, "
                                                 f"next save in {fd(first['next_save_s'])}")
    assert "saved_s_ago" in last_eval               # epoch 1's checkpoint holds a resumable state


def test_a_cpu_run_is_float32_and_reports_tokens_per_second_with_mfu_unknown(corpus_dir):
    """The CPU path: no autocast, plain Adam; every step line carries real tokens per second and
    an MFU the CPU cannot have (no peak in the table)."""
    events = _tiny_run("rates", 1)
    start = next(e for e in events if e["event"] == "start")
    assert (start["precision"], start["device_name"], start["peak_flops"]) == ("fp32", "cpu", None)
    steps = [e for e in events if e["event"] == "step"]
    assert steps and all(e["tokens_per_s"] > 0 and e["mfu"] is None for e in steps)
    from lab.training.progress import format_event
    assert "tok/s packed, MFU unknown" in format_event(steps[0])
    assert "(cpu, fp32, captions packed into rows)" in format_event(start)


def test_packed_batches_train_the_weights_the_padded_ones_do(corpus_dir):
    """Packing is on by default where it is exact: an epoch packed and one padded give the same
    losses and weights (to float rounding); a family reading one text per row says why not."""
    import torch
    packed = _tiny_run("packed", 1, dropout=0.0)
    padded = _tiny_run("padded", 1, dropout=0.0, pack=False)
    assert [next(e["packed"] for e in run if e["event"] == "start") for run in (packed, padded)] \
        == [True, False]
    losses = [[e["train_loss"] for e in run if e["event"] == "step"] for run in (packed, padded)]
    assert len(losses[0]) == 1 and losses[0] == pytest.approx(losses[1], rel=1e-5)
    a = checkpoints.load("packed").model.state_dict()
    b = checkpoints.load("padded").model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    assert [e.get("packed") for e in padded if e["event"] == "step"][0] is False

    cfg = TrainConfig(epochs=1, lr=1e-3, max_train=64, max_dev=20, **CHAR)
    model_cfg = ModelConfig(model="perceiver", n_layer=2, n_head=2, n_embd=32, n_positions=48)
    start = next(e for e in list(runs.train("perceived", model_cfg, cfg)) if e["event"] == "start")
    assert not start["packed"]
    assert "not packed: the perceiver model's parts read one text per row" in format_event(start)


def test_a_step_budget_ends_the_run_inside_an_epoch_and_a_resume_goes_on_exactly(corpus_dir):
    """max_steps=7 over 5-step epochs: epoch 2 ends at step 7 and is evaluated like an epoch's
    end; a run stopped at step 4 and resumed trains the same 7 steps to the same weights."""
    cfg = TrainConfig(epochs=5, lr=1e-3, max_train=160, max_dev=30, patience=5,
                      max_steps=7, **CHAR)
    model_cfg = ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48)
    events = list(runs.train("budget", model_cfg, cfg))
    assert events[1]["epochs"] == 2
    assert [e["step"] for e in events if e["event"] == "eval"] == [5, 7]
    assert max(e["step"] for e in events if e["event"] == "step") == 7
    assert events[-1]["event"] == "done" and events[-1]["budget"] == "max_steps=7"
    assert "max_steps=7 reached at step 7" in format_event(events[-1], "budget")
    with pytest.raises(ConfigError, match="already trained 7 steps, its budget max_steps=7"):
        list(runs.train("budget", None, cfg, resume=True))

    stopped = list(runs.train("halves", model_cfg, cfg, should_stop=_stop_from_call(5)))
    assert stopped[-1]["event"] == "stopped" and stopped[-1]["step"] == 4
    rest = list(runs.train("halves", None, cfg, resume=True))
    assert rest[-1]["budget"] == "max_steps=7"
    assert _same_weights("budget", "halves")


def test_a_time_budget_counts_training_time_across_resumes(corpus_dir, monkeypatch):
    """max_minutes stops once the steps' own time adds up to the budget and evaluates the epoch
    under way; the time trained travels in the train state, so a resume counts it and one past
    the budget is refused with the figure."""
    cfg = TrainConfig(epochs=50, lr=1e-3, max_train=320, max_dev=60, patience=50,
                      max_minutes=0.01, **CHAR)     # 0.6 s of steps
    model_cfg = ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48)
    events = list(runs.train("clock", model_cfg, cfg))
    done = events[-1]
    assert done["event"] == "done" and done["budget"] == "max_minutes=0.01"
    assert done["step"] < 500                       # ended well before the 50 epochs
    evals = [e for e in events if e["event"] == "eval"]
    assert evals[-1]["step"] == done["step"]        # the epoch under way was evaluated at the end
    state = checkpoints.load_train_state("clock")
    assert state["trained_s"] > 0
    monkeypatch.setattr(runs, "resume_point", lambda name, store=None, tensors=True: (
        {"epoch": 3, "step": 30, "trained_s": 61.0}, None))
    with pytest.raises(ConfigError, match="already trained 1.02 minutes, its budget max_minutes=1;"):
        runs.resume_state("clock", cfg.replace(max_minutes=1), None)
    assert runs.resume_state("clock", cfg.replace(max_minutes=2), None)[0]["step"] == 30


def test_budgets_are_checked():
    for bad, said in (({"max_steps": 0}, "max_steps must be between 1 and"),
                      ({"max_minutes": 0}, "max_minutes must be between 0.01"),
                      ({"max_minutes": float("nan")}, "max_minutes: expected a finite number"),
                      ({"max_minutes": 10 ** 7}, "max_minutes must be between")):
        with pytest.raises(ConfigError, match=said):
            TrainConfig(**bad).validate()



def test_keep_epochs_keeps_the_weights_at_those_epochs_as_their_own_checkpoints(corpus_dir, straight):
    """keep_epochs=1,2: NAME-e1 and NAME-e2 beside NAME; epoch 2's are the weights of two
    uninterrupted epochs, bit for bit; each can be a fine-tune's parent; a new run refuses a name
    whose NAME-eN exists."""
    import torch
    events = _tiny_run("budget", 2, keep_epochs="1, 2")
    kept = [e["epoch"] for e in events if e["event"] == "eval" and e.get("kept")]
    assert kept == [1, 2]
    assert "kept as the -e1 checkpoint" in format_event(next(e for e in events if e.get("kept")), "budget")
    for epoch in (1, 2):
        info = checkpoints.info(f"budget-e{epoch}")
        assert info["metrics"]["epoch"] == epoch and info["run"] == "budget"
        assert "dev_perplexity" in info["metrics"]
    assert _equal_to_straight("budget-e2", straight)
    e1 = checkpoints.load("budget-e1").model.state_dict()
    assert not all(torch.equal(e1[k], straight[k]) for k in straight)
    assert [n for n, _ in runs.kept_checkpoints("budget", TrainConfig(epochs=2, keep_epochs="1,2"))] == \
        ["budget", "budget-e1", "budget-e2"]
    checkpoints.delete("budget")
    with pytest.raises(checkpoints.CheckpointError, match="'budget-e1' already exists"):
        _tiny_run("budget", 2, keep_epochs="1")


@pytest.mark.parametrize("value, said", [("3", r"keep_epochs \[3\] out of range: this run has epochs 1 to 2"),
                                         ("0,1", r"keep_epochs \[0\] out of range"),
                                         ("first", "keep_epochs must be epoch numbers separated by commas")])
def test_keep_epochs_outside_the_run_are_refused(value, said):
    with pytest.raises(ConfigError, match=said):
        TrainConfig(epochs=2, keep_epochs=value).check()


def test_early_stop_none_keeps_the_last_epoch_even_where_dev_got_worse(corpus_dir, monkeypatch):
    """early_stop=none keeps the last evaluation's weights (the birth-place assignment's way),
    not the best dev perplexity's."""
    from lab.training.train import Trainer
    real = Trainer._evaluate

    def worse_each_epoch(self, epoch, step):
        record = real(self, epoch, step)
        if record:
            record["dev_perplexity"] = 10.0 + epoch
        return record
    monkeypatch.setattr(Trainer, "_evaluate", worse_each_epoch)
    events = _tiny_run("last", 3, early_stop="none")
    assert [e["epoch"] for e in events if e["event"] == "eval" and e.get("best")] == [1, 2, 3]
    assert checkpoints.info("last")["metrics"]["epoch"] == 3
    events = _tiny_run("best", 3)
    assert [e["epoch"] for e in events if e["event"] == "eval" and e.get("best")] == [1]


def test_minGPT_optimizer_leaves_biases_undecayed_with_its_betas():
    """decay_biases=false puts the biases in a group of their own without weight decay (minGPT's
    AdamW); adam_beta2 reaches every group; the default decays every parameter."""
    import torch
    from lab.modeling.model import build
    from lab.training.parameters import make_optimizer
    model = build(ModelConfig(model="gpt2", vocab_size=40, n_layer=1, n_head=2, n_embd=16, n_positions=16))
    biases = frozenset(id(p) for n, p in model.named_parameters() if n.endswith("bias"))
    params = list(model.parameters())
    cfg = TrainConfig(weight_decay=0.1, decay_biases=False, adam_beta2=0.95)
    groups = make_optimizer(params, cfg, torch.device("cpu"), biases).param_groups
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert {id(p) for p in groups[1]["params"]} == biases and len(biases) > 0
    assert all(g["betas"] == (0.9, 0.95) for g in groups)
    whole = make_optimizer(params, cfg.replace(decay_biases=True), torch.device("cpu"), biases)
    assert len(whole.param_groups) == 1 and whole.param_groups[0]["weight_decay"] == 0.1
