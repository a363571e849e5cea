"""Sweeps: a named set of training runs over a grid of config keys times seeds, under one budget.

Every run is a job in the ledger (so liveness, one writer per name and exact resume hold for each)
and is scored the same way when its training ends, inside the same job: perplexity of a seeded
subset of a split, and forward / backward / harmonic BLEU-4 of the captions each chosen decoder
writes for it. The per-caption figures are kept, so the table can give every figure a bootstrap
interval and every row a paired difference against a baseline row (same captions, same seeds).

    STORE/.lab/sweeps/NAME/RUN.json    what scoring RUN found (written whole, by its job alone)

A sweep's definition and its runs live in the ledger (tables `sweeps` and `sweep_runs`); a run's
status is that of the newest job with its name and the sweep's. Recipes (experiments/recipes/*.json) are sweep
definitions with two budgets, `cpu` and `full`.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from lab.storage import checkpoints, exports
from lab.inputs import data, tasks
from lab.worker import jobs, steps
from lab.evaluation import metrics
from lab.training import runs
from lab.storage import store as lab_store
from lab.config import SEED_MAX, ConfigError, DecodeConfig, TrainConfig, _Config
from lab.evaluation.evaluate import paired_intervals
from lab.evaluation.metrics import References, bootstrap_indices, percentile_interval
from lab.presets import configs
from lab.evaluation.report import sweep_report
from lab.training.runs import read_events
from lab.inputs.tokenizers import gpt2
from lab.training.progress import format_duration, format_event

SCHEMA = """
CREATE TABLE IF NOT EXISTS sweeps (   -- lab/sweeps.py: a named set of runs, each a job above
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,            -- JSON: the SweepSpec
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sweep_runs (
    sweep TEXT NOT NULL,
    idx INTEGER NOT NULL,
    run TEXT NOT NULL,             -- the checkpoint it writes; its status is its newest job's
    vals TEXT NOT NULL,            -- JSON: the swept keys' values
    seed INTEGER NOT NULL,
    model TEXT NOT NULL,           -- JSON: the run's model config (null for a fine-tune)
    train TEXT NOT NULL,           -- JSON: its train config
    parent TEXT,
    PRIMARY KEY (sweep, idx)
);
"""
jobs.add_tables(SCHEMA)

RECIPES_DIR = Path(__file__).resolve().parent.parent / "experiments" / "recipes"
MAX_RUNS = 200                      # runs in one sweep (each is a training job)
MAX_SCORE_N = 5000
SPLITS = ("train", "dev", "test")
DEFAULT_DECODER = {"decoder": "random", "temperature": 1.0}


@dataclass
class Score(_Config):
    """How each run is scored when its training ends: a seeded subset of `n` captions of `split`,
    and the captions each decoder writes for it (the same subset and seeds for every run: paired).
    pick_on_test: then score, on the test split, the decoder with the best harmonic BLEU here
    (the decoder search)."""
    split: str = "test"
    n: int = 500
    decoders: list = field(default_factory=lambda: [dict(DEFAULT_DECODER)])
    seed: int = 0
    pick_on_test: bool = False
    bleu_tokens: str = "auto"     # "auto": GPT-2 tokens for GPT-2-tokenized models, words
                                  # otherwise; "words" for every run (sweeps across tokenizers)
    exposure: bool = False        # also measure exposure bias on the subset (lab.evaluation.exposure): the
                                  # table shows the gap after 8 own tokens

    BOUNDS: ClassVar[dict] = {"seed": (0, SEED_MAX)}

    def check(self) -> None:
        if self.split not in SPLITS:
            raise ConfigError(f"score.split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if not 1 <= self.n <= MAX_SCORE_N:
            raise ConfigError(f"score.n must be a whole number from 1 to {MAX_SCORE_N}, got {self.n!r}")
        if not isinstance(self.decoders, list) or not 1 <= len(self.decoders) <= 32:
            raise ConfigError("score.decoders must be a list of 1 to 32 decoders, e.g. "
                              '[{"decoder": "top_p", "top_p": 0.9, "temperature": 0.7}]')
        self.decoders = [decode_config(d).to_dict() for d in self.decoders]
        if self.bleu_tokens not in ("auto", "gpt2", "words"):
            raise ConfigError(f"score.bleu_tokens must be 'auto', 'gpt2' or 'words', "
                              f"got {self.bleu_tokens!r}"[:200])
        if self.pick_on_test and self.split == "test":
            raise ConfigError("score.pick_on_test chooses a decoder on another split (dev) and "
                              "reports it on test; set score.split to dev")


def decode_config(d) -> DecodeConfig:
    """A decoder of a sweep: a JSON object, or a line such as 'top_p,temperature=0.7,top_p=0.9'
    (the seed is the sweep's)."""
    if isinstance(d, str):                  # "top_p" or "top_p,temperature=0.7,top_p=0.9"
        head, *rest = d.split(",")
        pairs = dict(p.split("=", 1) for p in rest if "=" in p)
        bad = [p for p in rest if "=" not in p]
        if bad:
            raise ConfigError(f"decoder {d!r}: settings are NAME=VALUE, got {bad[0]!r}")
        d = {"decoder": head.strip(), **{k.strip(): v.strip() for k, v in pairs.items()}}
    if not isinstance(d, dict):
        raise ConfigError(f"a decoder is a JSON object such as {{\"decoder\": \"top_k\", \"top_k\": 40}}, "
                          f"got {d!r}"[:200])
    return DecodeConfig.from_dict({k: v for k, v in d.items() if k != "seed"})


def decoder_label(d: dict) -> str:
    """'top_p p=0.9 t=0.7', 'greedy', 'beam beams=4'."""
    short = {"temperature": "t", "top_p": "p", "top_k": "k", "num_beams": "beams"}
    s = d.get("settings", {})
    return " ".join([d["decoder"]] + [f"{short.get(k, k)}={_num(v)}" for k, v in s.items()])


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass
class SweepSpec(_Config):
    """A sweep's definition. grid: {key: [values]} over config keys (model, train, plugin
    settings as KIND.SETTING, or `parent` for fine-tunes); runs: an explicit list of {key: value}
    instead of (or before) the grid; set: KEY=VALUE for every run; budget: KEY=VALUE applied
    last (epochs, max_train_captions, ...), said in the table. checkpoints: score these stored
    checkpoints as they are, no training (the decoder search)."""
    name: str = ""
    preset: str | None = None
    parent: str | None = None
    grid: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)
    set: list = field(default_factory=list)
    budget: list = field(default_factory=list)
    seeds: list = field(default_factory=lambda: [0])
    score: dict = field(default_factory=dict)
    checkpoints: list = field(default_factory=list)
    baseline: int = 1               # the row (1-based, as shown) differences are paired against
    recipe: str | None = None
    about: str = ""

    BOUNDS: ClassVar[dict] = {"baseline": (1, 10 ** 6)}

    def check(self) -> None:
        check_sweep_name(self.name)
        if not isinstance(self.grid, dict) or not all(
                isinstance(v, list) and v for v in self.grid.values()):
            raise ConfigError("grid must map each key to a non-empty list of values, e.g. "
                              '{"n_head": [1, 3, 6]}')
        if not isinstance(self.runs, list) or not all(isinstance(r, dict) for r in self.runs):
            raise ConfigError('runs must be a list of {key: value} objects, e.g. [{"n_layer": 3}]')
        for key in ("set", "budget"):
            if not isinstance(getattr(self, key), list) or not all(
                    isinstance(p, str) for p in getattr(self, key)):
                raise ConfigError(f"{key} must be a list of KEY=VALUE texts")
        if not isinstance(self.seeds, list) or not self.seeds or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2 ** 31 for s in self.seeds):
            raise ConfigError(f"seeds must be a non-empty list of whole numbers from 0, got {self.seeds!r}"[:200])
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds repeats a seed: {self.seeds}")
        self.score = Score.from_dict(self.score).to_dict()
        if self.score["bleu_tokens"] == "auto" and "tokenizer" in self.swept_keys():
            self.score["bleu_tokens"] = "words"       # one unit of BLEU across tokenizers
        if not isinstance(self.checkpoints, list) or not all(isinstance(c, str) for c in self.checkpoints):
            raise ConfigError("checkpoints must be a list of stored checkpoint names")
        if self.checkpoints and (self.grid or self.runs or self.parent):
            raise ConfigError("a sweep scores stored checkpoints as they are or trains runs over a "
                              "grid, not both: drop checkpoints, or grid/runs/parent")

    def points(self) -> list[dict]:
        """Each run's swept values (explicit runs first, then the grid's product), without seeds."""
        keys = list(self.grid)
        grid = [dict(zip(keys, combo)) for combo in itertools.product(*self.grid.values())] \
            if keys else []
        pts = [dict(r) for r in self.runs] + grid
        return pts or [{}]

    def swept_keys(self) -> list[str]:
        keys = []
        for p in self.points():
            keys += [k for k in p if k not in keys]
        return keys


def parse_grid(lines: list[str], what: str = "grid") -> dict:
    """'KEY=V1,V2' per line ('KEY=A;B' when the values hold commas, e.g. layers=1,2,3;5,6,7)
    -> {KEY: [V1, V2]}: the CLI's --grid flags and the Experiments form's grid lines."""
    grid = {}
    for line in (line.strip() for line in lines):
        if not line:
            continue
        if "=" not in line:
            raise ConfigError(f"{what} expects KEY=V1,V2, e.g. n_head=1,4 (each line is KEY=V1,V2); "
                              f"got {line!r}"[:300])
        key, values = (part.strip() for part in line.split("=", 1))
        vals = [v.strip() for v in values.split(";" if ";" in values else ",") if v.strip()]
        if not vals:
            raise ConfigError(f"{what} {key}: no values; write them as {key}=V1,V2")
        grid[key] = vals
    return grid


def parse_seeds(text: str, what: str = "seeds") -> list[int]:
    """'0,1,2' -> [0, 1, 2]."""
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError(f"{what} expects whole numbers separated by commas (seeds are whole "
                          f"numbers such as 0,1,2); got {text!r}"[:300]) from None


SWEEP_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,59}")


def check_sweep_name(name) -> str:
    if not isinstance(name, str) or not SWEEP_NAME_RE.fullmatch(name):
        raise ConfigError(f"sweep name {name!r} is not allowed: use 1-60 letters, digits, '.', '_' "
                          f"or '-', starting with a letter or digit")
    return name


# ---------------------------------------------------------------- planning and starting

@dataclass
class Run:
    index: int
    name: str                 # the checkpoint it writes (and its jobs' name)
    values: dict              # the swept keys' values
    seed: int
    model: dict | None        # the job's model config (None: a fine-tune of `parent`)
    train: dict
    parent: str | None
    score_only: bool = False   # a stored checkpoint, scored as it is


def _slug(values: dict, seed: int, many_seeds: bool, constant: set) -> str:
    """A run's name part: text values as they are, numbers after their key ('n_head12'); keys
    every run shares are left out."""
    parts = [str(v) if isinstance(v, str) and not v.replace(".", "").isdigit()
             else f"{k.split('.')[-1]}{_text(v)}" for k, v in values.items() if k not in constant]
    if many_seeds:
        parts.append(f"s{seed}")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts)).strip("_.-")


def plan(spec: SweepSpec, store=None) -> list[Run]:
    """Every run of the sweep, each config built and checked: a bad value in any run refuses the
    whole sweep before anything is queued."""
    if spec.checkpoints:
        if len(set(spec.checkpoints)) != len(spec.checkpoints):
            raise ConfigError(f"checkpoints names a checkpoint twice: {spec.checkpoints}")
        train = TrainConfig().to_dict()
        for c in spec.checkpoints:
            info = checkpoints.info(checkpoints.check_name(c), store)
            _check_scored(tasks.task_of(info), None, spec.score, f"checkpoint {c!r}")
        return [Run(i, checkpoints.check_name(c), {"checkpoint": c}, spec.score["seed"], None, train,
                    None, score_only=True) for i, c in enumerate(spec.checkpoints)]
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
        over = list(spec.set) + [f"{k}={_text(v)}" for k, v in values.items()] + list(spec.budget) \
            + [f"seed={seed}"]
        try:
            model_cfg, train_cfg, changed = configs(spec.preset, over)
        except ConfigError as e:
            raise ConfigError(f"run {i + 1} ({_describe(point, seed)}): {e}") from None
        if parent and changed:
            raise ConfigError(f"run {i + 1} ({_describe(point, seed)}): a fine-tune of {parent!r} "
                              f"keeps its parent's architecture; cannot set {', '.join(changed)}")
        _check_scored(train_cfg.task, tasks.objective_of(train_cfg), spec.score,
                      f"run {i + 1} ({_describe(point, seed)})")
        slug = _slug(point, seed, len(spec.seeds) > 1, constant)
        name = f"{spec.name}-{slug}"
        if not slug or len(name) > 100 or name in names:
            name = f"{spec.name}-{i + 1:03d}"
        names.add(name)
        typed = {k: _typed(k, v, model_cfg, train_cfg) for k, v in point.items()}
        runs.append(Run(i, name, typed, seed, None if parent else model_cfg.to_dict(),
                        train_cfg.to_dict(), parent))
    return runs


def _check_scored(task: str, objective: str | None, score: dict, where: str) -> None:
    """A run's task (objective None: a stored checkpoint, scored as it is) must be one its task's
    plugin scores for sweeps (sweep_check, sweep_score), with these scoring settings."""
    plugin = tasks.get(task)
    if not hasattr(plugin, "sweep_score"):
        raise ConfigError(f"{where}: the {task} task's checkpoints are not scored by sweeps")
    plugin.sweep_check(objective, score, where)


def _typed(key: str, value, model_cfg, train_cfg):
    """A swept value as the run's config read it: a grid line gives text ("2"), the table and
    its JSON show the setting's own type (2)."""
    if not isinstance(value, str):
        return value
    for cfg in (train_cfg, model_cfg):
        if key in type(cfg).__dataclass_fields__ and key != "settings":
            return getattr(cfg, key)
    kind, _, setting = key.partition(".")
    settings = model_cfg.to_dict().get("settings", {}).get(kind, {})
    return settings.get(setting, value)


def _text(v) -> str:
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def _describe(values: dict, seed: int) -> str:
    return ", ".join([f"{k}={_text(v)}" for k, v in values.items()] + [f"seed={seed}"])


def check(spec: SweepSpec | dict, store=None) -> tuple[SweepSpec, list[Run]]:
    """The sweep's runs, every one checked as its job will be (nothing queued)."""
    spec = spec if isinstance(spec, SweepSpec) else SweepSpec.from_dict(spec)
    with jobs.connect(store) as con:
        if con.execute("SELECT 1 FROM sweeps WHERE name=?", (spec.name,)).fetchone():
            raise ConfigError(f"sweep {spec.name!r} already exists; choose another name "
                              f"(`python -m lab sweep list` shows them)")
    runs = plan(spec, store)
    for run in runs:
        try:
            jobs.validate_spec(run.name, run.model, run.train, run.parent, store,
                               after=_after(spec), after_only=run.score_only)
            jobs.refuse_busy(run.name, store)
        except ConfigError as e:
            raise ConfigError(f"run {run.index + 1} ({_describe(run.values, run.seed)}): {e}") from None
    return spec, runs


def start(spec: SweepSpec | dict, store=None) -> list[Run]:
    """Check every run, then queue one job per run and record the sweep. A failure while queueing
    (a name taken meanwhile) stops the jobs already queued and records nothing."""
    spec, runs = check(spec, store)
    queued = []
    try:
        for run in runs:
            queued.append(jobs.submit(run.name, run.model, run.train, parent=run.parent,
                                      preset=spec.preset, store=store, after=_after(spec),
                                      after_only=run.score_only))
    except Exception:
        for job_id in queued:
            jobs.request_stop(job_id, store=store)
        raise
    with jobs.connect(store) as con:
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO sweeps (name, spec, created) VALUES (?, ?, ?)",
                    (spec.name, json.dumps(spec.to_dict()), time.time()))
        for run in runs:
            con.execute("INSERT INTO sweep_runs (sweep, idx, run, vals, seed, model, train, parent) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (spec.name, run.index, run.name, json.dumps(run.values), run.seed,
                         json.dumps(run.model), json.dumps(run.train), run.parent))
        con.execute("COMMIT")
    return runs


def _after(spec: SweepSpec) -> list[dict]:
    """What each run's job does once it trained: the step `score` (registered below)."""
    return [{"step": "score", **spec.score, "sweep": spec.name}]


def _sweep_of(job: dict) -> str | None:
    """The sweep whose scoring a job runs after training."""
    return next((s.get("sweep") for s in job["spec"].get("after", []) if s["step"] == "score"), None)


def get(name: str, store=None) -> tuple[SweepSpec, list[dict]]:
    """The sweep's definition and its runs, each with its newest job (status, progress)."""
    check_sweep_name(name)
    jobs.mark_dead(store)
    with jobs.connect(store) as con:
        row = con.execute("SELECT spec FROM sweeps WHERE name=?", (name,)).fetchone()
        if row is None:
            raise ConfigError(f"no sweep {name!r}; `python -m lab sweep list` shows the sweeps")
        spec = SweepSpec(**json.loads(row["spec"]))
        runs = []
        for r in con.execute("SELECT * FROM sweep_runs WHERE sweep=? ORDER BY idx", (name,)):
            # a job's spec names its sweep in its step `score`, or (written before steps were
            # named) in its field `score`
            job = con.execute(
                "SELECT * FROM jobs WHERE name=? AND (json_extract(spec, '$.score.sweep')=? OR EXISTS ("
                "SELECT 1 FROM json_each(spec, '$.after') WHERE json_extract(value, '$.step')='score' "
                "AND json_extract(value, '$.sweep')=?)) ORDER BY id DESC LIMIT 1",
                (r["run"], name, name)).fetchone()
            runs.append({"index": r["idx"], "name": r["run"], "values": json.loads(r["vals"]),
                         "seed": r["seed"], "model": json.loads(r["model"]),
                         "train": json.loads(r["train"]), "parent": r["parent"],
                         "job": jobs.read_row(job)})
    return spec, runs


def list_sweeps(store=None) -> list[dict]:
    with jobs.connect(store) as con:
        names = [r["name"] for r in con.execute("SELECT name FROM sweeps ORDER BY created DESC")]
    out = []
    for name in names:
        spec, runs = get(name, store)
        counts = {}
        for r in runs:
            s = r["job"]["status"] if r["job"] else "missing"
            counts[s] = counts.get(s, 0) + 1
        out.append({"name": name, "recipe": spec.recipe, "runs": len(runs), "statuses": counts,
                    "about": spec.about})
    return out


def run_status(run: dict, store=None) -> str:
    """The run's status: its newest job's, or `done, not scored` when its job ended without
    writing its results."""
    job = run["job"]
    if job is None:
        return "missing"
    if job["status"] == "done" and not results_path(_sweep_of(job) or "", run["name"], store).exists():
        return "done, not scored"
    return job["status"]


def _pick(runs: list[dict], only: str | None) -> list[dict]:
    if only is None:
        return runs
    chosen = [r for r in runs if r["name"] == only or str(r["index"] + 1) == str(only)]
    if not chosen:
        raise ConfigError(f"the sweep has no run {only!r}; its runs are: "
                          f"{', '.join(r['name'] for r in runs)}"[:400])
    return chosen


def stop(name: str, run: str | None = None, mode: str = "now", store=None) -> list[str]:
    """Stop the sweep's queued and running jobs (or one run's); says what it did per run."""
    _, runs = get(name, store)
    said = []
    for r in _pick(runs, run):
        job = r["job"]
        if job and job["status"] in ("queued", "running"):
            after = jobs.request_stop(job["id"], mode, store)
            what = "stopped" if after["status"] == "stopped" else f"asked to stop {mode}"
            said.append(f"{r['name']}: job {job['id']} {what}")
    return said or ["nothing to stop: no run is queued or running"]


def resume(name: str, run: str | None = None, store=None) -> list[str]:
    """Go on with every run that did not end (stopped, interrupted, failed), or one: training
    resumes where it stood; a run whose training ended but whose scoring did not is scored; a
    run stopped before it started starts."""
    spec, runs = get(name, store)
    said = []
    for r in _pick(runs, run):
        job = r["job"]
        if job is None or job["status"] not in ("stopped", "interrupted", "failed"):
            continue
        try:       # the job's own resume: training where it stood, or scoring once it trained
            if spec.checkpoints or _saved_anything(r["name"], store):
                job_id = jobs.resume(job["id"], store)
            else:
                job_id = jobs.submit(r["name"], r["model"], r["train"], parent=r["parent"],
                                     preset=spec.preset, store=store, after=_after(spec))
        except ConfigError as e:
            said.append(f"{r['name']}: {e}")
            continue
        said.append(f"{r['name']}: queued job {job_id}")
    return said or ["nothing to resume: every run is queued, running or done"]


def _saved_anything(run: str, store=None) -> bool:
    return runs.last_dir(run, store).is_dir() or run in checkpoints.names(store)


# ---------------------------------------------------------------- scoring (inside a run's job)

def results_path(sweep: str, run: str, store=None) -> Path:
    return lab_store.state_dir(store, "sweeps") / sweep / f"{run}.json"


def kept_checkpoints(run: str, store=None) -> list[tuple[str, str]]:
    """The checkpoints a run keeps, with what chose each (its task's metrics: its own name by
    early_stop's metric or the task's first, and NAME-bleu when keep_bleu_best kept one too)."""
    train = checkpoints.info(run, store).get("train") or {}
    if not train:
        return [(run, "as stored")]
    # the stored config as it was written (trusted: its run validated it)
    cfg = TrainConfig(**{k: v for k, v in train.items() if k in TrainConfig.__dataclass_fields__})
    kept = runs.kept_checkpoints(run, cfg)
    return [(name, m.label) for i, (name, m) in enumerate(kept) if i == 0 or name in checkpoints.names(store)]


def score_run(run: str, score: dict, store=None, data_dir=None, should_stop=None):
    """Score the checkpoints the run `run` keeps as the sweep says; yields progress events and
    writes the results file whole at the end (a stop leaves no file: resuming scores again)."""
    sweep = score["sweep"]
    sc = Score.from_dict({k: v for k, v in score.items() if k != "sweep"})
    abort = (lambda: should_stop() == "now") if should_stop else None
    out = {"run": run, "sweep": sweep, "score": sc.to_dict(), "kept": []}
    out.update(training_figures(runs.run_dir_for(run, store) / "metrics.jsonl"))
    t0 = time.time()
    try:
        for name, kept_by in kept_checkpoints(run, store):
            entry = yield from _score_checkpoint(name, sc, store, data_dir, abort, t0)
            out["kept"].append({**entry, "kept_by": kept_by})
    except metrics.Aborted:
        yield {"event": "stopped", "reason": "stopped while scoring; resume scores it again",
               "time": time.time()}
        return
    out["scored_s"] = time.time() - t0
    path = results_path(sweep, run, store)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(out))
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    yield {"event": "scored", "sweep": sweep, "elapsed_s": time.time() - t0,
           "summary": summary_line(out), "time": time.time()}


def _score_checkpoint(name: str, sc: Score, store, data_dir, abort, t0: float):
    """One checkpoint, scored by its task's plugin (a generator of progress events that returns
    the figures: see the task's sweep_score)."""
    ck = checkpoints.load(name, store)
    task = tasks.task_of(ck.meta)
    plugin = tasks.get(task)
    if not hasattr(plugin, "sweep_score"):
        raise ConfigError(f"checkpoint {name!r}: the {task} task's checkpoints are not scored by sweeps")
    return (yield from plugin.sweep_score(ck, sc, data_dir=data_dir, abort=abort, t0=t0))


def _check_score_step(settings: dict) -> dict:
    """The step `score`'s settings: the sweep's name and its Score."""
    sweep = check_sweep_name(settings.get("sweep"))
    return {**Score.from_dict({k: v for k, v in settings.items() if k != "sweep"}).to_dict(),
            "sweep": sweep}


def _score_step(checkpoint: str, settings: dict, store=None, data_dir=None, should_stop=None):
    return score_run(checkpoint, settings, store, data_dir, should_stop)


steps.register("score", _check_score_step, _score_step)


def best_decoder(split_results: dict) -> dict:
    """The decoder with the highest harmonic BLEU on a split's results."""
    return max(split_results["decoders"], key=lambda d: _harmonic(d["forward"], d["backward"]))["decode"]


def _harmonic(fwd: list, bwd: list) -> float:
    f, b = sum(fwd) / len(fwd), sum(bwd) / len(bwd)
    return 2 * f * b / (f + b) if f + b else 0.0


def summary_line(res: dict) -> str:
    parts = []
    for entry in res["kept"]:
        for split, s in entry["splits"].items():
            who = f"{entry['checkpoint']} " if len(res["kept"]) > 1 else ""
            if "correct" in s:
                parts.append(f"{who}{split} accuracy {100 * sum(s['correct']) / s['n']:.1f}% "
                             f"({sum(s['correct'])} of {s['n']})")
                continue
            nll = [a / b for a, b in zip(s["nll"], s["count"])]
            parts.append(f"{who}{split} perplexity {math.exp(sum(nll) / len(nll)):.3f}")
            parts += [f"{d['label']} harmonic BLEU {_harmonic(d['forward'], d['backward']):.4f}"
                      for d in s["decoders"]]
    return "; ".join(parts)


def kv_bytes_per_token(model, tokens: int = 32) -> float:
    """Bytes the generation cache holds per token after `tokens` tokens (every layer's keys and
    values; a windowed attention keeps fewer, a recomputing family keeps only the ids)."""
    import torch
    n = min(tokens, model.config.n_positions)
    with torch.no_grad():
        past = model(torch.zeros(1, n, dtype=torch.long, device=next(model.parameters()).device)
                     ).past_key_values
    total = 0
    for entry in past:
        items = entry if isinstance(entry, (tuple, list)) else (entry,)
        total += sum(t.numel() * t.element_size() for t in items if torch.is_tensor(t))
    return total / n


def training_figures(path: Path) -> dict:
    """From a run's metrics log: training time (all its segments, resumes included), real tokens
    per second (the last measured), and the dev curve."""
    total, seg, rate, curve, losses = 0.0, 0.0, None, [], []
    for ev in read_events(path):
        e = ev.get("event")
        if e == "start":
            total, seg = total + seg, 0.0
        if isinstance(ev.get("elapsed_s"), (int, float)) and e in ("step", "progress", "done"):
            seg = max(seg, ev["elapsed_s"])
        if isinstance(ev.get("tokens_per_s"), (int, float)):
            rate = ev["tokens_per_s"]
        if e == "eval" and "dev_perplexity" in ev:
            curve.append([ev.get("step"), ev["dev_perplexity"]])
        if e == "step" and "train_loss" in ev:
            losses.append([ev.get("step"), ev["train_loss"]])
    return {"train_s": total + seg, "tokens_per_s": rate, "dev_curve": curve, "loss_curve": losses}


def read_results(sweep: str, run: str, store=None) -> dict | None:
    try:
        return json.loads(results_path(sweep, run, store).read_text())
    except (OSError, json.JSONDecodeError):
        return None


# ---------------------------------------------------------------- the results table

COLUMNS = ["kept_by", "checkpoint", "epoch", "decoder", "split", "status", "params", "train_s",
           "tokens_per_s", "dev_perplexity", "dev_harmonic_bleu", "perplexity", "perplexity_ci",
           "word_perplexity", "word_perplexity_ci", "forward_bleu", "forward_bleu_ci",
           "backward_bleu", "backward_bleu_ci", "harmonic_bleu", "harmonic_bleu_ci",
           "kv_bytes_per_token", "gen_tokens_per_s", "perplexity_diff", "perplexity_diff_ci",
           "harmonic_bleu_diff", "harmonic_bleu_diff_ci", "exposure_gap", "exposure_gap_ci",
           "accuracy", "accuracy_ci", "accuracy_diff", "accuracy_diff_ci", "best"]


def table(name: str, store=None, baseline: int | None = None, n_boot: int = 1000) -> dict:
    """One row per run, kept checkpoint and decoder: the swept values, status, size, training time
    and speed, dev and scored perplexity, BLEU with 95% intervals, cache bytes and generation
    speed, and the paired difference against the baseline row (a row number from 1).
    {"columns", "rows", "baseline_row", "swept", "spec", ...}."""
    spec, runs = get(name, store)
    swept = spec.swept_keys() + (["seed"] if len(spec.seeds) > 1 else [])
    rows, figures = _rows(name, runs, swept, store)
    scored = [i for i, f in enumerate(figures) if f is not None]
    baseline = spec.baseline if baseline is None else baseline
    base_i = baseline - 1 if 0 < baseline <= len(rows) and figures[baseline - 1] is not None \
        else (scored[0] if scored else None)
    # tokenizers differ: a caption's per-token perplexities differ in kind, per word they pair
    per_word = len({figures[i]["tokenizer"] for i in scored}) > 1
    _intervals(rows, figures, base_i, n_boot, spec.score["seed"], per_word)
    _mark_best(rows, scored, per_word)
    columns = ["row", "run"] + swept + COLUMNS
    answers = any(tasks.meta(tasks.task_of(r["train"])).get("sweep_figures") == "answers"
                  for r in runs) or bool(scored) and all("correct" in figures[i] for i in scored)
    return {"sweep": name, "spec": spec.to_dict(), "columns": columns,
            "rows": [{c: row.get(c) for c in columns} for row in rows],
            "baseline_row": rows[base_i]["row"] if base_i is not None else None,
            "swept": swept, "bootstrap": n_boot, "per_word": per_word, "answers": answers}


def _rows(name: str, runs: list[dict], swept: list[str], store=None) -> tuple[list[dict], list]:
    """The table's rows without their intervals, and each row's per-caption figures (None for a
    run not scored yet)."""
    rows, figures = [], []
    for r in runs:
        res = read_results(name, r["name"], store)
        base = {"row": len(rows) + 1, "run": r["name"], "status": run_status(r, store),
                **{k: r["values"].get(k, r["seed"] if k == "seed" else "") for k in swept}}
        if res is None:
            figs = training_figures(_metrics_path(r["name"], store))
            rows.append({**base, "train_s": figs["train_s"] or None, "tokens_per_s": figs["tokens_per_s"]})
            figures.append(None)
            continue
        for entry in res["kept"]:
            for split, s in entry["splits"].items():
                if "correct" in s:          # answers (right or wrong): one row, its accuracy
                    right = sum(s["correct"])
                    rows.append({**base, "row": len(rows) + 1, "kept_by": entry["kept_by"],
                                 "checkpoint": entry["checkpoint"], "epoch": entry["epoch"],
                                 "decoder": s["decoders"][0]["label"], "split": split,
                                 "params": entry["params"], "train_s": res.get("train_s"),
                                 "tokens_per_s": res.get("tokens_per_s"),
                                 "dev_perplexity": entry["dev_perplexity"],
                                 "kv_bytes_per_token": entry["kv_bytes_per_token"],
                                 "gen_tokens_per_s": s["decoders"][0]["tokens_per_s"],
                                 "accuracy": right / s["n"], "accuracy_ci": metrics.wilson(right, s["n"])})
                    figures.append({"hash": s["subset_hash"], "tokenizer": entry.get("tokenizer"),
                                    "correct": s["correct"]})
                    continue
                for d in s["decoders"]:
                    rows.append({**base, "row": len(rows) + 1, "kept_by": entry["kept_by"],
                                 "checkpoint": entry["checkpoint"], "epoch": entry["epoch"],
                                 "decoder": d["label"], "split": split, "params": entry["params"],
                                 "train_s": res.get("train_s"), "tokens_per_s": res.get("tokens_per_s"),
                                 "dev_perplexity": entry["dev_perplexity"],
                                 "dev_harmonic_bleu": entry["dev_harmonic_bleu"],
                                 "kv_bytes_per_token": entry["kv_bytes_per_token"],
                                 "gen_tokens_per_s": d["tokens_per_s"], **_exposure_gap(s)})
                    figures.append({"hash": s["subset_hash"], "tokenizer": entry.get("tokenizer"),
                                    "nll": [a / b for a, b in zip(s["nll"], s["count"])],
                                    "cap_nll": s["nll"], "cap_words": s["words"],
                                    "fwd": d["forward"], "bwd": d["backward"]})
    return rows, figures


def _exposure_gap(split_results: dict) -> dict:
    """The exposure-bias gap after the longest own prefix measured (8 tokens), when measured."""
    rows = split_results.get("exposure")
    if not rows:
        return {}
    last = rows[-1]
    return {"exposure_gap": last["gap"], "exposure_gap_ci": last["gap_ci"],
            "exposure_prefix": last["prefix"]}


def _intervals(rows: list[dict], figures: list, base_i: int | None, n_boot: int, seed: int,
               per_word: bool = False) -> None:
    """Each scored row's intervals, and its paired difference against the baseline row where both
    scored the same captions (perplexity only between different checkpoints or splits; per word
    when the tokenizers differ)."""
    groups: dict[str, list[int]] = {}
    for i, f in enumerate(figures):
        if f is not None:
            groups.setdefault(f["hash"], []).append(i)
    for members in groups.values():
        if base_i in members:                     # the baseline first: differences against it
            members = [base_i] + [i for i in members if i != base_i]
        if "correct" in figures[members[0]]:
            if base_i in members:
                _accuracy_differences(rows, figures, members, n_boot, seed)
            continue
        shown, diffs = paired_intervals({i: {k: v for k, v in figures[i].items()
                                             if k not in ("hash", "tokenizer")}
                                         for i in members}, n_boot, seed)
        for i in members:
            rows[i].update({k: v for k, v in shown[i].items() if k in COLUMNS})
        if base_i not in members:
            continue
        for d in diffs:
            row, base = rows[d["model"]], rows[base_i]
            row["harmonic_bleu_diff"], row["harmonic_bleu_diff_ci"] = d["harmonic_bleu_diff"], d["harmonic_bleu_diff_ci"]
            if (row["checkpoint"], row["split"]) != (base["checkpoint"], base["split"]):
                kind = "word_perplexity" if per_word else "perplexity"
                row["perplexity_diff"], row["perplexity_diff_ci"] = d[f"{kind}_diff"], d[f"{kind}_diff_ci"]


def _accuracy_differences(rows: list[dict], figures: list, members: list[int], n_boot: int,
                          seed: int) -> None:
    """Each row's accuracy minus the baseline's (members[0]), paired by question."""
    base = figures[members[0]]["correct"]
    idx = metrics.bootstrap_indices(len(base), n_boot, seed)
    for i in members[1:]:
        rows[i]["accuracy_diff"], rows[i]["accuracy_diff_ci"] = \
            metrics.paired_difference(figures[i]["correct"], base, idx)


def _mark_best(rows: list[dict], scored: list[int], per_word: bool = False) -> None:
    """In each split, the rows of the lowest perplexity (per word when tokenizers differ) and the
    row of the best harmonic BLEU; among birth-place rows, those of the best accuracy."""
    answered = [i for i in scored if rows[i].get("accuracy") is not None]
    if answered:
        top = max(rows[i]["accuracy"] for i in answered)
        for i in answered:
            rows[i]["best"] = "best accuracy" if rows[i]["accuracy"] == top else ""
    scored = [i for i in scored if i not in answered]
    ppl = "word_perplexity" if per_word else "perplexity"
    for split in {rows[i]["split"] for i in scored}:
        here = [i for i in scored if rows[i]["split"] == split]
        low = min(rows[i][ppl] for i in here)
        top = max(here, key=lambda i: rows[i]["harmonic_bleu"])
        for i in here:
            rows[i]["best"] = ", ".join((["lowest perplexity"] if rows[i][ppl] == low else [])
                                        + (["best harmonic BLEU"] if i == top else []))


def _metrics_path(run: str, store=None) -> Path:
    return runs.run_dir_for(run, store) / "metrics.jsonl"


def curves(name: str, store=None) -> dict[str, dict]:
    """Each run's dev perplexity and training loss by step, for overlaid plots."""
    _, runs = get(name, store)
    out = {}
    for r in runs:
        figs = training_figures(_metrics_path(r["name"], store))
        out[r["name"]] = {"dev": figs["dev_curve"], "loss": figs["loss_curve"]}
    return out


# ---------------------------------------------------------------- reading the table

def _fmt(v, digits: int) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _with_ci(row: dict, key: str, digits: int) -> str:
    v, ci = row.get(key), row.get(f"{key}_ci")
    if v is None:
        return ""
    return f"{v:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else f"{v:.{digits}f}"


def display(t: dict) -> tuple[list[str], list[list[str]]]:
    """The table as people read it: figures rounded, intervals in brackets, times in minutes."""
    two = len({r["kept_by"] for r in t["rows"] if r["kept_by"]}) > 1 \
        or any(r["kept_by"] not in (None, "", "as stored", "dev perplexity") for r in t["rows"])
    vs = f" vs #{t['baseline_row']}" if t["baseline_row"] else ""
    if t.get("answers"):
        return _display_answers(t, vs)
    headers = ["#", *t["swept"], *(["kept by", "epoch"] if two else []), "decoder", "split", "status",
               "params", "train time", "tok/s", "dev ppl", "ppl [95%]", "ppl/word [95%]", "fwd BLEU", "bwd BLEU",
               "harmonic BLEU [95%]", "KV B/tok", "gen tok/s",
               f"Δppl{vs} [95%]", f"Δharmonic{vs} [95%]"]
    exposure = any(r.get("exposure_gap") is not None for r in t["rows"])
    headers += (["exposure gap @8 [95%]"] if exposure else []) + ["best"]
    rows = []
    for r in t["rows"]:
        rows.append([str(r["row"]), *[_text(r[k]) if r[k] is not None else "" for k in t["swept"]],
                     *([r["kept_by"] or "", _fmt(r["epoch"], 0)] if two else []), r["decoder"] or "", r["split"] or "", r["status"],
                     f"{r['params'] / 1e6:.2f}M" if r["params"] else "",
                     format_duration(r["train_s"]) if r["train_s"] else "",
                     f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "",
                     _fmt(r["dev_perplexity"], 2), _with_ci(r, "perplexity", 2),
                     _with_ci(r, "word_perplexity", 2), _with_ci(r, "forward_bleu", 3),
                     _with_ci(r, "backward_bleu", 3), _with_ci(r, "harmonic_bleu", 3),
                     f"{r['kv_bytes_per_token']:,.0f}" if r["kv_bytes_per_token"] is not None else "",
                     f"{r['gen_tokens_per_s']:,.0f}" if r["gen_tokens_per_s"] else "",
                     _with_ci(r, "perplexity_diff", 2), _with_ci(r, "harmonic_bleu_diff", 3),
                     *([_with_ci(r, "exposure_gap", 4)] if exposure else []), r["best"] or ""])
    return headers, rows


def _display_answers(t: dict, vs: str) -> tuple[list[str], list[list[str]]]:
    """A birth-place sweep: accuracy, its Wilson interval and the paired difference."""
    headers = ["#", *t["swept"], "decoder", "split", "status", "params", "train time", "tok/s",
               "dev ppl", "accuracy [95%]", f"Δaccuracy{vs} [95%]", "best"]
    pct = lambda r, k: "" if r.get(k) is None else (
        f"{100 * r[k]:.1f}%" + (f" [{100 * r[k + '_ci'][0]:.1f}, {100 * r[k + '_ci'][1]:.1f}]"
                                if r.get(k + "_ci") else ""))
    rows = [[str(r["row"]), *[_text(r[k]) if r[k] is not None else "" for k in t["swept"]],
             r["decoder"] or "", r["split"] or "", r["status"],
             f"{r['params'] / 1e6:.2f}M" if r["params"] else "",
             format_duration(r["train_s"]) if r["train_s"] else "",
             f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "",
             _fmt(r["dev_perplexity"], 2), pct(r, "accuracy"), pct(r, "accuracy_diff"), r["best"] or ""]
            for r in t["rows"]]
    return headers, rows


def budget_text(spec: dict) -> str:
    parts = [f"preset {spec['preset']}"] if spec.get("preset") else []
    if spec.get("parent"):
        parts.append(f"fine-tuning {spec['parent']}")
    parts += spec.get("set", []) + spec.get("budget", [])
    sc = spec["score"]
    parts.append(f"scored on {sc['n']:,} {sc['split']} captions (seed {sc['seed']})"
                 + ("; the best decoder on dev then on test" if sc.get("pick_on_test") else ""))
    if len(spec.get("seeds", [])) > 1:
        parts.append(f"seeds {', '.join(map(str, spec['seeds']))}")
    return "; ".join(parts)


def markdown(t: dict) -> str:
    headers, rows = display(t)
    esc = lambda s: str(s).replace("|", "\\|")
    lines = [f"Sweep `{t['sweep']}`" + (f" (recipe {t['spec']['recipe']})" if t["spec"].get("recipe") else "")
             + f": {budget_text(t['spec'])}.", "",
             "| " + " | ".join(map(esc, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    lines += ["", how_text(t)]
    return "\n".join(lines) + "\n"


def how_text(t: dict) -> str:
    """What the table's figures are, in one paragraph."""
    against = f"row #{t['baseline_row']}" if t["baseline_row"] else "the baseline row, once one is scored"
    if t.get("answers"):
        return (f"Accuracy: the greedy answer (up to the next \u2047) equal to the place, over the "
                f"dev questions; 95% Wilson interval; differences (in points) paired by question "
                f"against {against}, percentile bootstrap over questions ({t['bootstrap']} "
                f"resamples). The London baseline scores 5.0% on dev.")
    words = ("; the runs' tokenizers differ, so runs compare per word (the lowest perplexity "
             "and Δppl are per word) and BLEU is on whitespace words") if t.get("per_word") else ""
    return (f"Perplexity is the assignment's (mean over captions of the per-token loss, then exp), "
            f"per word beside it{words}; BLEU-4 forward = each generated caption against every caption of "
            f"the split, backward = each reference of the subset against the generated ones; "
            f"intervals: percentile bootstrap over captions ({t['bootstrap']} resamples), differences "
            f"paired by caption against {against}.")


def csv_rows(t: dict) -> tuple[list[str], list[list]]:
    """Raw figures, each interval as two columns (_lo, _hi)."""
    headers = []
    for c in t["columns"]:
        headers += [f"{c}_lo", f"{c}_hi"] if c.endswith("_ci") else [c]
    rows = []
    for r in t["rows"]:
        row = []
        for c in t["columns"]:
            if c.endswith("_ci"):
                row += list(r[c]) if r[c] else [None, None]
            else:
                row.append(_text(r[c]) if isinstance(r[c], list) else r[c])
        rows.append(row)
    return headers, rows


def export(name: str, out_dir: Path | None = None, store=None) -> list[str]:
    """The sweep's table as CSV, JSON, Markdown and a self-contained HTML report."""
    t, drawn = table(name, store), curves(name, store)
    files = {".csv": exports.table_csv(*csv_rows(t)),
             ".json": json.dumps({**t, "curves": drawn}, indent=2, default=str),
             ".md": markdown(t),
             ".html": sweep_report(t, display(t), how_text(t), drawn, budget_text(t["spec"]))}
    written = []
    for suffix, text in files.items():
        path = Path(out_dir) / f"{name}{suffix}" if out_dir else exports.fresh(f"sweep-{name}", suffix, store)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(str(path))
    return written


# ---------------------------------------------------------------- recipes

def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.json"))


def recipe(name: str, budget: str = "cpu") -> dict:
    """A recipe's sweep definition at a budget (without the sweep's name)."""
    if name not in recipe_names():
        raise ConfigError(f"unknown recipe {name!r}; the recipes are: {', '.join(recipe_names())}")
    doc = json.loads((RECIPES_DIR / f"{name}.json").read_text(encoding="utf-8"))
    budgets = doc.pop("budgets", {})
    if budget not in budgets:
        raise ConfigError(f"recipe {name!r} has the budgets {', '.join(budgets)}, not {budget!r}")
    doc.pop("seed_table", None)
    over = dict(budgets[budget])
    doc["budget"] = over.pop("set", [])
    doc.pop("note", None), over.pop("note", None)
    doc["score"] = {**doc.get("score", {}), **over.pop("score", {})}
    doc.update(over)
    doc["recipe"] = f"{name} ({budget})"
    return doc


def recipe_info(name: str) -> dict:
    if name not in recipe_names():
        raise ConfigError(f"unknown recipe {name!r}; the recipes are: {', '.join(recipe_names())}")
    return json.loads((RECIPES_DIR / f"{name}.json").read_text(encoding="utf-8"))


def all_ended(name: str, store=None) -> bool:
    _, runs = get(name, store)
    return all(r["job"] is None or r["job"]["status"] in jobs.FINAL for r in runs)


def wait(name: str, store=None, data_dir=None, say=print, poll_s: float = 1.0,
         executor: str | None = None) -> None:
    """Serve the store's queued jobs with a local worker (or, when another worker serves the
    store, watch it) until every run of the sweep has ended; a line per run as it moves on.
    Interrupted (Ctrl-C), the runs stop where they stand, resumable with `sweep resume`."""
    lock = lab_store.try_acquire(lab_store.lock_path("worker", store))
    worker = jobs.Worker(store, data_dir=data_dir, poll_s=poll_s,
                         executor=executor if lock is not None else "local")
    if lock is not None:
        for line in checkpoints.recover(store):       # as a worker does when it starts serving
            say(f"worker: {line}")
    else:
        say(f"another worker (pid {lab_store.holder(lab_store.lock_path('worker', store))}) serves "
            f"this store; watching it run the sweep")
    said: dict[str, tuple] = {}      # run -> (what was said, when): a line when it changes,
    try:                              # and a training step's line at most every 30 s
        while True:
            if lock is not None:
                worker.tick()
            _, runs = get(name, store)
            for r in runs:
                job = r["job"] or {"status": "missing", "progress": {}, "error": None}
                ev = job["progress"] or {}
                line = format_event(ev, r["name"]) if ev.get("event") else ""
                key = (job["status"], line if ev.get("event") in ("eval", "scored", "scoring") else "")
                last_key, last_t = said.get(r["name"], (None, 0.0))
                if key != last_key or (ev.get("event") == "step" and time.time() - last_t > 30):
                    said[r["name"]] = (key, time.time())
                    say(f"{r['name']}: {job['status']}" + (f": {line}" if line else "")
                        + (f" ({job['error']})" if job.get("error") else ""))
            if all(r["job"] is None or r["job"]["status"] in jobs.FINAL for r in runs):
                return
            time.sleep(poll_s)
    finally:
        if lock is not None:
            worker.shutdown()
            os.close(lock)


# ---------------------------------------------------------------- BLEU between the splits

SEED_SPLIT_BLEU = {("train", "dev"): 0.550, ("train", "test"): 0.611, ("dev", "test"): 0.538}


def split_bleu(data_dir=None, tokens: str = "gpt2", n_boot: int = 1000) -> dict:
    """BLEU-4 of each split against another (all captions of both; GPT-2 tokens as the report):
    how alike the splits are, the ceiling a caption model is read against. Intervals: bootstrap
    over the captions of both sides (per-sentence scores computed once, resampled)."""
    import torch

    tok = gpt2() if tokens == "gpt2" else None
    splits = {s: data.load_split(s, data_dir) for s in ("train", "dev", "test")}
    toks = {s: tok.encode_batch(c) if tok else [x.split() for x in c] for s, c in splits.items()}
    prepared = {s: References(t) for s, t in toks.items()}
    rows = []
    for (a, b), seed_value in SEED_SPLIT_BLEU.items():
        fwd = torch.tensor(prepared[b].sentence_bleus(toks[a]), dtype=torch.float64)
        bwd = torch.tensor(prepared[a].sentence_bleus(toks[b]), dtype=torch.float64)
        fb = fwd[bootstrap_indices(len(fwd), n_boot, 0)].mean(1)
        bb = bwd[bootstrap_indices(len(bwd), n_boot, 1)].mean(1)
        f, bk = fwd.mean().item(), bwd.mean().item()
        rows.append({"pair": f"{a}-{b}", "captions": f"{len(fwd):,} vs {len(bwd):,}",
                     "forward": f, "backward": bk, "harmonic": 2 * f * bk / (f + bk),
                     "harmonic_ci": percentile_interval(2 * fb * bb / (fb + bb)),
                     "report": seed_value if tokens == "gpt2" else None})
    return {"tokens": tokens, "rows": rows}
