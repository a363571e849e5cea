"""The runs of a sweep: the grid times the seeds (or the stored checkpoints it scores), each
run's name and its model and train configs built and checked before anything is queued.
"""
from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass

from lab.config import ConfigError, ModelConfig, TrainConfig
from lab.inputs import tasks
from lab.presets import configs
from lab.storage import checkpoints
from lab.sweeps.spec import SweepSpec, describe_run, value_text

MAX_RUNS = 200                      # runs in one sweep (each is a training job)


@dataclass
class Run:
    index: int
    name: str                 # the checkpoint it writes (and its jobs' name)
    values: dict              # the swept keys' values
    seed: int
    model: ModelConfig | None  # the job's model config (None: a fine-tune of `parent`)
    train: TrainConfig
    parent: str | None
    score_only: bool = False   # a stored checkpoint, scored as it is


def _slug(values: dict, seed: int, many_seeds: bool, constant: set) -> str:
    """A run's name part: text values as they are, numbers after their key ('n_head12'); keys
    every run shares are left out."""
    parts = [str(v) if isinstance(v, str) and not v.replace(".", "").isdigit()
             else f"{k.split('.')[-1]}{value_text(v)}" for k, v in values.items() if k not in constant]
    if many_seeds:
        parts.append(f"s{seed}")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts)).strip("_.-")


def plan(spec: SweepSpec, store=None) -> list[Run]:
    """Every run of the sweep, each config built and checked: a bad value in any run refuses the
    whole sweep before anything is queued."""
    if spec.checkpoints:
        return _score_only_runs(spec, store)
    points = spec.points()
    total = len(points) * len(spec.seeds)
    if total > MAX_RUNS:
        raise ConfigError(f"this sweep has {total} runs ({len(points)} settings x {len(spec.seeds)} "
                          f"seeds); a sweep runs at most {MAX_RUNS}")
    runs, names = [], set()
    keys = {k for p in points for k in p}
    constant = {k for k in keys if len(points) > 1 and len({json.dumps(p.get(k)) for p in points}) == 1}
    for i, (point, seed) in enumerate(itertools.product(points, spec.seeds)):
        values = dict(point)
        parent = values.pop("parent", spec.parent)
        over = list(spec.set) + [f"{k}={value_text(v)}" for k, v in values.items()] + list(spec.budget) \
            + [f"seed={seed}"]
        try:
            model_cfg, train_cfg, changed = configs(spec.preset, over)
        except ConfigError as e:
            raise ConfigError(f"run {i + 1} ({describe_run(point, seed)}): {e}") from None
        if parent and changed:
            raise ConfigError(f"run {i + 1} ({describe_run(point, seed)}): a fine-tune of {parent!r} "
                              f"keeps its parent's architecture; cannot set {', '.join(changed)}")
        _check_scored(train_cfg.task, tasks.objective_of(train_cfg), spec.score,
                      f"run {i + 1} ({describe_run(point, seed)})")
        slug = _slug(point, seed, len(spec.seeds) > 1, constant)
        name = f"{spec.name}-{slug}"
        if not slug or len(name) > 100 or name in names:
            name = f"{spec.name}-{i + 1:03d}"
        names.add(name)
        model, train = model_cfg.to_dict(), train_cfg.to_dict()
        typed_values = {k: typed(k, v, model, train) for k, v in point.items()}
        runs.append(Run(i, name, typed_values, seed, None if parent else model_cfg, train_cfg, parent))
    return runs


def _score_only_runs(spec: SweepSpec, store=None) -> list[Run]:
    """A run per stored checkpoint the sweep scores as it is (no training)."""
    if len(set(spec.checkpoints)) != len(spec.checkpoints):
        raise ConfigError(f"checkpoints names a checkpoint twice: {spec.checkpoints}")
    train = TrainConfig()
    for c in spec.checkpoints:
        info = checkpoints.info(checkpoints.check_name(c), store)
        _check_scored(tasks.task_of(info), None, spec.score, f"checkpoint {c!r}")
    return [Run(i, checkpoints.check_name(c), {"checkpoint": c}, spec.score["seed"], None, train,
                None, score_only=True) for i, c in enumerate(spec.checkpoints)]


def _check_scored(task: str, objective: str | None, score: dict, where: str) -> None:
    """A run's task (objective None: a stored checkpoint, scored as it is) must be one its task's
    plugin scores for sweeps (sweep_check, sweep_score), with these scoring settings."""
    plugin = tasks.get(task)
    if not hasattr(plugin, "sweep_score"):
        raise ConfigError(f"{where}: the {task} task's checkpoints are not scored by sweeps")
    plugin.sweep_check(objective, score, where)


def typed(key: str, value, model: dict | None, train: dict):
    """A swept value as the run's config read it: a grid line gives text ("2"), the table and
    its JSON show the setting's own type (2). model and train: the run's configs as dicts (model
    None for a fine-tune, whose values stay as given). Sweeps written before runs kept typed
    values are read through this too."""
    if not isinstance(value, str):
        return value
    for cfg in (train, model or {}):
        if key in cfg and key != "settings":
            return cfg[key]
    kind, _, setting = key.partition(".")
    return (model or {}).get("settings", {}).get(kind, {}).get(setting, value)
