"""The checkpoint store: list, load, save, import (HF GPT-2), export.

A checkpoint is a directory: `config.json` (model config and provenance: source, layers picked,
parent checkpoint, training config), `model.safetensors`, the tokenizer files, `metrics.json`, and
for a checkpoint written by the trainer `train_state.safetensors`: the optimizer's moments and
where training stood (epoch, step, best dev record), so a stopped run resumes exactly.
Weights never go through pickle. A checkpoint is written to a temporary directory and renamed into
place, so a crash never leaves a half-written one.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lab import tokenizers
from lab.config import ConfigError, ModelConfig
from lab.data import PROJECT_ROOT
from lab.errors import LabError

CONFIG_FILE, WEIGHTS_FILE, METRICS_FILE = "config.json", "model.safetensors", "metrics.json"
TRAIN_STATE_FILE = "train_state.safetensors"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class CheckpointError(LabError):
    pass


def store_dir(store: str | Path | None = None) -> Path:
    """The store: the argument, else $LAB_STORE, else checkpoints/ in the project."""
    path = Path(store or os.environ.get("LAB_STORE") or PROJECT_ROOT / "checkpoints")
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise CheckpointError(f"checkpoint name {name!r} is not allowed: use 1-100 letters, digits, "
                              f"'.', '_' or '-', starting with a letter or digit")
    return name


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
    root = store_dir(store)
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and (p / CONFIG_FILE).is_file())


def _read_config(path: Path) -> tuple[ModelConfig, dict]:
    try:
        doc = json.loads((path / CONFIG_FILE).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path} is not a checkpoint: {CONFIG_FILE} is missing") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path / CONFIG_FILE} is not valid JSON ({e}); the checkpoint "
                              f"is damaged") from None
    try:
        config = ModelConfig.from_dict(doc.pop("model"))
    except KeyError:
        raise CheckpointError(f"{path / CONFIG_FILE} has no 'model' section") from None
    except ConfigError as e:
        raise CheckpointError(f"{path / CONFIG_FILE}: {e}") from None
    return config, doc


def resolve(name_or_path: str | Path, store=None) -> Path:
    p = Path(name_or_path)
    if p.is_dir() and (p / CONFIG_FILE).exists():
        return p
    path = store_dir(store) / str(name_or_path)
    if not path.is_dir():
        available = names(store)
        raise CheckpointError(f"no checkpoint {str(name_or_path)!r} in {store_dir(store)}; "
                              f"available: {', '.join(available) or 'none yet (train or import one)'}")
    return path


def info(name: str, store=None) -> dict:
    """What the store shows about a checkpoint, without loading weights."""
    path = resolve(name, store)
    config, meta = _read_config(path)
    metrics = _read_metrics(path)
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    # "directory", not "path": gradio_client takes any dict with a "path" key for a file to fetch
    return {"name": path.name, "directory": str(path), "model": config.to_dict(), **meta,
            "metrics": metrics, "size_bytes": size}


def _read_metrics(path: Path) -> dict:
    try:
        return json.loads((path / METRICS_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def load(name: str | Path, store=None, device: str = "cpu") -> Checkpoint:
    """Load a checkpoint: `.model` (eval mode) and `.tokenizer`."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    from lab.model import build
    path = resolve(name, store)
    config, meta = _read_config(path)
    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"{path} has no {WEIGHTS_FILE}; the checkpoint is incomplete")
    try:
        state = load_file(str(weights), device=device)
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{weights} cannot be read ({e}); the file is truncated or corrupt") from None
    model = build(config)
    load_state(model, state, where=str(weights))
    model.to(device).eval()
    tok = tokenizers.load(path)
    return Checkpoint(path.name, path, config, meta, _read_metrics(path), model, tok)


def load_state(model: torch.nn.Module, state: dict, where: str) -> None:
    """Load weights, naming every missing, unexpected or mis-shaped tensor."""
    expected = {k: v.shape for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        expected.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [f"{k}: file {tuple(state[k].shape)} vs config {tuple(expected[k])}"
             for k in expected if k in state and state[k].shape != expected[k]]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(f"unexpected {', '.join(unexpected[:5])}{' ...' if len(unexpected) > 5 else ''}")
        if wrong:
            parts.append("wrong shapes: " + "; ".join(wrong[:5]))
        raise CheckpointError(f"{where} does not match its config.json: " + "; ".join(parts))
    model.load_state_dict(state, strict=False)


def save(model, tokenizer, name: str, store=None, provenance: dict | None = None,
         metrics: dict | None = None, overwrite: bool = False, train_state: dict | None = None) -> Path:
    """Write a checkpoint atomically: a temporary directory, then one rename into place.
    train_state: {"optimizer": optimizer.state_dict(), ...JSON-able fields} (see load_train_state)."""
    from safetensors.torch import save_file
    check_name(name)
    root = store_dir(store)
    final = root / name
    if final.exists() and not overwrite:
        raise CheckpointError(f"checkpoint {name!r} already exists in {root}; choose another name "
                              f"or delete it first")
    tmp = root / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
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
        if final.exists():     # overwrite: move the old one aside, swap, then drop it
            old = root / f".old-{name}-{uuid.uuid4().hex[:8]}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


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
    meta = {k: v for k, v in train_state.items() if k != "optimizer"}
    meta |= {"param_groups": opt["param_groups"], "scalars": scalars}
    save_file(tensors, str(path), metadata={"train_state": json.dumps(meta)})


def load_train_state(name: str, store=None) -> dict | None:
    """Where training stood when the checkpoint was saved, or None if it holds no training state
    (imported, or saved by something other than the trainer)."""
    from safetensors import SafetensorError, safe_open
    path = resolve(name, store) / TRAIN_STATE_FILE
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), "pt") as f:
            meta = json.loads(f.metadata()["train_state"])
            state: dict = {}
            for key in f.keys():
                _, pid, k = key.split(".", 2)
                state.setdefault(int(pid), {})[k] = f.get_tensor(key)
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        raise CheckpointError(f"{path} cannot be read ({e}); the file is truncated or corrupt") from None
    for key, value in meta.pop("scalars").items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = value
    meta["optimizer"] = {"state": state, "param_groups": meta.pop("param_groups")}
    return meta


def update_metrics(name: str, updates: dict, store=None) -> None:
    path = resolve(name, store)
    metrics = {**_read_metrics(path), **updates}
    tmp = path / f".{METRICS_FILE}.tmp"
    tmp.write_text(json.dumps(metrics, indent=2))
    os.replace(tmp, path / METRICS_FILE)


def delete(name: str, store=None) -> None:
    path = resolve(check_name(name), store)
    trash = path.parent / f".del-{name}-{uuid.uuid4().hex[:8]}"
    os.replace(path, trash)
    shutil.rmtree(trash)
