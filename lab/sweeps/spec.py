"""A sweep's definition and how it is scored, checked where they enter: SweepSpec (the grid, the
runs, the seeds, the budget), Score (the split, the subset and the decoders), the grid and seed
lines of the CLI and the Experiments form, sweep names, and how a run's swept values read.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import ClassVar

from lab.config import SEED_MAX, ConfigError, DecodeConfig, _Config
from lab.presets import DECODE_TO_SCORE

MAX_SCORE_N = 5000
SPLITS = ("train", "dev", "test")
DEFAULT_DECODER = DECODE_TO_SCORE


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
    """'top_p p=0.9 t=0.7', 'greedy', 'beam beams=4': each setting by its declared short name."""
    declared = DecodeConfig.declared()
    short = {k: f.metadata.get("short", k) for k, (f, _) in declared.items()}
    s = d.get("settings", {})
    return " ".join([d["decoder"]] + [f"{short.get(k, k)}={_num(v)}" for k, v in s.items()])


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass
class SweepSpec(_Config):
    """A sweep's definition. grid: {key: [values]} over config keys (model, train, plugin
    settings as KIND.SETTING, or `parent` for fine-tunes); runs: an explicit list of {key: value}
    instead of (or before) the grid; set: KEY=VALUE for every run; budget: KEY=VALUE applied
    last (epochs, max_train, ...), said in the table. checkpoints: score these stored
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
        for key, values in self.grid.items():         # one run per value: a repeat is a mistake
            shown = [value_text(v) for v in values]
            twice = sorted({v for v in shown if shown.count(v) > 1})
            if twice:
                raise ConfigError(f"grid {key}: {', '.join(twice)} appears more than once; write each "
                                  f"value once"[:300])
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
        if len(set(self.checkpoints)) != len(self.checkpoints):
            raise ConfigError(f"checkpoints names a checkpoint more than once: {self.checkpoints}"[:300])
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
        vals = [v.strip() for v in values.split(";" if ";" in values else ",")]
        if not any(vals):
            raise ConfigError(f"{what} {key}: no values; write them as {key}=V1,V2")
        if not all(vals):
            raise ConfigError(f"{what} {key}={values}: an empty value between the commas; write "
                              f"each value once, e.g. {key}=1,4"[:300])
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


def value_text(v) -> str:
    """A swept value as a grid line writes it: a list as V1,V2 ('layers=1,6,12')."""
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def describe_run(values: dict, seed: int) -> str:
    """A run's swept values and seed, as said beside its name: 'n_head=3, lr=0.001, seed=0'."""
    return ", ".join([f"{k}={value_text(v)}" for k, v in values.items()] + [f"seed={seed}"])
