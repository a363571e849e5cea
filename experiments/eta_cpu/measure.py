"""The ETA a run shows against the time it actually took: trains with `python -m lab train ...
--json` in a temporary store, reads the load average every 5 s beside it, and prints, for the
first progress event at least 60, 120, 180 and 240 s after the start, its ETA, the time that was
actually left until the `done` event, and the error.

    python experiments/eta_cpu/measure.py OUT_DIR -- --preset quick --set max_train=6000

OUT_DIR gets events.jsonl (the run's events), load.txt (time and /proc/loadavg) and summary.txt.
"""
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MARKS = (60, 120, 180, 240)


def sample_load(path: Path, stop: threading.Event) -> None:
    with open(path, "w") as out:
        while not stop.is_set():
            out.write(f"{time.time():.1f} {Path('/proc/loadavg').read_text().strip()}\n")
            out.flush()
            stop.wait(5)


def summary(events: list[dict], loads: list[float]) -> str:
    start = next(e["time"] for e in events if e["event"] == "start")
    done = next(e["time"] for e in events if e["event"] == "done")
    lines = [f"run time {done - start:.0f} s; load average (1 min) during it: min {min(loads):.2f}, "
             f"median {sorted(loads)[len(loads) // 2]:.2f}, max {max(loads):.2f}",
             "mark | at (s) | ETA (s) | actually left (s) | error"]
    progress = [e for e in events if e.get("eta_s") is not None and e["event"] != "start"]
    for mark in MARKS:
        e = next((e for e in progress if e["time"] - start >= mark), None)
        if e is None:
            continue
        left = done - e["time"]
        lines.append(f"{mark} s | {e['time'] - start:.0f} | {e['eta_s']:.0f} | {left:.0f} | "
                     f"{100 * (e['eta_s'] - left) / left:+.0f}%")
    return "\n".join(lines)


def main() -> None:
    out, args = Path(sys.argv[1]), sys.argv[sys.argv.index("--") + 1:]
    out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    sampler = threading.Thread(target=sample_load, args=(out / "load.txt", stop))
    sampler.start()
    with tempfile.TemporaryDirectory() as store:
        with open(out / "events.jsonl", "w") as f:
            subprocess.run([sys.executable, "-m", "lab", "train", *args, "--name", "etabench", "--json"],
                           stdout=f, check=True, env={**__import__("os").environ, "LAB_STORE": store})
    stop.set()
    sampler.join()
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()
              if line.startswith("{")]
    start = next(e["time"] for e in events if e["event"] == "start")
    done = next(e["time"] for e in events if e["event"] == "done")
    loads = [float(line.split()[1]) for line in (out / "load.txt").read_text().splitlines()
             if start <= float(line.split()[0]) <= done]
    text = summary(events, loads)
    (out / "summary.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
