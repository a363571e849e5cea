"""The job ledger: a SQLite file in the store holding the jobs table (one row per job: its spec,
status, stop request and last progress) and the tables modules above add beside it (lab/sweeps' own).
Every process opens it through `connect`; lab/worker/jobs.py writes its rows.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

from lab.errors import LabError
from lab.storage import store as lab_store

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,            -- the checkpoint it writes
    spec TEXT NOT NULL,            -- JSON: model, train, parent, preset, after (lab/worker/steps.py)
    status TEXT NOT NULL,          -- queued, running, done, failed, stopped, interrupted
    stop TEXT,                     -- NULL, 'now', 'after_checkpoint' or 'shutdown' (the worker's)
    pid INTEGER,                   -- the process running it (its liveness is its lock, not this)
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    heartbeat REAL,                -- when it last reported (shown; liveness is its lock)
    progress TEXT,                 -- JSON: the last event
    error TEXT,
    resumed_from INTEGER
);
"""
FINAL = ("done", "failed", "stopped", "interrupted")
_schemas = [SCHEMA]           # the jobs table, and the tables modules above add (add_tables)


def add_tables(schema: str) -> None:
    """Tables of a module above that live in the ledger beside the jobs (lab/sweeps' own)."""
    if schema not in _schemas:
        _schemas.append(schema)


def ledger_path(store=None) -> Path:
    return lab_store.ledger_path(store)


@contextmanager
def connect(store=None):
    con = sqlite3.connect(ledger_path(store), timeout=30, isolation_level=None)
    con.row_factory = sqlite3.Row
    try:
        con.execute("PRAGMA journal_mode=WAL")
        for schema in _schemas:
            con.executescript(schema)
        yield con
    except sqlite3.DatabaseError as e:
        raise LabError(f"the job ledger {ledger_path(store)} cannot be used ({e})") from None
    finally:
        con.close()


def glance(store=None) -> tuple[str, int]:
    """The jobs table as a short text that changes whenever a row does (a job queued, claimed,
    reporting progress or a heartbeat, asked to stop, ended), and how many jobs run; read through
    a read-only connection (it writes no row; SQLite may leave the -wal and -shm files beside the
    ledger), since a page's pulse asks every two seconds (lab/ui/pulse.py). A ledger that
    cannot be read gives a text of its own and says a job runs, so the page asks and hears why."""
    path = ledger_path(store)
    if not path.exists():
        return "", 0
    try:
        con = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, timeout=1)
        try:
            row = con.execute("SELECT COUNT(*), MAX(id), TOTAL(heartbeat), TOTAL(started), TOTAL(finished), "
                              "group_concat(status || ':' || COALESCE(stop, ''), ','), "
                              "TOTAL(status = 'running') FROM jobs").fetchone()
        finally:
            con.close()
    except sqlite3.Error as e:
        return f"unreadable ({e})", 1
    return hashlib.sha1(repr(tuple(row[:6])).encode()).hexdigest()[:16], int(row[6])


def spans(store=None, within_s: float = 600.0) -> list[tuple[float, float | None]]:
    """(started, finished) of each job running now or ended in the last within_s seconds
    (finished None while it runs), read as glance reads: what the lab's own jobs put on the
    machine's load (estimate.own_load)."""
    path = ledger_path(store)
    if not path.exists():
        return []
    try:
        con = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT started, CASE WHEN status = 'running' THEN NULL ELSE finished END "
                               "FROM jobs WHERE started IS NOT NULL AND (status = 'running' OR finished > ?)",
                               (time.time() - within_s,)).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []


def read_row(r: sqlite3.Row | None) -> dict | None:
    """A row of the jobs table as a dict, its spec and progress read (an older spec upgraded)."""
    if r is None:
        return None
    d = dict(r)
    d["spec"] = upgrade_spec(json.loads(d["spec"]))
    d["progress"] = json.loads(d["progress"]) if d["progress"] else {}
    return d


def upgrade_spec(spec: dict) -> dict:
    """A spec as this version writes it. Specs written before steps were named kept a sweep's
    scoring as `score` (and `score_only`): that is the step `score`."""
    if "score" not in spec and "score_only" not in spec:
        return spec
    spec = dict(spec)
    score, only = spec.pop("score", None), spec.pop("score_only", False)
    if score is not None and "after" not in spec:
        spec["after"] = [{"step": "score", **score}]
    if only:
        spec["after_only"] = True
    return spec
