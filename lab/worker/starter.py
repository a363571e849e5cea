"""Jobs forked from a starter process, for a worker that cannot fork them itself.

`lab worker` forks each job from itself (lab/worker/forked.py). A worker made inside another
program (`lab sweep start --wait`, a script, a test) must not: that program may have computed on
several threads, and a child forked from it can hang at its first parallel operation. Without a
starter each of its jobs would be a new interpreter paying torch's and the lab's imports (about
2 s of CPU before its first step). The starter is a process of its own (`python -m lab
job-starter FD`, its own session) that imports them once, loads what a job would, says it is
ready, computes nothing, and forks each job it is sent: the job's environment, working folder,
log and lock (the two descriptors passed over a Unix socket), exactly as `lab worker` forks one.
It answers each job with its pid (or why it refused it), and tells each job's exit code as it
reaps it.

A process keeps one starter, for jobs of one environment as a process reads it at start
(`_imported`: Python's, the locale's, glibc's, torch's and the libraries' settings; the lab reads
its own when a job runs); a job of another starts a new one. The starter ends when its worker's process does (its socket
closes); the jobs it forked run on, as a new interpreter's would. A starter that cannot start,
is not ready in time, or refuses a job leaves the job to a new interpreter (`python -m lab
run-job ID`), as before. One that took a job and then never answered may have forked it: no second
process is started, and the job's lock says whether it runs (a job's liveness everywhere else
in the lab, lab/worker/jobs.py), as it does for any job once its starter has ended.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from lab.storage import store as lab_store
from lab.worker import forked

# the variables a process reads as it starts or imports (the rest a job reads when it runs)
# (the lab's own, LAB_*, are read when a job runs, never as a module loads: tests/test_jobs.py)
_PREFIXES = ("PYTHON", "HOME", "LANG", "LC_", "TZ", "TMPDIR", "XDG_", "MALLOC_", "LD_", "OMP_",
             "MKL_", "KMP_", "OPENBLAS_", "TORCH", "PYTORCH_", "TRITON_", "CUDA", "NCCL_", "HF_",
             "TRANSFORMERS_", "TOKENIZERS_")
# one job's own, kept out of the starter's environment (its /proc/PID/environ, which its jobs show)
_PER_JOB = ("LAB_STORE", "LAB_DATA_DIR", "LAB_JOB_LOCK_FD", "LAB_JOB_LOCKED")
READY_S = 120.0            # the longest a starter may take to import and load, before any job
ANSWER_S = 30.0            # the longest a ready starter may take to answer a job

_lock = threading.RLock()
_current: Starter | None = None


def _imported(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(_PREFIXES)}


def start(job_id: int, env: dict, log_fd: int, lock_fd: int, cwd: str,
          lock: Path) -> StartedJob | None:
    """The job's process, forked by this process's starter (started first if it has none for
    jobs of `env`); None when no starter took the job: the caller then starts a new interpreter.
    The caller keeps its own copies of the two descriptors, to close as it would after a Popen.
    `lock`: the job's lock file, which says whether it runs once no starter can."""
    global _current
    with _lock:
        if _current is not None and (_current.key != _imported(env) or not _current.alive()):
            _end()
        try:
            if _current is None:
                _current = Starter(env, cwd)
            _current.wait_ready()
            _current.send(job_id, env, log_fd, lock_fd, cwd)
        except OSError as e:                # nothing was sent: nothing can have been forked
            return _without(job_id, f"no job starter ({e})")
        try:
            answer = _current.answer(job_id)
        except BaseException:               # (a Ctrl-C) its answer would be read as another job's
            _end()
            raise
        if "pid" in answer:
            return StartedJob(answer["pid"], _current, lock)
        if "refused" in answer:             # it forked nothing and let go of both descriptors
            return _without(job_id, f"the job starter refused it ({answer['refused']})")
        print(f"worker: the job starter did not answer for job {job_id} ({answer['lost']}); the job "
              f"runs if it was forked, else its free lock has it marked interrupted", flush=True)
        _end()
        return StartedJob(None, None, lock)


def _without(job_id: int, why: str) -> None:
    print(f"worker: {why}; job {job_id} starts as a new process", flush=True)
    _end()


def _end() -> None:
    global _current
    if _current is not None:
        _current.close()
    _current = None


@atexit.register
def end() -> None:
    """End this process's starter, if it has one (its jobs run on); at exit too, so that it is
    reaped, and its CPU and its jobs' counted, where the process's own ends."""
    with _lock:
        _end()


class Starter:
    """The worker's side of one starter process. Its socket is read under the module's lock."""

    def __init__(self, env: dict, cwd: str):
        self.key = _imported(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "lab", "job-starter", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), cwd=cwd,
                                         env={k: v for k, v in env.items() if k not in _PER_JOB},
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock, self.codes, self.gone, self.ready = ours, {}, False, False

    def wait_ready(self) -> None:
        """Return once the starter has loaded what the jobs need; raise ConnectionError if it
        ended first, or was not ready within READY_S seconds (nothing was sent to it yet)."""
        while not self.ready:
            message = self._receive(READY_S)
            if message is None:
                raise ConnectionError("it ended as it started" if self.gone else
                                      f"not ready within {READY_S:.0f} s")
            self.ready = bool(message.get("ready"))

    def send(self, job_id: int, env: dict, log_fd: int, lock_fd: int, cwd: str) -> None:
        request = json.dumps({"job": job_id, "env": env, "cwd": cwd}).encode()
        socket.send_fds(self.sock, [request], [log_fd, lock_fd])

    def answer(self, job_id: int) -> dict:
        """The starter's answer to this job: {"pid": ...}, {"refused": why}, or {"lost": why}
        when none came (it ended, or was silent for ANSWER_S seconds)."""
        while True:
            message = self._receive(ANSWER_S)
            if message is None:
                return {"lost": "it ended" if self.gone else f"no answer within {ANSWER_S:.0f} s"}
            if message.get("job") == job_id:
                return message

    def returncode(self, pid: int) -> int | None:
        """The job's exit code once the starter has reaped it, else None (also once the starter
        has ended: its jobs' codes are lost, their locks say whether they run)."""
        with _lock:
            while self._receive(0) is not None:
                pass
            return self.codes.pop(pid, None)

    def _receive(self, timeout: float) -> dict | None:
        """The starter's next message (an exit code is recorded on the way), or None if none
        came within `timeout` seconds or the starter is gone."""
        if self.gone or not select.select([self.sock], [], [], timeout)[0]:
            return None
        try:
            data = self.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self.gone = True
            return None
        message = json.loads(data)
        if "exit" in message:
            self.codes[message["exit"]] = message["code"]
        return message

    def alive(self) -> bool:
        self.returncode(0)
        return not self.gone and self.proc.poll() is None

    def close(self) -> None:
        """End the starter (its jobs run on) and reap it."""
        self.sock.close()
        self.gone = True
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class StartedJob(forked.ForkedJob):
    """A job forked by a starter: its exit code comes from the starter, which reaps it. Once the
    starter has ended (or never answered: pid None) the job's lock says whether it still runs,
    never its pid, which another process may have by then; a job without a known pid is never
    signalled (the ledger's stop request reaches it, as every job's does), nor one whose lock is
    free."""

    def __init__(self, pid: int | None, starter: Starter | None, lock: Path):
        super().__init__(pid)
        self.starter, self.lock = starter, lock

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.starter is not None:
                self.returncode = self.starter.returncode(self.pid)
            if self.returncode is None and (self.starter is None or self.starter.gone) \
                    and not lab_store.is_held(self.lock):
                self.returncode = -1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.pid is None and timeout is None:    # asked after a kill it could not send
            return self.poll() or -1
        return super().wait(timeout)

    def _send(self, sig) -> None:
        if self.pid is not None:    # signalled only while it runs: its lock held, its pid its own
            super()._send(sig)


def serve(fd: int, entry: Callable[[int], int], warm: Callable[[], None]) -> None:
    """The starter's side: load what every job would and say it is ready, then fork each job
    the worker sends and answer with its pid, and tell each job's exit code once reaped; end when
    the worker's side closes. Computes nothing, and starts no thread, so every fork is safe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # its worker decides when it ends
    _standard_streams_open()
    sock, started = socket.socket(fileno=fd), _imported(dict(os.environ))
    try:
        warm()
    except Exception as e:      # noqa: BLE001 (each job then loads it itself and meets the same)
        print(f"job starter: not preloaded for the jobs ({type(e).__name__}: {e})", file=sys.stderr)
    children: set[int] = set()
    try:
        sock.send(json.dumps({"ready": True}).encode())
        while True:
            if select.select([sock], [], [], 0.1 if children else None)[0]:
                message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
                if not message:
                    return
                _fork(sock, json.loads(message), fds, entry, started, children)
            _reap(sock, children)
    except (BrokenPipeError, ConnectionResetError):     # the worker's process is gone
        return


def _standard_streams_open() -> None:
    """Descriptors 0-2 taken (by /dev/null where the worker's program had one closed), so no
    job's descriptor received later lands on one that a job's process replaces with its log."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)


def _fork(sock, request: dict, fds: list[int], entry, started: dict, children: set[int]) -> None:
    log_fd, lock_fd = fds
    job_id = request["job"]
    try:
        env = {**request["env"], "LAB_JOB_LOCK_FD": str(lock_fd)}
        if _imported(env) != started or threading.active_count() != 1:
            why = "the job's environment is not the starter's"
        else:
            try:
                pid = forked.fork_job(job_id, entry, env, log_fd, lock_fd, request["cwd"],
                                      by="the worker's job starter").pid
            except OSError as e:            # no process to spare: nothing was forked
                why = f"cannot fork: {e}"
            else:
                children.add(pid)
                sock.send(json.dumps({"job": job_id, "pid": pid}).encode())
                return
        sock.send(json.dumps({"job": job_id, "refused": why}).encode())
    finally:
        os.close(log_fd)
        os.close(lock_fd)


def _reap(sock, children: set[int]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
