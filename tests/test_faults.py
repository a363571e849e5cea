"""Fault injection: real processes killed at every stage of training and saving, a process
stopped far beyond any timeout, resumes racing, and the app stopped (SIGTERM) and killed (SIGKILL)
then started again. Faults land at named points through LAB_FAULTS (lab/storage/store.py), so the waits are
seconds, not the minutes a real run would take."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lab.storage import checkpoints
from lab.worker import jobs
from lab.training import runs
from lab.storage import store as lab_store
from lab.config import ConfigError
from lab.presets import get
from tests.conftest import start_app, wait_job

ROOT = Path(__file__).resolve().parent.parent
TRAIN = dict(get("tiny")[1].to_dict(), max_train=200, max_dev=50, epochs=3, patience=5,
             tokenizer="words")                       # a small output layer: cheap tiny runs
MODEL = get("tiny")[0].to_dict()


def _wait(job_id, statuses, worker=None, timeout=180):
    return wait_job(job_id, statuses, worker, timeout)


def _wait_event(job_id, event, worker, timeout=180):
    """Tick until the job's last reported event is `event` (it fails the test if the job ends)."""
    t0 = time.time()
    while jobs.get(job_id)["progress"].get("event") != event:
        job = jobs.get(job_id)
        assert job["status"] in ("queued", "running"), job
        assert time.time() - t0 < timeout, f"job {job_id} never reported {event!r}"
        worker.tick()
        time.sleep(0.2)


def _wait_started(job_id, name, worker, timeout=180):
    """Tick until the job's run has logged its start in its metrics log (the job's last reported
    event may already be a later one: a heartbeat or a step)."""
    t0 = time.time()
    log = runs.run_dir_for(name) / "metrics.jsonl"
    while not any(e.get("event") == "start" for e in runs.read_events(log)):
        job = jobs.get(job_id)
        assert job["status"] in ("queued", "running"), job
        assert time.time() - t0 < timeout, f"job {job_id} never logged its start"
        worker.tick()
        time.sleep(0.2)


def _leftovers(store):
    return sorted(p.name for p in store.iterdir() if p.name.startswith((".tmp-", ".old-", ".del-")))


# where the kill lands -> (what recovery says, the epoch of the checkpoint left visible)
SAVE_KILLS = {
    "kill@save.written#1": ("finished the interrupted save", 1),        # new one complete, not moved
    "kill@save.written#2": ("removed 1 leftover", 1),                   # old in place, new beside it
    "kill@save.between_renames#1": ("finished the interrupted save", 2),  # old aside, new not in place
    "kill@save.renamed#1": ("removed 1 leftover", 2),                   # new in place, old not removed
}
# a training job killed, then resumed: before any save, inside a save, inside an evaluation (every
# state a kill inside a save leaves is also checked on its own, below: SAVE_KILLS)
KILLS = {
    "kill@train.step#3": (None, None),
    "kill@save.between_renames#1": SAVE_KILLS["kill@save.between_renames#1"],
    "kill@eval.batch#2": (None, 1),
}

SAVE_TWICE = """
import torch
from lab.storage import checkpoints
from lab.inputs import tokenizers
from lab.modeling.model import build
from tests.conftest import tiny_config
torch.manual_seed(0)
model = build(tiny_config(vocab_size=50257))
for epoch in (1, 2):
    checkpoints.save(model, tokenizers.gpt2(), "victim", metrics={"epoch": epoch}, overwrite=True)
"""


@pytest.mark.parametrize("fault", list(SAVE_KILLS))
def test_a_kill_inside_a_save_leaves_one_whole_checkpoint(fault, store):
    """A process saving a checkpoint twice, SIGKILLed at each step of the save: recovery leaves
    the old or the new checkpoint whole, with nothing beside it."""
    said, epoch = SAVE_KILLS[fault]
    done = subprocess.run([sys.executable, "-c", SAVE_TWICE], cwd=ROOT, capture_output=True,
                          env={**os.environ, "LAB_STORE": str(store), "LAB_FAULTS": fault})
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    lines = checkpoints.recover()
    assert any(said in line for line in lines), lines
    assert _leftovers(store) == []
    assert checkpoints.info("victim")["metrics"]["epoch"] == epoch
    checkpoints.load("victim")                       # whole and loadable


@pytest.mark.parametrize("fault", list(KILLS))
def test_a_kill_at_any_stage_loses_no_checkpoint_and_resume_goes_on(fault, store, monkeypatch):
    said, epoch = KILLS[fault]
    monkeypatch.setenv("LAB_FAULTS", fault)
    job_id = jobs.submit("victim", MODEL, TRAIN, preset="tiny")
    worker = jobs.Worker(poll_s=0.2)
    job = _wait(job_id, jobs.FINAL, worker)
    assert job["status"] == "interrupted", job["error"]
    assert "ended without a word" in job["error"]
    lines = checkpoints.recover()
    assert (said is None and lines == []) or any(said in line for line in lines), lines
    assert _leftovers(store) == []
    monkeypatch.delenv("LAB_FAULTS")
    if epoch is None:
        assert "victim" not in checkpoints.names()
        with pytest.raises(ConfigError, match="saved nothing to go on from"):
            jobs.resume(job_id)
        return
    assert checkpoints.info("victim")["metrics"]["epoch"] == epoch
    checkpoints.load("victim")                       # whole and loadable
    resumed = _wait(jobs.resume(job_id), jobs.FINAL, worker)
    assert resumed["status"] == "done", resumed["error"]
    assert checkpoints.info("victim")["metrics"]["epoch"] == 3
    assert _leftovers(store) == []


# a run killed in its first epoch after periodic saves (due every 0.12 s, each step made to take
# at least 0.05 s, so one falls after step 3 at the latest): where the kill lands -> what recovery
# says (None: nothing to mend)
PERIODIC_KILLS = {
    "kill@train.step#6": None,                        # between two saves
    "kill@eval.batch#1": None,                        # inside epoch 1's dev evaluation
    "kill@save.written#2": "removed 1 leftover",      # inside the second save: the first one stays
}
PERIODIC_TRAIN = dict(epochs=2, lr=1e-3, max_train=320, max_dev=60, patience=5,
                      tokenizer="words", save_every_minutes=0.002)       # 10 steps an epoch
PERIODIC_MODEL = dict(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48, dropout=0.1)
KILLED_RUN = """
import json, sys
from lab.config import ModelConfig, TrainConfig
from lab.training import runs
for _ in runs.train("victim", ModelConfig.from_dict(json.loads(sys.argv[1])),
                    TrainConfig.from_dict(json.loads(sys.argv[2]))):
    pass
"""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """PERIODIC_TRAIN's two epochs run straight through, in a store of their own: the weights."""
    store = tmp_path_factory.mktemp("uninterrupted")
    list(runs.train("straight", jobs.ModelConfig.from_dict(PERIODIC_MODEL),
                    jobs.TrainConfig.from_dict(PERIODIC_TRAIN), store=store))
    return checkpoints.load("straight", store).model.state_dict()


@pytest.mark.parametrize("fault", list(PERIODIC_KILLS))
def test_a_kill_after_a_periodic_save_goes_on_from_it_exactly(fault, store, corpus_dir, uninterrupted):
    """SIGKILLed in epoch 1, before any checkpoint: the run goes on from its newest periodic save
    (not from step 0, and not 'saved nothing to go on from') and ends with the weights of an
    uninterrupted run, bit for bit, dropout on."""
    import torch
    env = {**os.environ, "LAB_STORE": str(store), "LAB_FAULTS": f"sleep@train.step=0.05,{fault}",
           "OMP_NUM_THREADS": str(torch.get_num_threads())}      # the threads of this process
    done = subprocess.run([sys.executable, "-c", KILLED_RUN, json.dumps(PERIODIC_MODEL),
                           json.dumps(PERIODIC_TRAIN)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    said, before = PERIODIC_KILLS[fault], runs.read_events(runs.run_dir_for("victim") / "metrics.jsonl")
    lines = checkpoints.recover()
    assert (said is None and lines == []) or any(said in line for line in lines), lines
    assert not [p for p in runs.run_dir_for("victim").iterdir() if p.name.startswith(".")]
    saves = [e["step"] for e in before if e["event"] == "saved"]
    if fault.startswith("kill@eval"):
        assert any(e.get("phase") == "evaluating" for e in before)
    if fault.startswith("kill@save"):
        assert len(saves) == 1                # the second save was cut short: the first one holds
    state, _ = runs.newest_save("victim")
    assert "victim" not in checkpoints.names()           # no dev score yet, so no checkpoint
    assert (state["saved_by"], state["epoch"], state["batches_done"]) == ("periodic", 0, saves[-1])
    assert 0 < state["step"] == saves[-1]
    assert runs.going_on_from("victim") == \
        f"step {saves[-1]}, {saves[-1]} batches into epoch 1 (its periodic save)"
    events = list(runs.train("victim", None, jobs.TrainConfig.from_dict(PERIODIC_TRAIN), resume=True))
    start = next(e for e in events if e["event"] == "start")
    assert (start["first_step"], start["resumed_from"]) == (saves[-1], "periodic")
    weights = checkpoints.load("victim").model.state_dict()
    assert all(torch.equal(uninterrupted[k], weights[k]) for k in uninterrupted)


def test_a_resume_names_the_step_it_goes_on_from_after_a_save_cut_between_its_renames(store, corpus_dir):
    """Killed inside its second periodic save, the old state moved aside and the new one not yet
    in place: what a resume says before anything has mended the store (`jobs resume` asks this
    first) is the step the run then goes on from, the newer save's."""
    import torch
    env = {**os.environ, "LAB_STORE": str(store), "OMP_NUM_THREADS": str(torch.get_num_threads()),
           "LAB_FAULTS": "sleep@train.step=0.05,kill@save.between_renames#2"}
    done = subprocess.run([sys.executable, "-c", KILLED_RUN, json.dumps(PERIODIC_MODEL),
                           json.dumps(PERIODIC_TRAIN)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    first = [e["step"] for e in runs.read_events(runs.run_dir_for("victim") / "metrics.jsonl")
             if e["event"] == "saved"]
    said = runs.going_on_from("victim")                 # nothing mended it yet
    step = int(said.split()[1].rstrip(","))
    assert step > first[-1] and said.endswith("(its periodic save)"), (said, first)
    events = list(runs.train("victim", None, jobs.TrainConfig.from_dict(PERIODIC_TRAIN), resume=True))
    assert next(e for e in events if e["event"] == "start")["first_step"] == step


def test_a_stopped_process_stays_running_and_no_second_writer_starts(store, monkeypatch):
    """SIGSTOP for as long as you like (its last word set ten minutes back, beyond any heartbeat
    timeout): the job stays running, nothing else may write its checkpoint, and once continued
    it stops on request, saving where it stood."""
    job_id = jobs.submit("paused", MODEL, {**TRAIN, "epochs": 50, "max_train": 2000})
    worker = jobs.Worker(poll_s=0.2)
    _wait(job_id, ("running",), worker)
    _wait_event(job_id, "step", worker)                # training has begun
    pid = jobs.get(job_id)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        with sqlite3.connect(lab_store.ledger_path()) as con:
            con.execute("UPDATE jobs SET heartbeat=? WHERE id=?", (time.time() - 600, job_id))
        for _ in range(5):
            worker.tick()
            time.sleep(0.2)
        assert jobs.get(job_id)["status"] == "running"
        assert [j["status"] for j in jobs.list_jobs()] == ["running"]
        with pytest.raises(ConfigError, match="only interrupted, stopped or failed"):
            jobs.resume(job_id)
        with pytest.raises(ConfigError, match="'paused' is being written by another process"):
            jobs.submit("paused", MODEL, TRAIN)
        from lab.modeling.model import build
        from lab.config import ModelConfig
        from lab.inputs.tokenizers import gpt2
        tiny = build(ModelConfig.from_dict({**MODEL, "vocab_size": 50257}))
        with pytest.raises(lab_store.Busy, match="checkpoint 'paused' is in use by another process"):
            checkpoints.save(tiny, gpt2(), "paused", overwrite=True)
    finally:
        os.kill(pid, signal.SIGCONT)
        jobs.request_stop(job_id, "now")
        job = _wait(job_id, jobs.FINAL, worker)
    assert job["status"] == "stopped"
    state, folder = runs.resume_point("paused")
    assert folder == runs.last_dir("paused") and state["step"] > 0


def test_two_resumes_racing_queue_one_run(store):
    job_id = jobs.submit("twice", MODEL, {**TRAIN, "epochs": 20})
    worker = jobs.Worker(poll_s=0.2)
    _wait(job_id, ("running",), worker)
    jobs.request_stop(job_id, "after_checkpoint")
    assert _wait(job_id, jobs.FINAL, worker)["status"] == "stopped"
    results, barrier = [], threading.Barrier(4)

    def go():
        barrier.wait()
        try:
            results.append(jobs.resume(job_id))
        except ConfigError as e:
            results.append(str(e))
    threads = [threading.Thread(target=go) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    queued = [r for r in results if isinstance(r, int)]
    assert len(queued) == 1, results
    assert all("already writing checkpoint 'twice'" in r for r in results if isinstance(r, str))


def test_a_second_process_cannot_write_a_checkpoint_being_written(store, corpus_dir):
    """The per-name lock, across processes: the CLI refuses to train a name a job holds."""
    with lab_store.hold(lab_store.name_lock("held"), "checkpoint 'held'"):
        out = subprocess.run([sys.executable, "-m", "lab", "train", "--preset", "tiny", "--name", "held"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: checkpoint 'held' is in use by another process")


def test_an_old_store_is_moved_over_and_names_cannot_reach_the_lab_files(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    with sqlite3.connect(old / "jobs.sqlite") as con:
        con.executescript(jobs.SCHEMA)
        con.execute("INSERT INTO jobs (name, spec, status, created) VALUES ('x', '{}', 'done', 0)")
    (old / "job-1.log").write_text("hello")
    assert jobs.get(1, old)["status"] == "done"
    assert (old / ".lab" / "jobs.sqlite").is_file() and not (old / "jobs.sqlite").exists()
    assert (old / ".lab" / "logs" / "job-1.log").read_text() == "hello"
    for bad in ("x\n", ".lab", "_runs", "../x", "a/b", "", ".", "x" * 101):
        with pytest.raises(checkpoints.CheckpointError, match="is not allowed"):
            checkpoints.check_name(bad)
    with pytest.raises(checkpoints.CheckpointError, match="is not allowed"):
        checkpoints.load("../elsewhere/x")
    # a checkpoint called jobs.sqlite is just a checkpoint now
    checkpoints.check_name("jobs.sqlite")


# ---------------------------------------------------------------- the app stopped and killed

def _start_app(store, log_name):
    return start_app(store, store / log_name, LAB_SHUTDOWN_GRACE_S="30")[0]


def _running_job_processes(job_ids, store) -> list[int]:
    """Live `run-job` processes of these jobs of this store."""
    pids, mine = [], f"LAB_STORE={store}".encode()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().split(b"\0")
                env = (p / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"run-job" in cmd and any(str(j).encode() in cmd for j in job_ids) and mine in env:
                stat = (p / "stat").read_text().split()
                if stat[2] != "Z":
                    pids.append(int(p.name))
    return pids


def _wait_for(predicate, timeout=60, what="condition"):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_app_sigterm_then_sigkill_then_restart(store):
    """SIGTERM: the app stops its worker, the worker stops the job, which saves where it stands
    and is left interrupted. SIGKILL: the orphaned worker notices its app is gone and does the
    same; the next app never runs a second worker or job beside it."""
    long = {**TRAIN, "epochs": 50, "max_train": 2000}
    job_id = jobs.submit("served", MODEL, long)
    app = _start_app(store, "app1.log")
    _wait_for(lambda: jobs.get(job_id)["progress"].get("event") == "step", 120, "the job to train")
    app.send_signal(signal.SIGTERM)
    assert app.wait(timeout=60) == 0
    job = jobs.get(job_id)
    assert job["status"] == "interrupted" and "lab shut down" in job["error"]
    assert _running_job_processes([job_id], store) == []
    assert runs.resume_point("served")[0]["step"] > 0

    second = jobs.resume(job_id)
    app = _start_app(store, "app2.log")
    _wait_for(lambda: jobs.get(second)["status"] == "running", 120, "the resumed job to run")
    worker_pid = lab_store.holder(lab_store.lock_path("worker"))
    app.send_signal(signal.SIGKILL)
    app.wait()
    third_app = _start_app(store, "app3.log")           # at once: the old worker may still be up
    try:
        most = 0

        def settled():
            nonlocal most
            most = max(most, len(_running_job_processes([job_id, second], store)))
            return not Path(f"/proc/{worker_pid}").exists() and jobs.get(second)["status"] in jobs.FINAL
        _wait_for(settled, 90, "the orphaned worker to stop its job and end")
        assert most <= 1
        job = jobs.get(second)
        assert job["status"] == "interrupted" and "lab shut down" in job["error"]
        _wait_for(lambda: lab_store.holder(lab_store.lock_path("worker")) not in (None, worker_pid),
                  30, "the new app's worker to take over")
        assert [j["status"] for j in jobs.list_jobs()] == ["interrupted", "interrupted"]
    finally:
        third_app.send_signal(signal.SIGTERM)
        third_app.wait(timeout=60)


# ---------------------------------------------------------------- the review's sequences

def _tiny_checkpoint(name, store=None):
    from lab.config import ModelConfig
    from lab.modeling.model import build
    from lab.inputs.tokenizers import gpt2
    return checkpoints.save(build(ModelConfig.from_dict({**MODEL, "vocab_size": 50257})), gpt2(), name,
                            store)


def test_two_threads_of_one_process_never_write_one_name(store):
    """The name lock is re-entrant within a thread only: a second thread is refused like a second
    process (the web UI runs requests in threads)."""
    inside, release, refused = threading.Event(), threading.Event(), []

    def writer():
        with lab_store.hold(lab_store.name_lock("shared"), "checkpoint 'shared'"):
            inside.set()
            release.wait(30)
    t = threading.Thread(target=writer)
    t.start()
    inside.wait(30)
    try:
        _tiny_checkpoint("shared")
    except lab_store.Busy as e:
        refused.append(str(e))
    release.set()
    t.join()
    assert refused and "in use by another process" in refused[0]
    assert "shared" not in checkpoints.names()


def test_a_new_run_cannot_take_the_name_of_an_unfinished_save(store, corpus_dir):
    """A crash between a save's two renames left NAME missing; a new run of that name is refused
    (the old save is put back first), so the leftovers never get deleted as stale."""
    import shutil
    path = _tiny_checkpoint("m")
    (path / checkpoints.COMPLETE_FILE).touch()
    shutil.copytree(path, store / ".tmp-m-0123abcd")
    os.replace(path, store / ".old-m-4567cdef")
    with pytest.raises(checkpoints.CheckpointError, match="'m' already exists"):
        list(runs.train("m", jobs.ModelConfig.from_dict(MODEL), jobs.TrainConfig.from_dict(TRAIN)))
    assert "m" in checkpoints.names() and _leftovers(store) == []
    checkpoints.load("m")


def test_a_stopped_runs_state_is_neither_wiped_nor_resurrected(store):
    """A run stopped before its first checkpoint keeps `_runs/NAME/last`: a new job or import of
    that name is refused; deleting the name deletes that state too."""
    # an epoch over all 15,000 training captions: the stop (read within a second) comes long
    # before its first dev score
    job_id = jobs.submit("kept", MODEL, {**TRAIN, "epochs": 20, "max_train": 15000})
    worker = jobs.Worker(poll_s=0.2)
    _wait(job_id, ("running",), worker)
    _wait_started(job_id, "kept", worker)
    jobs.request_stop(job_id, "now")
    assert _wait(job_id, jobs.FINAL, worker)["status"] == "stopped"
    assert "kept" not in checkpoints.names() and runs.last_dir("kept").is_dir()
    with pytest.raises(checkpoints.CheckpointError, match="stopped run named 'kept' kept its state"):
        jobs.submit("kept", MODEL, TRAIN)
    with pytest.raises(checkpoints.CheckpointError, match="stopped run named 'kept'"):
        checkpoints.refuse_existing("kept")      # what every import asks first
    checkpoints.delete("kept")
    assert not runs.run_dir_for("kept").exists()
    with pytest.raises(ConfigError, match="saved nothing to go on from"):
        jobs.resume(job_id)
