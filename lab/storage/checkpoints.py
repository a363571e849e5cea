"""The checkpoint store: list, inspect, load, save atomically, recover, delete.

A checkpoint is a directory: `config.json` (model config and provenance: source, layers picked,
parent checkpoint, training config), `model.safetensors`, the tokenizer files, `metrics.json`, and
for a checkpoint written by the trainer `train_state.safetensors`: the optimizer's moments and
where training stood (epoch, step, best dev record), so a stopped run resumes exactly.
Weights never go through pickle. A checkpoint is written to a temporary directory and renamed into
place, so a crash never leaves a half-written one; one interrupted between renames is put back by
`recover`. Every use of a checkpoint passes one gate (`info`, `check_folder`): its config,
tokenizer and weights whole (weights: health.py), else one line saying what is wrong. Import and
export live in interop.py and smollm2.py.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lab.storage import health as health_mod
from lab.storage import store as store_mod
from lab.inputs import tokenizers
from lab.config import ModelConfig
from lab.errors import LabError, not_found, quoted
from lab.modeling.model import build

log = logging.getLogger("lab.storage.checkpoints")

CONFIG_FILE, WEIGHTS_FILE, METRICS_FILE = health_mod.CONFIG_FILE, health_mod.WEIGHTS_FILE, "metrics.json"
TRAIN_STATE_FILE = "train_state.safetensors"
COMPLETE_FILE = ".complete"          # written last into a temporary directory: the save is whole
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
LEFTOVER_RE = re.compile(r"\.(tmp|old|del)-(.+)-[0-9a-f]{8}")


class CheckpointError(LabError):
    pass


def store_dir(store: str | Path | None = None) -> Path:
    """The store folder (see lab/storage/store.py for its layout)."""
    return store_mod.root(store)


def check_name(name: str) -> str:
    """A checkpoint is addressed by its name alone: never a path, never one of the store's own
    files (those live under `.lab/` and `_runs/`, which no name can be)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise CheckpointError(f"checkpoint name {quoted(name)} is not allowed: use 1-100 letters, "
                              f"digits, '.', '_' or '-', starting with a letter or digit")
    return name


def refuse_existing(name: str, store=None) -> None:
    """A new run or import never replaces a stored checkpoint, one whose save a crash left
    unfinished, or the state a stopped run kept to resume from."""
    root = store_dir(store)
    recover(store, only=check_name(name))
    if (root / name).exists():
        run = (root / store_mod.RUNS / name).is_dir()     # only a trained checkpoint has a run
        raise CheckpointError(f"checkpoint {name!r} already exists; choose another name"
                              + (", delete it first, or resume its run" if run else " or delete it first"))
    if (root / store_mod.RUNS / name / "last").exists():
        raise CheckpointError(f"a stopped run named {name!r} kept its state to resume from; resume "
                              f"it, delete it first, or choose another name")


@dataclass
class Checkpoint:
    name: str
    path: Path
    config: ModelConfig
    meta: dict                      # everything in config.json besides the model config
    metrics: dict = field(default_factory=dict)
    model: torch.nn.Module | None = None
    tokenizer: tokenizers.Tokenizer | None = None


def names(store=None) -> list[str]:
    """Every checkpoint in the store, damaged ones included (`listing` says what is wrong).
    An interrupted save found on the way is finished or rolled back first."""
    root = store_dir(store)
    entries = list(root.iterdir())
    if any(LEFTOVER_RE.fullmatch(p.name) for p in entries):
        recover(store)
        entries = list(root.iterdir())
    return sorted(p.name for p in entries if p.is_dir() and NAME_RE.fullmatch(p.name))


def unusable(store=None) -> list[dict]:
    """The store's other folders, each with why no checkpoint can be read from it: {"name",
    "unusable": reason}. Not the lab's own (`.lab`, `_runs`, `_datasets`) nor a save under way."""
    root = store_dir(store)
    out = []
    for p in sorted(root.iterdir()):
        if p.name in (store_mod.STATE, store_mod.RUNS, store_mod.DATASETS) or NAME_RE.fullmatch(p.name) \
                or LEFTOVER_RE.fullmatch(p.name) or not p.is_dir():
            continue
        why = ("starts with '.' (a hidden folder)" if p.name.startswith(".") else
               f"starts with {p.name[0]!r}" if not p.name[0].isalnum() else
               "holds a space" if " " in p.name else
               "is over 100 characters" if len(p.name) > 100 else "holds characters other than "
               "letters, digits, '.', '_' or '-'")
        out.append({"name": p.name, "unusable": f"folder {p.name!r} is not a checkpoint the lab can "
                    f"use: its name {why}; rename it (1-100 letters, digits, '.', '_' or '-', "
                    f"starting with a letter or digit) or move it out of the store"})
    return out


def recover(store=None, only: str | None = None) -> list[str]:
    """Finish or roll back saves a crash interrupted, and remove what they left; says what it did.
    A save first writes `.tmp-NAME-x/` (marked complete last), then moves NAME aside to
    `.old-NAME-y/`, renames the new one into place and removes the old. Where NAME is missing, the
    newest complete new version (else the old one) becomes NAME; where NAME is there, what lies
    beside it is a leftover. Each name is mended holding its lock, so a name a live process writes
    is left alone. only: mend that name alone."""
    root = store_dir(store)
    done = []
    folders = [root] + [d for d in (root / store_mod.RUNS).glob("*") if d.is_dir()]
    for folder in folders:
        found: dict[str, list[Path]] = {}
        for p in folder.iterdir():
            m = LEFTOVER_RE.fullmatch(p.name)
            if m:
                found.setdefault(m.group(2), []).append(p)
        for name, leftovers in found.items():
            owner = name if folder == root else folder.name
            if not NAME_RE.fullmatch(owner) or (only is not None and owner != only):
                continue
            try:
                with store_mod.hold(store_mod.name_lock(owner, store), f"checkpoint {owner!r}"):
                    done += _recover_one(folder, name, [p for p in leftovers if p.exists()])
            except (store_mod.Busy, OSError):     # a live writer, or another process mending it
                continue
    for line in done:
        log.warning("store %s: %s", root, line)
    return done


def _recover_one(folder: Path, name: str, leftovers: list[Path]) -> list[str]:
    final, said = folder / name, []
    complete = [p for p in leftovers if p.name.startswith(".tmp-") and (p / COMPLETE_FILE).is_file()]
    olds = [p for p in leftovers if p.name.startswith(".old-")]
    if not final.exists() and complete:
        newest = max(complete, key=lambda p: p.stat().st_mtime)
        os.replace(newest, final)
        leftovers.remove(newest)
        said.append(f"finished the interrupted save of {name!r}")
    elif not final.exists() and olds:
        newest = max(olds, key=lambda p: p.stat().st_mtime)
        os.replace(newest, final)
        leftovers.remove(newest)
        said.append(f"restored {name!r} from before an interrupted save")
    for p in leftovers:
        shutil.rmtree(p, ignore_errors=True)
    if leftovers:
        said.append(f"removed {len(leftovers)} leftover folder(s) of {name!r}")
    return said


def read_config(path: Path) -> tuple[ModelConfig, dict]:
    try:
        doc = json.loads((path / CONFIG_FILE).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path.name!r} is damaged: {CONFIG_FILE} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {path.name!r} is damaged: {CONFIG_FILE} is not valid JSON "
                              f"({e})") from None
    except OSError as e:
        raise CheckpointError(f"checkpoint {path.name!r}: {CONFIG_FILE} cannot be read ({e.strerror})") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"checkpoint {path.name!r} is damaged: {CONFIG_FILE} holds a "
                              f"{type(doc).__name__}, not a JSON object")
    if "model" not in doc:
        raise CheckpointError(f"checkpoint {path.name!r} is damaged: {CONFIG_FILE} has no 'model' section")
    try:
        config = ModelConfig.from_dict(doc.pop("model"))
    except LabError as e:
        raise CheckpointError(f"checkpoint {path.name!r} is damaged: {CONFIG_FILE}: {e}") from None
    for key in ("source", "parent", "pretrained", "preset", "created"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise CheckpointError(f"checkpoint {path.name!r} is damaged: {CONFIG_FILE}: {key} is "
                                  f"{doc[key]!r}, not text")
    return config, doc


def resolve(name: str, store=None) -> Path:
    """The folder of checkpoint `name` (a name in the store, never a path)."""
    path = store_dir(store) / check_name(name)
    if not path.is_dir():
        raise CheckpointError(not_found("checkpoint", name, names(store), "the Checkpoints tab or "
                                        "`python -m lab checkpoints`", "it holds none yet: train or import one"))
    return path


def info(name: str, store=None) -> dict:
    """What the store shows about a checkpoint; the gate every use of one passes (through `load`,
    `check_loadable` or `check_folder`). A damaged checkpoint raises CheckpointError saying in
    one line what is wrong: its config, its tokenizer, or its weights (`health`: checked once,
    the verdict kept until the files change). Unreadable metrics leave it usable: "metrics" is
    then empty and "metrics_unreadable" says why."""
    path = resolve(name, store)
    config, meta = check_folder(path)
    metrics, unreadable = read_metrics(path)
    state = path / TRAIN_STATE_FILE
    try:
        tokenizers.check_files(path)
    except tokenizers.TokenizerError as e:
        raise CheckpointError(str(e)) from None
    # "directory", not "path": gradio_client takes any dict with a "path" key for a file to fetch
    return {"name": path.name, "directory": str(path), "model": config.to_dict(), **meta,
            "metrics": metrics, **({"metrics_unreadable": unreadable} if unreadable else {}),
            "size_bytes": (path / WEIGHTS_FILE).stat().st_size,
            "train_state_bytes": state.stat().st_size if state.is_file() else 0}


def check_folder(path: Path) -> tuple[ModelConfig, dict]:
    """(model config, provenance) of a checkpoint-format folder whose config and weights are
    whole (a store entry, or the state a stopped run kept); else one line saying what is wrong
    and what to do."""
    config, meta = read_config(path)
    verdict = health_mod.weights(path, config)
    if not verdict.ok:
        run = health_mod.run_of(path)
        raise CheckpointError(f"the state run {run!r} kept to resume from is damaged: "
                              f"{verdict.problem}; start the run again" if run else
                              f"checkpoint {path.name!r} is damaged: {verdict.problem}; delete it, "
                              f"then train or import it again")
    return config, meta


def health(name: str, store=None) -> health_mod.Health:
    """Whether checkpoint `name` can be used and, if not, the one line every action refuses it with."""
    try:
        info(name, store)
    except CheckpointError as e:
        return health_mod.Health(False, str(e))
    return health_mod.Health(True)


def listing(store=None) -> list[dict]:
    """`info` of every checkpoint; a damaged one is {"name", "damaged": reason}, and the others
    are listed all the same; then the folders that cannot be checkpoints ({"name", "unusable"})."""
    out = []
    for name in names(store):
        try:
            out.append(info(name, store))
        except CheckpointError as e:
            out.append({"name": name, "damaged": str(e)})
        except OSError as e:          # deleted while we looked, or unreadable
            if (store_dir(store) / name).exists():
                out.append({"name": name, "damaged": f"checkpoint {name!r} cannot be read ({e.strerror})"})
    return out + unusable(store)


def add_metrics(name: str, extra: dict, store=None) -> None:
    """Add figures to a stored checkpoint's metrics (the writer holds the name's lock); the file is
    replaced whole, so a crash leaves the old or the new one. Unreadable metrics are replaced by
    the new figures, and the log says so."""
    path = resolve(name, store)
    old, unreadable = read_metrics(path)
    if unreadable:
        log.warning("checkpoint %r: %s; writing the new figures in its place", name, unreadable)
    metrics = {**old, **extra}
    tmp = path / f".{METRICS_FILE}.tmp"
    tmp.write_text(json.dumps(metrics, indent=2))
    os.replace(tmp, path / METRICS_FILE)


def read_metrics(path: Path) -> tuple[dict, str]:
    """(metrics, "") or, for a metrics file that cannot be read, ({}, what is wrong with it): the
    figures are then unknown, the checkpoint itself usable."""
    try:
        metrics = json.loads((path / METRICS_FILE).read_text())
    except FileNotFoundError:
        return {}, ""
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return {}, f"{METRICS_FILE} is not valid JSON ({e})"
    except OSError as e:
        return {}, f"{METRICS_FILE} cannot be read ({e.strerror})"
    if not isinstance(metrics, dict):
        return {}, f"{METRICS_FILE} is not a JSON object"
    bad = {k: v for k, v in metrics.items()
           if (k.startswith("dev_") or k == "epoch") and not _number(v)}
    if bad:
        k, v = next(iter(bad.items()))
        return {}, f"{METRICS_FILE}: {k} is {v!r}, not a number"
    return metrics, ""


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load(name: str, store=None, device: str = "cpu") -> Checkpoint:
    """Load a checkpoint: `.model` (eval mode) and `.tokenizer`."""
    found = info(name, store)          # a damaged checkpoint: one message saying what is wrong
    return load_dir(Path(found["directory"]), device)


def load_dir(path: Path, device: str = "cpu") -> Checkpoint:
    """A checkpoint-format folder the lab itself wrote (a store entry, or a run's resume state),
    through the same gate as `info` (kept verdicts make the second look cheap)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    config, meta = check_folder(path)
    weights = path / WEIGHTS_FILE
    try:
        state = load_file(str(weights), device=device)
    except (SafetensorError, OSError) as e:       # changed since its check
        raise CheckpointError(f"{weights} cannot be read ({e}); the file is truncated or corrupt") from None
    model = build(config)
    load_state(model, state, where=str(weights))
    model.to(device).eval()
    tok = tokenizers.load(path)
    return Checkpoint(path.name, path, config, meta, read_metrics(path)[0], model, tok)


def keep_blocks(model, blocks: list[int]):
    """A copy of `model` with only the given 1-based blocks, in that order (the rest of the
    weights as they are): the lab's own models, built from its config with fewer layers."""
    cfg = model.config.replace(n_layer=len(blocks))
    state = {}
    for k, v in model.state_dict().items():
        if k.startswith("transformer.h."):
            i, rest = k[len("transformer.h."):].split(".", 1)
            if int(i) + 1 in blocks:
                state[f"transformer.h.{blocks.index(int(i) + 1)}.{rest}"] = v
        elif not (k == "lm_head.weight" and cfg.tie_embeddings):     # tied: wte's own tensor
            state[k] = v
    out = build(cfg)
    load_state(out, state, where="the kept blocks")
    return out.eval()


def check_loadable(name: str, store=None) -> ModelConfig:
    """Make sure checkpoint `name` would load (config, tokenizer, and the weights' verdict, which
    is kept: cheap once made), without loading it. Returns its model config."""
    found = info(name, store)
    tokenizers.load(Path(found["directory"]))
    return ModelConfig.from_dict(found["model"])


def load_state(model: torch.nn.Module, state, where: str) -> None:
    """Load weights a tensor at a time (`state` may read each when asked: lab/storage/lazy.py),
    naming every missing, unexpected or mis-shaped tensor first."""
    targets, shape = model.state_dict(), getattr(state, "shape", lambda k: state[k].shape)
    expected = {k: tuple(v.shape) for k, v in targets.items()
                if not (model.config.tie_embeddings and k == "lm_head.weight")}
    mismatch = health_mod.describe_mismatch(expected, {k: tuple(shape(k)) for k in state})
    if mismatch:
        raise CheckpointError(f"{where} does not match its config.json: {mismatch}")
    with torch.no_grad():
        for k in state:
            targets[k].copy_(state[k])


def save(model, tokenizer, name: str, store=None, provenance: dict | None = None,
         metrics: dict | None = None, overwrite: bool = False, train_state: dict | None = None) -> Path:
    """Write checkpoint `name` atomically (see `write_dir`), holding the name's lock so that no
    other process writes it at the same time. train_state: {"optimizer": state_dict, ...}."""
    check_name(name)
    root = store_dir(store)
    with store_mod.hold(store_mod.name_lock(name, store), f"checkpoint {name!r}", wait_s=2):
        if (root / name).exists() and not overwrite:
            raise CheckpointError(f"checkpoint {name!r} already exists in {root}; choose another name "
                                  f"or delete it first")
        return write_dir(root / name, model, tokenizer, provenance, metrics, train_state)


def write_dir(final: Path, model, tokenizer, provenance: dict | None = None,
              metrics: dict | None = None, train_state: dict | None = None) -> Path:
    """A checkpoint-format folder written atomically: everything into `.tmp-NAME-x/`, marked
    complete last; then the old version (if any) moves aside and the new one takes its place.
    A crash at any point leaves the old or the new version, which `recover` puts back in place."""
    from safetensors.torch import save_file
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        if model.config.tie_embeddings:
            state.pop("lm_head.weight", None)     # the same tensor as transformer.wte.weight
        save_file(state, str(tmp / WEIGHTS_FILE))
        doc = {"model": model.config.to_dict(), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
               **(provenance or {})}
        (tmp / CONFIG_FILE).write_text(json.dumps(doc, indent=2))
        (tmp / METRICS_FILE).write_text(json.dumps(metrics or {}, indent=2))
        tokenizer.save(tmp)
        if train_state is not None:
            _save_train_state(train_state, tmp / TRAIN_STATE_FILE)
        _fsync_dir(tmp)
        (tmp / COMPLETE_FILE).touch()
        store_mod.fault("save.written")
        if final.exists():     # overwrite: move the old one aside, swap, then drop it
            old = final.parent / f".old-{final.name}-{uuid.uuid4().hex[:8]}"
            os.replace(final, old)
            store_mod.fault("save.between_renames")
            os.replace(tmp, final)
            store_mod.fault("save.renamed")
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        (final / COMPLETE_FILE).unlink(missing_ok=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    health_mod.written(final, model.config, state)      # its verdict, from what it wrote
    return final


def _fsync_dir(path: Path) -> None:
    """Flush the files of a folder to disk before it is renamed into place."""
    for f in path.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())


def _save_train_state(train_state: dict, path: Path) -> None:
    """Optimizer tensors flat in safetensors (`state.<param>.<key>`); the param groups, any
    non-tensor state and the rest of train_state as JSON metadata. No pickle."""
    from safetensors.torch import save_file
    opt = train_state["optimizer"]
    tensors, scalars = {}, {}
    for pid, st in opt["state"].items():
        for key, value in st.items():
            if torch.is_tensor(value):
                tensors[f"state.{pid}.{key}"] = value.detach().contiguous().cpu()
            else:
                scalars[f"{pid}.{key}"] = value
    for key, value in (train_state.get("rng") or {}).items():
        tensors[f"rng.{key}"] = value.contiguous().cpu()
    meta = {k: v for k, v in train_state.items() if k not in ("optimizer", "rng")}
    meta |= {"param_groups": opt["param_groups"], "scalars": scalars}
    save_file(tensors, str(path), metadata={"train_state": json.dumps(meta)})


def load_train_state(name: str, store=None) -> dict | None:
    """Where training stood when the checkpoint was saved, or None if it holds no training state
    (imported, or saved by something other than the trainer)."""
    return read_train_state(resolve(name, store))


def read_train_position(folder: Path) -> dict | None:
    """Where training stood (epoch, batches_done, step, saved_by, ...) without the optimizer's
    state or the random states: the file's metadata alone, to choose between saves or say where
    a run goes on from."""
    meta = read_train_state(folder, tensors=False)
    return meta and {k: v for k, v in meta.items() if k not in ("optimizer", "rng")}


def read_train_state(folder: Path, tensors: bool = True) -> dict | None:
    from safetensors import SafetensorError, safe_open
    path = folder / TRAIN_STATE_FILE
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), "pt") as f:
            meta = json.loads(f.metadata()["train_state"])
            state: dict = {}
            rng: dict = {}
            for key in f.keys() if tensors else ():
                if key.startswith("rng."):
                    rng[key[4:]] = f.get_tensor(key)
                    continue
                _, pid, k = key.split(".", 2)
                state.setdefault(int(pid), {})[k] = f.get_tensor(key)
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        raise CheckpointError(f"{path} cannot be read ({e}); the file is truncated or corrupt") from None
    for key, value in meta.pop("scalars").items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = value
    meta["optimizer"] = {"state": state, "param_groups": meta.pop("param_groups")}
    meta["rng"] = rng
    return meta


def delete(name: str, store=None) -> None:
    """Delete checkpoint `name` and its run's folder (curves, and the state a stop kept)."""
    root = store_dir(store)
    path, run = root / check_name(name), root / store_mod.RUNS / name
    if not path.is_dir() and not (run / "last").is_dir():
        resolve(name, store)                  # says it does not exist, listing what does
    with store_mod.hold(store_mod.name_lock(name, store), f"checkpoint {name!r} (a job is writing it)",
                        wait_s=2):
        health_mod.forget(path)
        health_mod.forget(run / "last")
        for folder in (path, run):
            if folder.is_dir():
                trash = root / f".del-{name}-{uuid.uuid4().hex[:8]}"
                os.replace(folder, trash)
                shutil.rmtree(trash)
