"""A job's process forked from the worker of `lab worker` instead of a new interpreter.

`python -m lab run-job ID` spends about 1.1 s of CPU importing torch and the lab before its first
step, on every job; the worker has imported them already, so a child forked from it starts at
once. The
child becomes what `run-job` would have been: a session of its own, the job's environment and
working folder, its output in the job's log, the job's lock the only file it holds besides its
standard streams, the signals' default handlers, and
`lab run-job ID` as its command line (what `ps` and /proc show).

A process running Python in more than one thread is never forked (a lock another thread held
would stay held in the child), nor one whose allocator settings are not the job's: the worker
then starts `run-job` as before, as it does under torchrun or Ray. Only `lab worker` (and the
app's worker, which is one) forks, and a job starter (lab/worker/starter.py) for a worker made
inside another program, which never forks itself.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable


def forkable(env: dict, allocator: dict) -> bool:
    """This process may fork the job whose environment is `env`: no thread of Python but this one
    (the native thread numpy's BLAS starts as torch loads is fork-safe, as torch's own
    data-loader processes rely on), and the job's allocator settings already this process's
    (glibc reads them when a process starts; a child keeps its parent's)."""
    if not os.path.isdir("/proc/self/fd"):          # not Linux: never forked
        return False
    return threading.active_count() == 1 and all(os.environ.get(k) == env.get(k) for k in allocator)


class ForkedJob:
    """The part of subprocess.Popen the worker uses, for a forked child."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:       # reaped elsewhere: gone all the same
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"job process {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def terminate(self) -> None:
        self._send(signal.SIGTERM)

    def kill(self) -> None:
        self._send(signal.SIGKILL)

    def _send(self, sig) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def fork_job(job_id: int, entry: Callable[[int], int], env: dict, log_fd: int, lock_fd: int,
             cwd: str, by: str = "the worker") -> ForkedJob:
    """Fork the job's process: it runs entry(job_id) (the `run-job` command) and exits with its
    code; this process (`by`, in the job's log) gets a handle to wait on it."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _become_job(job_id, entry, env, log_fd, lock_fd, cwd, by)       # never returns
    return ForkedJob(pid)


def _become_job(job_id, entry, env, log_fd, lock_fd, cwd, by) -> None:
    code = 1
    try:
        os.setsid()
        os.chdir(cwd)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        _close_all_but({0, 1, 2, lock_fd})
        os.environ.clear()
        os.environ.update(env)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _retitle(f"{os.path.basename(sys.executable)} -m lab run-job {job_id}", f"lab run-job {job_id}")
        sys.argv[1:] = ["run-job", str(job_id)]
        print(f"worker: job {job_id} runs in a process forked from {by} (pid {os.getppid()})",
              flush=True)
        code = entry(job_id)
    except SystemExit as e:
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    except BaseException:            # a bug: its traceback in the job's log, as run-job would print
        import traceback
        traceback.print_exc()
    finally:
        _exit(code)


def _exit(code) -> None:
    """Leave as a finished interpreter would (its exit functions run, its streams flushed), never
    through the worker's own code above the fork."""
    import atexit
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code if isinstance(code, int) else 1)


def _close_all_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:          # the listing's own descriptor, gone already
                pass


def _retitle(*texts: str) -> None:
    """The command line /proc/self/cmdline shows: the original argument strings overwritten in
    place with the first of `texts` that fits the room they had (the worker's own command line is
    usually longer than a job's); Python keeps its own copy of sys.argv."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])        # arg_start, arg_end (fields 48, 49)
        room = end - start - 1
        new = next((t for t in texts if len(t.encode()) <= room), texts[-1])
        new = new.replace(" ", "\0").encode()[:room]
        ctypes.memmove(start, new + b"\0" * (end - start - len(new)), end - start)
    except (OSError, ValueError, IndexError):
        pass
