"""Typed configs: ModelConfig, TrainConfig, DecodeConfig. JSON in and out, validated.

A model config is plugin names, sizes and each chosen plugin's own settings, nothing else. Keys use
HF GPT-2's names where they exist (`n_layer`, `n_head`, `n_embd`, `n_positions`); the same key is
the config-JSON field, the CLI `--set` key and the UI form label. A plugin's setting is
`KIND.SETTING` (`attention.window`) on the command line and in the form, and
`"settings": {"attention": {"window": 8}}` in JSON (a dotted key is accepted there too).

A model family (the `model` plugin) fills the parts a config leaves unset: `model=llama` alone is
RMSNorm, grouped-query attention, rotary positions and SwiGLU; any part may still be named.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from lab.errors import ConfigError, LabError


def _coerce(key: str, value, typ):
    """Convert `value` (from JSON or a `--set key=value` string) to the field type `typ`."""
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "")):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(key, value, inner[0])
    if origin is list:
        if isinstance(value, str):
            value = [v for v in value.replace(" ", "").split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(key, v, args[0]) for v in value]
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if typ is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ConfigError(f"{key}: expected a whole number, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}: expected a whole number, got {value!r}")
        if isinstance(value, str) and len(value) > 30:
            raise ConfigError(f"{key}: expected a whole number, got {value[:30]!r}...")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a whole number, got {value!r}") from None
    if typ is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return number
    if typ is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a JSON object, got {value!r}"[:200])
        return value
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected text, got {value!r}")
        if len(value) > 200:
            raise ConfigError(f"{key}: expected a short text, got {len(value)} characters")
        return value
    return value


SEED_MAX = 2 ** 63 - 1


class _Config:
    """JSON round trip and `--set` overrides shared by every config dataclass. Every number is
    bounded where it enters: BOUNDS maps a field to its (lowest, highest) allowed value."""
    BOUNDS: ClassVar[dict] = {}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict):
        if not isinstance(d, dict):
            raise ConfigError(f"{cls.__name__}: expected a JSON object, got {type(d).__name__}")
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ConfigError(f"{cls.__name__}: unknown key(s) {', '.join(unknown)}; "
                              f"valid keys are: {', '.join(names)}")
        obj = cls(**{k: _coerce(k, v, hints[k]) for k, v in d.items()})
        obj.validate()
        return obj

    @classmethod
    def from_json(cls, path: str | Path):
        path = Path(path)
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"config file {path} is not valid JSON: {e}") from None
        except OSError as e:
            raise ConfigError(f"config file {path} cannot be read: {e.strerror}") from None
        return cls.from_dict(d)

    def replace(self, **overrides):
        return type(self).from_dict({**self.to_dict(), **overrides})

    def validate(self) -> None:
        self.check()
        for key, (lo, hi) in self.BOUNDS.items():
            v = getattr(self, key)
            if v is not None and not lo <= v <= hi:
                raise ConfigError(f"{key} must be between {lo} and {hi}, got {v}")
        self.check_after_bounds()

    def check_after_bounds(self) -> None:
        """Rules that are only safe to compute on bounded values."""

    def check(self) -> None:
        """The config's own rules beyond its bounds."""


def split_overrides(pairs: list[str], *classes) -> list[dict]:
    """Split `key=value` strings among config classes by which one has the key."""
    out = [{} for _ in classes]
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        key = key.strip()
        for i, cls in enumerate(classes):
            if key in getattr(cls, "MOVED", {}):
                raise ConfigError(f"--set: {key} {cls.MOVED[key]}")
            if key in {f.name for f in dataclasses.fields(cls)} or (
                    "." in key and key.split(".", 1)[0] in getattr(cls, "PLUGIN_KINDS", ())):
                out[i][key] = value
                break
        else:
            valid = sorted({f.name for c in classes for f in dataclasses.fields(c)} - {"settings"})
            raise ConfigError(f"--set: unknown key {key!r}; valid keys are: {', '.join(valid)}, "
                              f"and a plugin's own settings as KIND.SETTING (python -m lab plugins "
                              f"lists them)")
    return out


def fill_settings(cls, given: dict, prefix: str) -> dict:
    """A plugin's settings: the given values converted to their declared types, the rest at their
    defaults; names the plugin does not declare stay, for check_settings to refuse."""
    hints = typing.get_type_hints(cls)
    values = {f.name: _coerce(prefix + f.name, given[f.name], hints[f.name])
              if f.name in given else f.default for f in dataclasses.fields(cls)}
    return {**given, **values}


def check_settings(cls, given: dict, prefix: str, plugin: str, config) -> None:
    """One plugin's settings: only declared names, within their bounds and choices, and the
    settings class's own `check(config)`."""
    names = [f.name for f in dataclasses.fields(cls)] if cls else []
    for key in given:
        if key not in names:
            has = f"its settings are: {', '.join(names)}" if names else "it has no settings"
            raise ConfigError(f"{prefix}{key}: the {plugin} has no setting {key!r}; {has}")
    if cls is None:
        return
    for f in dataclasses.fields(cls):
        v, meta, key = given[f.name], f.metadata, prefix + f.name
        if v is None:
            continue
        if "min" in meta and v < meta["min"] or "max" in meta and v > meta["max"]:
            raise ConfigError(f"{key} must be between {meta.get('min', '-inf')} and "
                              f"{meta.get('max', 'inf')}, got {v}")
        if "choices" in meta and v not in meta["choices"]:
            raise ConfigError(f"{key} must be one of {', '.join(map(str, meta['choices']))}, got {v!r}")
    instance = cls(**given)
    if hasattr(instance, "check"):
        instance.check(config)


def parse_blocks(value, n_layer: int | None = None, key: str = "layers") -> list[int]:
    """'1,6,12' (or [1, 6, 12]) -> [1, 6, 12]: 1-based blocks, in the order given, each once,
    within 1..n_layer when it is known. The one parser of block lists: the layers picked from a
    pretrained model and the blocks a fine-tune trains."""
    if isinstance(value, (list, tuple)):
        layers = list(value)
    else:
        try:
            layers = [int(x) for x in str(value).replace(" ", "").split(",") if x]
        except ValueError:
            raise ConfigError(f"{key} must be 1-based block numbers separated by commas, "
                              f"e.g. 1,6,12; got {value!r}"[:300]) from None
    if not layers:
        raise ConfigError(f"{key} is empty; give block numbers such as 1,6,12")
    repeated = sorted({i for i in layers if layers.count(i) > 1})
    if repeated:
        raise ConfigError(f"{key} repeats block(s) {repeated}; name each block once")
    if n_layer is not None:
        bad = [i for i in layers if not 1 <= i <= n_layer]
        if bad:
            raise ConfigError(f"{key} {bad} out of range: this model has blocks 1 to {n_layer}")
    return layers


def _positive(obj, *names):
    for n in names:
        v = getattr(obj, n)
        if v is None or v <= 0:
            raise ConfigError(f"{n} must be positive, got {v!r}")


# what a model family fills when a config leaves it unset; a family's `defaults` meta overrides it
FAMILY_KEYS = ("norm", "norm_position", "attention", "positional", "mlp", "bias", "norm_eps",
               "tie_embeddings", "dropout")
BASE_FAMILY = dict(norm="layernorm", norm_position="pre", attention="mha", positional="learned",
                   mlp="gelu", bias=True, norm_eps=1e-5, tie_embeddings=False, dropout=0.1)


def family_defaults(model: str) -> dict:
    from lab.registry import MODELS, load_plugins
    load_plugins()
    meta = MODELS.get(model).meta if model in MODELS else {}
    return {**BASE_FAMILY, **meta.get("defaults", {})}


def _registry(kind: str):
    from lab.registry import REGISTRIES, load_plugins
    load_plugins()
    return REGISTRIES[kind]


@dataclass
class ModelConfig(_Config):
    model: str = "gpt2"             # model plugin: the family; it builds the model and fills the
                                    # parts left unset below
    vocab_size: int = 50257         # tokens in the vocabulary (GPT-2 BPE: 50257)
    n_positions: int = 1024         # longest context the model accepts
    n_embd: int = 768               # width of the residual stream
    n_layer: int = 3                # number of Transformer blocks
    n_head: int = 12                # query heads per attention layer
    n_inner: int | None = None      # MLP hidden width; None: 4 * n_embd
    norm: str | None = None         # norm plugin                        (None: the family's)
    norm_position: str | None = None  # "pre" (GPT-2) or "post" (the original Transformer)
    attention: str | None = None    # attention plugin
    positional: str | None = None   # positional plugin
    mlp: str | None = None          # MLP plugin
    bias: bool | None = None        # biases in the linear layers (GPT-2 yes, Llama no)
    norm_eps: float | None = None   # epsilon of every norm
    tie_embeddings: bool | None = None  # share the output layer with the token embedding
    dropout: float | None = None    # dropout on embeddings, attention and residual branches
    init_std: float = 0.02          # std of the normal initialisation
    settings: dict = field(default_factory=dict)   # {kind: {setting: value}} of the chosen plugins

    PLUGIN_KINDS: ClassVar[tuple] = ("model", "norm", "attention", "positional", "mlp")
    MOVED: ClassVar[dict] = {
        "kv_groups": "is the gqa attention plugin's own setting now: "
                     "--set attention=gqa --set attention.kv_groups=N",
        "rope_theta": "is the rotary positional plugin's own setting now: "
                      "--set positional=rotary --set positional.theta=X"}
    BOUNDS: ClassVar[dict] = {"vocab_size": (1, 1_000_000), "n_positions": (1, 32768),
                              "n_embd": (1, 16384), "n_layer": (1, 256), "n_head": (1, 4096),
                              "n_inner": (1, 131072), "norm_eps": (1e-12, 1.0),
                              "init_std": (1e-6, 1.0)}
    MAX_PARAMS: ClassVar[int] = 2_000_000_000   # about 32 GB to train with Adam in float32

    def __post_init__(self):
        """Fill what the family decides, and each chosen plugin's settings with its defaults."""
        if isinstance(self.model, str):
            for key, value in family_defaults(self.model).items():
                if getattr(self, key) is None:
                    setattr(self, key, value)
        if not isinstance(self.settings, dict) or not all(
                isinstance(v, dict) for v in self.settings.values()):
            return                                  # check() says what is wrong
        resolved = {}
        for kind, given in self.settings.items():
            if given or kind not in self.PLUGIN_KINDS:
                resolved[kind] = dict(given)
        for kind in self.PLUGIN_KINDS:
            cls = self._settings_class(kind)
            if cls is not None:
                resolved[kind] = fill_settings(cls, resolved.get(kind, {}), f"{kind}.")
        self.settings = resolved

    def _settings_class(self, kind: str):
        name = getattr(self, kind)
        reg = _registry(kind)
        return reg.get(name).settings if isinstance(name, str) and name in reg else None

    @classmethod
    def from_dict(cls, d: dict):
        """Also takes `KIND.SETTING` keys, and the keys of older configs (kv_groups, rope_theta),
        which become the settings of the plugins they belonged to."""
        if not isinstance(d, dict):
            raise ConfigError(f"{cls.__name__}: expected a JSON object, got {type(d).__name__}")
        d = dict(d)
        settings = d.pop("settings", None) or {}
        if isinstance(settings, dict):
            settings = {k: dict(v) if isinstance(v, dict) else v for k, v in settings.items()}
        for key in [k for k in d if isinstance(k, str) and "." in k]:
            kind, name = key.split(".", 1)
            if kind not in cls.PLUGIN_KINDS:
                raise ConfigError(f"{key}: a plugin setting is KIND.SETTING with KIND one of "
                                  f"{', '.join(cls.PLUGIN_KINDS)}")
            if not isinstance(settings, dict) or not isinstance(settings.setdefault(kind, {}), dict):
                raise ConfigError(f"settings: expected {{kind: {{setting: value}}}}, got {settings!r}"[:200])
            settings[kind][name] = d.pop(key)
        if isinstance(settings, dict):
            cls._carry_moved_keys(d, settings)
        return super().from_dict({**d, "settings": settings})

    @staticmethod
    def _carry_moved_keys(d: dict, settings: dict) -> None:
        """Checkpoints made before plugins had settings keep kv_groups and rope_theta at the top;
        they go to the plugin they belonged to (where another plugin is chosen, they meant nothing)."""
        family = family_defaults(d.get("model", "gpt2")) if isinstance(d.get("model", "gpt2"), str) else {}
        if "kv_groups" in d:
            groups = d.pop("kv_groups")
            if (d.get("attention") or family.get("attention")) == "gqa" and isinstance(
                    settings.setdefault("attention", {}), dict):
                settings["attention"].setdefault("kv_groups", groups or d.get("n_head", 12))
        if "rope_theta" in d:
            theta = d.pop("rope_theta")
            if (d.get("positional") or family.get("positional")) == "rotary" and isinstance(
                    settings.setdefault("positional", {}), dict):
                settings["positional"].setdefault("theta", theta)

    def replace(self, **overrides):
        """A plugin changed here drops the old plugin's settings, and a family changed here takes
        the new family's parts wherever the old family's were in place."""
        d = self.to_dict()
        if "model" in overrides and overrides["model"] != self.model:
            old = family_defaults(self.model)
            for key in FAMILY_KEYS:
                if key not in overrides and d[key] == old[key]:
                    d[key] = None
        for kind in self.PLUGIN_KINDS:
            if kind in overrides and overrides[kind] != d.get(kind):
                d["settings"].pop(kind, None)
        return type(self).from_dict({**d, **overrides})

    def plugin_settings(self, kind: str):
        """The settings dataclass of the plugin chosen for `kind`, filled; None if it has none."""
        cls = self._settings_class(kind)
        return cls(**self.settings.get(kind, {})) if cls is not None else None

    def check(self) -> None:
        for kind in self.PLUGIN_KINDS:
            reg, value = _registry(kind), getattr(self, kind)
            if value not in reg:
                raise ConfigError(f"{reg.kind}: unknown plugin {value!r}; "
                                  f"choose one of: {', '.join(reg.names())}")
        _positive(self, "vocab_size", "n_positions", "n_embd", "n_layer", "n_head")
        if self.n_embd % self.n_head:
            divisors = [d for d in range(1, min(self.n_embd, 4096) + 1) if self.n_embd % d == 0]
            raise ConfigError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}; "
                              f"n_head must divide the width, e.g. one of {divisors[:24]}")
        if self.n_inner is not None:
            _positive(self, "n_inner")
        if self.norm_position not in ("pre", "post"):
            raise ConfigError(f"norm_position must be 'pre' or 'post', got {self.norm_position!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        self._check_settings()

    def _check_settings(self) -> None:
        if not isinstance(self.settings, dict) or not all(
                isinstance(v, dict) for v in self.settings.values()):
            raise ConfigError(f"settings: expected {{kind: {{setting: value}}}}, e.g. "
                              f'{{"attention": {{"window": 8}}}}; got {self.settings!r}'[:300])
        for kind, given in self.settings.items():
            if kind not in self.PLUGIN_KINDS:
                raise ConfigError(f"settings: unknown kind {kind!r}; the kinds with plugins are "
                                  f"{', '.join(self.PLUGIN_KINDS)}")
            check_settings(self._settings_class(kind), given, f"{kind}.",
                           f"{kind} plugin {getattr(self, kind)!r}", self)

    def check_after_bounds(self) -> None:
        n = self.approx_params()
        if n > self.MAX_PARAMS:
            raise ConfigError(f"this model would have about {n / 1e9:.1f}B parameters (n_embd="
                              f"{self.n_embd}, n_layer={self.n_layer}, vocab_size={self.vocab_size}); "
                              f"the lab builds models up to {self.MAX_PARAMS / 1e9:.0f}B")

    def approx_params(self) -> int:
        """Parameters of the model this config builds, to within biases, norms and plugin extras;
        keys and values counted for every head (an upper bound for grouped-query attention)."""
        d = self.n_embd
        inner = self.n_inner or 4 * d
        attn = 4 * d * d
        mlp = d * inner * (3 if self.mlp == "swiglu" else 2)
        return self.vocab_size * d * (1 if self.tie_embeddings else 2) + self.n_positions * d \
            + self.n_layer * (attn + mlp)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


@dataclass
class TrainConfig(_Config):
    epochs: int = 20                  # passes over the training split (upper bound with early stop)
    batch_size: int = 32              # captions per step
    lr: float = 1e-4                  # Adam learning rate
    weight_decay: float = 0.0         # AdamW decay (0: plain Adam, as the assignment)
    grad_clip: float = 0.0            # max gradient norm; 0 turns clipping off
    seed: int = 0                     # seeds init, shuffling and dropout
    shuffle: bool = True              # reshuffle the training captions every epoch
    early_stop: str = "perplexity"    # "perplexity", "bleu" (dev harmonic BLEU) or "none"
    patience: int = 1                 # epochs without improvement before stopping
    bleu_samples: int = 500           # dev captions sampled per epoch for dev BLEU (early_stop="bleu"
                                      # or keep_bleu_best)
    keep_bleu_best: bool = False      # also keep the epoch with the best dev harmonic BLEU, as the
                                      # checkpoint NAME-bleu (NAME keeps the best dev perplexity)
    eval_batch_size: int = 128        # captions per forward pass in evaluation
    max_train_captions: int | None = None  # use only the first N training captions (quick runs)
    max_dev_captions: int | None = None    # use only the first N dev captions
    max_steps: int | None = None      # budget: stop after N optimizer steps in all (the epoch under
                                      # way ends there and is evaluated like any epoch's end)
    max_minutes: float | None = None  # budget: stop after N minutes of training steps in all
                                      # (resumes add up; evaluations do not count), as max_steps
    final_dev: bool = False           # at the end, score the kept checkpoint on every dev caption
                                      # (when max_dev_captions scored only some during training)
    train_layers: str = "all"         # "all", or comma-separated 1-based blocks that train
    task: str = "captions"            # the task plugin: "captions" or "birthplace"
    objective: str = ""               # the task's objective ("" its first): captions "lm";
                                      # birthplace "span" (pretraining) or "qa" (fine-tuning)
    lr_schedule: str = "constant"     # "constant", or "warmup_cosine": linear warm-up over
                                      # warmup_steps, cosine decay to 10% of lr at the last step
    warmup_steps: int = 0
    scheduled_sampling: str = "none"  # captions: feed the model its own sampled token instead of
                                      # the gold one with a probability that grows (Bengio et al.
                                      # 2015): "linear", "exponential" or "inverse_sigmoid" decay of
                                      # the teacher-forcing probability over the steps
    ss_k: float = 0.0                 # the decay's constant; 0: reach ss_floor (or 1%) at the last step
    ss_floor: float = 0.0             # the teacher-forcing probability never falls below this
    tokenizer: str = "gpt2"           # a model trained from scratch: "gpt2" (BPE), "words" (the
                                      # training captions' whitespace words) or "char"; a
                                      # fine-tune keeps its parent's
    log_every: int = 20               # steps between logged training losses
    eval_every: int = 0               # steps between extra dev evaluations inside an epoch (0: none);
                                      # they draw the curve, only the epoch's end saves or stops
    device: str = "auto"              # "auto" (CUDA when present), "cpu" or "cuda"
    precision: str = "auto"           # "auto" (bf16 autocast on CUDA, fp32 on the CPU), "bf16" or
                                      # "fp32"; weights and optimizer state stay float32 either way
    compile: bool = False             # torch.compile the model for training steps (CUDA; the first
                                      # steps of each new batch length compile)
    pack: bool = True                 # pack each batch's captions into rows (no compute on
                                      # padding; the loss and gradients are the padded batch's),
                                      # where it is exact: a model whose parts all take packed
                                      # rows, captions without scheduled sampling

    BOUNDS: ClassVar[dict] = {"epochs": (1, 100_000), "batch_size": (1, 65536), "lr": (0.0, 10.0),
                              "weight_decay": (0.0, 10.0), "grad_clip": (0.0, 1e6),
                              "seed": (0, SEED_MAX), "patience": (1, 10_000),
                              "bleu_samples": (1, 5000), "eval_batch_size": (1, 65536),
                              "max_train_captions": (1, 10 ** 8), "max_dev_captions": (1, 10 ** 8),
                              "max_steps": (1, 10 ** 9), "max_minutes": (0.01, 10 ** 6),
                              "warmup_steps": (0, 10 ** 9), "ss_k": (0.0, 1e9), "ss_floor": (0.0, 1.0),
                              "log_every": (1, 10 ** 9), "eval_every": (0, 10 ** 9)}

    def check(self) -> None:
        _positive(self, "epochs", "batch_size", "lr", "eval_batch_size", "log_every")
        if self.early_stop not in ("perplexity", "bleu", "none"):
            raise ConfigError(f"early_stop must be 'perplexity', 'bleu' or 'none', "
                              f"got {self.early_stop!r}")
        for n in ("max_train_captions", "max_dev_captions", "bleu_samples", "max_steps"):
            v = getattr(self, n)
            if v is not None and v < 1:
                raise ConfigError(f"{n} must be at least 1 (or unset for all), got {v}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ConfigError(f"max_minutes must be a positive number of minutes (or unset for no "
                              f"time budget), got {self.max_minutes}")
        if self.eval_every < 0:
            raise ConfigError(f"eval_every must be 0 (only at the end of each epoch) or a number "
                              f"of steps, got {self.eval_every}")
        if self.patience < 1:
            raise ConfigError(f"patience must be at least 1, got {self.patience}")
        if self.keep_bleu_best and self.early_stop == "bleu":
            raise ConfigError("keep_bleu_best keeps the best-BLEU epoch beside the best-perplexity "
                              "one; with early_stop=bleu the checkpoint is already the best-BLEU "
                              "one: use early_stop=perplexity (or none) with keep_bleu_best")
        if self.lr_schedule not in ("constant", "warmup_cosine"):
            raise ConfigError(f"lr_schedule must be 'constant' or 'warmup_cosine', "
                              f"got {self.lr_schedule!r}"[:300])
        from lab.tasks import check_task
        check_task(self.task, self.objective)
        if self.scheduled_sampling not in ("none", "linear", "exponential", "inverse_sigmoid"):
            raise ConfigError(f"scheduled_sampling must be 'none', 'linear', 'exponential' or "
                              f"'inverse_sigmoid', got {self.scheduled_sampling!r}"[:300])
        if self.scheduled_sampling != "none" and self.task != "captions":
            raise ConfigError(f"scheduled_sampling is for the captions language model; the "
                              f"{self.task} task trains with teacher forcing")
        if self.scheduled_sampling == "exponential" and self.ss_k >= 1:
            raise ConfigError(f"ss_k of the exponential decay is a rate below 1 (e.g. 0.999), "
                              f"got {self.ss_k}")
        if self.scheduled_sampling == "inverse_sigmoid" and 0 < self.ss_k < 1:
            raise ConfigError(f"ss_k of the inverse-sigmoid decay is at least 1 (e.g. 100), "
                              f"got {self.ss_k}")
        if self.tokenizer not in ("gpt2", "words", "char"):
            raise ConfigError(f"tokenizer must be 'gpt2' (BPE), 'words' or 'char', "
                              f"got {self.tokenizer!r}"[:300])
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ConfigError(f"precision must be 'auto', 'bf16' or 'fp32', got {self.precision!r}")


@dataclass
class DecodeConfig(_Config):
    decoder: str = "random"          # decoder plugin
    max_new_tokens: int = 35         # stop a caption after this many tokens
    seed: int = 0                    # sampling seed
    settings: dict = field(default_factory=dict)   # the decoder's own (temperature, top_k, ...)

    BOUNDS: ClassVar[dict] = {"max_new_tokens": (1, 1024), "seed": (0, SEED_MAX)}

    def __post_init__(self):
        cls = self._settings_class()
        if cls is not None and isinstance(self.settings, dict):
            self.settings = fill_settings(cls, self.settings, "")

    def _settings_class(self):
        return self.settings_class(self.decoder)

    @staticmethod
    def settings_class(decoder) -> type | None:
        """The settings dataclass of a decoder plugin (None: it has none, or no such decoder)."""
        from lab.registry import DECODERS, load_plugins
        load_plugins()
        return DECODERS.get(decoder).settings if isinstance(decoder, str) and decoder in DECODERS \
            else None

    @staticmethod
    def declared() -> dict[str, tuple[dataclasses.Field, list[str]]]:
        """Every decoder setting: its first declaration (default, help, bounds) and the decoders
        that have it, the sampling ones first: the order of the forms' fields and CLI flags."""
        from lab.registry import DECODERS, load_plugins
        load_plugins()
        found: dict = {}
        for name in DECODERS.names():
            cls = DECODERS.get(name).settings
            for f in dataclasses.fields(cls) if cls else ():
                found.setdefault(f.name, (f, []))[1].append(name)
        order = ["temperature", "top_k", "top_p", "num_beams"]
        first = list(found)
        return {n: found[n] for n in sorted(found, key=lambda n: (
            order.index(n) if n in order else len(order), first.index(n)))}

    @classmethod
    def setting_names(cls) -> list[str]:
        """Every decoder's setting names, in the forms' field order."""
        return list(cls.declared())

    @classmethod
    def from_dict(cls, d: dict, lenient: bool = False):
        """Also takes the decoder's settings as top-level keys (`{"decoder": "top_k", "top_k": 5}`).
        `lenient`: drop settings of other decoders (a form sends every decoder's fields); otherwise
        a setting the chosen decoder does not have is refused."""
        if not isinstance(d, dict):
            raise ConfigError(f"{cls.__name__}: expected a JSON object, got {type(d).__name__}")
        d = dict(d)
        settings = d.pop("settings", None) or {}
        if not isinstance(settings, dict):
            raise ConfigError(f"settings: expected a JSON object of the decoder's settings, got "
                              f"{settings!r}"[:200])
        settings = dict(settings)
        known = set(cls.setting_names())
        own = cls.settings_class(d.get("decoder", "random"))
        own_names = {f.name for f in dataclasses.fields(own)} if own else set()
        for key in [k for k in d if k in known]:
            value = d.pop(key)
            if key in own_names:
                settings[key] = value
            elif not lenient:
                raise ConfigError(f"{key} is not a setting of the {d.get('decoder', 'random')} "
                                  f"decoder; its settings are: {', '.join(sorted(own_names)) or 'none'}")
        return super().from_dict({**d, "settings": settings})

    def decoder_settings(self):
        """The chosen decoder's settings dataclass, filled; None if it has none."""
        cls = self._settings_class()
        return cls(**self.settings) if cls is not None else None

    def label(self) -> str:
        """The decoder and its settings, e.g. 'top_p, temperature=0.7, top_p=0.9'."""
        return self.decoder + "".join(f", {k}={v}" for k, v in self.settings.items())

    def check(self) -> None:
        from lab.registry import DECODERS, load_plugins
        load_plugins()
        if self.decoder not in DECODERS:
            raise ConfigError(f"decoder: unknown plugin {self.decoder!r}; "
                              f"choose one of: {', '.join(DECODERS.names())}")
        check_settings(self._settings_class(), self.settings, "", f"{self.decoder} decoder", self)
        _positive(self, "max_new_tokens")
