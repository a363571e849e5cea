"""Steps a job runs after training, by name: a job's spec lists them (`"after": [{"step":
"score", ...its settings}]`) and the job runs each once its training is done (or only them, a
spec with `"after_only": true`). The module that owns a step registers it on import (lab/sweeps
registers `score`), so the job runner knows no step by name; a job's process imports the modules
of MODULES, then those of the entry-point group `tfmr_lab.steps`, before it looks a step up.

May import lab.errors and lab.registry only: lab/worker/jobs.py sits above it, the step modules above jobs.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Callable, Iterator

from lab.errors import LabError
from lab.registry import PluginError

MODULES = ("lab.sweeps",)           # the built-in modules that register steps
ENTRY_POINT_GROUP = "tfmr_lab.steps"


@dataclass(frozen=True)
class Step:
    """check(settings) -> the settings checked and complete (raises a LabError); run(checkpoint,
    settings, store=, data_dir=, should_stop=) -> progress events (dicts with "event")."""
    name: str
    check: Callable[[dict], dict]
    run: Callable[..., Iterator[dict]]


_steps: dict[str, Step] = {}
_lock = threading.Lock()
_loaded = False


def register(name: str, check: Callable[[dict], dict], run: Callable[..., Iterator[dict]]) -> None:
    if name in _steps:
        raise PluginError(f"step {name!r} is already registered (by {_steps[name].run.__module__})")
    _steps[name] = Step(name, check, run)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    with _lock:
        if not _loaded:
            for module in MODULES:
                importlib.import_module(module)
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                ep.load()
            _loaded = True


def get(name) -> Step:
    _load()
    if name not in _steps:
        raise LabError(f"unknown step {name!r} after training; the steps are: {', '.join(sorted(_steps))}"[:300])
    return _steps[name]


def check(after) -> list[dict]:
    """A spec's steps, each checked by its own step: [{"step": NAME, ...settings}]."""
    if not isinstance(after, list) or not all(isinstance(s, dict) and "step" in s for s in after):
        raise LabError('the steps after training are a list of {"step": NAME, ...settings}, '
                       f"got {after!r}"[:300])
    return [{"step": s["step"], **get(s["step"]).check({k: v for k, v in s.items() if k != "step"})}
            for s in after]


def run(checkpoint: str, after: list[dict], **where) -> Iterator[dict]:
    """Each step's events in turn (where: store, data_dir, should_stop)."""
    for s in after:
        yield from get(s["step"]).run(checkpoint, {k: v for k, v in s.items() if k != "step"}, **where)
