"""Scoring a run inside its job, once its training ended: the step `score`, registered with
lab.worker.steps on import. Each checkpoint the run keeps is scored by its task's plugin
(sweep_score); the results are written whole to STORE/.lab/sweeps/NAME/RUN.json.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from lab.config import ConfigError, TrainConfig
from lab.evaluation import metrics
from lab.inputs import tasks
from lab.storage import checkpoints
from lab.storage import store as lab_store
from lab.sweeps.spec import Score, check_sweep_name
from lab.sweeps.texts import harmonic, score_texts
from lab.training import runs
from lab.training.runs import read_events
from lab.worker import steps

def results_path(sweep: str, run: str, store=None) -> Path:
    return lab_store.state_dir(store, "sweeps") / sweep / f"{run}.json"


def kept_checkpoints(run: str, store=None) -> list[tuple[str, str]]:
    """The checkpoints a run keeps, with what chose each (its task's metrics: its own name by
    early_stop's metric or the task's first, NAME-METRIC when keep_also kept one too, and
    NAME-eEPOCH for each epoch keep_epochs names)."""
    train = checkpoints.info(run, store).get("train") or {}
    if not train:
        return [(run, "as stored")]
    # the stored config as it was written (trusted: its run validated it)
    cfg = TrainConfig(**{k: v for k, v in train.items() if k in TrainConfig.__dataclass_fields__})
    kept = runs.kept_checkpoints(run, cfg)
    return [(name, label) for i, (name, label) in enumerate(kept) if i == 0 or name in checkpoints.names(store)]


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
    score = score_texts if plugin.sweep_score == tasks.SCORED_AS_TEXT else plugin.sweep_score
    return (yield from score(ck, sc, data_dir=data_dir, abort=abort, t0=t0))


def _check_score_step(settings: dict) -> dict:
    """The step `score`'s settings: the sweep's name and its Score."""
    sweep = check_sweep_name(settings.get("sweep"))
    return {**Score.from_dict({k: v for k, v in settings.items() if k != "sweep"}).to_dict(),
            "sweep": sweep}


def _score_step(checkpoint: str, settings: dict, store=None, data_dir=None, should_stop=None):
    return score_run(checkpoint, settings, store, data_dir, should_stop)


steps.register("score", _check_score_step, _score_step)


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
            parts += [f"{d['label']} harmonic BLEU {harmonic(d['forward'], d['backward']):.4f}"
                      for d in s["decoders"]]
    return "; ".join(parts)




def training_figures(path: Path) -> dict:
    """From a run's metrics log: training time (all its segments, resumes included), real tokens
    per second (the last measured), and the dev curve."""
    total, seg, base, rate, curve, losses = 0.0, 0.0, 0.0, None, [], []
    for ev in read_events(path):
        e = ev.get("event")
        if e == "start":    # a segment's own time: its elapsed goes on from elapsed_before (older logs: 0)
            total, seg, base = total + max(seg - base, 0.0), 0.0, ev.get("elapsed_before") or 0.0
        if isinstance(ev.get("elapsed_s"), (int, float)) and e in ("step", "progress", "done"):
            seg = max(seg, ev["elapsed_s"])
        if isinstance(ev.get("tokens_per_s"), (int, float)):
            rate = ev["tokens_per_s"]
        if e == "eval" and "dev_perplexity" in ev:
            curve.append([ev.get("step"), ev["dev_perplexity"]])
        if e == "step" and "train_loss" in ev:
            losses.append([ev.get("step"), ev["train_loss"]])
    return {"train_s": total + max(seg - base, 0.0), "tokens_per_s": rate, "dev_curve": curve,
            "loss_curve": losses}


def read_results(sweep: str, run: str, store=None) -> dict | None:
    try:
        return json.loads(results_path(sweep, run, store).read_text())
    except (OSError, json.JSONDecodeError):
        return None
