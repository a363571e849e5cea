"""Durable job ledger (SQLite in the store) and the background worker.

The UI and CLI *queue* jobs; a worker process (`python -m lab worker`, started by `make run`
beside the web server, or alone on a GPU machine sharing the store) claims them and runs each in
a child process (`python -m lab run-job ID`) that writes its progress back to the ledger and to
its run directory. Closing the browser never touches a job.

Liveness is a fact, not a guess: the worker takes the job's OS lock before it marks the job
running and hands it to the job's process, which holds it until it exits. A running job whose
lock is free has no process, and only then is it marked `interrupted`; a job that is alive stays
`running` however long it is silent (a long evaluation, a stopped process). A final status is
written only over `running`. One worker serves a store at a time (its own lock).

States: queued -> running -> done | failed | stopped | interrupted. `resume` queues a new run that
goes on exactly where the job stood: its last save (a stop saves where the run stands) or its best
checkpoint, whichever is later. Stopping the worker (SIGTERM, or the app that started it ending)
stops its jobs the same way, so they stay resumable.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from lab import checkpoints
from lab import store as lab_store
from lab.config import ConfigError, ModelConfig, TrainConfig
from lab.errors import LabError

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,            -- the checkpoint it writes
    spec TEXT NOT NULL,            -- JSON: model, train, parent, preset
    status TEXT NOT NULL,          -- queued, running, done, failed, stopped, interrupted
    stop TEXT,                     -- NULL, 'now' or 'after_checkpoint'
    pid INTEGER,                   -- the process running it
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    heartbeat REAL,
    progress TEXT,                 -- JSON: the last event
    error TEXT,
    resumed_from INTEGER
);
"""
FINAL = ("done", "failed", "stopped", "interrupted")
_HELD: list = []          # the job lock of this process (run-job), kept open for its lifetime
SHUTDOWN_GRACE_S = float(os.environ.get("LAB_SHUTDOWN_GRACE_S", "60"))   # a job's time to save


def ledger_path(store=None) -> Path:
    return lab_store.ledger_path(store)


@contextmanager
def connect(store=None):
    con = sqlite3.connect(ledger_path(store), timeout=30, isolation_level=None)
    con.row_factory = sqlite3.Row
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.executescript(SCHEMA)
        yield con
    except sqlite3.DatabaseError as e:
        raise LabError(f"the job ledger {ledger_path(store)} cannot be used ({e})") from None
    finally:
        con.close()


def _row(r: sqlite3.Row | None) -> dict | None:
    if r is None:
        return None
    d = dict(r)
    d["spec"] = json.loads(d["spec"])
    d["progress"] = json.loads(d["progress"]) if d["progress"] else {}
    return d


def validate_spec(name: str, model: dict | None, train: dict, parent: str | None, store=None,
                  resume: bool = False) -> dict:
    """Check everything before a job is queued: a bad value never reaches the worker."""
    from lab.runs import resume_state
    from lab.train import parse_train_layers
    checkpoints.check_name(name)
    train_cfg = TrainConfig.from_dict(train)
    if train_cfg.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' was asked for but this machine has no CUDA GPU; "
                              "use 'auto' or 'cpu'")
    model_cfg = None
    if resume:
        _, folder = resume_state(name, train_cfg, store)
        n_layer = checkpoints.read_config(folder)[0].n_layer
    else:
        checkpoints.refuse_existing(name, store)
        if parent:
            n_layer = checkpoints.check_loadable(parent, store).n_layer
        else:
            model_cfg = ModelConfig.from_dict(model or {})
            n_layer = model_cfg.n_layer
    parse_train_layers(train_cfg.train_layers, n_layer)
    return {"model": model_cfg and model_cfg.to_dict(), "train": train_cfg.to_dict(),
            "parent": None if resume else parent}


def submit(name: str, model: dict | None, train: dict, parent: str | None = None,
           preset: str | None = None, store=None, resumed_from: int | None = None) -> int:
    resume = resumed_from is not None
    spec = validate_spec(name, model, train, parent, store, resume) | {"preset": preset}
    if resume:                               # go on with the run `name` itself
        spec |= {"model": None, "resume": True}
    if lab_store.is_held(lab_store.name_lock(name, store)):
        raise ConfigError(f"checkpoint {name!r} is being written by another process; choose another "
                          f"name or wait for it to end")
    with connect(store) as con:
        con.execute("BEGIN IMMEDIATE")       # the check and the insert are one step
        busy = con.execute("SELECT id FROM jobs WHERE name=? AND status IN ('queued','running')",
                           (name,)).fetchone()
        if busy:
            con.execute("ROLLBACK")
            raise ConfigError(f"job {busy['id']} is already writing checkpoint {name!r}; "
                              f"choose another name")
        cur = con.execute("INSERT INTO jobs (name, spec, status, created, resumed_from) "
                          "VALUES (?, ?, 'queued', ?, ?)",
                          (name, json.dumps(spec), time.time(), resumed_from))
        con.execute("COMMIT")
        return cur.lastrowid


def get(job_id: int, store=None) -> dict:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 2 ** 63:
        raise ConfigError(f"a job id is a positive whole number, got {job_id!r}")
    with connect(store) as con:
        job = _row(con.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone())
    if job is None:
        raise ConfigError(f"no job {job_id}; `python -m lab jobs list` shows the jobs")
    return job


def list_jobs(store=None, limit: int = 50) -> list[dict]:
    mark_dead(store)
    with connect(store) as con:
        return [_row(r) for r in con.execute("SELECT * FROM jobs ORDER BY id DESC LIMIT ?", (limit,))]


def request_stop(job_id: int, mode: str = "now", store=None) -> dict:
    if mode not in ("now", "after_checkpoint"):
        raise ConfigError(f"stop mode must be 'now' or 'after_checkpoint', got {mode!r}")
    job = get(job_id, store)
    with connect(store) as con:
        if job["status"] == "queued":
            con.execute("UPDATE jobs SET status='stopped', finished=? WHERE id=? AND status='queued'",
                        (time.time(), job_id))
        elif job["status"] == "running":
            con.execute("UPDATE jobs SET stop=? WHERE id=? AND status='running'", (mode, job_id))
        else:
            raise ConfigError(f"job {job_id} is {job['status']}; only queued or running jobs stop")
    return get(job_id, store)


def resume(job_id: int, store=None) -> int:
    """Queue a job that continues an interrupted, stopped or failed one where it stood."""
    job = get(job_id, store)
    if job["status"] not in ("interrupted", "stopped", "failed"):
        raise ConfigError(f"job {job_id} is {job['status']}; only interrupted, stopped or failed "
                          f"jobs resume")
    lock, deadline = lab_store.job_lock(job_id, store), time.time() + 10
    while lab_store.is_held(lock):            # it wrote its status and is leaving: give it a moment
        if time.time() > deadline:
            raise ConfigError(f"job {job_id}'s process is still ending; resume it in a moment")
        time.sleep(0.2)
    return submit(job["name"], None, job["spec"]["train"], preset=job["spec"].get("preset"),
                  store=store, resumed_from=job_id)


def mark_dead(store=None) -> list[int]:
    """Running jobs whose lock is free (their process is gone) become interrupted."""
    dead = []
    with connect(store) as con:
        for r in con.execute("SELECT id FROM jobs WHERE status='running'").fetchall():
            if not lab_store.is_held(lab_store.job_lock(r["id"], store)):
                cur = con.execute("UPDATE jobs SET status='interrupted', finished=?, error=COALESCE("
                                  "error, 'its process ended without a word (killed or crashed); "
                                  "resume goes on from its last save') WHERE id=? AND status='running'",
                                  (time.time(), r["id"]))
                if cur.rowcount:
                    dead.append(r["id"])
    return dead


def claim_next(pid: int, store=None) -> tuple[dict, int] | None:
    """The oldest queued job, now running, with its lock (a descriptor the caller hands to the
    job's process). The lock is taken before the job is marked running, so a running job's lock
    is never free while its process lives."""
    with connect(store) as con:
        con.execute("BEGIN IMMEDIATE")
        r = con.execute("SELECT id FROM jobs WHERE status='queued' ORDER BY id LIMIT 1").fetchone()
        fd = r and lab_store._try_lock(lab_store.job_lock(r["id"], store))
        if r is None or fd is None:
            con.execute("COMMIT")
            return None
        con.execute("UPDATE jobs SET status='running', pid=?, started=?, heartbeat=? WHERE id=?",
                    (pid, time.time(), time.time(), r["id"]))
        con.execute("COMMIT")
    return get(r["id"], store), fd


def _finish(job_id: int, status: str, error: str | None, store=None) -> None:
    """A final status, written only over `running`."""
    with connect(store) as con:
        con.execute("UPDATE jobs SET status=?, error=?, finished=? WHERE id=? AND status='running'",
                    (status, error, time.time(), job_id))


def _hold_job_lock(job_id: int, store=None):
    """The job's lock for this process: handed down by the worker (LAB_JOB_LOCK_FD), held by a
    torchrun launcher above us (LAB_JOB_LOCKED), or taken here (`run-job` started by hand)."""
    path = lab_store.job_lock(job_id, store)
    fd = os.environ.pop("LAB_JOB_LOCK_FD", None)
    if fd is not None:
        try:
            if os.fstat(int(fd)).st_ino == path.stat().st_ino:
                return int(fd)
        except (OSError, ValueError):
            pass
    if os.environ.get("LAB_JOB_LOCKED") == str(job_id):
        return None
    return lab_store.acquire_fd(path, f"job {job_id}")


def run_job(job_id: int, store=None, data_dir=None) -> str:
    """Run one claimed job in this process; returns its final status. Under torchrun every rank
    trains, and rank 0 alone talks to the ledger. SIGTERM stops it as "stop now" does (it saves
    where it stands) and leaves it interrupted, to be resumed."""
    from lab import distributed, runs
    job = get(job_id, store)
    spec = job["spec"]

    def events(should_stop=None):
        return runs.train(job["name"], spec["model"] and ModelConfig.from_dict(spec["model"]),
                          TrainConfig.from_dict(spec["train"]), parent=spec["parent"],
                          preset=spec.get("preset"), data_dir=data_dir, store=store,
                          should_stop=should_stop, resume=spec.get("resume", False))
    shutdown = []
    signal.signal(signal.SIGTERM, lambda *a: shutdown.append(True))
    if distributed.rank() != 0:
        for _ in events():          # rank 0 polls for stops and broadcasts them
            pass
        return "done"
    _HELD.append(_hold_job_lock(job_id, store))     # held until this process exits
    if job["status"] != "running":
        return job["status"]
    with connect(store) as con:
        con.execute("UPDATE jobs SET pid=?, heartbeat=? WHERE id=?", (os.getpid(), time.time(), job_id))
    last_poll, stop = 0.0, None

    def should_stop():
        nonlocal last_poll, stop
        if time.time() - last_poll > 1.0:
            last_poll = time.time()
            with connect(store) as con:
                stop = con.execute("SELECT stop FROM jobs WHERE id=?", (job_id,)).fetchone()["stop"]
            if stop == "shutdown":                # the worker is stopping: see Worker.shutdown
                shutdown.append(True)
        return "now" if shutdown else stop

    status, error = "done", None
    try:
        from lab.train import format_event
        for ev in events(should_stop):
            print(format_event(ev, job["name"]), flush=True)
            if ev["event"] == "stopped":
                status = "stopped"
            with connect(store) as con:
                con.execute("UPDATE jobs SET progress=?, heartbeat=? WHERE id=?",
                            (json.dumps(ev), time.time(), job_id))
    except LabError as e:      # a value the checks before queueing could not see; said in one line
        status, error = "failed", str(e)
        print(f"error: {e}", flush=True)
    except Exception as e:     # a bug: recorded for the UI; the traceback goes to the job's log
        status, error = "failed", f"{type(e).__name__}: {e}"
        import traceback
        traceback.print_exc()
    if shutdown and status in ("stopped", "done"):
        status, error = "interrupted", "the lab shut down while it ran; it saved where it stood: resume it"
    _finish(job_id, status, error, store)
    return status


class Worker:
    """Claims queued jobs and runs each in a child process; `slots` jobs at once (default 1),
    counting every live job of the store. nproc > 1 runs each job under torchrun with that many
    processes (one per GPU; gloo on CPUs). exit_with_parent: stop when the process that started
    this worker (the web app) is gone."""

    def __init__(self, store=None, slots: int = 1, poll_s: float = 1.0, data_dir=None, nproc: int = 1,
                 exit_with_parent: bool = False):
        if nproc < 1 or slots < 1:
            raise ConfigError(f"slots and nproc must be at least 1, got slots={slots} nproc={nproc}")
        self.store, self.slots, self.poll_s, self.data_dir = store, slots, poll_s, data_dir
        self.nproc = nproc
        self.children: dict[int, subprocess.Popen] = {}
        self.running = True
        self.parent = os.getppid() if exit_with_parent else None

    def _spawn(self, job: dict, fd: int) -> None:
        log = open(lab_store.log_path(job["id"], self.store), "ab")
        env = {**os.environ, "LAB_STORE": str(checkpoints.store_dir(self.store)),
               "LAB_JOB_LOCK_FD": str(fd), "LAB_JOB_LOCKED": str(job["id"])}
        if self.data_dir:
            env["LAB_DATA_DIR"] = str(self.data_dir)
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(self.nproc)] \
            if self.nproc > 1 else []
        try:      # its own session: a Ctrl-C meant for the app reaches the job through the worker
            proc = subprocess.Popen([sys.executable, *launcher, "-m", "lab", "run-job", str(job["id"])],
                                    stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(fd,),
                                    cwd=str(Path(__file__).resolve().parent.parent),
                                    start_new_session=True)
        finally:
            os.close(fd)           # the child holds the lock now (or, if it failed to start, nobody)
            log.close()
        with connect(self.store) as con:
            con.execute("UPDATE jobs SET pid=? WHERE id=?", (proc.pid, job["id"]))
        self.children[job["id"]] = proc

    def tick(self) -> None:
        for job_id, proc in list(self.children.items()):
            if proc.poll() is not None:
                del self.children[job_id]
        mark_dead(self.store)
        with connect(self.store) as con:
            busy = con.execute("SELECT COUNT(*) FROM jobs WHERE status='running'").fetchone()[0]
        while busy < self.slots and self.running:
            claimed = claim_next(os.getpid(), self.store)
            if claimed is None:
                break
            self._spawn(*claimed)
            busy += 1

    def parent_gone(self) -> bool:
        return self.parent is not None and os.getppid() != self.parent

    def serve(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *a: setattr(self, "running", False))
        lock = self._take_worker_lock()
        if lock is None:
            return
        for line in checkpoints.recover(self.store):
            print(f"worker: {line}", flush=True)
        try:
            while self.running and not self.parent_gone():
                self.tick()
                time.sleep(self.poll_s)
        finally:
            self.shutdown()
            os.close(lock)

    def _take_worker_lock(self) -> int | None:
        """One worker per store: a second one waits for the first to end."""
        path, said = lab_store.lock_path("worker", self.store), False
        while self.running and not self.parent_gone():
            fd = lab_store._try_lock(path)
            if fd is not None:
                return fd
            if not said:
                print(f"worker: another worker (pid {lab_store.holder(path)}) serves this store; "
                      f"waiting for it to end", flush=True)
                said = True
            time.sleep(self.poll_s)
        return None

    def shutdown(self) -> None:
        """Stop this worker's jobs as "stop now" does (each saves where it stands and is left
        interrupted), wait for them, and kill only what has not ended after the grace period.
        The request goes through the ledger, not a signal: a job still starting up sees it when
        its first step begins, where a signal would have killed it before it could save."""
        with connect(self.store) as con:
            for job_id in self.children:
                con.execute("UPDATE jobs SET stop='shutdown' WHERE id=? AND status='running'", (job_id,))
        deadline = time.time() + SHUTDOWN_GRACE_S
        for proc in self.children.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.children.clear()
