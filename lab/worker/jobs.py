"""Jobs in the durable ledger (SQLite in the store, lab/worker/ledger.py) and the background worker.

The UI and CLI *queue* jobs; a worker process (`python -m lab worker`, started by `make run`
beside the web server, or alone on a GPU machine sharing the store) claims them and runs each in
a child process (`lab run-job ID`: forked from the worker, which has imported torch and the lab
already, lab/worker/forked.py; a worker inside another program has a starter process fork it,
lab/worker/starter.py; else a new `python -m lab run-job ID`) that writes its progress
back to the ledger and to its run directory. Closing the browser never touches a job.

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
import subprocess
import sys
import time
from pathlib import Path

from lab.inputs import tasks
from lab.storage import checkpoints
from lab.training import distributed, runs
from lab.worker import steps
from lab.storage import store as lab_store
from lab.config import ConfigError, ModelConfig, TrainConfig
from lab.errors import LabError
from lab.worker import forked, starter
from lab.worker.executors import ALLOCATOR, ROOT, RayTasks, executor_name, job_environment
# the ledger's names that modules above and the tests read as jobs.X
from lab.worker.ledger import FINAL, SCHEMA, add_tables, connect, read_row  # noqa: F401
from lab.training import heartbeat
from lab.training.progress import format_event
from lab.training.parameters import parse_train_layers

def shutdown_grace_s() -> float:
    """LAB_SHUTDOWN_GRACE_S: how long jobs get to save when the lab stops (default 60 s)."""
    raw = os.environ.get("LAB_SHUTDOWN_GRACE_S", "60")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86400:
        raise LabError(f"LAB_SHUTDOWN_GRACE_S must be a number of seconds from 0 to 86400, got {raw!r}")
    return value


def _typed(cfg, cls):
    """A config its caller read and checked already, or plain values, read and checked here."""
    return cfg if isinstance(cfg, cls) else cls.from_dict(cfg or {})


def validate_spec(name: str, model: ModelConfig | dict | None, train: TrainConfig | dict,
                  parent: str | None, store=None, resume: bool = False, after: list | None = None,
                  after_only: bool = False) -> dict:
    """Check everything before a job is queued: a bad value never reaches the worker. The configs:
    typed (checked where their values entered: the form, the API, the command line) or plain
    values (read here). after: the steps after training (lab/worker/steps.py), each checked by its
    step; after_only: the run `name` trained already, only the steps are left."""
    checkpoints.check_name(name)
    after = steps.check(after) if after else []
    train_cfg = _typed(train, TrainConfig)
    if after_only:
        if not after:
            raise ConfigError("a job that only runs the steps after training needs its steps")
        checkpoints.check_loadable(name, store)
        return {"model": None, "train": train_cfg.to_dict(), "parent": None, "after": after,
                "after_only": True}
    tasks.check_stored(train_cfg, store)
    if train_cfg.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' was asked for but this machine has no CUDA GPU; "
                              "use 'auto' or 'cpu'")
    model_cfg = None
    if resume:
        _, folder = runs.resume_state(name, train_cfg, store, tensors=False)
        n_layer = checkpoints.read_config(folder)[0].n_layer
    else:
        runs.refuse_taken(name, train_cfg, store)
        if parent:
            runs.check_finetune(train_cfg)
            n_layer = runs.check_parent(parent, store)
        else:
            model_cfg = _typed(model, ModelConfig)
            n_layer = model_cfg.n_layer
    parse_train_layers(train_cfg.train_layers, n_layer)
    return {"model": model_cfg and model_cfg.to_dict(), "train": train_cfg.to_dict(),
            "parent": None if resume else parent} | ({"after": after} if after else {})


def _refuse_busy(con, name: str, store=None) -> None:
    """Another process, or a queued or running job, writes checkpoint `name`: say which."""
    if lab_store.is_held(lab_store.name_lock(name, store)):
        raise ConfigError(f"checkpoint {name!r} is being written by another process; choose another "
                          f"name or wait for it to end")
    busy = con.execute("SELECT id FROM jobs WHERE name=? AND status IN ('queued','running')",
                       (name,)).fetchone()
    if busy:
        raise ConfigError(f"job {busy['id']} is already writing checkpoint {name!r}; choose another name")


def refuse_busy(name: str, store=None) -> None:
    """Checked before queueing a whole sweep (submit checks again, in its transaction)."""
    with connect(store) as con:
        _refuse_busy(con, name, store)


def submit(name: str, model: ModelConfig | dict | None, train: TrainConfig | dict, parent: str | None = None,
           preset: str | None = None, store=None, resumed_from: int | None = None,
           after: list | None = None, after_only: bool = False) -> int:
    """Queue a job that trains checkpoint `name` (a new model, a fine-tune of `parent`, or, with
    resumed_from, the run going on), then runs the steps `after` names."""
    resume = resumed_from is not None and not after_only
    spec = validate_spec(name, model, train, parent, store, resume, after, after_only) | {"preset": preset}
    if resume:                               # go on with the run `name` itself
        spec |= {"model": None, "resume": True}
    with connect(store) as con:
        con.execute("BEGIN IMMEDIATE")       # the check and the insert are one step
        try:
            _refuse_busy(con, name, store)
        except ConfigError:
            con.execute("ROLLBACK")
            raise
        cur = con.execute("INSERT INTO jobs (name, spec, status, created, resumed_from) "
                          "VALUES (?, ?, 'queued', ?, ?)",
                          (name, json.dumps(spec), time.time(), resumed_from))
        con.execute("COMMIT")
        return cur.lastrowid


def get(job_id: int, store=None) -> dict:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 2 ** 63:
        raise ConfigError(f"a job id is a positive whole number, got {job_id!r}")
    with connect(store) as con:
        job = read_row(con.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone())
    if job is None:
        raise ConfigError(f"no job {job_id}; `python -m lab jobs list` shows the jobs")
    return job


def list_jobs(store=None, limit: int = 50) -> list[dict]:
    mark_dead(store)
    with connect(store) as con:
        return [read_row(r) for r in con.execute("SELECT * FROM jobs ORDER BY id DESC LIMIT ?", (limit,))]


def request_stop(job_id: int, mode: str = "now", store=None) -> dict:
    if mode not in ("now", "after_checkpoint"):
        raise ConfigError(f"stop mode must be 'now' or 'after_checkpoint', got {mode!r}")
    get(job_id, store)
    with connect(store) as con:
        con.execute("BEGIN IMMEDIATE")       # the status read and the change are one step
        status = con.execute("SELECT status FROM jobs WHERE id=?", (job_id,)).fetchone()["status"]
        if status == "queued":
            con.execute("UPDATE jobs SET status='stopped', finished=? WHERE id=?", (time.time(), job_id))
        elif status == "running":         # a shutdown already under way is not weakened
            con.execute("UPDATE jobs SET stop=? WHERE id=? AND stop IS NOT 'shutdown'", (mode, job_id))
        con.execute("COMMIT")
    if status not in ("queued", "running"):
        raise ConfigError(f"job {job_id} is {status}; only queued or running jobs stop")
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
    spec = job["spec"]
    after = spec.get("after") or None
    # a run whose training ended: only the steps after it are left
    only = bool(after) and (spec.get("after_only", False) or runs.trained(job["name"], store))
    return submit(job["name"], None, spec["train"], preset=spec.get("preset"), store=store,
                  resumed_from=job_id, after=after, after_only=only)


def resumes_from(job_id: int, store=None) -> str:
    """Where a queued resume goes on from, as ' from step 40, 10 batches into epoch 2 (its
    periodic save)'; nothing for one that goes on with the steps after training."""
    job = get(job_id, store)
    return f" from {runs.going_on_from(job['name'], store)}" if job["spec"].get("resume") else ""


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


def claim_next(store=None) -> tuple[dict, int] | None:
    """The oldest queued job, now running, with its lock (a descriptor the caller hands to the
    job's process). The lock is taken before the job is marked running, so a running job's lock
    is never free while its process lives."""
    with connect(store) as con:
        con.execute("BEGIN IMMEDIATE")
        r = con.execute("SELECT id FROM jobs WHERE status='queued' ORDER BY id LIMIT 1").fetchone()
        fd = r and lab_store.try_acquire(lab_store.job_lock(r["id"], store))
        if r is None or fd is None:
            con.execute("COMMIT")
            return None
        try:
            con.execute("UPDATE jobs SET status='running', started=? WHERE id=?", (time.time(), r["id"]))
            con.execute("COMMIT")
        except BaseException:
            os.close(fd)
            raise
    return get(r["id"], store), fd


def _finish(job_id: int, status: str, error: str | None, store=None) -> None:
    """A final status, written only over `running`."""
    with connect(store) as con:
        con.execute("UPDATE jobs SET status=?, error=?, finished=? WHERE id=? AND status='running'",
                    (status, error, time.time(), job_id))


def _hold_job_lock(job_id: int, store=None) -> None:
    """Hold the job's lock until this process exits (the descriptor is never closed): handed down
    by the worker (LAB_JOB_LOCK_FD), held by a torchrun launcher above us (LAB_JOB_LOCKED), or
    taken here (`run-job` started by hand)."""
    path = lab_store.job_lock(job_id, store)
    fd = os.environ.pop("LAB_JOB_LOCK_FD", None)
    if fd is not None:
        try:
            if os.fstat(int(fd)).st_ino == path.stat().st_ino:
                os.set_inheritable(int(fd), False)      # ours alone, not our children's
                return
        except (OSError, ValueError):
            pass
    if os.environ.get("LAB_JOB_LOCKED") == str(job_id):
        return
    lab_store.acquire_fd(path, f"job {job_id} (its process)")


class _StopPoller:
    """The job's should_stop(): the ledger's stop request, read at most once a second. The
    worker's 'shutdown' and a SIGTERM both mean stop now, save, and be left interrupted."""

    def __init__(self, job_id: int, store=None):
        self.job_id, self.store, self.last, self.stop, self.shutdown = job_id, store, 0.0, None, False
        signal.signal(signal.SIGTERM, lambda *a: setattr(self, "shutdown", True))

    def __call__(self):
        if time.time() - self.last > 1.0:
            self.last = time.time()
            with connect(self.store) as con:
                self.stop = con.execute("SELECT stop FROM jobs WHERE id=?", (self.job_id,)).fetchone()["stop"]
            self.shutdown = self.shutdown or self.stop == "shutdown"
        return "now" if self.shutdown else self.stop


def run_job(job_id: int, store=None, data_dir=None) -> str:
    """Run one claimed job in this process; returns its final status. Under torchrun every rank
    trains, and rank 0 alone talks to the ledger."""
    job = get(job_id, store)
    spec = job["spec"]

    def events(should_stop=None):
        ended = None
        if not spec.get("after_only"):
            # the ledger's row is where these values enter this process: read once, typed
            for ended in runs.train(job["name"], spec["model"] and ModelConfig.from_dict(spec["model"]),
                                    TrainConfig.from_dict(spec["train"]), parent=spec["parent"],
                                    preset=spec.get("preset"), data_dir=data_dir, store=store,
                                    should_stop=should_stop, resume=spec.get("resume", False)):
                yield ended
        if spec.get("after") and distributed.rank() == 0 and (spec.get("after_only") or (
                ended and ended["event"] in ("done", "final", "final_aborted"))):
            with lab_store.hold(lab_store.name_lock(job["name"], store), f"checkpoint {job['name']!r}",
                                wait_s=10), heartbeat.phase("the steps after training"):
                yield from steps.run(job["name"], spec["after"], store=store, data_dir=data_dir,
                                     should_stop=should_stop)
    if distributed.rank() != 0:
        signal.signal(signal.SIGTERM, lambda *a: None)    # rank 0 decides, and tells every rank
        for _ in events():
            pass
        return "done"
    _hold_job_lock(job_id, store)
    if job["status"] != "running":
        return job["status"]
    with connect(store) as con:
        con.execute("UPDATE jobs SET pid=? WHERE id=?", (os.getpid(), job_id))
    poller = _StopPoller(job_id, store)
    status, error = _follow(job_id, job["name"], events(poller), store)
    if poller.shutdown and status == "stopped":
        status, error = "interrupted", "the lab shut down while it ran; it saved where it stood: resume it"
    _finish(job_id, status, error, store)
    return status


def _follow(job_id: int, name: str, events, store=None) -> tuple[str, str | None]:
    """Print the run's events to the job's log and the latest to the ledger: (status, error).
    A heartbeat (lab.training.heartbeat) writes there too while a long phase is under way."""
    def write(ev: dict) -> None:
        print(format_event(ev, name), flush=True)
        with connect(store) as con:
            con.execute("UPDATE jobs SET progress=?, heartbeat=? WHERE id=?",
                        (json.dumps(ev), time.time(), job_id))
    status, beat = "done", heartbeat.start(write)
    try:
        with heartbeat.phase("starting the job"):
            for ev in events:
                beat.write(ev)
                status = "stopped" if ev["event"] == "stopped" else status
    except LabError as e:      # a value the checks before queueing could not see; said in one line
        print(f"error: {e}", flush=True)
        return "failed", str(e)
    except Exception as e:     # a bug: recorded for the UI; the traceback goes to the job's log
        import traceback
        traceback.print_exc()
        return "failed", f"{type(e).__name__}: {e}"
    finally:
        heartbeat.stop()
    return status, None


class Worker:
    """Claims queued jobs and runs each in a child process; `slots` jobs at once (default 1),
    counting every live job of the store. nproc > 1 runs each job under torchrun with that many
    processes (one per GPU; gloo on CPUs). exit_with_parent: stop when the process that started
    this worker (the web app) is gone. entry: what a job's process forked from this one runs
    (the `run-job` command, given by `lab worker`); without it each job is a new interpreter.
    warm: what every job would load before its first step, loaded once here before the first
    fork, so the jobs forked after it start with it."""

    def __init__(self, store=None, slots: int = 1, poll_s: float = 1.0, data_dir=None, nproc: int = 1,
                 exit_with_parent: bool = False, executor: str | None = None, entry=None, warm=None):
        if nproc < 1 or slots < 1:
            raise ConfigError(f"slots and nproc must be at least 1, got slots={slots} nproc={nproc}")
        self.store, self.slots, self.poll_s, self.data_dir = store, slots, poll_s, data_dir
        self.nproc = nproc
        self.executor = executor_name(executor)
        if self.executor == "ray" and nproc > 1:
            raise ConfigError("--nproc runs a job under torchrun on this machine; with the ray "
                              "executor each job is one Ray task (leave nproc at 1)")
        self.ray = RayTasks() if self.executor == "ray" else None
        self.children: dict[int, subprocess.Popen | forked.ForkedJob] = {}
        self.started: set[int] = set()      # its jobs not yet seen to end (with or without a handle)
        self.entry = entry        # run-job for a forked job's process (lab/worker/forked.py)
        self.warm = warm          # loaded once, before the first fork
        self.running = True
        self.parent = os.getppid() if exit_with_parent else None

    def _warm(self) -> None:
        """Load what every job would (self.warm) once, before the first fork; should it fail,
        each job loads it itself, as without it."""
        warm, self.warm = self.warm, None
        if warm is None:
            return
        try:
            warm()
        except Exception as e:      # noqa: BLE001 (a job meets the same and says it in its log)
            print(f"worker: not preloaded for the jobs ({type(e).__name__}: {e})", flush=True)

    def _spawn(self, job: dict, fd: int) -> None:
        env = job_environment({**os.environ, "LAB_STORE": str(checkpoints.store_dir(self.store)),
                               "LAB_JOB_LOCK_FD": str(fd)})
        if self.data_dir:
            env["LAB_DATA_DIR"] = str(Path(self.data_dir).resolve())
        if self.ray is not None:           # the worker keeps the lock while the task runs
            shared = {k: env[k] for k in ("LAB_STORE", "LAB_DATA_DIR") if k in env}
            self.ray.submit(job["id"], fd, {**shared, "LAB_JOB_LOCKED": str(job["id"])},
                            str(lab_store.log_path(job["id"], self.store)))
            return
        launcher = []
        if self.nproc > 1:        # the launcher holds the lock; its ranks know it is held
            launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(self.nproc)]
            env["LAB_JOB_LOCKED"] = str(job["id"])
        self.started.add(job["id"])         # asked to stop at a shutdown, even with no handle
        try:
            with open(lab_store.log_path(job["id"], self.store), "ab") as log:
                proc = self._start(job["id"], env, log, fd, launcher)
        finally:
            os.close(fd)           # the child holds the lock now (or, if it failed to start, nobody)
        if proc.pid is not None:            # None: its starter never said (the job writes its own)
            with connect(self.store) as con:
                con.execute("UPDATE jobs SET pid=? WHERE id=?", (proc.pid, job["id"]))
        self.children[job["id"]] = proc

    def _start(self, job_id: int, env: dict, log, fd: int, launcher: list[str]):
        """The job's process, in a session of its own (a Ctrl-C meant for the app reaches the job
        through the worker): forked from this worker where it may fork (`lab worker`), else from
        this process's job starter (lab/worker/starter.py), else a new interpreter."""
        if not launcher and self.entry is not None and forked.forkable(env, ALLOCATOR):
            self._warm()            # what the forked job would load, loaded here once
            return forked.fork_job(job_id, self.entry, env, log.fileno(), fd, str(ROOT))
        if not launcher and self.entry is None and os.path.isdir("/proc/self/fd"):
            proc = starter.start(job_id, env, log.fileno(), fd, str(ROOT),
                                 lab_store.job_lock(job_id, self.store))
            if proc is not None:
                return proc
        return subprocess.Popen([sys.executable, *launcher, "-m", "lab", "run-job", str(job_id)],
                                stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(fd,),
                                cwd=str(ROOT), start_new_session=True)

    def tick(self) -> None:
        for job_id, proc in list(self.children.items()):
            if proc.poll() is not None:
                del self.children[job_id]
                self.started.discard(job_id)
        if self.ray is not None:
            self.ray.reap()
        mark_dead(self.store)
        with connect(self.store) as con:
            busy = con.execute("SELECT COUNT(*) FROM jobs WHERE status='running'").fetchone()[0]
        while busy < self.slots and self.running:
            claimed = claim_next(self.store)
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
            fd = lab_store.try_acquire(path)
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
            for job_id in {*self.started, *self.children, *(self.ray.tasks if self.ray else ())}:
                con.execute("UPDATE jobs SET stop='shutdown' WHERE id=? AND status='running'", (job_id,))
        deadline = time.time() + shutdown_grace_s()
        if self.ray is not None:
            self.ray.wait_all(deadline)
        for proc in self.children.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:     # SIGTERM first: torchrun passes it to its ranks
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.children.clear()
