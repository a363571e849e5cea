"""Typed configs: ModelConfig, TrainConfig, DecodeConfig. JSON in and out, validated.

A model config is plugin names, sizes and each chosen plugin's own settings, nothing else. Keys use
HF GPT-2's names where they exist (`n_layer`, `n_head`, `n_embd`, `n_positions`); the same key is
the config-JSON field, the CLI `--set` key and the UI form label. A plugin's setting is
`KIND.SETTING` (`attention.window`) on the command line and in the form, and
`"settings": {"attention": {"window": 8}}` in JSON (a dotted key is accepted there too).

A model family (the `model` plugin) fills the parts a config leaves unset: `model=llama` alone is
RMSNorm, grouped-query attention, rotary positions and SwiGLU; any part may still be named.

A plugin's own settings are filled and checked by lab.plugin_settings, `key=value` overrides split by
lab.overrides; both are read from here too.
"""
from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from lab.errors import ConfigError, read_json
from lab.overrides import owner, split_overrides  # noqa: F401  (read from here by the CLI and presets)
from lab.plugin_settings import (FAMILY_KEYS, PluginSettings, check_settings, coerce_settings,
                                 family_defaults, fill_settings, keep_best_choices, legacy_keys,
                                 plugin_choices, plugin_field, scratch_tokenizer_choices, task_meta)
from lab.registry import REGISTRIES, load_plugins
from lab.settings import check_value, coerce, default_of, describe, enters, setting


SEED_MAX = 2 ** 63 - 1


class _Config:
    """JSON round trip and `--set` overrides shared by every config dataclass. Each field is a
    described setting (lab.settings): its type, bounds and choices are checked here, once, where a
    value enters; `check()` holds the rules that cross fields. BOUNDS (lowest, highest) bounds a
    field that is not described."""
    BOUNDS: ClassVar[dict] = {}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def default(cls, name: str):
        """A setting's declared default."""
        return default_of(cls.__dataclass_fields__[name])

    @classmethod
    def from_dict(cls, d: dict):
        """A config read from plain values (JSON, a form, `--set`, a file, a ledger row): each
        value enters here, converted to its type and checked, once."""
        return cls._from(d, None)

    @classmethod
    def _from(cls, d: dict, entered: set | None):
        """The config `d` describes, its entering values (lab.settings.enters; None: all)
        converted and checked; the others are a checked config's own. A config whose dicts take
        keys of another shape gathers them before this."""
        if not isinstance(d, dict):
            raise ConfigError(f"{cls.__name__}: expected a JSON object, got {type(d).__name__}")
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names), key=str)
        if unknown:
            raise ConfigError(f"{cls.__name__}: unknown key(s) {', '.join(map(str, unknown))}; "
                              f"valid keys are: {', '.join(names)}"[:600])
        d = cls._coerce_plugin_settings(d, entered)
        obj = cls(**{k: coerce(k, v, hints[k]) if enters(entered, k) else v for k, v in d.items()})
        obj.validate(entered)
        return obj

    @classmethod
    def from_json(cls, path: str | Path):
        return cls.from_dict(read_json(path, ConfigError, f"config file {path} does not exist"))

    def replace(self, **overrides):
        """This config with `overrides`: they alone enter (converted and checked), and the rules
        that cross fields hold for the new config."""
        return type(self)._from({**self.to_dict(), **overrides}, set(overrides))

    def validate(self, entered: set | None = None) -> None:
        """The entering values (None: all) within their bounds and choices, the config's rules
        across fields, and the chosen plugins' settings."""
        for f in dataclasses.fields(self):
            if enters(entered, f.name):
                check_value(f.name, getattr(self, f.name), f)
        for key, (lo, hi) in self.BOUNDS.items():
            v = getattr(self, key)
            if enters(entered, key) and v is not None and not lo <= v <= hi:
                raise ConfigError(f"{key} must be between {lo} and {hi}, got {v}")
        self.check()
        self._check_plugin_settings(entered)

    @classmethod
    def _coerce_plugin_settings(cls, d: dict, entered: set | None) -> dict:
        return d                        # a config with plugin settings converts those entering

    def _check_plugin_settings(self, entered: set | None) -> None:
        """A config with plugin settings checks those entering, and the plugins' own rules."""

    def check(self) -> None:
        """The config's own rules that cross fields (its values are bounded by then)."""


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


@dataclass
class ModelConfig(PluginSettings, _Config):
    model: str = setting("gpt2", "the family: it builds the model and fills the parts left blank",
                         choices=plugin_choices("model"))
    vocab_size: int = setting(50257, "tokens in the vocabulary (a new model's is its tokenizer's)",
                              min=1, max=1_000_000)
    n_positions: int = setting(1024, "the longest context the model reads", min=1, max=32768,
                               unit="tokens")
    n_embd: int = setting(768, "width of the residual stream", min=1, max=16384)
    n_layer: int = setting(3, "Transformer blocks", min=1, max=256)
    n_head: int = setting(12, "query heads per attention layer; divides n_embd", min=1, max=4096)
    n_inner: int | None = setting(None, "the MLP's hidden width", min=1, max=131072,
                                  blank="4 x n_embd")
    norm: str | None = plugin_field("norm", "the norm plugin")
    norm_position: str | None = setting(None, "pre (GPT-2) or post (the original Transformer)",
                                        choices=("pre", "post"), blank="the family's")
    attention: str | None = plugin_field("attention", "the attention plugin")
    positional: str | None = plugin_field("positional", "the positional plugin")
    mlp: str | None = plugin_field("mlp", "the MLP plugin")
    bias: bool | None = setting(None, "biases in the linear layers (GPT-2 yes, Llama no)",
                                blank="the family's")
    norm_eps: float | None = setting(None, "epsilon of every norm", min=1e-12, max=1.0,
                                     blank="the family's")
    tie_embeddings: bool | None = setting(None, "share the output layer with the token embedding",
                                          blank="the family's")
    dropout: float | None = setting(None, "dropout on embeddings, attention and residual branches, "
                                    "below 1", min=0.0, max=1.0, blank="the family's")
    init_std: float = setting(0.02, "std of the normal initialisation", min=1e-6, max=1.0)
    init: str = setting("scaled", "how the weights start: scaled (GPT-2's: N(0, init_std), the "
                        "projections into the residual stream by 1/sqrt(2 n_layer), position "
                        "embeddings drawn too) or plain (minGPT's: N(0, init_std) on every "
                        "linear and embedding, position embeddings at zero)",
                        choices=("scaled", "plain"))
    settings: dict = setting(help="the chosen plugins' own settings, {kind: {setting: value}}",
                             factory=dict)

    PLUGIN_KINDS: ClassVar[tuple] = ("model", "norm", "attention", "positional", "mlp")
    MAX_PARAMS: ClassVar[int] = 2_000_000_000   # about 32 GB to train with Adam in float32

    def __post_init__(self):
        """Fill what the family decides, and each chosen plugin's settings with its defaults."""
        if isinstance(self.model, str):
            for key, value in family_defaults(self.model).items():
                if getattr(self, key) is None:
                    setattr(self, key, value)
        self._fill_plugin_settings()

    @classmethod
    def _from(cls, d: dict, entered: set | None):
        """Also takes `KIND.SETTING` keys, and the keys of older configs that are a plugin's
        setting now, which go to the plugins they belonged to."""
        return super()._from(cls._plugin_dict(d), cls._entered_settings(entered))

    @classmethod
    def _chosen_plugins(cls, d: dict) -> dict:
        model = d.get("model", cls.default("model"))
        family = family_defaults(model) if isinstance(model, str) else {}
        return {kind: d.get(kind) or family.get(kind) for kind in cls.PLUGIN_KINDS}

    def replace(self, **overrides):
        """A plugin changed here drops the old plugin's settings, and a family changed here takes
        the new family's parts wherever the old family's were in place."""
        d, entered = self.to_dict(), set(overrides)
        if "model" in overrides and overrides["model"] != self.model:
            old = family_defaults(self.model)
            for key in FAMILY_KEYS:
                if key not in overrides and d[key] == old.get(key):
                    d[key] = None
                    entered.add(key)                    # the new family's part enters
        return type(self)._from({**self._without_changed_plugins(d, overrides), **overrides}, entered)

    def check(self) -> None:
        if self.n_embd % self.n_head:
            divisors = [d for d in range(1, min(self.n_embd, 4096) + 1) if self.n_embd % d == 0]
            raise ConfigError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}; "
                              f"n_head must divide the width, e.g. one of {divisors[:24]}")
        if not self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        n = self.approx_params()
        if n > self.MAX_PARAMS:
            raise ConfigError(f"this model would have about {n / 1e9:.1f}B parameters (n_embd="
                              f"{self.n_embd}, n_layer={self.n_layer}, vocab_size={self.vocab_size}); "
                              f"the lab builds models up to {self.MAX_PARAMS / 1e9:.0f}B")

    def approx_params(self) -> int:
        """Parameters of the model this config builds, to within biases, norms and plugin extras;
        keys and values counted for every head (an upper bound for grouped-query attention); the
        MLP plugin declares its matrices per block (`matrices`, 2 when it declares none)."""
        d = self.n_embd
        inner = self.n_inner or 4 * d
        attn = 4 * d * d
        mlp = d * inner * REGISTRIES["mlp"].get(self.mlp).meta.get("matrices", 2)
        return self.vocab_size * d * (1 if self.tie_embeddings else 2) + self.n_positions * d \
            + self.n_layer * (attn + mlp)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


@dataclass
class TrainConfig(PluginSettings, _Config):
    epochs: int = setting(20, "passes over the training split (an upper bound with early "
                          "stopping)", min=1, max=100_000)
    batch_size: int = setting(32, "examples per optimizer step", min=1, max=65536)
    lr: float = setting(1e-4, "Adam's learning rate", min=1e-12, max=10.0)
    weight_decay: float = setting(0.0, "AdamW's decay", min=0.0, max=10.0,
                                  blank="0: plain Adam (the assignment's)")
    decay_biases: bool = setting(True, "AdamW decays the biases too (minGPT leaves them alone)")
    adam_beta2: float = setting(0.999, "Adam's second-moment decay (torch's 0.999; minGPT's "
                                "0.95)", min=0.5, max=0.99999)
    grad_clip: float = setting(0.0, "the largest gradient norm", min=0.0, max=1e6,
                               blank="0: no clipping")
    seed: int = setting(0, "seeds the initialisation, the shuffling and dropout", min=0,
                        max=SEED_MAX)
    shuffle: bool = setting(True, "reshuffle the training examples every epoch")
    early_stop: str = setting("perplexity", "the dev score the run keeps its best checkpoint by "
                              "and stops on (the task's metrics), or none: keep the last",
                              choices=keep_best_choices)
    patience: int = setting(1, "evaluations without improvement before stopping", min=1,
                            max=10_000)
    keep_also: str = setting("none", "also keep the evaluation with the best dev score by this "
                             "metric (another of the task's), as the checkpoint NAME-METRIC",
                             choices=keep_best_choices)
    keep_epochs: str = setting("", "also keep the weights at the end of these epochs, e.g. "
                               "50,100, as the checkpoints NAME-e50, NAME-e100: a budget curve "
                               "from one run", blank="none")
    eval_batch_size: int = setting(128, "examples per forward pass in evaluation", min=1,
                                   max=65536)
    max_train: int | None = setting(None, "train on the first N training examples only", min=1,
                                    max=10 ** 8, blank="all of them")
    max_dev: int | None = setting(None, "score the first N dev examples at each evaluation (the "
                                  "same for every run)", min=1, max=10 ** 8,
                                  blank="all of them (or as many as the task scores)")
    max_steps: int | None = setting(None, "budget: stop after N optimizer steps in all (the "
                                    "epoch under way is evaluated)", min=1, max=10 ** 9,
                                    unit="steps", blank="the epochs decide")
    max_minutes: float | None = setting(None, "budget: stop after N minutes of training steps "
                                        "(resumes add up; evaluations do not count)", min=0.01,
                                        max=10 ** 6, unit="minutes", blank="no time limit")
    save_every_minutes: float = setting(10.0, "save where the run stands (weights, optimizer, "
                                        "place in the epoch) after this many minutes since its "
                                        "last save, so a crash loses at most that; 0: never",
                                        min=0.0, max=10 ** 6, unit="minutes")
    train_layers: str = setting("all", "'all', or the 1-based blocks that train, e.g. 1,3")
    task: str = setting("captions", "the task plugin: the data, objectives and scores of the run",
                        choices=plugin_choices("task"))
    objective: str = setting("", "the task's objective (python -m lab plugins lists each "
                             "task's)", blank="the task's first")
    lr_schedule: str = setting("constant", "warmup_cosine: linear warm-up over warmup_steps, then "
                               "cosine decay to 10% of lr at the last step; mingpt: minGPT's own "
                               "(the birth-place assignment's), a cosine over decay_epochs floored "
                               "at 10% but not clamped, so it rises again after",
                               choices=("constant", "warmup_cosine", "mingpt"))
    warmup_steps: int = setting(0, "linear warm-up steps of warmup_cosine and mingpt", min=0,
                                max=10 ** 9, unit="steps", blank="0: none")
    decay_epochs: float = setting(0.0, "mingpt: the epochs its cosine takes to fall to 10% (the "
                                  "assignment: 200 of its 650)", min=0.0, max=10 ** 6,
                                  unit="epochs", blank="0: the whole run")
    tokenizer: str = setting("gpt2", "a new model's vocabulary: GPT-2 BPE, the training texts' "
                             "words, or characters (a fine-tune keeps its parent's)",
                             choices=scratch_tokenizer_choices)
    log_every: int = setting(20, "steps between progress lines (and curve points)", min=1,
                             max=10 ** 9, unit="steps")
    eval_every: int = setting(0, "steps between extra dev evaluations inside an epoch (they draw "
                              "the curve; only an epoch's end saves or stops)", min=0,
                              max=10 ** 9, unit="steps", blank="0: only at each epoch's end")
    device: str = setting("auto", "auto: CUDA when present", choices=("auto", "cpu", "cuda"))
    precision: str = setting("auto", "auto: bf16 autocast on a GPU, float32 on the CPU; weights "
                             "and optimizer state stay float32", choices=("auto", "bf16", "fp32"))
    compile: bool = setting(False, "torch.compile the model for training steps (GPU; the first "
                            "steps of each new batch length compile)")
    pack: bool = setting(True, "several examples per row where it is exact: no compute on "
                         "padding, the same loss")
    settings: dict = setting(help="the task's own settings, {\"task\": {setting: value}}",
                             factory=dict)

    PLUGIN_KINDS: ClassVar[tuple] = ("task",)

    def __post_init__(self):
        self._fill_plugin_settings()

    # the top-level keys of older configs that are a top-level key of another name now:
    # old -> (new, convert(old value) or None)
    RENAMED: ClassVar[dict] = {"max_train_captions": ("max_train", None),
                               "max_dev_captions": ("max_dev", None),
                               "keep_bleu_best": ("keep_also", lambda kept: "bleu" if kept else "none")}

    @classmethod
    def _from(cls, d: dict, entered: set | None):
        """Also takes the task's settings as `task.SETTING` keys, and the keys of older configs:
        renamed ones (RENAMED) and those that are the task's setting now."""
        if isinstance(d, dict) and any(old in d for old in cls.RENAMED):
            d = dict(d)
            for old, (new, convert) in cls.RENAMED.items():
                if old in d:
                    value = d.pop(old)
                    d[new] = convert(value) if convert else value   # over a newer default's
                    entered = entered if entered is None else entered | {new}
        return super()._from(cls._plugin_dict(d), cls._entered_settings(entered))

    @classmethod
    def moved_keys(cls) -> dict[str, str]:
        return {**super().moved_keys(),
                **{old: f"is {new} now: --set {new}={convert(True) if convert else 'VALUE'}"
                   for old, (new, convert) in cls.RENAMED.items()}}

    @classmethod
    def _chosen_plugins(cls, d: dict) -> dict:
        return {"task": d.get("task") or cls.default("task")}

    def replace(self, **overrides):
        """A task changed here drops the old task's settings."""
        d = self.to_dict()
        return type(self)._from({**self._without_changed_plugins(d, overrides), **overrides},
                                set(overrides))

    def check(self) -> None:
        task = task_meta(self.task)
        objectives = task["objectives"]
        if self.objective and self.objective not in objectives:
            raise ConfigError(f"the {self.task} task's objectives are {', '.join(objectives)}; "
                              f"got objective={self.objective!r}"[:300])
        keep = task.get("keep_best", {})
        kept = self.early_stop if self.early_stop != "none" else next(iter(keep), None)
        if self.early_stop != "none" and self.early_stop not in keep:
            raise ConfigError(f"early_stop={self.early_stop} is not a metric of the {self.task} "
                              f"task; choose {' or '.join([*keep, 'none'])}")
        if self.keep_also != "none" and (self.keep_also not in keep or self.keep_also == kept):
            others = [m for m in keep if m != kept]
            raise ConfigError(f"keep_also={self.keep_also}: keep_also names another metric of the "
                              f"{self.task} task than {kept}, which the checkpoint is kept by; "
                              f"choose {' or '.join([*others, 'none'])}")
        self.kept_epochs()

    def kept_epochs(self) -> list[int]:
        """keep_epochs as whole epochs, ascending, each within the run's epochs."""
        text = str(self.keep_epochs).replace(" ", "")
        try:
            kept = sorted({int(x) for x in text.split(",") if x})
        except ValueError:
            raise ConfigError(f"keep_epochs must be epoch numbers separated by commas, e.g. "
                              f"50,100, or empty; got {self.keep_epochs!r}"[:300]) from None
        bad = [e for e in kept if not 1 <= e <= self.epochs]
        if bad:
            raise ConfigError(f"keep_epochs {bad} out of range: this run has epochs 1 to {self.epochs}")
        return kept


@dataclass
class DecodeConfig(_Config):
    decoder: str = setting("random", "the decoder plugin", choices=plugin_choices("decoder"))
    max_new_tokens: int = setting(35, "stop a text after this many tokens", min=1, max=1024,
                                  unit="tokens")
    seed: int = setting(0, "the sampling seed", min=0, max=SEED_MAX)
    settings: dict = setting(help="the decoder's own settings (temperature, top_k, ...)",
                             factory=dict)

    def __post_init__(self):
        cls = self._settings_class()
        if cls is not None and isinstance(self.settings, dict):
            self.settings = fill_settings(cls, self.settings)

    def _settings_class(self):
        return self.settings_class(self.decoder)

    @staticmethod
    def settings_class(decoder) -> type | None:
        """The settings dataclass of a decoder plugin (None: it has none, or no such decoder)."""
        load_plugins()
        decoders = REGISTRIES["decoder"]
        return decoders.get(decoder).settings if isinstance(decoder, str) and decoder in decoders \
            else None

    @staticmethod
    def declared() -> dict[str, tuple[dataclasses.Field, list[str]]]:
        """Every decoder setting: its first declaration (default, help, bounds) and the decoders
        that have it; the order of the forms' fields and CLI flags: settings more decoders share
        first (temperature), then as the decoders' names come."""
        load_plugins()
        found: dict = {}
        for name in REGISTRIES["decoder"].names():
            cls = REGISTRIES["decoder"].get(name).settings
            for f in dataclasses.fields(cls) if cls else ():
                found.setdefault(f.name, (f, []))[1].append(name)
        first = list(found)
        return {n: found[n] for n in sorted(found, key=lambda n: (-len(found[n][1]), first.index(n)))}

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
        decoder = d.get("decoder", cls.default("decoder"))
        own = cls.settings_class(decoder)
        own_names = {f.name for f in dataclasses.fields(own)} if own else set()
        for key in [k for k in d if k in known]:
            value = d.pop(key)
            if key in own_names:
                settings[key] = value
            elif not lenient and decoder in REGISTRIES["decoder"]:
                # (an unknown decoder is named by validation instead)
                raise ConfigError(f"{key} is not a setting of the {decoder} "
                                  f"decoder; its settings are: {', '.join(sorted(own_names)) or 'none'}")
        return cls._from({**d, "settings": settings}, None)

    @classmethod
    def _coerce_plugin_settings(cls, d: dict, entered: set | None) -> dict:
        own, settings = cls.settings_class(d.get("decoder", cls.default("decoder"))), d.get("settings")
        if own is None or not isinstance(settings, dict):
            return d
        return {**d, "settings": coerce_settings(own, settings, "", cls._entered_settings(entered))}

    def _check_plugin_settings(self, entered: set | None) -> None:
        check_settings(self._settings_class(), self.settings, "", f"{self.decoder} decoder", self,
                       self._entered_settings(entered))

    @staticmethod
    def _entered_settings(entered: set | None) -> set | None:   # all, with a new decoder
        return None if entered is None or {"decoder", "settings"} & entered else entered

    def decoder_settings(self):
        """The chosen decoder's settings dataclass, filled; None if it has none."""
        cls = self._settings_class()
        return cls(**self.settings) if cls is not None else None

    def label(self) -> str:
        """The decoder and its settings, e.g. 'top_p, temperature=0.7, top_p=0.9'."""
        return self.decoder + "".join(f", {k}={v}" for k, v in self.settings.items())



def describe_settings(built_in_only: bool = False) -> dict:
    """Every setting as plain data (name, type, default, help, choices, bounds, unit, blank): the
    trainer's, a model's, the decoders' and each plugin's own, as KIND.SETTING. What `python -m
    lab settings` and the API's /settings show; built_in_only: the plugins that ship with the lab
    alone (the configuration reference in docs/, whatever else is installed)."""
    load_plugins()

    def shown(kind: str, name: str) -> bool:
        return not built_in_only or REGISTRIES[kind].get(name).factory.__module__.startswith("plugins.")

    def rows(config) -> list[dict]:          # a plugin kind's choices: the plugins shown
        return [{**r, "choices": [c for c in r["choices"] if c not in REGISTRIES[r["name"]] or
                                  shown(r["name"], c)]} if r["name"] in REGISTRIES and "choices" in r
                else r for r in describe(config)]
    plugins = {kind: {name: describe(REGISTRIES[kind].get(name).settings, f"{kind}.")
                      for name in REGISTRIES[kind].names()
                      if REGISTRIES[kind].get(name).settings and shown(kind, name)}
               for kind in ModelConfig.PLUGIN_KINDS + TrainConfig.PLUGIN_KINDS + ("decoder",)}
    return {"train": rows(TrainConfig), "model": rows(ModelConfig), "decode": rows(DecodeConfig),
            "plugins": plugins}
