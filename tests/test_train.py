"""The trainer on the real corpus with a tiny model: mid-epoch dev evaluations draw the curve,
only the end of an epoch saves a checkpoint; per-word dev perplexity relates to per-token."""
import math

import pytest

from lab import checkpoints, data, runs, tokenizers
from lab.config import ConfigError, ModelConfig, TrainConfig


def test_mid_epoch_evaluations_draw_the_curve_but_only_epoch_ends_save(corpus_dir):
    cfg = TrainConfig(epochs=2, lr=1e-3, max_train_captions=320, max_dev_captions=60, eval_every=4,
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
    with pytest.raises(ConfigError, match="eval_every must be 0"):
        TrainConfig(eval_every=-5).validate()


def _tiny_run(name, epochs, resume=False):
    cfg = TrainConfig(epochs=epochs, lr=1e-3, max_train_captions=96, max_dev_captions=30, patience=5)
    model_cfg = ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48, dropout=0.0)
    return list(runs.train(name, None if resume else model_cfg, cfg, resume=resume))


def test_resume_goes_on_exactly_where_training_stopped(corpus_dir):
    """One epoch, then resume to three, ends with the weights three uninterrupted epochs give:
    the optimizer's moments, the step count and the shuffling all carry over."""
    import torch
    _tiny_run("straight", 3)
    _tiny_run("halted", 1)
    assert checkpoints.load_train_state("halted")["epoch"] == 1
    events = _tiny_run("halted", 3, resume=True)
    assert events[1]["event"] == "start" and events[1]["first_epoch"] == 2
    assert [e["epoch"] for e in events if e["event"] == "eval"] == [2, 3]
    a, b = checkpoints.load("straight").model.state_dict(), checkpoints.load("halted").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    info = checkpoints.info("halted")
    assert info["metrics"]["epoch"] == 3 and info["source"] == "scratch"
    with pytest.raises(ConfigError, match="already trained 3 of 3 epochs"):
        _tiny_run("halted", 3, resume=True)


def test_resume_needs_a_training_state(corpus_dir):
    from lab.model import build
    checkpoints.save(build(ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48,
                                       vocab_size=50257)), tokenizers.gpt2(), "imported")
    with pytest.raises(ConfigError, match="holds no training state"):
        _tiny_run("imported", 2, resume=True)


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
        "train": {"epochs": 2, "lr": 1e-3, "batch_size": 8, "max_train_captions": 67,
                  "max_dev_captions": 20, "patience": 5}}))
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
