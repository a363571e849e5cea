"""A sweep in the job ledger: its tables (`sweeps`, `sweep_runs`), starting it (a job per run),
reading it back with each run's newest job, stopping and resuming its runs, and serving them
with a local worker until all have ended.
"""
from __future__ import annotations

import json
import os
import time

from lab.config import ConfigError
from lab.storage import checkpoints
from lab.storage import store as lab_store
from lab.sweeps.plan import Run, plan, typed
from lab.sweeps.scoring import results_path
from lab.sweeps.spec import SweepSpec, check_sweep_name, describe_run
from lab.training import runs
from lab.training.progress import format_event
from lab.worker import jobs

SCHEMA = """
CREATE TABLE IF NOT EXISTS sweeps (   -- lab/sweeps: a named set of runs, each a job above
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,            -- JSON: the SweepSpec
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sweep_runs (
    sweep TEXT NOT NULL,
    idx INTEGER NOT NULL,
    run TEXT NOT NULL,             -- the checkpoint it writes; its status is its newest job's
    vals TEXT NOT NULL,            -- JSON: the swept keys' values
    seed INTEGER NOT NULL,
    model TEXT NOT NULL,           -- JSON: the run's model config (null for a fine-tune)
    train TEXT NOT NULL,           -- JSON: its train config
    parent TEXT,
    PRIMARY KEY (sweep, idx)
);
"""
jobs.add_tables(SCHEMA)


def check(spec: SweepSpec | dict, store=None) -> tuple[SweepSpec, list[Run]]:
    """The sweep's runs, every one checked as its job will be (nothing queued)."""
    spec = spec if isinstance(spec, SweepSpec) else SweepSpec.from_dict(spec)
    with jobs.connect(store) as con:
        if con.execute("SELECT 1 FROM sweeps WHERE name=?", (spec.name,)).fetchone():
            raise ConfigError(f"sweep {spec.name!r} already exists; choose another name "
                              f"(`python -m lab sweep list` shows them)")
    runs = plan(spec, store)
    for run in runs:
        try:
            jobs.validate_spec(run.name, run.model, run.train, run.parent, store,
                               after=_after(spec), after_only=run.score_only)
            jobs.refuse_busy(run.name, store)
        except ConfigError as e:
            raise ConfigError(f"run {run.index + 1} ({describe_run(run.values, run.seed)}): "
                              f"{e}") from None
    return spec, runs


def start(spec: SweepSpec | dict, store=None) -> list[Run]:
    """Check every run, then queue one job per run and record the sweep. A failure while queueing
    (a name taken meanwhile) stops the jobs already queued and records nothing."""
    spec, runs = check(spec, store)
    queued = []
    try:
        for run in runs:
            queued.append(jobs.submit(run.name, run.model, run.train, parent=run.parent,
                                      preset=spec.preset, store=store, after=_after(spec),
                                      after_only=run.score_only))
    except Exception:
        for job_id in queued:
            jobs.request_stop(job_id, store=store)
        raise
    with jobs.connect(store) as con:
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO sweeps (name, spec, created) VALUES (?, ?, ?)",
                    (spec.name, json.dumps(spec.to_dict()), time.time()))
        for run in runs:
            con.execute("INSERT INTO sweep_runs (sweep, idx, run, vals, seed, model, train, parent) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (spec.name, run.index, run.name, json.dumps(run.values), run.seed,
                         json.dumps(run.model and run.model.to_dict()), json.dumps(run.train.to_dict()),
                         run.parent))
        con.execute("COMMIT")
    return runs


def _after(spec: SweepSpec) -> list[dict]:
    """What each run's job does once it trained: the step `score` (registered below)."""
    return [{"step": "score", **spec.score, "sweep": spec.name}]


def _sweep_of(job: dict) -> str | None:
    """The sweep whose scoring a job runs after training."""
    return next((s.get("sweep") for s in job["spec"].get("after", []) if s["step"] == "score"), None)


def get(name: str, store=None) -> tuple[SweepSpec, list[dict]]:
    """The sweep's definition and its runs, each with its newest job (status, progress)."""
    check_sweep_name(name)
    jobs.mark_dead(store)
    with jobs.connect(store) as con:
        row = con.execute("SELECT spec FROM sweeps WHERE name=?", (name,)).fetchone()
        if row is None:
            raise ConfigError(f"no sweep {name!r}; `python -m lab sweep list` shows the sweeps")
        spec = SweepSpec(**json.loads(row["spec"]))
        runs = []
        for r in con.execute("SELECT * FROM sweep_runs WHERE sweep=? ORDER BY idx", (name,)):
            # a job's spec names its sweep in its step `score`, or (written before steps were
            # named) in its field `score`
            job = con.execute(
                "SELECT * FROM jobs WHERE name=? AND (json_extract(spec, '$.score.sweep')=? OR EXISTS ("
                "SELECT 1 FROM json_each(spec, '$.after') WHERE json_extract(value, '$.step')='score' "
                "AND json_extract(value, '$.sweep')=?)) ORDER BY id DESC LIMIT 1",
                (r["run"], name, name)).fetchone()
            model, train = json.loads(r["model"]), json.loads(r["train"])
            values = {k: typed(k, v, model, train) for k, v in json.loads(r["vals"]).items()}
            runs.append({"index": r["idx"], "name": r["run"], "values": values, "seed": r["seed"],
                         "model": model, "train": train, "parent": r["parent"],
                         "job": jobs.read_row(job)})
    return spec, runs


def list_sweeps(store=None) -> list[dict]:
    with jobs.connect(store) as con:
        names = [r["name"] for r in con.execute("SELECT name FROM sweeps ORDER BY created DESC")]
    out = []
    for name in names:
        spec, runs = get(name, store)
        counts = {}
        for r in runs:
            s = r["job"]["status"] if r["job"] else "missing"
            counts[s] = counts.get(s, 0) + 1
        out.append({"name": name, "recipe": spec.recipe, "runs": len(runs), "statuses": counts,
                    "about": spec.about})
    return out


def run_status(run: dict, store=None) -> str:
    """The run's status: its newest job's, or `done, not scored` when its job ended without
    writing its results."""
    job = run["job"]
    if job is None:
        return "missing"
    if job["status"] == "done" and not results_path(_sweep_of(job) or "", run["name"], store).exists():
        return "done, not scored"
    return job["status"]


def _pick(runs: list[dict], only: str | None) -> list[dict]:
    if only is None:
        return runs
    chosen = [r for r in runs if r["name"] == only or str(r["index"] + 1) == str(only)]
    if not chosen:
        raise ConfigError(f"the sweep has no run {only!r}; its runs are: "
                          f"{', '.join(r['name'] for r in runs)}"[:400])
    return chosen


def stop(name: str, run: str | None = None, mode: str = "now", store=None) -> list[str]:
    """Stop the sweep's queued and running jobs (or one run's); says what it did per run."""
    _, runs = get(name, store)
    said = []
    for r in _pick(runs, run):
        job = r["job"]
        if job and job["status"] in ("queued", "running"):
            after = jobs.request_stop(job["id"], mode, store)
            what = "stopped" if after["status"] == "stopped" else f"asked to stop {mode}"
            said.append(f"{r['name']}: job {job['id']} {what}")
    return said or ["nothing to stop: no run is queued or running"]


def resume(name: str, run: str | None = None, store=None) -> list[str]:
    """Go on with every run that did not end (stopped, interrupted, failed), or one: training
    resumes where it stood; a run whose training ended but whose scoring did not is scored; a
    run stopped before it started starts."""
    spec, runs = get(name, store)
    said = []
    for r in _pick(runs, run):
        job = r["job"]
        if job is None or job["status"] not in ("stopped", "interrupted", "failed"):
            continue
        try:       # the job's own resume: training where it stood, or scoring once it trained
            if spec.checkpoints or _saved_anything(r["name"], store):
                job_id = jobs.resume(job["id"], store)
            else:
                job_id = jobs.submit(r["name"], r["model"], r["train"], parent=r["parent"],
                                     preset=spec.preset, store=store, after=_after(spec))
        except ConfigError as e:
            said.append(f"{r['name']}: {e}")
            continue
        said.append(f"{r['name']}: queued job {job_id}")
    return said or ["nothing to resume: every run is queued, running or done"]


def _saved_anything(run: str, store=None) -> bool:
    return runs.last_dir(run, store).is_dir() or run in checkpoints.names(store)


def all_ended(name: str, store=None) -> bool:
    _, runs = get(name, store)
    return all(r["job"] is None or r["job"]["status"] in jobs.FINAL for r in runs)


def wait(name: str, store=None, data_dir=None, say=print, poll_s: float = 1.0,
         executor: str | None = None) -> None:
    """Serve the store's queued jobs with a local worker (or, when another worker serves the
    store, watch it) until every run of the sweep has ended; a line per run as it moves on.
    Interrupted (Ctrl-C), the runs stop where they stand, resumable with `sweep resume`."""
    lock = lab_store.try_acquire(lab_store.lock_path("worker", store))
    worker = jobs.Worker(store, data_dir=data_dir, poll_s=poll_s,
                         executor=executor if lock is not None else "local")
    if lock is not None:
        for line in checkpoints.recover(store):       # as a worker does when it starts serving
            say(f"worker: {line}")
    else:
        say(f"another worker (pid {lab_store.holder(lab_store.lock_path('worker', store))}) serves "
            f"this store; watching it run the sweep")
    said: dict[str, tuple] = {}      # run -> (what was said, when): a line when it changes,
    try:                              # and a training step's line at most every 30 s
        while True:
            if lock is not None:
                worker.tick()
            _, runs = get(name, store)
            for r in runs:
                job = r["job"] or {"status": "missing", "progress": {}, "error": None}
                ev = job["progress"] or {}
                line = format_event(ev, r["name"]) if ev.get("event") else ""
                key = (job["status"], line if ev.get("event") in ("eval", "scored", "scoring") else "")
                last_key, last_t = said.get(r["name"], (None, 0.0))
                if key != last_key or (ev.get("event") == "step" and time.time() - last_t > 30):
                    said[r["name"]] = (key, time.time())
                    say(f"{r['name']}: {job['status']}" + (f": {line}" if line else "")
                        + (f" ({job['error']})" if job.get("error") else ""))
            if all(r["job"] is None or r["job"]["status"] in jobs.FINAL for r in runs):
                return
            time.sleep(poll_s)
    finally:
        if lock is not None:
            worker.shutdown()
            os.close(lock)
