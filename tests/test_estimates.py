"""Estimates that fit the machine: a finished run keeps its measured speed per machine and
preset, the getting-started panel turns it into minutes (or says the first run measures them),
and a busy machine is named with its load, the lab's own jobs counted apart."""
import math
import time

import pytest

from lab.config import TrainConfig
from lab.training import estimate


def test_a_run_time_is_the_measured_steps_and_evaluations():
    cfg = TrainConfig(epochs=2, batch_size=32, max_train=640, max_dev=256,
                      eval_batch_size=128)
    speed = {"step_s": 1.5, "eval_s": 20.0}
    assert estimate.run_seconds(speed, cfg) == pytest.approx(40 * 1.5 + 2 * 20.0)
    no_eval = estimate.run_seconds({"step_s": 1.5, "eval_s": None}, cfg)
    assert no_eval == pytest.approx(40 * 1.5 + 2 * 2 * 1.5 * estimate.eta.EVAL_SHARE)
    assert estimate.run_seconds(speed, TrainConfig()) is None      # the whole corpus: not fixed


def test_a_measured_speed_is_kept_per_preset(store):
    assert estimate.measured("quick", store) is None
    estimate.record("quick", 1.8, 50.0, store)
    estimate.record("smollm2-quick", 11.0, None, store)
    assert estimate.measured("quick", store)["step_s"] == 1.8
    assert estimate.measured("smollm2-quick", store)["eval_s"] is None


def test_busy_or_idle_wording():
    assert estimate.busy_text(0.3, 2) == ""
    assert estimate.busy_text(4.1, 2) == "the machine is busy (load 4.1 on 2 cores): expect longer"
    assert estimate.busy_text(2.4, 2, own=2.0) == ""               # the lab's own job alone
    assert estimate.busy_text(3.2, 2, own=1.96) == \
        "the machine is busy (load 3.2 on 2 cores, about 2.0 of it this lab's jobs): expect longer"


def test_the_labs_own_share_of_the_load_is_what_its_jobs_put_on_the_1_minute_average():
    """A training job computes on every thread torch has: a long one puts about that many on the
    average, one just started less, one that ended a minute ago 1/e of it, then nothing."""
    now = 10_000.0
    assert estimate.own_load([(now - 600, None)], now, threads=2) == pytest.approx(2.0, abs=0.01)
    assert estimate.own_load([(now - 30, None)], now, threads=2) == pytest.approx(2 * (1 - math.exp(-0.5)))
    ended = estimate.own_load([(now - 660, now - 60)], now, threads=2)
    assert ended == pytest.approx(2 / math.e, abs=0.01)
    assert estimate.own_load([(now - 60, now - 30), (now - 600, None)], now, threads=1) == \
        pytest.approx((1 - math.exp(-0.5)) * math.exp(-0.5) + 1.0, abs=0.01)
    assert estimate.own_load([(None, None), (now + 5, None)], now, threads=2) == 0.0
    # a job of the lab ended a minute ago, the machine otherwise idle: not "busy"
    assert estimate.busy_text(1.5, 2, ended) == "" and estimate.busy_text(1.5, 2) != ""


def test_the_ledger_gives_the_spans_of_running_and_recently_ended_jobs(store):
    from lab.presets import get as get_preset
    from lab.worker import jobs, ledger
    assert ledger.spans(store) == []
    model, train = get_preset("tiny")
    ids = [jobs.submit(f"j{i}", model, train, store=store) for i in range(4)]
    now = time.time()
    with ledger.connect(store) as con:
        for job_id, status, started, finished in ((ids[0], "running", now - 50, None),
                                                  (ids[1], "done", now - 100, now - 20),
                                                  (ids[2], "done", now - 3000, now - 2000)):
            con.execute("UPDATE jobs SET status=?, started=?, finished=? WHERE id=?",
                        (status, started, finished, job_id))
    assert sorted(ledger.spans(store)) == sorted([(now - 50, None), (now - 100, now - 20)])  # not queued


def test_the_panel_says_the_measured_time_or_that_the_first_run_measures_it():
    from lab.ui import start
    intro, one, two, three, four = start.panel_texts(400.0, 200.0, "")
    assert "side by side, in about 10 minutes at the speed this machine measured." in intro
    assert "Now" not in intro and "about 10 s" not in one
    assert two.endswith("training captions; about 7 minutes here, by its last run)")
    assert "over 800 captions; about 3 minutes here, by its last run; it starts" in three
    intro, _, two, three, _ = start.panel_texts(None, 200.0,
                                                estimate.busy_text(4.1, 2))
    assert "side by side. Training" in intro
    assert intro.endswith("Now the machine is busy (load 4.1 on 2 cores): expect longer.")
    assert "its first run here measures its time" in two
    assert "minutes" not in intro


def test_the_panel_reads_the_store(store):
    from lab.ui import start
    assert "its first run here measures its time" in start.texts(store)[2]
    estimate.record(start.SCRATCH_PRESET, 1.5, 50.0, store)
    assert "here, by its last run" in start.texts(store)[2]


def test_the_open_panel_follows_the_load_and_sends_its_words_only_when_they_change(store, monkeypatch):
    """The load note is not frozen at page load: a tick of the open panel sends the new words when
    the machine became busy (or idle again), and leaves them as they are otherwise."""
    import gradio as gr
    from lab.ui import start
    load = [0.2]
    monkeypatch.setattr(estimate, "load", lambda: (load[0], 2))
    idle = start.texts(store)
    out = start.follow(store, False, idle)
    n = len(start.statuses(store))
    assert len(out) == n + len(idle) + 1 and all(v == gr.skip() for v in out[n:])
    load[0] = 4.1
    out = start.follow(store, False, idle)
    busy = out[-1]
    assert busy[0].endswith("Now the machine is busy (load 4.1 on 2 cores): expect longer.")
    assert out[n:-1] == busy and busy != idle
    load[0] = 0.2
    assert start.follow(store, False, busy)[-1] == idle      # idle again: the note goes
