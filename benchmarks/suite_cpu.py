"""Where a command's CPU goes, by kind of process: every process of the machine read from /proc
twice a second while the command runs (its CPU so far, kept at the last reading before it ended),
grouped by what its command line says it is (Chromium, an app, a job, a `lab` command, a pytest
worker, ...), beside the whole machine's busy CPU over the same time (/proc/stat: what the
readings miss, processes shorter than half a second and the last half second of each, is the
difference).

    python benchmarks/suite_cpu.py [--out FILE.json] -- COMMAND ...     (default: make test)

Run it with nothing else busy on the machine: everything the machine does is counted. The
figures in docs/benchmarks.md ("Where the suite's CPU goes") are its output."""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")
KINDS = (   # (kind, what its command line holds), the first that matches
    ("Chromium", r"chrom"),
    ("Playwright's driver (node)", r"(^|/)node\b"),
    ("pytest-xdist workers (the tests' own work)", r"exec\(eval\(sys\.stdin"),
    ("the app (app.py)", r"\bapp\.py\b"),
    ("the app's job worker (lab worker)", r"\blab\b.*\bworker\b"),
    ("training jobs (run-job)", r"\brun-job\b"),
    ("`lab` commands the tests run", r"(-m lab|bin/lab)\b"),
    ("python -c (the tests' own scripts)", r"python\S* -c "),
    ("pytest (the main process, pytest a test runs)", r"pytest"),
)


def machine_busy() -> float:
    """Seconds the machine's cores have been busy since it booted (/proc/stat's first line)."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / TICK


def kind(command: str) -> str:
    return next((k for k, pattern in KINDS if re.search(pattern, command)), "other")


class Readings(threading.Thread):
    """Every process's CPU so far, twice a second: {(pid, start): [cpu s, command, first seen]};
    a process that was running before the readings began counts only what it spent after."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen, self.before, self.done = {}, {}, threading.Event()
        self._read(first=True)

    def run(self):
        while not self.done.wait(0.5):
            self._read()

    def _read(self, first=False):
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    after_name = f.read().rsplit(")", 1)[1].split()
                cpu = (int(after_name[11]) + int(after_name[12])) / TICK
                key = (pid, after_name[19])
                if first:
                    self.before[key] = cpu
                    continue
                if key not in self.seen or self.seen[key][2] > time.time() - 2:
                    # read again while young: a child between fork and exec, or a job forked
                    # by `lab worker` before it renames itself, still shows its parent's
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        command = f.read().replace(b"\0", b" ").decode(errors="replace")
                    born = self.seen[key][2] if key in self.seen else time.time()
                    self.seen[key] = [0.0, command, born]
                self.seen[key][0] = cpu - self.before.get(key, 0.0)
            except (OSError, IndexError):        # gone between the listing and the reading
                pass


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--out", help="also write every process's reading here (JSON)")
    args.add_argument("command", nargs="*", default=["make", "test"])
    opts = args.parse_args()
    readings, busy0, t0 = Readings(), machine_busy(), time.time()
    readings.start()
    code = subprocess.call(opts.command)
    readings.done.set()
    readings.join()
    wall, busy = time.time() - t0, machine_busy() - busy0
    by_kind: dict[str, list] = {}
    for cpu, command, _ in readings.seen.values():
        if cpu > 0:
            row = by_kind.setdefault(kind(command), [0.0, 0])
            row[0] += cpu
            row[1] += 1
    seen = sum(cpu for cpu, _ in by_kind.values())
    print(f"\n# {' '.join(opts.command)}: exit {code}, {wall:.0f} s wall, the machine busy "
          f"{busy:.0f} s of CPU ({busy / wall:.2f} cores on average); by kind of process "
          f"(the readings saw {seen:.0f} s of it):")
    print("| kind of process | processes | CPU s | of the machine's |\n| --- | ---: | ---: | ---: |")
    for name, (cpu, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"| {name} | {n} | {cpu:.0f} | {cpu / busy:.0%} |")
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump([{"cpu": cpu, "command": command} for cpu, command, _ in readings.seen.values()
                       if cpu > 0], f)
    return code


if __name__ == "__main__":
    sys.exit(main())
