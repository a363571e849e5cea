"""Durable job ledger (SQLite in the store) and the background worker.

The UI and CLI *queue* jobs; a worker process (`python -m lab worker`, started by `make run`
beside the web server, or alone on a GPU machine sharing the store) claims them and runs each in
a child process (`python -m lab run-job ID`) that writes its progress back to the ledger and to
its run directory. Closing the browser never touches a job; a job whose process died is marked
`interrupted` and can be resumed from its last checkpoint.

States: queued -> running -> done | failed | stopped | interrupted. `resume` queues a new run that
goes on from the job's last (best) checkpoint: weights, Adam moments, epoch, step and best dev score.
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
from lab.config import ConfigError, ModelConfig, TrainConfig

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
HEARTBEAT_TIMEOUT_S = 120


def ledger_path(store=None) -> Path:
    return checkpoints.store_dir(store) / "jobs.sqlite"


@contextmanager
def connect(store=None):
    con = sqlite3.connect(ledger_path(store), timeout=30, isolation_level=None)
    con.row_factory = sqlite3.Row
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.executescript(SCHEMA)
        yield con
    finally:
        con.close()


def _row(r: sqlite3.Row | None) -> dict | None:
    if r is None:
        return None
    d = dict(r)
    d["spec"] = json.loads(d["spec"])
    d["progress"] = json.loads(d["progress"]) if d["progress"] else {}
    return d


def validate_spec(name: str, model: dict | None, train: dict, parent: str | None) -> dict:
    """Check everything before a job is queued: a bad value never reaches the worker."""
    checkpoints.check_name(name)
    train_cfg = TrainConfig.from_dict(train)
    if parent:
        checkpoints.resolve(parent)
        model_cfg = None
    else:
        model_cfg = ModelConfig.from_dict(model or {})
    return {"model": model_cfg and model_cfg.to_dict(), "train": train_cfg.to_dict(), "parent": parent}


def submit(name: str, model: dict | None, train: dict, parent: str | None = None,
           preset: str | None = None, store=None, resumed_from: int | None = None) -> int:
    spec = validate_spec(name, model, train, parent) | {"preset": preset}
    if resumed_from is not None:            # go on with checkpoint `name` itself
        spec |= {"parent": None, "model": None, "resume": True}
    with connect(store) as con:
        busy = con.execute("SELECT id FROM jobs WHERE name=? AND status IN ('queued','running')",
                           (name,)).fetchone()
        if busy:
            raise ConfigError(f"job {busy['id']} is already writing checkpoint {name!r}; "
                              f"choose another name")
        cur = con.execute("INSERT INTO jobs (name, spec, status, created, resumed_from) "
                          "VALUES (?, ?, 'queued', ?, ?)",
                          (name, json.dumps(spec), time.time(), resumed_from))
        return cur.lastrowid


def get(job_id: int, store=None) -> dict:
    with connect(store) as con:
        job = _row(con.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone())
    if job is None:
        raise ConfigError(f"no job {job_id}")
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
            con.execute("UPDATE jobs SET status='stopped', finished=? WHERE id=?", (time.time(), job_id))
        elif job["status"] == "running":
            con.execute("UPDATE jobs SET stop=? WHERE id=?", (mode, job_id))
        else:
            raise ConfigError(f"job {job_id} is {job['status']}; only queued or running jobs stop")
    return get(job_id, store)


def resume(job_id: int, store=None) -> int:
    """Queue a job that continues an interrupted or stopped one from its last checkpoint."""
    job = get(job_id, store)
    if job["status"] not in ("interrupted", "stopped", "failed"):
        raise ConfigError(f"job {job_id} is {job['status']}; only interrupted, stopped or failed "
                          f"jobs resume")
    name = job["name"]
    if name not in checkpoints.names(store):
        raise ConfigError(f"job {job_id} wrote no checkpoint before it ended; start it again instead")
    from lab.runs import resume_state
    train = job["spec"]["train"]
    resume_state(name, TrainConfig.from_dict(train), store)     # refuse now, not in the worker
    return submit(name, None, train, parent=name, preset=job["spec"].get("preset"), store=store,
                  resumed_from=job_id)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:   # a zombie (exited, not yet reaped) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def mark_dead(store=None) -> list[int]:
    """Running jobs whose process is gone (or silent too long) become interrupted."""
    now, dead = time.time(), []
    with connect(store) as con:
        for r in con.execute("SELECT id, pid, heartbeat FROM jobs WHERE status='running'").fetchall():
            if not _alive(r["pid"]) or (r["heartbeat"] and now - r["heartbeat"] > HEARTBEAT_TIMEOUT_S):
                con.execute("UPDATE jobs SET status='interrupted', finished=?, "
                            "error=COALESCE(error, 'its worker process died') WHERE id=?", (now, r["id"]))
                dead.append(r["id"])
    return dead


def claim_next(pid: int, store=None) -> dict | None:
    with connect(store) as con:
        con.execute("BEGIN IMMEDIATE")
        r = con.execute("SELECT id FROM jobs WHERE status='queued' ORDER BY id LIMIT 1").fetchone()
        if r is None:
            con.execute("COMMIT")
            return None
        con.execute("UPDATE jobs SET status='running', pid=?, started=?, heartbeat=? WHERE id=?",
                    (pid, time.time(), time.time(), r["id"]))
        con.execute("COMMIT")
    return get(r["id"], store)


def run_job(job_id: int, store=None, data_dir=None) -> str:
    """Run one claimed job in this process; returns its final status. Under torchrun every rank
    trains, and rank 0 alone talks to the ledger."""
    from lab import distributed, runs
    job = get(job_id, store)
    spec = job["spec"]

    def events(should_stop=None):
        return runs.train(job["name"], spec["model"] and ModelConfig.from_dict(spec["model"]),
                          TrainConfig.from_dict(spec["train"]), parent=spec["parent"],
                          preset=spec.get("preset"), data_dir=data_dir, store=store,
                          should_stop=should_stop, resume=spec.get("resume", False))
    if distributed.rank() != 0:
        for _ in events():          # rank 0 polls for stops and broadcasts them
            pass
        return "done"
    with connect(store) as con:
        con.execute("UPDATE jobs SET pid=?, heartbeat=? WHERE id=?", (os.getpid(), time.time(), job_id))
    last_poll, stop = 0.0, None

    def should_stop():
        nonlocal last_poll, stop
        if time.time() - last_poll > 1.0:
            last_poll = time.time()
            with connect(store) as con:
                stop = con.execute("SELECT stop FROM jobs WHERE id=?", (job_id,)).fetchone()["stop"]
        return stop

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
    except Exception as e:     # recorded for the UI; the traceback goes to the worker's log
        status, error = "failed", f"{type(e).__name__}: {e}"
        import traceback
        traceback.print_exc()
    with connect(store) as con:
        con.execute("UPDATE jobs SET status=?, error=?, finished=? WHERE id=?",
                    (status, error, time.time(), job_id))
    return status


class Worker:
    """Claims queued jobs and runs each in a child process; `slots` jobs at once (default 1).
    nproc > 1 runs each job under torchrun with that many processes (one per GPU; gloo on CPUs)."""

    def __init__(self, store=None, slots: int = 1, poll_s: float = 1.0, data_dir=None, nproc: int = 1):
        if nproc < 1 or slots < 1:
            raise ConfigError(f"slots and nproc must be at least 1, got slots={slots} nproc={nproc}")
        self.store, self.slots, self.poll_s, self.data_dir = store, slots, poll_s, data_dir
        self.nproc = nproc
        self.children: dict[int, subprocess.Popen] = {}
        self.running = True

    def _spawn(self, job: dict) -> None:
        log = open(Path(checkpoints.store_dir(self.store)) / f"job-{job['id']}.log", "ab")
        env = {**os.environ, "LAB_STORE": str(checkpoints.store_dir(self.store))}
        if self.data_dir:
            env["LAB_DATA_DIR"] = str(self.data_dir)
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(self.nproc)] \
            if self.nproc > 1 else []
        proc = subprocess.Popen([sys.executable, *launcher, "-m", "lab", "run-job", str(job["id"])],
                                stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=str(Path(__file__).resolve().parent.parent))
        with connect(self.store) as con:
            con.execute("UPDATE jobs SET pid=? WHERE id=?", (proc.pid, job["id"]))
        self.children[job["id"]] = proc

    def tick(self) -> None:
        for job_id, proc in list(self.children.items()):
            if proc.poll() is not None:
                del self.children[job_id]
        mark_dead(self.store)
        while len(self.children) < self.slots:
            job = claim_next(os.getpid(), self.store)
            if job is None:
                break
            self._spawn(job)

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, lambda *a: setattr(self, "running", False))
        while self.running:
            self.tick()
            time.sleep(self.poll_s)
        for proc in self.children.values():   # jobs outlive a worker restart only as 'interrupted'
            proc.terminate()
