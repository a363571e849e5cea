"""Builds the Gradio app from lab/ui and launches it, with the background job worker beside it.

Honours GRADIO_SERVER_PORT (default 7860), GRADIO_SERVER_NAME (default 127.0.0.1), LAB_STORE,
LAB_DATA_DIR, LAB_WORKER_SLOTS (jobs run at once, default 1: queued jobs run one after another),
LAB_WORKER_NPROC (processes per job under torchrun, e.g. the number of GPUs; default 1),
LAB_WORKER=0 to run without starting a worker (e.g. one runs on a GPU machine sharing the store),
LAB_AUTH=user:password (a login page), LAB_TRUSTED_PROXIES (the reverse proxies whose
X-Forwarded-For is believed; none by default) and LAB_ALLOWED_DIRS (folders the web UI may read and
write outside the store, separated by ':'; none by default).

Ctrl-C or SIGTERM stops the app, its worker and the worker's jobs cleanly: each job saves where it
stands and is left interrupted, ready to resume. Requests in flight stop at their next decoding
step (their callers are told the app is stopping), and the app waits for them before it exits. If
the app is killed outright, its worker notices and does the same; a new app's worker waits for an
old one instead of running beside it.
"""
import os
import signal
import subprocess
import sys

from lab.storage import checkpoints, uploads
from lab.errors import LabError
from lab.worker.executors import job_environment
from lab.worker.jobs import shutdown_grace_s
from lab.ui import build_app, launch_kwargs, queued, work


def start_worker():
    if os.environ.get("LAB_WORKER", "1") == "0":
        return None
    # with the allocator settings of a job's process: the worker forks its jobs (they keep them)
    return subprocess.Popen([sys.executable, "-m", "lab", "worker", "--exit-with-parent",
                             "--slots", os.environ.get("LAB_WORKER_SLOTS", "1"),
                             "--nproc", os.environ.get("LAB_WORKER_NPROC", "1")],
                            env=job_environment(dict(os.environ)),
                            start_new_session=True)    # Ctrl-C reaches it through the app, once


def stop_worker(proc, grace_s: float) -> None:
    if proc is None or proc.poll() is not None:
        return
    print("stopping the worker and its jobs (each saves where it stands) ...", flush=True)
    proc.terminate()
    try:
        proc.wait(timeout=grace_s + 30)
    except subprocess.TimeoutExpired:
        proc.kill()


def stop_requests(grace_s: float) -> int:
    """Every request's work stops at its next step; wait up to grace_s for them. How many are
    still running."""
    work.stop_every_request()
    left = work.wait_for_requests(grace_s)
    if left:
        print(f"{left} request(s) still running after {grace_s:g} s; exiting without them",
              flush=True)
    return left


def _interrupt(*_):
    work.stop_every_request()   # the requests' work stops while the server closes
    raise KeyboardInterrupt     # Gradio's launch() closes the server on it and returns


def main() -> int:
    try:
        kwargs = launch_kwargs(store=os.environ.get("LAB_STORE"))
        grace_s = shutdown_grace_s()
        for line in checkpoints.recover(os.environ.get("LAB_STORE")):
            print(f"store: {line}", flush=True)
        uploads.clear(os.environ.get("LAB_STORE"))
        demo = build_app(store=os.environ.get("LAB_STORE"), data_dir=os.environ.get("LAB_DATA_DIR"))
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    worker = start_worker()
    try:
        queued(demo).launch(**kwargs)
    except KeyboardInterrupt:
        pass
    finally:
        left = stop_requests(grace_s)
        stop_worker(worker, grace_s)
    if left:        # a thread inside torch while the interpreter finalizes would abort the exit
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
