"""What a run of small jobs costs through `lab worker` (which forks each job from itself): four
tiny jobs (two steps on 200 captions, 20 dev captions) queued on a fresh store, the worker
started with the job's allocator settings and stopped after 40 s, and the CPU of the worker and
every job it forked (/usr/bin/time's user + sys of the worker's tree).

    python benchmarks/worker_jobs.py [REPO]

REPO: the tree to measure (default this one), e.g. a `git worktree` of an older commit."""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]).resolve()
JOBS, SECONDS = 4, 40


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
    out = subprocess.run(["/usr/bin/time", "-f", "%U %S", "timeout", "-s", "TERM", str(SECONDS)] + lab
                         + ["worker"], env=env, cwd=REPO, capture_output=True, text=True)
    user, sys_s = map(float, re.findall(r"^([\d.]+) ([\d.]+)$", out.stderr, re.M)[-1])
    listed = subprocess.run(lab + ["jobs", "list"], env=env, cwd=REPO, capture_output=True, text=True).stdout
    print(f"{REPO}: {listed.count('done')} of {JOBS} jobs done; the worker and its jobs: "
          f"{user + sys_s:.2f} s of CPU ({user:.2f} user + {sys_s:.2f} sys)")


if __name__ == "__main__":
    main()
