"""A training run as one operation, shared by the CLI and the job worker: read the corpus,
build (or load) the model, train, keep the best checkpoint in the store."""
from __future__ import annotations

import functools
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Iterator

import torch

from lab.storage import checkpoints, smollm2
from lab.training import distributed, estimate, heartbeat, progress
from lab.inputs import tasks, tokenizers
from lab.storage import store as lab_store
from lab.config import ConfigError, ModelConfig, TrainConfig, parse_blocks
from lab.modeling.model import build
from lab.training.train import Trainer


def run_dir_for(name: str, store=None) -> Path:
    return checkpoints.store_dir(store) / lab_store.RUNS / checkpoints.check_name(name)


def last_dir(name: str, store=None) -> Path:
    """Where a stopped run keeps its state (weights, optimizer, random states) to go on from."""
    return run_dir_for(name, store) / "last"


def train(name: str, model_cfg: ModelConfig | None, train_cfg: TrainConfig, *,
          parent: str | None = None, preset: str | None = None, data_dir=None, store=None,
          should_stop=None, resume: bool = False) -> Iterator[dict]:
    """Train a new model (model_cfg), fine-tune a stored checkpoint (parent), or go on with the
    run `name` where it stopped (resume: weights, optimizer moments, epoch and step, best dev
    score, random states; the same shuffling as an uninterrupted run). Yields the trainer's events.
    The process holds checkpoint `name`'s lock from start to end: no other process writes it.
    train_cfg is typed and was checked where its values entered (the CLI, a job's submit, the
    ledger row a job reads), so it is trusted here."""
    checkpoints.check_name(name)
    if distributed.rank() != 0:       # under torchrun rank 0 alone saves, so rank 0 alone locks
        yield from _train(name, model_cfg, train_cfg, parent, preset, data_dir, store, should_stop, resume)
        return
    # a run that just ended may still be leaving: wait a moment for its lock
    with lab_store.hold(lab_store.name_lock(name, store), f"checkpoint {name!r}", wait_s=10):
        yield from _train(name, model_cfg, train_cfg, parent, preset, data_dir, store, should_stop, resume)


def _train(name, model_cfg, train_cfg, parent, preset, data_dir, store, should_stop, resume):
    if distributed.rank() == 0:
        checkpoints.recover(store, only=name)     # a save of this name a crash left unfinished
    state, source_dir = resume_state(name, train_cfg, store) if resume else (None, None)
    if not resume:
        refuse_taken(name, train_cfg, store)
        if distributed.rank() == 0:
            shutil.rmtree(run_dir_for(name, store), ignore_errors=True)   # an old run's leftovers
    task = tasks.get(train_cfg.task)
    root = task.data_dir(data_dir, store) if hasattr(task, "data_dir") else None   # optional
    torch.manual_seed(train_cfg.seed)
    with heartbeat.phase("loading the last save" if source_dir else f"loading the parent {parent}"
                         if parent else "building the model and its tokenizer"):
        model, tok, model_cfg, source = _model_to_train(task, root, model_cfg, train_cfg, parent, store,
                                                        source_dir, state)
    with heartbeat.phase("preparing the data: reading and tokenizing"):
        prepared = task.prepare(tasks.objective_of(train_cfg), train_cfg, tok, model_cfg, root)
    run_dir = run_dir_for(name, store)
    provenance = {**source, "preset": preset, "train": train_cfg.to_dict(), "task": train_cfg.task,
                  "objective": tasks.objective_of(train_cfg),
                  "data_dir": str(root), "run_dir": str(run_dir), "tokenizer": tok.kind}
    also = (tasks.also_kept(train_cfg) or [None])[0]
    save_best, save_last, save_also_best, save_epoch = _savers(name, model, tok, provenance, also, store)
    trainer = Trainer(model, prepared, train_cfg, run_dir, on_best=save_best, on_stop=save_last,
                      should_stop=should_stop, best_by=tasks.kept_by(train_cfg), also_by=also,
                      on_also_best=save_also_best if also else None, on_epoch=save_epoch,
                      resume=state)
    if distributed.rank() == 0:
        yield {"event": "data", "train_items": len(prepared.train_items),
               "dev_items": len(prepared.dev_items), "unit": prepared.unit,
               "params": sum(p.numel() for p in model.parameters()), "run_dir": str(run_dir),
               **prepared.info, "time": time.time()}
    ended = None
    for ended in trainer.run():
        yield ended
    if distributed.rank() == 0 and ended and ended["event"] == "done":
        yield from _finished(name, trainer, prepared, preset, store)


def _finished(name: str, trainer: Trainer, prepared, preset: str | None, store):
    """A run that ended done: its last save goes, its speed is kept for the next estimate of its
    preset on this machine, and the task's last step runs (every dev caption)."""
    drop_last(name, store)
    if preset and trainer.steps.count:
        estimate.record(preset, trainer.steps.per_step, trainer.eval_s, store)
    if prepared.final and name in checkpoints.names(store):
        with heartbeat.phase("scoring the kept checkpoint on the whole dev set"):
            yield from prepared.final(name, trainer, store)


def drop_last(name: str, store=None) -> None:
    """A finished run's last save (periodic or a stop's) goes: its checkpoint holds the training
    state a run given more epochs goes on from, as it did before any mid-way save. Moved aside
    first, so a crash never leaves half a state (recover removes what is left)."""
    last = last_dir(name, store)
    if last.is_dir():
        trash = last.parent / f".del-{last.name}-{uuid.uuid4().hex[:8]}"
        os.replace(last, trash)
        shutil.rmtree(trash, ignore_errors=True)


def _model_to_train(task, root, model_cfg, train_cfg, parent, store, source_dir, state):
    """(model, tokenizer, model config, where the model came from): the stopped run's last save
    (source_dir), a stored parent to fine-tune, or a new model with the task's scratch tokenizer."""
    if source_dir is not None:
        ck = checkpoints.load_dir(source_dir)
        # still the same run: keep where the model came from
        source = {k: v for k, v in ck.meta.items() if k in ("source", "parent", "layers", "pretrained")}
        source["resumed_at_step"] = state["step"]
        return ck.model, ck.tokenizer, ck.config, source
    if parent:
        check_finetune(train_cfg)
        model, tok, meta = load_parent(parent, store)
        source = {"source": "finetune", "parent": parent, **{k: v for k, v in meta.items()
                                                             if k in ("layers", "pretrained")}}
        return model, tok, model.config, source
    tok = task.scratch_tokenizer(root, train_cfg)
    if model_cfg.vocab_size != tok.vocab_size:
        model_cfg = model_cfg.replace(vocab_size=tok.vocab_size)
    return build(model_cfg), tok, model_cfg, {"source": "scratch"}


def _saying(what: str):
    """A saver that the job's heartbeat names while it writes."""
    def deco(fn):
        @functools.wraps(fn)
        def saver(*args):
            with heartbeat.phase(what):
                return fn(*args)
        return saver
    return deco


def _savers(name: str, model, tok, provenance: dict, also, store):
    """The trainer's callbacks that write checkpoints: the best epoch (as `name`), where a run
    stands when it stops or a periodic save is due (its last save, in its run folder), and the
    best by the second metric `also` (as NAME-METRIC)."""
    @_saying("saving the checkpoint")
    def save_best(record: dict, train_state: dict):
        checkpoints.save(model, tok, name, store, provenance={**provenance, "epoch": record["epoch"]},
                         metrics={k: v for k, v in record.items() if k.startswith("dev_")}
                         | {"epoch": record["epoch"]}, overwrite=True, train_state=train_state)

    @_saying("saving where the run stands")
    def save_last(train_state: dict):
        """Where the run stands (a stop's, or a periodic save): never over the best checkpoint."""
        checkpoints.write_dir(last_dir(name, store), model, tok,
                              provenance={**provenance, "saved_at_step": train_state["step"],
                                          "saved_by": train_state["saved_by"]},
                              metrics={"step": train_state["step"]}, train_state=train_state)

    @_saying(f"saving the checkpoint best by {also and also.name}")
    def save_also_best(record: dict, train_state: dict):
        """The epoch with the best score by the second metric so far (keep_also), as NAME-METRIC."""
        checkpoints.save(model, tok, kept_name(name, also), store,
                         provenance={**provenance, "epoch": record["epoch"], "run": name,
                                     "kept_by": also.label},
                         metrics={k: v for k, v in record.items() if k.startswith("dev_")}
                         | {"epoch": record["epoch"]}, overwrite=True)

    @_saying("keeping the epoch's weights")
    def save_epoch(record: dict):
        """The weights at the end of an epoch keep_epochs names, as NAME-eEPOCH."""
        checkpoints.save(model, tok, epoch_name(name, record["epoch"]), store,
                         provenance={**provenance, "epoch": record["epoch"], "run": name,
                                     "kept_by": f"keep_epochs (epoch {record['epoch']})"},
                         metrics={k: v for k, v in record.items() if k.startswith("dev_")}
                         | {"epoch": record["epoch"]}, overwrite=True)

    return save_best, save_last, save_also_best, save_epoch


def kept_name(name: str, metric: tasks.Metric) -> str:
    """Where a run keeps its best epoch by a second metric (keep_also: NAME-METRIC)."""
    return checkpoints.check_name(f"{name}-{metric.name}")


def epoch_name(name: str, epoch: int) -> str:
    """Where a run keeps the weights at an epoch keep_epochs names (NAME-e50)."""
    return checkpoints.check_name(f"{name}-e{epoch}")


def kept_checkpoints(name: str, train_cfg: TrainConfig) -> list[tuple[str, str]]:
    """The checkpoints a run of train_cfg writes, each with what chooses it (a metric's label,
    or the epoch keep_epochs names)."""
    return ([(name, tasks.kept_by(train_cfg).label)]
            + [(kept_name(name, m), m.label) for m in tasks.also_kept(train_cfg)]
            + [(epoch_name(name, e), f"the weights at epoch {e}") for e in train_cfg.kept_epochs()])


def refuse_taken(name: str, train_cfg: TrainConfig, store=None) -> None:
    """A new run writes checkpoints none of which may exist yet (checked before a job is queued,
    and again by the run itself under the name's lock)."""
    for kept, _ in kept_checkpoints(name, train_cfg):
        checkpoints.refuse_existing(kept, store)


def check_finetune(train_cfg: TrainConfig) -> None:
    if train_cfg.tokenizer != "gpt2":
        raise ConfigError(f"tokenizer={train_cfg.tokenizer} is for a model trained from scratch; "
                          f"a fine-tune keeps its parent's tokenizer: leave tokenizer at gpt2")


def read_events(path: Path, limit_bytes: int = 64 * 2 ** 20) -> list[dict]:
    """A run's metrics log (metrics.jsonl) as events; a line cut short by a kill is skipped."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit_bytes)
    except OSError:
        return []
    out = []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def trained(name: str, store=None) -> bool:
    """The run's training ended (its metrics log's last training segment says done) and its
    checkpoint is stored."""
    if name not in checkpoints.names(store):
        return False
    ended = False
    for ev in read_events(run_dir_for(name, store) / "metrics.jsonl"):
        if ev.get("event") == "start":
            ended = False
        elif ev.get("event") == "done":
            ended = True
    return ended


SMOLLM2 = "smollm2"          # a parent name that, unless the store has one, is the packaged SmolLM2
SMOLLM2_LAYERS = 30


def split_parent(parent: str) -> tuple[str, str | None]:
    """'NAME' or 'NAME:LAYERS' (LAYERS: 1-based blocks such as 1,15,30, or 'all'): the blocks of
    a parent a fine-tune starts from, chosen without importing anything into the store first.
    NAME is a stored checkpoint, or smollm2 for the packaged SmolLM2 when no checkpoint has
    that name."""
    if not isinstance(parent, str):
        raise ConfigError(f"parent must be a checkpoint name, got {type(parent).__name__}")
    name, _, layers = parent.partition(":")
    return name, (layers or None) if ":" in parent else None


def check_parent(parent: str, store=None) -> int:
    """The number of blocks a fine-tune from `parent` starts with (no weights read)."""
    name, layers = split_parent(parent)
    if name == SMOLLM2 and name not in checkpoints.names(store):
        smollm2.gguf_path()                                  # the packaged weights are there
        if layers is None:
            raise ConfigError("parent 'smollm2' names the packaged SmolLM2: give its blocks, e.g. "
                              "smollm2:1,2,3 or smollm2:all (or import it under that name first)")
        n_layer = SMOLLM2_LAYERS
    else:
        n_layer = checkpoints.check_loadable(name, store).n_layer
    if layers is None or layers == "all":
        return n_layer
    return len(parse_blocks(layers, n_layer, f"the blocks of parent {parent!r}"))


def load_parent(parent: str, store=None):
    """(model, tokenizer, provenance) of the parent a fine-tune starts from: a stored checkpoint,
    or some of its blocks ('NAME:1,2,3'), or blocks of the packaged SmolLM2 ('smollm2:1,15,30').
    The blocks kept are named in the original model's numbering ('layers')."""
    name, layers = split_parent(parent)
    if name == SMOLLM2 and name not in checkpoints.names(store):
        check_parent(parent, store)
        hf_model, hf_tok = smollm2.load_hf()
        model, kept = smollm2.to_lab(hf_model, None if layers == "all" else parse_blocks(layers, 30))
        return model, tokenizers.HFTokenizer(hf_tok, "smollm2"), {
            "pretrained": smollm2.PRETRAINED, "layers": kept}
    ck = checkpoints.load(name, store)
    if layers is None:
        return ck.model, ck.tokenizer, ck.meta
    n = ck.config.n_layer
    chosen = list(range(1, n + 1)) if layers == "all" else parse_blocks(layers, n)
    model = checkpoints.keep_blocks(ck.model, chosen)
    before = ck.meta.get("layers") or list(range(1, n + 1))
    meta = {**ck.meta, "layers": [before[i - 1] for i in chosen]}
    return model, ck.tokenizer, meta


def resume_state(name: str, train_cfg: TrainConfig, store, tensors: bool = True) -> tuple[dict, Path]:
    """Where the run `name` stands (see resume_point), checked against the epochs to train.
    tensors=False: the position alone (a check before queueing reads no optimizer state)."""
    state, path = resume_point(name, store, tensors)
    if state["epoch"] >= train_cfg.epochs:
        raise ConfigError(f"run {name!r} has already trained {state['epoch']} of "
                          f"{train_cfg.epochs} epochs; set epochs above {state['epoch']} to go on")
    if train_cfg.max_steps is not None and state["step"] >= train_cfg.max_steps:
        raise ConfigError(f"run {name!r} has already trained {state['step']} steps, its budget "
                          f"max_steps={train_cfg.max_steps}; set max_steps higher to go on")
    if train_cfg.max_minutes is not None and state.get("trained_s", 0) >= train_cfg.max_minutes * 60:
        raise ConfigError(f"run {name!r} has already trained {state['trained_s'] / 60:.2f} "
                          f"minutes, its budget max_minutes={train_cfg.max_minutes:g}; set "
                          f"max_minutes higher to go on")
    return state, path


def resume_point(name: str, store=None, tensors: bool = True) -> tuple[dict, Path]:
    """Where the run `name` stands, from the newer of its best checkpoint and its last save (a
    stop's or a periodic one): (train state, folder to load the model from); or one message
    saying why training cannot go on. tensors=False: the position, read without the optimizer."""
    position, path = newest_save(name, store)
    return (checkpoints.read_train_state(path) if tensors else position), path


def going_on_from(name: str, store=None) -> str:
    """Where a resume of the run `name` goes on from, in words."""
    return progress.position_text(newest_save(name, store)[0])


def newest_save(name: str, store=None) -> tuple[dict, Path]:
    """(where training stood, the folder) of the run's newest resumable save, read without its
    tensors; at the same step an epoch's checkpoint is newer than a save before its evaluation."""
    if distributed.rank() == 0:               # a save a crash cut short: finished or rolled back
        checkpoints.recover(store, only=name)
    candidates = []
    last = last_dir(name, store)
    if not last.is_dir() and name not in checkpoints.names(store):
        raise ConfigError(f"run {name!r} saved nothing to go on from (no checkpoint {name!r} in "
                          f"the store, no state kept by a stop or a periodic save); start it again")
    if last.is_dir():
        candidates.append((checkpoints.read_train_position(last), last))
    if name in checkpoints.names(store):
        path = checkpoints.resolve(name, store)
        candidates.append((checkpoints.read_train_position(path), path))
    candidates = [(s, p) for s, p in candidates if s is not None]
    if not candidates:
        raise ConfigError(f"run {name!r} kept no training state to go on from (the checkpoint was "
                          f"imported, saved before checkpoints kept one, or the run ended before "
                          f"its first save); fine-tune from it with a new name, or start it again")
    state, folder = max(candidates, key=lambda c: (c[0]["step"], c[0]["epoch"]))
    checkpoints.check_folder(folder)          # whole weights, or one line saying what is wrong
    return state, folder
