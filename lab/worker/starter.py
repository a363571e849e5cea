"""Jobs forked from a starter process, for a worker that cannot fork them itself.

`lab worker` forks each job from itself (lab/worker/forked.py). A worker made inside another
program (`lab sweep start --wait`, a script, a test) must not: that program may have computed on
several threads, and a child forked from it can hang at its first parallel operation. Without a
starter each of its jobs would be a new interpreter paying torch's and the lab's imports (about
2 s of CPU before its first step). The starter is a process of its own (`python -m lab
job-starter FD`, its own session) that imports them once, loads what a job would, computes
nothing, and forks each job it is sent: the job's environment, working folder, log and lock (the
two descriptors passed over a Unix socket), exactly as `lab worker` forks one. It tells the
worker each job's pid, and each job's exit code as it reaps it.

A process keeps one starter, for jobs of one environment as a process reads it at start
(`_imported`: Python's, glibc's, torch's, the libraries' and the lab's settings); a job of
another starts a new one. The starter ends when its worker's process does (its socket closes);
the jobs it forked run on, as a new interpreter's would. Whatever goes wrong (it cannot start,
dies, or does not answer) the worker starts `python -m lab run-job ID` as before.
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
from typing import Callable

from lab.worker import forked

# the variables a process reads as it starts or imports (the rest a job reads when it runs)
_PREFIXES = ("PYTHON", "MALLOC_", "LD_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "TORCH", "PYTORCH_",
             "CUDA", "NCCL_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "LAB_")
_PER_JOB = ("LAB_STORE", "LAB_DATA_DIR", "LAB_JOB_LOCK_FD", "LAB_JOB_LOCKED")
ANSWER_S = 120.0           # the longest a starter may take to answer (its imports come first)

_lock = threading.Lock()
_current: Starter | None = None


def _imported(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(_PREFIXES) and k not in _PER_JOB}


def start(job_id: int, env: dict, log_fd: int, lock_fd: int, cwd: str) -> StartedJob | None:
    """The job's process, forked by this process's starter (started first if it has none for
    jobs of `env`); None when no starter took the job: the caller then starts a new interpreter.
    The caller keeps its own copies of the two descriptors, to close as it would after a Popen.
    A starter that took the job and never answered (killed, or hung: ended here) may have forked
    it: the job is then left to its lock, never started twice (the handle's pid is None; a
    forked job runs on and writes its own end, else its free lock has it marked interrupted)."""
    global _current
    with _lock:
        if _current is not None and (_current.key != _imported(env) or not _current.alive()):
            _current.close()
            _current = None
        try:
            if _current is None:
                _current = Starter(env, cwd)
                _end_at_exit()
            _current.send(job_id, env, log_fd, lock_fd, cwd)
        except OSError as e:                # nothing was sent: nothing can have been forked
            return _without(job_id, f"no job starter ({type(e).__name__}: {e})")
        answer = _current.answer()
        if "pid" in answer:
            return StartedJob(answer["pid"], _current)
        if "refused" in answer:             # it forked nothing and let go of both descriptors
            return _without(job_id, f"the job starter refused it ({answer['refused']})")
        print(f"worker: the job starter did not answer for job {job_id} ({answer['lost']}); the job "
              f"runs if it was forked, else its free lock has it marked interrupted", flush=True)
        _current.close()
        _current = None
        return StartedJob(None, None)


def _without(job_id: int, why: str) -> None:
    global _current
    print(f"worker: {why}; job {job_id} starts as a new process", flush=True)
    if _current is not None:
        _current.close()
    _current = None
    return None


_registered = []


def _end_at_exit() -> None:
    if not _registered:
        atexit.register(end)
        _registered.append(end)


def end() -> None:
    """End this process's starter, if it has one (its jobs run on); at exit too, so that it is
    reaped, and its CPU and its jobs' counted, where the process's own ends."""
    global _current
    with _lock:
        if _current is not None:
            _current.close()
        _current = None


class Starter:
    """The worker's side of one starter process."""

    def __init__(self, env: dict, cwd: str):
        self.key = _imported(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "lab", "job-starter", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), cwd=cwd,
                                         env={k: v for k, v in env.items() if k not in _PER_JOB},
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            theirs.close()
        self.sock, self.codes, self.gone = ours, {}, False

    def send(self, job_id: int, env: dict, log_fd: int, lock_fd: int, cwd: str) -> None:
        request = json.dumps({"job": job_id, "env": env, "cwd": cwd}).encode()
        socket.send_fds(self.sock, [request], [log_fd, lock_fd])

    def answer(self) -> dict:
        """The starter's answer to the job just sent: {"pid": ...}, {"refused": why}, or
        {"lost": why} when none came (it is gone, or silent for ANSWER_S seconds)."""
        while True:
            message = self._receive(ANSWER_S)
            if message is None:
                return {"lost": "it ended" if self.gone else f"no answer within {ANSWER_S:.0f} s"}
            if "pid" in message or "refused" in message:
                return message

    def returncode(self, pid: int) -> int | None:
        while self._receive(0) is not None:
            pass
        if pid in self.codes:
            return self.codes.pop(pid)
        if self.gone and _ended(pid):
            return -1           # another parent's child since the starter ended: the code is lost
        return None

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
        self.returncode(-1)
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


def _ended(pid: int) -> bool:
    """The process is gone, or a zombie left for whichever parent it has now to reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


class StartedJob(forked.ForkedJob):
    """A job forked by a starter: its exit code comes from the starter, which reaps it. Without a
    starter (pid None: whether it was forked is not known) it counts as ended at once, and no
    signal is ever sent."""

    def __init__(self, pid: int | None, starter: Starter | None):
        super().__init__(pid)
        self.starter = starter
        if starter is None:
            self.returncode = -1

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.starter.returncode(self.pid)
        return self.returncode


def serve(fd: int, entry: Callable[[int], int], warm: Callable[[], None]) -> None:
    """The starter's side: load what every job would, then fork each job the worker sends and
    tell it the job's pid, and each job's exit code once reaped; end when the worker's side
    closes. Computes nothing, and starts no thread, so every fork is safe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # its worker decides when it ends
    sock, started = socket.socket(fileno=fd), _imported(dict(os.environ))
    try:
        warm()
    except Exception as e:      # noqa: BLE001 (each job then loads it itself and meets the same)
        print(f"job starter: not preloaded for the jobs ({type(e).__name__}: {e})", file=sys.stderr)
    children: set[int] = set()
    try:
        while True:
            if select.select([sock], [], [], 0.1 if children else None)[0]:
                message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
                if not message:
                    return
                _fork(sock, json.loads(message), fds, entry, started, children)
            _reap(sock, children)
    except (BrokenPipeError, ConnectionResetError):     # the worker's process is gone
        return


def _fork(sock, request: dict, fds: list[int], entry, started: dict, children: set[int]) -> None:
    log_fd, lock_fd = fds
    try:
        env = {**request["env"], "LAB_JOB_LOCK_FD": str(lock_fd)}
        if _imported(env) != started or threading.active_count() != 1:
            sock.send(json.dumps({"refused": "the job's environment is not the starter's"}).encode())
            return
        job = forked.fork_job(request["job"], entry, env, log_fd, lock_fd, request["cwd"],
                              by="the worker's job starter")
        children.add(job.pid)
        sock.send(json.dumps({"pid": job.pid}).encode())
    finally:
        os.close(log_fd)
        os.close(lock_fd)


def _reap(sock, children: set[int]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
