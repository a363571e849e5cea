"""Typed configs: ModelConfig, TrainConfig, DecodeConfig. JSON in and out, validated.

A model config is plugin names plus sizes, nothing else. Keys use HF GPT-2's names where they exist
(`n_layer`, `n_head`, `n_embd`, `n_positions`); the same key is the config-JSON field, the CLI
`--set` key and the UI form label.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from lab.errors import LabError


class ConfigError(LabError):
    """A config value a person can fix: the message says which key, what it was, what is right."""


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
            if key in {f.name for f in dataclasses.fields(cls)}:
                out[i][key] = value
                break
        else:
            valid = sorted({f.name for c in classes for f in dataclasses.fields(c)})
            raise ConfigError(f"--set: unknown key {key!r}; valid keys are: {', '.join(valid)}")
    return out


def _positive(obj, *names):
    for n in names:
        v = getattr(obj, n)
        if v is None or v <= 0:
            raise ConfigError(f"{n} must be positive, got {v!r}")


@dataclass
class ModelConfig(_Config):
    model: str = "gpt2"             # model plugin: the family, which fixes module names for interop
    vocab_size: int = 50257         # tokens in the vocabulary (GPT-2 BPE: 50257)
    n_positions: int = 1024         # longest context the model accepts
    n_embd: int = 768               # width of the residual stream
    n_layer: int = 3                # number of Transformer blocks
    n_head: int = 12                # query heads per attention layer
    kv_groups: int | None = None    # key/value heads (grouped-query); None: as many as n_head
    n_inner: int | None = None      # MLP hidden width; None: 4 * n_embd
    norm: str = "layernorm"         # norm plugin
    norm_position: str = "pre"      # "pre" (GPT-2) or "post" (the original Transformer)
    attention: str = "mha"          # attention plugin
    positional: str = "learned"     # positional plugin
    mlp: str = "gelu"               # MLP plugin
    bias: bool = True               # biases in the linear layers (GPT-2 yes, Llama no)
    norm_eps: float = 1e-5          # epsilon of every norm
    rope_theta: float = 10000.0     # rotary base (rotary positions only)
    tie_embeddings: bool = False    # share the output layer with the token embedding
    dropout: float = 0.1            # dropout on embeddings, attention and residual branches
    init_std: float = 0.02          # std of the normal initialisation

    BOUNDS: ClassVar[dict] = {"vocab_size": (1, 1_000_000), "n_positions": (1, 32768),
                              "n_embd": (1, 16384), "n_layer": (1, 256), "n_head": (1, 4096),
                              "kv_groups": (1, 4096), "n_inner": (1, 131072),
                              "norm_eps": (1e-12, 1.0), "rope_theta": (1.0, 1e9),
                              "init_std": (1e-6, 1.0)}
    MAX_PARAMS: ClassVar[int] = 2_000_000_000   # about 32 GB to train with Adam in float32

    def check(self) -> None:
        from lab.registry import ATTENTION, MLP, MODELS, NORMS, POSITIONAL, load_plugins
        load_plugins()
        for reg, value in ((MODELS, self.model), (NORMS, self.norm), (ATTENTION, self.attention),
                           (POSITIONAL, self.positional), (MLP, self.mlp)):
            if value not in reg:
                raise ConfigError(f"{reg.kind}: unknown plugin {value!r}; "
                                  f"choose one of: {', '.join(reg.names())}")
        _positive(self, "vocab_size", "n_positions", "n_embd", "n_layer", "n_head")
        if self.n_embd % self.n_head:
            divisors = [d for d in range(1, min(self.n_embd, 4096) + 1) if self.n_embd % d == 0]
            raise ConfigError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}; "
                              f"n_head must divide the width, e.g. one of {divisors[:24]}")
        if self.positional == "rotary" and (self.n_embd // self.n_head) % 2:
            raise ConfigError(f"rotary positions need an even head width; "
                              f"n_embd/n_head = {self.n_embd // self.n_head}")
        if self.kv_groups is not None:
            _positive(self, "kv_groups")
            if self.n_head % self.kv_groups:
                raise ConfigError(f"kv_groups={self.kv_groups} must divide n_head={self.n_head}")
        if self.n_inner is not None:
            _positive(self, "n_inner")
        if self.norm_position not in ("pre", "post"):
            raise ConfigError(f"norm_position must be 'pre' or 'post', got {self.norm_position!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")

    def check_after_bounds(self) -> None:
        n = self.approx_params()
        if n > self.MAX_PARAMS:
            raise ConfigError(f"this model would have about {n / 1e9:.1f}B parameters (n_embd="
                              f"{self.n_embd}, n_layer={self.n_layer}, vocab_size={self.vocab_size}); "
                              f"the lab builds models up to {self.MAX_PARAMS / 1e9:.0f}B")

    def approx_params(self) -> int:
        """Parameters of the model this config builds, to within biases and norms."""
        d, hd = self.n_embd, self.n_embd // self.n_head
        kv = 1 if self.attention == "mqa" else (self.kv_groups or self.n_head)
        inner = self.n_inner or 4 * d
        attn = 2 * d * d + 2 * d * hd * kv
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
    bleu_samples: int = 500           # dev captions sampled per epoch when early_stop="bleu"
    eval_batch_size: int = 128        # captions per forward pass in evaluation
    max_train_captions: int | None = None  # use only the first N training captions (quick runs)
    max_dev_captions: int | None = None    # use only the first N dev captions
    final_dev: bool = False           # at the end, score the kept checkpoint on every dev caption
                                      # (when max_dev_captions scored only some during training)
    train_layers: str = "all"         # "all", or comma-separated 1-based blocks that train
    log_every: int = 20               # steps between logged training losses
    eval_every: int = 0               # steps between extra dev evaluations inside an epoch (0: none);
                                      # they draw the curve, only the epoch's end saves or stops
    device: str = "auto"              # "auto" (CUDA when present), "cpu" or "cuda"
    precision: str = "auto"           # "auto" (bf16 autocast on CUDA, fp32 on the CPU), "bf16" or
                                      # "fp32"; weights and optimizer state stay float32 either way
    compile: bool = False             # torch.compile the model for training steps (CUDA; the first
                                      # steps of each new batch length compile)

    BOUNDS: ClassVar[dict] = {"epochs": (1, 100_000), "batch_size": (1, 65536), "lr": (0.0, 10.0),
                              "weight_decay": (0.0, 10.0), "grad_clip": (0.0, 1e6),
                              "seed": (0, SEED_MAX), "patience": (1, 10_000),
                              "bleu_samples": (1, 5000), "eval_batch_size": (1, 65536),
                              "max_train_captions": (1, 10 ** 8), "max_dev_captions": (1, 10 ** 8),
                              "log_every": (1, 10 ** 9), "eval_every": (0, 10 ** 9)}

    def check(self) -> None:
        _positive(self, "epochs", "batch_size", "lr", "eval_batch_size", "log_every")
        if self.early_stop not in ("perplexity", "bleu", "none"):
            raise ConfigError(f"early_stop must be 'perplexity', 'bleu' or 'none', "
                              f"got {self.early_stop!r}")
        for n in ("max_train_captions", "max_dev_captions", "bleu_samples"):
            v = getattr(self, n)
            if v is not None and v < 1:
                raise ConfigError(f"{n} must be at least 1 (or unset for all), got {v}")
        if self.eval_every < 0:
            raise ConfigError(f"eval_every must be 0 (only at the end of each epoch) or a number "
                              f"of steps, got {self.eval_every}")
        if self.patience < 1:
            raise ConfigError(f"patience must be at least 1, got {self.patience}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ConfigError(f"precision must be 'auto', 'bf16' or 'fp32', got {self.precision!r}")


@dataclass
class DecodeConfig(_Config):
    decoder: str = "random"          # decoder plugin
    temperature: float = 1.0         # divides the logits before sampling
    top_k: int = 40                  # top_k decoder: sample among the k likeliest tokens
    top_p: float = 0.9               # top_p decoder: smallest set with this much probability
    num_beams: int = 4               # beam decoder: beams kept
    max_new_tokens: int = 35         # stop a caption after this many tokens
    seed: int = 0                    # sampling seed

    BOUNDS: ClassVar[dict] = {"temperature": (0.01, 100.0), "top_k": (1, 1_000_000),
                              "num_beams": (1, 16), "max_new_tokens": (1, 1024), "seed": (0, SEED_MAX)}

    def check(self) -> None:
        from lab.registry import DECODERS, load_plugins
        load_plugins()
        if self.decoder not in DECODERS:
            raise ConfigError(f"decoder: unknown plugin {self.decoder!r}; "
                              f"choose one of: {', '.join(DECODERS.names())}")
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be positive, got {self.temperature}")
        if self.top_k < 1:
            raise ConfigError(f"top_k must be at least 1, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        _positive(self, "num_beams", "max_new_tokens")
