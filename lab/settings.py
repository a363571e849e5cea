"""A setting described once: its type (the dataclass field's), default, one-line help, choices,
bounds, unit and what a blank value means. Every config dataclass (the trainer's, a model's, each
plugin's settings) declares its fields with `setting(...)`; validation, the CLI's flags and help,
the Train form's fields, the API's description and the generated configuration reference all read
these fields, so no list of choices or help text is written twice.

This module is the ground floor of the settings: it imports nothing of the lab but its errors.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import field
from typing import Any, Callable

from lab.errors import ConfigError


def setting(default: Any = dataclasses.MISSING, help: str = "", *, choices=None, min=None, max=None,
            unit: str | None = None, blank: str | None = None, factory: Callable | None = None):
    """A described dataclass field. `choices`: a sequence, or a function returning one (a
    registry's names, read when asked). `min` / `max`: inclusive bounds of a number. `blank`: what
    leaving the value blank means (it then takes the default); without it a blank is refused."""
    meta = {"help": help}
    for key, value in (("choices", choices), ("min", min), ("max", max), ("unit", unit),
                       ("blank", blank)):
        if value is not None:
            meta[key] = value
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def choices_of(f: dataclasses.Field) -> list | None:
    """The field's allowed values, or None when any value of its type goes."""
    choices = f.metadata.get("choices")
    if choices is None:
        return None
    return list(choices() if callable(choices) else choices)


def base_type(typ) -> type:
    """`int | None` -> int: the type a value is converted to."""
    args = [a for a in typing.get_args(typ) if a is not type(None)]
    if typing.get_origin(typ) in (typing.Union, types.UnionType) and args:
        return args[0]
    return typing.get_origin(typ) or typ


def optional(typ) -> bool:
    return type(None) in typing.get_args(typ)


def fields(cls) -> list[tuple[dataclasses.Field, Any]]:
    """Each described field of a config dataclass with its resolved type."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def default_of(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _quoted(values) -> str:
    shown = [repr(v) if isinstance(v, str) else str(v) for v in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def enters(entered: set | None, key: str) -> bool:
    """Whether the value of `key` (a field, or a plugin's `KIND.SETTING`) enters a config now, to
    be converted and checked: every value where a config is read (`entered` None: a form, the
    API, the command line, a file, a ledger row); where a checked config is changed (its
    `replace`), the keys given, and a plugin's settings where the plugin or the settings are."""
    if entered is None or key in entered:
        return True
    kind, dot, _ = key.partition(".")
    return bool(dot) and (kind in entered or "settings" in entered)


def check_value(key: str, value, f: dataclasses.Field) -> None:
    """The one bound and choice rule of every described setting; None passes (a blank that means
    the default)."""
    if value is None:
        return
    meta = f.metadata
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: expected a finite number, got {value!r}")
    choices = choices_of(f)
    kind = getattr(meta.get("choices"), "plugin_kind", None)
    if choices is not None and value not in choices and kind:
        raise ConfigError(f"{kind}: unknown plugin {value!r}; choose one of: {', '.join(choices)}"[:300])
    if choices is not None and value not in choices:
        raise ConfigError(f"{key} must be {_quoted(choices)}, got {value!r}"[:300])
    low, high = meta.get("min"), meta.get("max")
    if (low is not None and value < low) or (high is not None and value > high):
        blank = f" (or blank: {meta['blank']})" if "blank" in meta else ""
        raise ConfigError(f"{key} must be between {'-inf' if low is None else low} and "
                          f"{'inf' if high is None else high}{blank}, got {value}")


def coerce(key: str, value, typ):
    """Convert `value` (from JSON, a form or a `--set key=value` string) to the type `typ`. The
    one parser of a setting's value: the same text gets the same answer through every door."""
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null", "")):
            if type(None) in args:
                return None
        return coerce(key, value, base_type(typ))
    if origin is list:
        if isinstance(value, str):
            value = [v for v in value.replace(" ", "").split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}"[:200])
        return [coerce(key, v, args[0]) for v in value]
    parse = _PARSERS.get(typ)
    return parse(key, value) if parse else value


def _bool(key, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{key}: expected true or false, got {value!r}"[:200])


def _int(key, value):
    bad = ConfigError(f"{key}: expected a whole number, got {value!r}"[:200])
    if isinstance(value, bool) or (isinstance(value, float) and not (
            math.isfinite(value) and value.is_integer())):
        raise bad
    if isinstance(value, str) and len(value) > 30:
        raise ConfigError(f"{key}: expected a whole number, got {value[:30]!r}...")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise bad from None


def _float(key, value):
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a number, got {value!r}"[:200])
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{key}: expected a number, got {value!r}"[:200]) from None
    if not math.isfinite(number):
        raise ConfigError(f"{key}: expected a finite number, got {value!r}"[:200])
    return number


def _dict(key, value):
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a JSON object, got {value!r}"[:200])
    return value


def _str(key, value):
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected text, got {value!r}"[:200])
    if len(value) > 200:
        raise ConfigError(f"{key}: expected a short text, got {len(value)} characters")
    return value


_PARSERS = {bool: _bool, int: _int, float: _float, dict: _dict, str: _str}


def type_name(typ) -> str:
    t = base_type(typ)
    return {bool: "true/false", int: "whole number", float: "number", str: "text",
            dict: "object"}.get(t, getattr(t, "__name__", str(t)))


def describe(cls, prefix: str = "") -> list[dict]:
    """Each setting of a config dataclass as plain data: what the CLI, the API and the docs show."""
    out = []
    for f, typ in fields(cls):
        if f.metadata.get("help") is None and not f.metadata:
            continue
        row = {"name": prefix + f.name, "type": type_name(typ), "default": default_of(f),
               "help": f.metadata.get("help", "")}
        choices = choices_of(f)
        if choices is not None:
            row["choices"] = choices
        for key in ("min", "max", "unit", "blank"):
            if key in f.metadata:
                row[key] = f.metadata[key]
        out.append(row)
    return out


def _cell(row: dict) -> tuple[str, str]:
    """A described setting's 'allowed' and 'blank' cells for the reference table."""
    if "choices" in row:
        allowed = ", ".join(f"`{c}`" if c != "" else "blank" for c in row["choices"])
    elif "min" in row or "max" in row:
        allowed = f"{row['type']}, {row.get('min', '-inf')} to {row.get('max', 'inf')}"
    else:
        allowed = row["type"]
    if row.get("unit"):
        allowed += f" ({row['unit']})"
    return allowed, row.get("blank", "")


def _table(rows: list[dict]) -> list[str]:
    out = ["| setting | default | allowed | blank means | what it does |",
           "| --- | --- | --- | --- | --- |"]
    for row in rows:
        allowed, blank = _cell(row)
        default = "blank" if row["default"] in (None, "") else f"`{row['default']}`"
        help = row["help"].replace("|", "\\|")
        out.append(f"| `{row['name']}` | {default} | {allowed} | {blank} | {help} |")
    return out


def reference_markdown(described: dict) -> str:
    """The configuration reference (docs/configuration.md) from the settings' descriptions."""
    lines = ["# Configuration reference", "",
             "Generated from the settings' own descriptions by",
             "`python -m lab settings --markdown --built-in` (the plugins that ship with the lab;",
             "without `--built-in`, third-party ones installed beside them too); a test checks that",
             "this page is current. A setting is set the same way everywhere:",
             "`--set NAME=VALUE` on the command line, a field of the Train form, a key of the",
             "`settings` object of the API's `/start_job`, or a key of a `--config` file's `model` or",
             "`train` object. A plugin's own setting is `KIND.SETTING` (`attention.window`) and",
             "counts only while that plugin is chosen.", "",
             "## Training", ""] + _table([r for r in described["train"] if r["name"] != "settings"])
    lines += ["", "## Model", "",
              "A model family (`model`) fills the parts left blank with its own.", ""]
    lines += _table([r for r in described["model"] if r["name"] != "settings"])
    lines += ["", "## Decoding", ""] + _table([r for r in described["decode"]
                                               if r["name"] != "settings"])
    for kind, plugins in described["plugins"].items():
        for plugin, rows in plugins.items():
            lines += ["", f"## {kind} plugin `{plugin}`", ""] + _table(rows)
    return "\n".join(lines) + "\n"
