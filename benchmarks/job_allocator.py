"""A job's process with the allocator settings the worker gives it (lab/worker/executors.py:
ALLOCATOR) against glibc's defaults: the same tiny CPU training run (`python -m lab train --preset
tiny`, a step budget), each in a fresh process on an empty store of its own, alternating.

Prints, per round, each run's wall, user and system seconds and its minor page faults (the process
whole: Python and the lab's imports included), and the ratios default / settings.

Run: .venv/bin/python benchmarks/job_allocator.py [--rounds 3] [--steps 30]"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import header, report  # noqa: E402
from lab.worker.executors import ALLOCATOR  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def one_run(steps: int, allocator: bool) -> dict:
    """A fresh process's tiny training run: wall, user, system seconds and minor faults."""
    env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR}
    if allocator:
        env.update(ALLOCATOR)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as store:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "lab", "train", "--preset", "tiny", "--name", "bench",
                        "--set", f"max_steps={steps}"], cwd=ROOT, check=True, capture_output=True,
                       env={**env, "LAB_STORE": store})
        wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": round(wall, 2), "user_s": round(after.ru_utime - before.ru_utime, 2),
            "sys_s": round(after.ru_stime - before.ru_stime, 2),
            "minor_faults": after.ru_minflt - before.ru_minflt}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    header("A job's process: the lab's allocator settings against glibc's defaults")
    rounds = []
    for _ in range(args.rounds):
        default, kept = one_run(args.steps, False), one_run(args.steps, True)
        rounds.append({"default": default, "settings": kept,
                       "wall_ratio": round(default["wall_s"] / kept["wall_s"], 2),
                       "sys_ratio": round(default["sys_s"] / max(kept["sys_s"], 0.01), 2)})
        print(json.dumps(rounds[-1]))
    report(rounds=rounds, steps=args.steps)


if __name__ == "__main__":
    main()
