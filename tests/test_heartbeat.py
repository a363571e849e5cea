"""A job's line stays fresh through every phase: with each phase made slow (building the model,
preparing the data, a training step, a dev evaluation, a save, the final dev pass), the events a
job writes to its log and ledger are never further apart than the beat allows, and the beats say
what the job is doing. The beat is scaled down (0.25 s for the lab's 2 s) so the test is short;
the slack over one beat stays the lab's own (1 s: a line every 3 s with a 2 s beat), since what
delays a beat (a stretch that holds the interpreter) does not shrink with it."""
import dataclasses
import threading
import time

import pytest

from lab.config import ModelConfig, TrainConfig
from lab.inputs import tasks
from lab.storage import checkpoints
from lab.training import heartbeat, progress, runs, train
from lab.worker import jobs

BEAT = 0.25
SLOW = 2.0                # each slow phase: longer than the gap allowed
MAX_GAP = BEAT + 1.0


def _slow(fn):
    def slowed(*args, **kwargs):
        time.sleep(SLOW)
        return fn(*args, **kwargs)
    return slowed


class _SlowTask:
    """The captions task with a slow prepare and a slow final dev pass."""

    def __init__(self, task):
        self.task = task

    def __getattr__(self, name):
        return getattr(self.task, name)

    def prepare(self, *args):
        time.sleep(SLOW)
        prepared = self.task.prepare(*args)

        def slow_final(*a):           # stands for the pass over every dev caption
            time.sleep(SLOW)
            yield {"event": "final_aborted", "text": "cut short"}
        return dataclasses.replace(prepared, evaluate=_slow(prepared.evaluate), final=slow_final)


@pytest.fixture
def written(monkeypatch):
    """Every event the job writes, with the time it was written."""
    monkeypatch.setattr(heartbeat, "BEAT_S", BEAT)
    out = []
    real = jobs.format_event
    monkeypatch.setattr(jobs, "format_event", lambda ev, name: out.append((time.time(), ev)) or real(ev, name))
    return out


def test_every_phase_of_a_job_keeps_its_line_fresh(corpus_dir, monkeypatch, written):
    get = tasks.get
    monkeypatch.setattr(tasks, "get", lambda name: _SlowTask(get(name)))
    monkeypatch.setattr(runs, "_model_to_train", _slow(runs._model_to_train))
    monkeypatch.setattr(train.Trainer, "_train_step", _slow(train.Trainer._train_step))
    monkeypatch.setattr(checkpoints, "save", _slow(checkpoints.save))
    cfg = TrainConfig(epochs=1, lr=1e-3, max_train=64, max_dev=40, settings={"task": {"final_dev": True}})
    model_cfg = ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48)
    status, error = jobs._follow(0, "beating", runs.train("beating", model_cfg, cfg))
    assert status == "done", error
    times = [t for t, _ in written]
    gaps = [b - a for a, b in zip(times, times[1:])]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    assert gaps[worst] <= MAX_GAP, (f"a gap of {gaps[worst]:.2f} s (beat {BEAT} s) between",
                                    written[worst][1], written[worst + 1][1])
    said = [ev["doing"] for _, ev in written if "doing" in ev]
    for doing in ("building the model", "preparing the data", "training step 1 of 2",
                  "training step 2 of 2", "evaluating 40 dev captions", "saving the checkpoint",
                  "scoring the kept checkpoint on the whole dev set"):
        assert any(s.startswith(doing) for s in said), (doing, sorted(set(said)))
    assert any(ev["event"] == "final_aborted" for _, ev in written)
    beats = [ev for _, ev in written if "doing" in ev]
    assert all(ev["time"] and ev["phase_s"] >= 0 for ev in beats)
    during_steps = [ev for ev in beats if ev["doing"].startswith("training step")]
    assert all(ev["total_steps"] == 2 and "eta_s" in ev for ev in during_steps)   # the bar stays


def test_a_beat_says_the_innermost_phase_and_keeps_the_trainers_fields():
    lines = []
    beat = heartbeat.start(lines.append, every_s=0.05)
    try:
        with heartbeat.phase("training", lambda: {"step": 3, "total_steps": 9}):
            with heartbeat.phase(lambda: "saving the checkpoint"):
                time.sleep(0.3)
            ev = beat.beat()
    finally:
        heartbeat.stop()
    saving = [e for e in lines if e["doing"] == "saving the checkpoint"]
    assert saving and saving[-1]["step"] == 3 and saving[-1]["total_steps"] == 9
    assert ev["doing"] == "training"
    assert not any(t.name == "heartbeat" and t.is_alive() for t in threading.enumerate())


def test_heartbeat_lines_read_as_what_the_job_does():
    ev = {"event": "progress", "phase": "working", "doing": "preparing the data: reading and "
          "tokenizing", "phase_s": 12.4, "time": 1.0}
    assert progress.format_event(ev) == "preparing the data: reading and tokenizing (0m12s in)"
    from lab.ui.jobs_view import progress_html
    assert "running: preparing the data: reading and tokenizing (0m12s in) (updated" in \
        progress_html({"status": "running", "progress": ev, "error": None})
    during = {**ev, "doing": "training step 12 of 40 (steps take about 11 s)", "epoch": 1,
              "step": 11, "total_steps": 40, "elapsed_s": 130.0, "eta_s": 320.0}
    said = progress_html({"status": "running", "progress": during, "error": None})
    assert "training step 12 of 40 (steps take about 11 s) — epoch 1, elapsed 2m10s, ETA 5m20s" in said
    assert "11/40" not in said                   # the step said once, as the one under way
    first = {**during, "doing": "training step 1 of 40", "step": 0, "eta_s": 0.0}
    assert "— epoch 1, elapsed 2m10s, ETA estimating" in progress_html(
        {"status": "running", "progress": first, "error": None})   # no step measured yet
    # the job's log says the same as the page: no "ETA 0m00s" before a step is timed, 0m00s at the end
    assert progress.format_event({**first, "event": "progress"}).endswith(", ETA estimating")
    last = {"event": "step", "epoch": 1, "step": 40, "total_steps": 40, "train_loss": 2.0,
            "elapsed_s": 440.0, "eta_s": 0.0, "tokens_per_s": 900.0}
    assert "ETA 0m00s" in progress.format_event(last)
    assert "ETA estimating" in progress.format_event({**last, "step": 0})
    assert progress.step_text(12, 40, 11.2) == "training step 12 of 40 (steps take about 11 s)"
    assert progress.step_text(1, 40, 0.0) == "training step 1 of 40"
    assert progress.step_text(5, 40, 0.25) == "training step 5 of 40 (4.0 steps a second)"


def test_without_a_started_beat_a_phase_only_marks():
    with heartbeat.phase("anything"):
        pass
