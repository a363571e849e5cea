"""Where a claimed job runs. The local worker runs each in a child process (lab/worker/jobs.py); with
`--executor ray` (or LAB_EXECUTOR=ray, RAY_ADDRESS naming the cluster) each job is a Ray task that
runs the same `python -m lab run-job ID` on whichever node Ray places it, asking for a GPU of its
own when the cluster has one. The ledger stays the record: the worker claims jobs from it, the
job's process reports to it, and the UI reads it.

The store must be on storage every node sees, at the same path, and the lab checked out at the
same path on every node. The worker holds each job's lock while its task runs, so the job's
liveness is the worker's: a worker that dies frees the locks, its jobs are marked interrupted, and
Ray cancels the tasks it owned (their job processes end with them).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from lab.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXECUTORS = ("local", "ray")

# glibc's allocator, for a job's process: every block from the heap and none handed back while
# the job runs. By default a block over 32 MB (a batch's logits over GPT-2's vocabulary: tokens x
# 50,257 floats) is mapped fresh and unmapped on free, so each training step faults its pages in
# again (benchmarks/job_allocator.py measures both ways). The memory goes back when the job's
# process ends. A variable already set is left as it is.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**32)}


def job_environment(env: dict) -> dict:
    """`env` with the allocator settings a job's process runs best with (its own values win)."""
    return {**ALLOCATOR, **env}


def executor_name(value: str | None = None) -> str:
    name = value or os.environ.get("LAB_EXECUTOR") or "local"
    if name not in EXECUTORS:
        raise ConfigError(f"executor must be one of {', '.join(EXECUTORS)}, got {name!r} "
                          f"(from {'--executor' if value else 'LAB_EXECUTOR'})")
    return name


def _die_with_parent() -> None:
    """In the job's process: a SIGTERM when the Ray task that started it ends (it then saves where
    it stands, as at a shutdown), so no job outlives the lock its worker held."""
    import ctypes
    import signal
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)      # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_job_task(job_id: int, env: dict, log: str) -> dict:
    """The Ray task: the job's process on this node, its output appended to the job's log."""
    import platform
    import subprocess

    import ray
    node = ray.get_runtime_context().get_node_id()[:12]
    with open(log, "ab") as f:
        f.write(f"ray: job {job_id} runs on node {node} ({platform.node()}), GPUs "
                f"{os.environ.get('CUDA_VISIBLE_DEVICES') or 'none'}\n".encode())
        f.flush()
        code = subprocess.run([sys.executable, "-m", "lab", "run-job", str(job_id)], stdout=f,
                              stderr=subprocess.STDOUT, env=job_environment({**os.environ, **env}),
                              cwd=str(ROOT),
                              preexec_fn=_die_with_parent).returncode
    return {"node": node, "returncode": code}


class RayTasks:
    """The jobs a worker has handed to Ray: job id -> (task, the job lock's descriptor)."""

    def __init__(self):
        try:
            import ray
        except ImportError:
            raise ConfigError("the ray executor needs the ray package (make install puts it in the "
                              "lab's environment)") from None
        self.ray = ray
        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS") or None
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False, **({} if address else {"num_cpus": os.cpu_count()}))
        self.remote = ray.remote(run_job_task)
        self.gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        self.tasks: dict[int, tuple] = {}

    def submit(self, job_id: int, fd: int, env: dict, log: str) -> None:
        ref = self.remote.options(num_gpus=self.gpus, num_cpus=1, max_retries=0).remote(job_id, env, log)
        self.tasks[job_id] = (ref, fd)

    def reap(self) -> None:
        """Tasks that ended give their job's lock back (a job whose process died without a word
        is then marked interrupted by the ledger's liveness check)."""
        for job_id, (ref, fd) in list(self.tasks.items()):
            ready, _ = self.ray.wait([ref], timeout=0)
            if ready:
                try:
                    self.ray.get(ref)
                except Exception as e:        # the task itself failed (a node lost): said in the log
                    print(f"worker: job {job_id}'s Ray task failed: {type(e).__name__}: {e}", flush=True)
                os.close(fd)
                del self.tasks[job_id]

    def wait_all(self, deadline: float) -> None:
        for job_id, (ref, fd) in list(self.tasks.items()):
            ready, _ = self.ray.wait([ref], timeout=max(0.1, deadline - time.time()))
            if not ready:
                self.ray.cancel(ref, force=True)
            os.close(fd)
        self.tasks.clear()

    def __len__(self) -> int:
        return len(self.tasks)
