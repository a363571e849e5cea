"""Named presets: small builder functions returning (ModelConfig, TrainConfig)."""
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


@preset("tfmr-scratch", "The assignment's Tfmr-scratch: 3 layers, 12 heads, width 768, Adam 1e-4, "
                        "batch 32, up to 20 epochs, early stop on dev perplexity")
def tfmr_scratch():
    return ModelConfig(model="gpt2", n_layer=3, n_head=12, n_embd=768), TrainConfig()


@preset("tiny", "A tiny model on 2,000 captions: two epochs")
def tiny():
    return (ModelConfig(model="gpt2", n_layer=2, n_head=4, n_embd=64, n_positions=64),
            TrainConfig(epochs=2, lr=1e-3, max_train_captions=2000, max_dev_captions=500))


@preset("quick", "A first scratch model: 2 layers, width 128, one epoch over the first 12,000 "
                 "training captions; it writes readable captions")
def quick():
    return (ModelConfig(model="gpt2", n_layer=2, n_head=4, n_embd=128, n_positions=64),
            TrainConfig(epochs=1, lr=1e-3, max_train_captions=12000, max_dev_captions=500, log_every=50))


@preset("small", "A small 4-layer model on the full corpus")
def small():
    return (ModelConfig(model="gpt2", n_layer=4, n_head=4, n_embd=256, n_positions=64),
            TrainConfig(epochs=5, lr=5e-4))


@preset("tfmr-finetune", "The assignment's fine-tuning settings (Adam 1e-4, batch 32, up to 20 epochs); "
                         "choose the checkpoint to fine-tune; 500 dev captions an evaluation, all "
                         "5,000 at the end", fine_tunes=True)
def tfmr_finetune():
    return ModelConfig(model="llama"), TrainConfig(max_dev_captions=500, final_dev=True)


@preset("smollm2-quick", "A quick fine-tune of a stored checkpoint such as SmolLM2: one pass over the "
                         "first 800 training captions, 200 dev captions scored (all 30 SmolLM2 "
                         "blocks)", fine_tunes=True)
def smollm2_quick():
    return (ModelConfig(model="llama"),
            TrainConfig(epochs=1, lr=2e-4, max_train_captions=800, max_dev_captions=200, log_every=5))


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
    load_plugins()
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(sorted(PRESETS))}")
    return PRESETS[name][0]()
