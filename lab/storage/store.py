"""The store's own layout and the locks that make it trustworthy.

    STORE/
      NAME/                a checkpoint (names start with a letter or digit, see checkpoints.py)
      _runs/NAME/          a training run's metrics, TensorBoard events and `last/` resume state
      _datasets/NAME/      a text corpus imported for the text task (plugins/tasks/text/corpora.py)
      .lab/jobs.sqlite     the job ledger
      .lab/logs/job-N.log  each job's output
      .lab/locks/          OS locks (flock): job-N (held by the job's process for its lifetime),
                           name-NAME (held by whoever writes checkpoint NAME), worker
      .lab/exports/        exports made from the web UI, offered as downloads
      .lab/health/         each checkpoint's weights verdict, kept until its files change (health.py)

A checkpoint name can never be `.lab`, `_runs` or `_datasets` (names start with a letter or digit), so no
name reaches the lab's own files. Stores made before this layout (ledger and logs at the top)
are moved over the first time they are opened.

Liveness is a fact, not a guess: a lock is free exactly when no live process holds it (the OS
drops a process's locks when it exits, however it exits).
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from lab.errors import LabError

log = logging.getLogger("lab.storage.store")
STATE = ".lab"
RUNS = "_runs"
DATASETS = "_datasets"
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


class StoreError(LabError):
    pass


class Busy(StoreError):
    """A lock another live process holds."""


def root(store: str | Path | None = None) -> Path:
    """The store: the argument, else $LAB_STORE, else checkpoints/ in the project."""
    chosen = store or os.environ.get("LAB_STORE") or _PROJECT_ROOT / "checkpoints"
    if "\0" in str(chosen):
        raise StoreError("the store path contains a NUL character")
    path = Path(chosen)
    if path.exists() and not path.is_dir():
        raise StoreError(f"the store {path} is a file, not a folder; point --store / LAB_STORE at a "
                         f"folder (it is created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the store {path}: {e.strerror}") from None
    _migrate(path)
    return path.resolve()        # absolute: a job's process runs from the project folder


def state_dir(store=None, *parts: str) -> Path:
    path = root(store) / STATE
    for part in parts:
        path = path / part
    path.mkdir(parents=True, exist_ok=True)
    return path


def ledger_path(store=None) -> Path:
    return state_dir(store) / "jobs.sqlite"


def log_path(job_id: int, store=None) -> Path:
    return state_dir(store, "logs") / f"job-{int(job_id)}.log"


def lock_path(key: str, store=None) -> Path:
    return state_dir(store, "locks") / f"{key}.lock"


def _migrate(path: Path) -> None:
    """Stores made before `.lab/`: move the ledger and job logs in (only real files: a folder of
    that name is somebody's checkpoint)."""
    old = path / "jobs.sqlite"
    if not old.is_file() or (path / STATE / "jobs.sqlite").exists():
        return
    (path / STATE / "logs").mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        f = path / f"jobs.sqlite{suffix}"
        if f.is_file():
            os.replace(f, path / STATE / f.name)
    for f in path.glob("job-*.log"):
        if f.is_file():
            os.replace(f, path / STATE / "logs" / f.name)
    log.warning("moved the job ledger and logs of %s into %s/", path, STATE)


# ---------------------------------------------------------------- locks

# (lock file, thread) -> [fd, count]: the locks this process's threads hold. Re-entrant within a
# thread only: another thread opens its own descriptor, which flock refuses like another process.
_held: dict[tuple[str, int], list] = {}
_held_guard = threading.Lock()


def try_acquire(path: Path, mark: bool = True) -> int | None:
    """The lock's descriptor, or None if someone else holds it. mark: write our pid into the file
    (for messages naming the holder); a mere probe does not."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if mark:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def acquire_fd(path: Path, what: str, wait_s: float = 0.0) -> int:
    """Take the lock and return its descriptor (the caller owns it: pass it to a child process,
    close it to release). Raises Busy, naming the holder, if another process keeps it."""
    deadline = time.time() + wait_s
    while True:
        fd = try_acquire(path)
        if fd is not None:
            return fd
        if time.time() >= deadline:
            pid = holder(path)
            raise Busy(f"{what} is in use by another process{f' (pid {pid})' if pid else ''}")
        time.sleep(0.2)


@contextmanager
def hold(path: Path, what: str, wait_s: float = 0.0):
    """Hold a lock for a block; re-entrant within a thread."""
    key = (str(path), threading.get_ident())
    with _held_guard:
        entry = _held.get(key)
        if entry:
            entry[1] += 1
    if not entry:
        fd = acquire_fd(path, what, wait_s)
        with _held_guard:
            _held[key] = entry = [fd, 1]
    try:
        yield
    finally:
        with _held_guard:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[key]
                os.close(entry[0])


def is_held(path: Path) -> bool:
    """Whether a live process (this one included) holds the lock. A probe takes the lock for an
    instant, so a writer that must not fail on a probe asks with a short wait_s."""
    with _held_guard:
        if any(p == str(path) for p, _ in _held):
            return True
    if not path.exists():
        return False
    fd = try_acquire(path, mark=False)
    if fd is None:
        return True
    os.close(fd)
    return False


def holder(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def name_lock(name: str, store=None) -> Path:
    return lock_path(f"name-{name}", store)


def job_lock(job_id: int, store=None) -> Path:
    return lock_path(f"job-{int(job_id)}", store)


# ---------------------------------------------------------------- fault injection (tests)

_fault_counts: dict[str, int] = {}


def fault(point: str) -> None:
    """A named point where tests inject faults into real processes: LAB_FAULTS holds
    comma-separated `kill@POINT[#N]` (SIGKILL at the N-th pass, default 1st) or
    `sleep@POINT[#N]=SECONDS` (at every pass, or at the N-th alone). Unset (always, outside tests)
    it costs one dictionary lookup."""
    spec = os.environ.get("LAB_FAULTS")
    if not spec:
        return
    _fault_counts[point] = _fault_counts.get(point, 0) + 1
    for item in spec.split(","):
        action, _, target = item.partition("@")
        target, _, arg = target.partition("=")
        where, _, nth = target.partition("#")
        if where != point:
            continue
        if action == "sleep" and (not nth or _fault_counts[point] == int(nth)):
            time.sleep(float(arg or 1))
        elif action == "kill" and _fault_counts[point] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------- folders the web UI may use

def allowed_dirs() -> list[Path]:
    """LAB_ALLOWED_DIRS: folders outside the store that the web UI and its API may read and write
    (separated by ':'). Empty by default: the UI then imports only uploads and exports only into
    the store (offered as a download). The CLI is the person's own shell and is not limited."""
    return [Path(p).expanduser().resolve() for p in os.environ.get("LAB_ALLOWED_DIRS", "").split(":")
            if p.strip()]


def allowed_path(text: str, purpose: str) -> Path:
    """A server path the UI may use for `purpose`, or one message that says nothing about whether
    the path exists."""
    if not isinstance(text, str) or not text.strip() or "\0" in text or len(text) > 4096:
        raise StoreError(f"{purpose}: give a folder path on the server")
    allowed = allowed_dirs()
    if not allowed:
        raise StoreError(f"{purpose}: the web lab reads and writes no server folders outside its "
                         f"store unless it is started with LAB_ALLOWED_DIRS=/some/folder")
    path = _resolved(Path(text.strip()).expanduser(), purpose, text.strip())
    if not _inside(path, allowed):
        raise StoreError(f"{purpose}: {text.strip()!r} is outside the folders this lab may use "
                         f"({', '.join(map(str, allowed))}; set by LAB_ALLOWED_DIRS)")
    return path


MAX_SOURCE_ENTRIES = 10_000       # files and folders an imported folder may hold


def allowed_source(text: str, purpose: str) -> Path:
    """allowed_path for what the lab will read: a folder's every file and folder must resolve
    inside the allowed folders too (a symlink inside one leads nowhere else)."""
    path = allowed_path(text, purpose)
    if not path.is_dir():
        return path
    allowed, seen = allowed_dirs(), 0
    for folder, dirs, files in os.walk(path):
        for entry in dirs + files:
            seen += 1
            if seen > MAX_SOURCE_ENTRIES:
                raise StoreError(f"{purpose}: {text.strip()!r} holds more than {MAX_SOURCE_ENTRIES:,} "
                                 f"files and folders; give the folder of the model or corpus itself")
            inner = Path(folder) / entry
            if not _inside(_resolved(inner, purpose, str(inner.relative_to(path))), allowed):
                raise StoreError(f"{purpose}: {str(inner.relative_to(path))!r} inside {text.strip()!r} "
                                 f"leads outside the folders this lab may use (a symbolic link)")
    return path


def _resolved(path: Path, purpose: str, shown: str) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError):          # a symbolic link that leads back to itself
        raise StoreError(f"{purpose}: {shown!r} is a loop of symbolic links") from None


def _inside(path: Path, allowed: list[Path]) -> bool:
    return any(path == a or a in path.parents for a in allowed)
