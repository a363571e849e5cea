"""What a run of small jobs costs through `lab worker` (which forks each job from itself): four
tiny jobs (two steps on 200 captions, 20 dev captions) queued on a fresh store, the worker
started with the job's allocator settings and stopped after 40 s, and the CPU of the worker and
every job it forked (/usr/bin/time's user + sys of the worker's tree). With --in-process, the
worker is one made inside another program (as `lab sweep start --wait` makes one), ticked until
the four jobs have ended.

    python benchmarks/worker_jobs.py [--in-process] [REPO]

REPO: the tree to measure (default this one), e.g. a `git worktree` of an older commit."""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

IN_PROCESS = "--in-process" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--in-process"]
REPO = Path(ARGS[0] if ARGS else Path(__file__).resolve().parents[1]).resolve()
JOBS, SECONDS = 4, 40
# a worker inside a program of its own, until every job has ended (at most SECONDS)
TICKED = ("import time; from lab.worker import jobs; w = jobs.Worker(poll_s=0.2); t = time.time()\n"
          "while time.time() - t < {s} and not all(j['status'] in jobs.FINAL for j in jobs.list_jobs()):\n"
          "    w.tick(); time.sleep(0.2)\n").format(s=SECONDS)


def main() -> None:
    sys.path.insert(0, str(REPO))
    from lab.worker.executors import ALLOCATOR
    store = tempfile.mkdtemp()
    env = {**os.environ, "LAB_STORE": store, "PYTHONPATH": str(REPO), **ALLOCATOR}
    lab = [sys.executable, "-m", "lab"]
    for i in range(JOBS):
        subprocess.run(lab + ["jobs", "submit", "--preset", "tiny", "--name", f"j{i}", "--set", "max_steps=2",
                              "--set", "max_dev=20", "--set", "max_train=200"],
                       env=env, cwd=REPO, check=True, capture_output=True)
    worker = [sys.executable, "-c", TICKED] if IN_PROCESS else ["timeout", "-s", "TERM", str(SECONDS)] + lab + ["worker"]
    out = subprocess.run(["/usr/bin/time", "-f", "%U %S"] + worker, env=env, cwd=REPO,
                         capture_output=True, text=True)
    user, sys_s = map(float, re.findall(r"^([\d.]+) ([\d.]+)$", out.stderr, re.M)[-1])
    listed = subprocess.run(lab + ["jobs", "list"], env=env, cwd=REPO, capture_output=True, text=True).stdout
    print(f"{REPO}{' (a worker in a program)' if IN_PROCESS else ''}: {listed.count('done')} of {JOBS} jobs done; "
          f"the worker and its jobs: "
          f"{user + sys_s:.2f} s of CPU ({user:.2f} user + {sys_s:.2f} sys)")


if __name__ == "__main__":
    main()
