"""How long a preset's run takes on this machine, measured rather than promised: each finished
run keeps its recent step time and its evaluation's time, per machine and preset, in the store
(record), and an estimate is that speed times the run's steps (run_seconds); and whether the
machine is busy with other work (its load average against its cores), which makes any estimate
longer. The runs' own figures, not a synthetic calibration: a few steps on random full rows timed
far slower than the real run of the same preset.
"""
from __future__ import annotations

import json
import math
import os
import platform
import time

import torch

from lab.config import TrainConfig
from lab.storage import store as lab_store
from lab.training import eta


def _key(preset: str) -> str:
    """This machine (host, cores, threads) and the preset."""
    return f"{platform.node()}:{os.cpu_count()}:{torch.get_num_threads()}:{preset}"


def _path(store=None):
    return lab_store.state_dir(store) / "speeds.json"


def measured(preset: str, store=None) -> dict | None:
    """What the last run of `preset` on this machine measured (step_s, eval_s, load), if any."""
    try:
        return json.loads(_path(store).read_text()).get(_key(preset))
    except (OSError, ValueError):
        return None


def record(preset: str, step_s: float, eval_s: float | None, store=None) -> None:
    """Keep what a run of `preset` measured: its recent step time and its last evaluation's."""
    path = _path(store)
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known[_key(preset)] = {"step_s": step_s, "eval_s": eval_s, "load": os.getloadavg()[0],
                           "measured_at": time.time()}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known))
    tmp.replace(path)


def run_seconds(speed: dict, train_cfg: TrainConfig) -> float | None:
    """A run's training and dev evaluations at a measured speed (None when its training set's
    size is not fixed by its settings)."""
    if train_cfg.max_train is None:
        return None
    steps = math.ceil(train_cfg.max_train / train_cfg.batch_size) * train_cfg.epochs
    dev_batches = math.ceil((train_cfg.max_dev or 0) / train_cfg.eval_batch_size)
    return eta.eta_s(speed["step_s"], steps, train_cfg.epochs, speed.get("eval_s"), dev_batches)


def load() -> tuple[float, int]:
    """(the 1-minute load average, the cores)."""
    return os.getloadavg()[0], os.cpu_count() or 1


BUSY_SHARE = 0.5            # busy: other work keeps at least this share of the cores busy
LOAD_WINDOW_S = 60.0        # the 1-minute load average takes in and forgets at exp(-t/60)


def own_load(spans, now: float, threads: int | None = None) -> float:
    """What the lab's own jobs put on the 1-minute load average at `now`. spans: each job's
    (started, finished), finished None while it runs; each keeps `threads` cores busy meanwhile
    (torch's threads, as many as the cores by default: a training job computes on all of them),
    which the average takes in and then forgets at exp(-t/60), as the kernel's does."""
    threads = threads or min(torch.get_num_threads(), os.cpu_count() or 1)
    total = 0.0
    for started, finished in spans:
        end = min(finished or now, now)
        if started is None or end <= started:
            continue
        total += (threads * (1 - math.exp(-(end - started) / LOAD_WINDOW_S))
                  * math.exp(-(now - end) / LOAD_WINDOW_S))
    return total


def busy_text(load_avg: float, cores: int, own: float = 0.0) -> str:
    """'' on a machine with room, or 'the machine is busy (load 4.1 on 2 cores): expect longer'.
    own: what the lab's own jobs put on the load (own_load), counted apart."""
    if load_avg - own < BUSY_SHARE * cores:
        return ""
    mine = f", about {own:.1f} of it this lab's jobs" if own >= 0.05 else ""
    return f"the machine is busy (load {load_avg:.1f} on {cores} cores{mine}): expect longer"
