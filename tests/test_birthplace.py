"""The birth-place task on its real data: the assignment's vocabulary, span corruption and question
examples, the London baseline, greedy answers, and pretrain -> finetune -> evaluate through the
CLI; a stopped pretraining run resumes to the same weights."""
import json
import math

import pytest
import torch

from plugins.tasks.birthplace import core as bp
from lab.storage import checkpoints
from lab import cli
from lab.training import runs
from lab.config import ConfigError, ModelConfig, TrainConfig
from lab.presets import configs
from lab.training.progress import format_event
from lab.training.train import scheduled_lr
from lab.ui import attention

TINY = ["n_layer=2", "n_head=2", "n_embd=32", "max_train=64", "max_dev=24",
        "batch_size=16", "eval_batch_size=32", "epochs=2"]


def test_the_vocabulary_is_wikis_characters_with_pad_and_mask():
    tok = bp.tokenizer()
    assert tok.vocab_size == 254 + 2
    assert tok.stoi[bp.PAD] == 0 and tok.stoi[bp.MASK] == 1
    assert tok.token_strings(tok.encode(f"Ab{bp.PAD}")) == ["A", "b", bp.PAD]
    assert tok.decode(tok.encode(f"Ab{bp.MASK}{bp.PAD}")) == f"Ab{bp.MASK}"


def test_span_corruption_follows_the_assignment():
    """prefix + MASK + suffix + MASK + masked content, padded to block + 1; the document truncated
    to 4..7/8 of the block; the masked span a quarter of it on average; seeded."""
    docs = bp.wiki()
    g = torch.Generator().manual_seed(0)
    spans, kept = [], []
    for doc in docs[:600]:
        text = bp.corrupt(doc, g)
        assert len(text) == bp.BLOCK + 1
        body = text.rstrip(bp.PAD)
        prefix, suffix, masked = body.split(bp.MASK)
        truncated = prefix + masked + suffix
        assert doc.startswith(truncated) and 4 <= len(truncated) <= bp.BLOCK * 7 // 8
        assert 1 <= len(masked)
        spans.append(len(masked)); kept.append(len(truncated))
    assert 0.2 < sum(spans) / sum(kept) < 0.3
    again = torch.Generator().manual_seed(0)
    assert bp.corrupt(docs[0], again) == bp.corrupt(docs[0], torch.Generator().manual_seed(0))
    tok = bp.tokenizer()
    b = bp.span_batch(docs[:4], tok, torch.Generator().manual_seed(1))
    assert b.input_ids.shape == (4, 128) and b.targets.shape == (4, 128)
    assert torch.equal(b.loss_mask.bool(), b.targets != 0)             # pad targets do not count


def test_a_question_counts_only_its_answer():
    tok = bp.tokenizer()
    b = bp.qa_batch([("Where was Ralf Wadephul born?", "Berlin")], tok)
    counted = b.targets[0][b.loss_mask[0].bool()].tolist()
    assert tok.decode(counted) == f"{bp.MASK}Berlin{bp.MASK}"
    assert b.input_ids.shape == (1, 127)


def test_answers_bits_per_byte_sums_each_counted_character_over_its_bytes():
    """The answers' bits per byte, against each answer's log-probabilities read one question at a
    time from the model's own output."""
    import math
    from lab.modeling.model import build
    tok = bp.tokenizer()
    torch.manual_seed(0)
    model = build(ModelConfig(n_layer=1, n_head=2, n_embd=32, n_positions=bp.BLOCK,
                              vocab_size=tok.vocab_size)).eval()
    pairs = bp.questions("dev")[:5]
    nll, nbytes = 0.0, 0
    for q, place in pairs:
        text, first = bp.qa_example(q, place)
        ids = tok.encode(text)
        with torch.no_grad():
            logp = model(torch.tensor([ids[:-1]])).logits[0].log_softmax(-1)
        nll -= sum(logp[t, ids[t + 1]].item() for t in range(len(ids) - 1) if t >= first and ids[t + 1])
        nbytes += len(f"{bp.MASK}{place}{bp.MASK}".encode())
    assert bp.answers_bits_per_byte(model, tok, pairs, chunk=2) == pytest.approx(
        nll / math.log(2) / nbytes, rel=1e-5)


def test_the_london_baseline_scores_five_percent_on_dev():
    assert bp.baseline("dev") == {"correct": 25, "total": 500, "accuracy": 0.05}
    with pytest.raises(bp.DataError, match="no places to score against; the baseline is scored on dev"):
        bp.baseline("test")


def test_batched_greedy_answers_equal_one_question_at_a_time():
    from lab.modeling.model import build
    tok = bp.tokenizer()
    torch.manual_seed(0)
    model = build(ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=128,
                              vocab_size=tok.vocab_size))
    qs = [q for q, _ in bp.questions("dev")[:12]]
    assert bp.answer(model, tok, qs, max_chars=12) == [bp.answer(model, tok, [q], max_chars=12)[0]
                                                        for q in qs]


def test_cached_answers_equal_reading_the_whole_prefix_again():
    """answer() groups the questions by length and decodes from the cache; the reference reads
    question + MASK + the answer so far whole for each character, as minGPT's sample() does."""
    from lab.modeling.model import build
    tok = bp.tokenizer()
    torch.manual_seed(1)
    model = build(ModelConfig(model="gpt2", n_layer=2, n_head=2, n_embd=32, n_positions=128,
                              vocab_size=tok.vocab_size)).eval()
    qs = [q for q, _ in bp.questions("dev")[:40]]
    assert len({len(q) for q in qs}) > 5

    def whole_prefix(q):
        ids = tok.encode(q + bp.MASK)
        made = []
        for _ in range(20):
            c = int(model(torch.tensor([ids])).logits[0, -1].argmax())
            if c == tok.stoi[bp.MASK]:
                break
            made.append(c)
            ids.append(c)
        return tok.decode(made)
    expected = [whole_prefix(q) for q in qs]
    assert any(expected) and bp.answer(model, tok, qs, max_chars=20) == expected


def test_warm_up_then_cosine_decay_to_a_tenth():
    cfg = TrainConfig(lr=1.0, lr_schedule="warmup_cosine", warmup_steps=4)
    assert [scheduled_lr(cfg, s, 104) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert scheduled_lr(cfg, 54, 104) == pytest.approx(0.55)
    assert scheduled_lr(cfg, 104, 104) == pytest.approx(0.1)
    assert scheduled_lr(TrainConfig(lr=0.3), 50, 100) == 0.3


def test_mingpt_cosine_is_floored_not_clamped():
    """minGPT's schedule as the assignment runs it (650 epochs, a 200-epoch decay, no warm-up):
    full at the start, 10% from epoch 200, back to full at 400, 10% again at 600."""
    cfg = TrainConfig(lr=1.0, lr_schedule="mingpt", decay_epochs=200)
    at = [scheduled_lr(cfg, epoch * 23, 650 * 23, 23) for epoch in (0, 100, 200, 300, 400, 600, 650)]
    assert at == pytest.approx([1.0, 0.5, 0.1, 0.5, 1.0, 0.1, 0.5 * (1 + math.cos(math.pi * 3.25))])
    whole = TrainConfig(lr=1.0, lr_schedule="mingpt", warmup_steps=2)
    assert [scheduled_lr(whole, s, 102) for s in (0, 1, 52, 102)] == pytest.approx([0.5, 1.0, 0.5, 0.1])


def test_pretrain_finetune_evaluate_from_the_command_line(tmp_path, capsys, store):
    """The assignment's commands on the real data with a tiny model: pretrained with span
    corruption, fine-tuned on questions, evaluated on dev (accuracy and its interval) and on test
    (answers only). (The Perceiver trains in the worker test below: its greedy answers, a full
    recomputation per character, are slow on a CPU.)"""
    sets = [a for s in TINY for a in ("--set", s)]
    assert cli.main(["birthplace", "pretrain", "--model", "vanilla", "--name", "pre", *sets]) == 0
    pre = checkpoints.info("pre")
    assert pre["model"]["model"] == "gpt2" and pre["task"] == "birthplace"
    assert pre["objective"] == "span" and pre["train"]["lr_schedule"] == "warmup_cosine"
    assert cli.main(["birthplace", "finetune", "--name", "ft", "--parent", "pre", "--set", "epochs=1",
                     "--set", "max_train=32", "--set", "max_dev=16"]) == 0
    out = capsys.readouterr().out
    assert "dev accuracy" in out and checkpoints.info("ft")["objective"] == "qa"
    capsys.readouterr()
    assert cli.main(["birthplace", "evaluate", "--checkpoint", "ft", "--json",
                     "--predictions", str(tmp_path / "dev.txt")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["total"] == 500 and 0 <= result["correct"] <= 500
    lo, hi = result["accuracy_ci"]
    assert lo <= result["accuracy"] <= hi
    assert result["bits_per_byte"] > 0
    assert checkpoints.info("ft")["metrics"]["dev_bits_per_byte"] > 0
    assert len((tmp_path / "dev.txt").read_text().splitlines()) == 500
    assert cli.main(["birthplace", "evaluate", "--checkpoint", "ft", "--split", "test",
                     "--predictions", str(tmp_path / "test.txt")]) == 0
    assert len((tmp_path / "test.txt").read_text().splitlines()) == 437
    # the Attention tab reads a question as the model does (no BOS) and shows its answer
    note, *views, shown = attention.show("ft", "Where was Ada Lovelace born?", True, 0)
    assert shown.startswith("Where was Ada Lovelace born?\u2047")
    assert f"{len(shown)} tokens (generated from token 30 on)" in note     # no <bos> among them
    for argv, said in ((["evaluate", "--checkpoint", "ft", "--split", "test"], "give --predictions"),
                       (["evaluate"], "needs --checkpoint"),
                       (["finetune", "--name", "x", "--parent", "pre", "--set", "n_layer=3"],
                        "cannot --set n_layer"),
                       (["pretrain", "--name", "y", "--set", "objective=lm"],
                        "the birthplace task's objectives are span, qa"),
                       (["pretrain"], "needs --name")):
        capsys.readouterr()
        assert cli.main(["birthplace", *argv]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err


def test_a_captions_model_is_refused_by_the_birthplace_task(store):
    from lab.inputs import tokenizers
    from lab.modeling.model import build
    checkpoints.save(build(ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=128,
                                       vocab_size=50257)), tokenizers.gpt2(), "captions")
    with pytest.raises(ConfigError, match="not a birth-place model"):
        bp.evaluate("captions")
    _, t, _ = configs("birthplace-finetune", ["epochs=1", "max_train=8"])
    with pytest.raises(ConfigError, match="needs a character model with the task's mask"):
        list(runs.train("ft", None, t, parent="captions"))


def test_a_stopped_pretraining_run_resumes_to_the_same_weights(store):
    """The corruption is drawn from the epoch's seeded generator: stopped at step 3 of 8 and
    resumed, the run sees the same examples and ends with the same weights."""
    model_cfg, train_cfg, _ = configs("birthplace-vanilla", TINY + ["dropout=0.0"])
    start = next(e for e in list(runs.train("straight", model_cfg, train_cfg)) if e["event"] == "start")
    assert start["packed"]      # no position a target counts at sees the pads after it: packed
    assert "documents packed into rows" in format_event(start), format_event(start)
    calls = []

    def stop_at_4():
        calls.append(1)
        return "now" if len(calls) >= 4 else None
    events = list(runs.train("halted", model_cfg, train_cfg, should_stop=stop_at_4))
    assert events[-1]["event"] == "stopped" and events[-1]["step"] == 3
    list(runs.train("halted", None, train_cfg, resume=True))
    a = checkpoints.load("straight").model.state_dict()
    b = checkpoints.load("halted").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_birthplace_job_runs_in_the_background_worker(store, corpus_dir):
    """The same through jobs: the worker, given the caption corpus as every worker is, runs a
    Perceiver pretraining job on the task's own data."""
    import time
    from lab.worker import jobs
    from lab.worker.jobs import Worker
    m, t, _ = configs("birthplace-perceiver", TINY + ["epochs=1", "model.bottleneck_dim=16"])
    job_id = jobs.submit("bpjob", m.to_dict(), t.to_dict(), preset="birthplace-perceiver", store=store)
    worker, t0 = Worker(store, poll_s=0.2, data_dir=corpus_dir), time.time()
    while jobs.get(job_id, store)["status"] not in jobs.FINAL:
        assert time.time() - t0 < 300
        worker.tick()
        time.sleep(0.3)
    assert jobs.get(job_id, store)["status"] == "done", jobs.get(job_id, store)["error"]
    info = checkpoints.info("bpjob", store)
    assert info["task"] == "birthplace" and info["objective"] == "span"
    assert info["model"]["model"] == "perceiver"
    assert info["model"]["settings"]["model"]["bottleneck_dim"] == 16


def test_a_job_is_refused_before_it_is_queued_when_the_task_s_data_is_not_there(store, tmp_path,
                                                                               monkeypatch):
    """LAB_BIRTHPLACE_DIR naming a folder without the task's files: the job is refused in one
    line naming the folder and the variable, and nothing is queued."""
    from lab.errors import LabError
    from lab.worker import jobs
    monkeypatch.setenv("LAB_BIRTHPLACE_DIR", str(tmp_path))
    model, train, _ = configs("birthplace-vanilla")
    with pytest.raises(LabError) as e:
        jobs.submit("bp", model.to_dict(), train.to_dict(), store=store)
    assert str(e.value) == (f"birth-place data not found: {tmp_path} has no wiki.txt (pass "
                            f"--data-dir or set LAB_BIRTHPLACE_DIR to the cs224n-birthplaces folder)")
    assert jobs.list_jobs(store) == []
