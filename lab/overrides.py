"""Settings given as `key=value` text (the CLI's `--set`, a preset's overrides), each handed to
the config class that has the key. The ground floor: imports only lab.errors; lab.config
re-exports it.
"""
from __future__ import annotations

import dataclasses

from lab.errors import ConfigError


def owner(key: str, *classes) -> int:
    """Which of the config classes has setting `key` (`KIND.SETTING` for a plugin's); an unknown
    or moved key is refused by name."""
    for i, cls in enumerate(classes):
        moved = cls.moved_keys() if hasattr(cls, "moved_keys") else {}
        if key in moved:
            raise ConfigError(f"{key} {moved[key]}")
        if key in {f.name for f in dataclasses.fields(cls)} or (
                "." in key and key.split(".", 1)[0] in getattr(cls, "PLUGIN_KINDS", ())):
            return i
    valid = sorted({f.name for c in classes for f in dataclasses.fields(c)} - {"settings"})
    raise ConfigError(f"unknown key {key!r}; valid keys are: {', '.join(valid)}, and a "
                      f"plugin's own settings as KIND.SETTING (python -m lab settings lists "
                      f"them)"[:1200])


def split_overrides(pairs: list[str], *classes) -> list[dict]:
    """Split `key=value` strings among config classes by which one has the key."""
    out = [{} for _ in classes]
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[owner(key.strip(), *classes)][key.strip()] = value
        except ConfigError as e:
            raise ConfigError(f"--set: {e}") from None
    return out
