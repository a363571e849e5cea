"""Named presets: small builder functions returning (ModelConfig, TrainConfig), each registered by
the task it trains (the captions task's in plugins/tasks/captions/presets.py, the birth-place
task's in its package); and the decoders the views open with."""
from __future__ import annotations

import dataclasses

from lab.config import ConfigError, ModelConfig, TrainConfig, owner, split_overrides
from lab.registry import load_plugins
from lab.settings import default_of

PRESETS = {}

# The decoders the views open with, named once. Texts to look at (Compare's captions, Attention's
# caption) are drawn as the Tfmr reports drew theirs, nucleus sampling at temperature 0.7; scores
# (Evaluate, sweeps) sample the whole distribution at temperature 1, the assignment's convention.
DECODE_TO_SHOW = {"decoder": "top_p", "temperature": 0.7}
DECODE_TO_SCORE = {"decoder": "random", "temperature": 1.0}
# head ablation's continuations shown side by side: the same for both models, so greedy
DECODE_TO_CONTINUE = {"decoder": "greedy", "max_new_tokens": 30}
# a task's answers (lab/task.py's greedy_answers): the model's most likely, so exact match is fair
DECODE_TO_ANSWER = {"decoder": "greedy"}


FINE_TUNES = set()      # the presets made for a stored checkpoint (a parent); the rest make new models


def preset(name: str, description: str, fine_tunes: bool = False):
    """Registers a builder of (ModelConfig, TrainConfig) by name; a task package registers its
    own (lab.task re-exports this). fine_tunes: made for a stored checkpoint (a parent)."""
    def deco(fn):
        PRESETS[name] = (fn, description)
        if fine_tunes:
            FINE_TUNES.add(name)
        return fn
    return deco


def configs(preset: str | None = None, overrides: list[str] | None = None, doc: dict | None = None,
            named: dict | None = None):
    """Layered configs: the preset (defaults without one), then a config file's {"model": ...,
    "train": ...}, then named settings (`{"epochs": 2, "attention.window": 8}`, as the API and
    the form give them), then `key=value` overrides. Also returns the model keys changed (a
    fine-tune cannot change them)."""
    model_cfg, train_cfg = get(preset) if preset else (ModelConfig(), TrainConfig())
    doc = doc or {}
    m_named, t_named = split_named(named or {})
    m_over, t_over = split_overrides(overrides or [], ModelConfig, TrainConfig)
    m_all = {**doc.get("model", {}), **m_named, **m_over}
    return (model_cfg.replace(**m_all),
            train_cfg.replace(**{**doc.get("train", {}), **t_named, **t_over}), sorted(m_all))


def split_named(named: dict) -> tuple[dict, dict]:
    """Settings keyed by name (`KIND.SETTING` for a plugin's) split into the model's and the
    trainer's; an unknown name is refused by name, and a blank value of a setting that says what
    blank means takes its default."""
    if not isinstance(named, dict):
        raise ConfigError(f"settings: expected a JSON object keyed by setting name, got "
                          f"{type(named).__name__}")
    model, train = {}, {}
    described = {f.name: f for cls in (ModelConfig, TrainConfig) for f in dataclasses.fields(cls)}
    for key, value in named.items():
        side = (model, train)[owner(str(key), ModelConfig, TrainConfig)]
        f = described.get(key)
        if (value is None or value == "") and f is not None and "blank" in f.metadata:
            value = default_of(f)
        side[key] = value
    return model, train


def names() -> list[str]:
    """Every preset's name: the lab's and those the task packages register (the plugins load)."""
    load_plugins()
    return sorted(PRESETS)


def description(name: str) -> str:
    load_plugins()
    return PRESETS[name][1] if name in PRESETS else ""


def get(name: str) -> tuple[ModelConfig, TrainConfig]:
    """A preset's configs, checked: its values enter the lab here (a task package's builder
    makes them)."""
    load_plugins()
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(sorted(PRESETS))}")
    model_cfg, train_cfg = PRESETS[name][0]()
    try:
        model_cfg.validate()
        train_cfg.validate()
    except ConfigError as e:
        raise ConfigError(f"preset {name!r} (its task package's): {e}") from None
    return model_cfg, train_cfg
