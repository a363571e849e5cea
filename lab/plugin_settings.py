"""A plugin's own settings, read from the registries: filling and checking them, the choices of a
field that names a plugin, the parts a model family fills, the top-level keys of older configs
that are a plugin's setting now, and what the registered tasks declare (their metrics and
tokenizers). The ground floor: imports only lab.errors, lab.registry and lab.settings; lab.config
builds its configs on it and re-exports what others read from there.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import ClassVar

from lab.errors import ConfigError
from lab.registry import REGISTRIES, TASKS, load_plugins
from lab.settings import check_value, coerce, enters, setting


def fill_settings(cls, given: dict) -> dict:
    """A plugin's settings: the given values, the rest at their defaults; names the plugin does
    not declare stay, for check_settings to refuse."""
    return {**given, **{f.name: given.get(f.name, f.default) for f in dataclasses.fields(cls)}}


def coerce_settings(cls, given: dict, prefix: str, entered: set | None = None) -> dict:
    """A plugin's given settings, those entering (lab.settings.enters) converted to their declared
    types; names it does not declare stay as they are, for check_settings to refuse."""
    hints = typing.get_type_hints(cls)
    return {k: coerce(prefix + k, v, hints[k]) if k in hints and enters(entered, prefix + k) else v
            for k, v in given.items()}


def check_settings(cls, given: dict, prefix: str, plugin: str, config,
                   entered: set | None = None) -> None:
    """One plugin's settings: only declared names, those entering within their bounds and
    choices, and the settings class's own `check(config)`."""
    names = [f.name for f in dataclasses.fields(cls)] if cls else []
    for key in given:
        if key not in names:
            has = f"its settings are: {', '.join(names)}" if names else "it has no settings"
            raise ConfigError(f"{prefix}{key}: the {plugin} has no setting {key!r}; {has}"[:300])
    if cls is None:
        return
    for f in dataclasses.fields(cls):
        if enters(entered, prefix + f.name):
            check_value(prefix + f.name, given[f.name], f)
    instance = cls(**given)
    if hasattr(instance, "check"):
        instance.check(config)


def plugin_choices(kind: str):
    """A registry's names, read when asked (the choices of a plugin field)."""
    def names():
        load_plugins()
        return REGISTRIES[kind].names()
    names.plugin_kind = kind            # a wrong name is "an unknown plugin" (lab.settings)
    return names


def plugin_field(kind: str, help: str):
    """A config field that names a plugin of `kind`; blank: the family's."""
    return setting(None, help, choices=plugin_choices(kind), blank="the family's")


# the parts a model family fills when a config leaves them blank (its plugin's `defaults`)
FAMILY_KEYS = ("norm", "norm_position", "attention", "positional", "mlp", "bias", "norm_eps",
               "tie_embeddings", "dropout")


def family_defaults(model: str) -> dict:
    """The parts model family `model` chooses, as its plugin declares them."""
    load_plugins()
    models = REGISTRIES["model"]
    if model not in models:
        return {}
    defaults = models.get(model).meta.get("defaults", {})
    missing = [k for k in FAMILY_KEYS if k not in defaults]
    if missing:
        raise ConfigError(f"model plugin {model!r} declares no default for {', '.join(missing)}; "
                          f"its registration's `defaults` must name every part")
    return dict(defaults)


def legacy_keys(kinds: tuple) -> list[tuple[str, str, str, str]]:
    """(kind, plugin, old top-level key, its setting) for every plugin of `kinds` that declares
    `legacy_keys`: the keys older configs kept at the top before plugins had settings. The
    setting is its name, or (name, convert(old value, the config's dict))."""
    load_plugins()
    return [(kind, name, old, new) for kind in kinds
            for name in REGISTRIES[kind].names()
            for old, new in REGISTRIES[kind].get(name).meta.get("legacy_keys", {}).items()]


def task_meta(task: str) -> dict:
    """What task plugin `task` declares (objectives, metrics, tokenizers, ...)."""
    load_plugins()
    return TASKS.get(task).meta


def keep_best_choices() -> list[str]:
    """What the trainer may keep the best checkpoint by: any task's declared metrics, or none."""
    load_plugins()
    names = [m for t in TASKS.names() for m in task_meta(t).get("keep_best", {})]
    return list(dict.fromkeys(names)) + ["none"]


def scratch_tokenizer_choices() -> list[str]:
    """The tokenizers a model trained from scratch may have: any task's declared `tokenizers`."""
    load_plugins()
    return list(dict.fromkeys(k for t in TASKS.names() for k in task_meta(t).get("tokenizers", ())))

class PluginSettings:
    """What a config with plugin fields keeps of their settings: in `settings`, {kind: {setting:
    value}} for the plugin each kind's field names (ModelConfig: norm, attention, ...;
    TrainConfig: task). PLUGIN_KINDS: those kinds."""
    PLUGIN_KINDS: ClassVar[tuple] = ()

    def _settings_class(self, kind: str):
        return self._settings_class_of(kind, getattr(self, kind))

    @staticmethod
    def _settings_class_of(kind: str, name):
        """The settings dataclass of plugin `name` of `kind`; None: it has none, or no such plugin."""
        load_plugins()
        reg = REGISTRIES[kind]
        return reg.get(name).settings if isinstance(name, str) and name in reg else None

    def plugin_settings(self, kind: str):
        """The settings dataclass of the plugin chosen for `kind`, filled; None if it has none."""
        cls = self._settings_class(kind)
        return cls(**self.settings.get(kind, {})) if cls is not None else None

    def _fill_plugin_settings(self) -> None:
        """Each chosen plugin's settings filled with its defaults (a kind given no settings and
        whose plugin has none is left out)."""
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
                resolved[kind] = fill_settings(cls, resolved.get(kind, {}))
        self.settings = resolved

    @classmethod
    def _chosen_plugins(cls, d: dict) -> dict:
        """{kind: the plugin config dict `d` chooses for it}."""
        raise NotImplementedError

    @classmethod
    def moved_keys(cls) -> dict[str, str]:
        """Top-level keys of older configs that are a plugin's setting now, and where they went."""
        out = {}
        for kind, plugin, old, new in legacy_keys(cls.PLUGIN_KINDS):
            new = new if isinstance(new, str) else new[0]
            out[old] = (f"is the {plugin} {kind} plugin's own setting now: "
                        f"--set {kind}={plugin} --set {kind}.{new}=VALUE")
        return out

    @classmethod
    def _plugin_dict(cls, d: dict) -> dict:
        """A config dict with its plugin settings gathered into `settings` (`KIND.SETTING` keys,
        and older configs' top-level keys that are a plugin's setting now)."""
        if not isinstance(d, dict):
            raise ConfigError(f"{cls.__name__}: expected a JSON object, got {type(d).__name__}")
        d, settings = cls._gather_settings(d)
        if isinstance(settings, dict):
            cls._carry_moved_keys(d, settings)
        return {**d, "settings": settings}

    @classmethod
    def _carry_moved_keys(cls, d: dict, settings: dict) -> None:
        """An older config's top-level key goes to the plugin that declares it (`legacy_keys` in
        its registration) when that plugin is the chosen one; otherwise it meant nothing. The key
        is the more specific where both are given (an older config laid over a newer default's)."""
        chosen = cls._chosen_plugins(d)
        for kind, plugin, old, new in legacy_keys(cls.PLUGIN_KINDS):
            if old not in d:
                continue
            value = d.pop(old)
            name, convert = (new, None) if isinstance(new, str) else new
            if chosen.get(kind) == plugin and isinstance(settings.setdefault(kind, {}), dict):
                settings[kind][name] = convert(value, d) if convert else value

    @classmethod
    def _gather_settings(cls, d: dict) -> tuple[dict, object]:
        """(the dict without its plugin settings, the settings): `settings` and every dotted
        `KIND.SETTING` key, gathered as {kind: {setting: value}}."""
        d = dict(d)
        settings = d.pop("settings", None) or {}
        if isinstance(settings, dict):
            settings = {k: dict(v) if isinstance(v, dict) else v for k, v in settings.items()}
        for key in [k for k in d if isinstance(k, str) and "." in k]:
            kind, name = key.split(".", 1)
            if kind not in cls.PLUGIN_KINDS:
                raise ConfigError(f"{key}: a plugin setting is KIND.SETTING with KIND one of "
                                  f"{', '.join(cls.PLUGIN_KINDS)}"[:300])
            if not isinstance(settings, dict) or not isinstance(settings.setdefault(kind, {}), dict):
                raise ConfigError(f"settings: expected {{kind: {{setting: value}}}}, got {settings!r}"[:200])
            settings[kind][name] = d.pop(key)
        return d, settings

    def _without_changed_plugins(self, d: dict, overrides: dict) -> dict:
        """A config dict whose plugins `overrides` change, without the old plugins' settings."""
        for kind in self.PLUGIN_KINDS:
            if kind in overrides and overrides[kind] != d.get(kind):
                d["settings"].pop(kind, None)
        return d

    @classmethod
    def _entered_settings(cls, entered: set | None) -> set | None:
        """The keys entering a change, with "settings" where one is an older config's key that
        is a plugin's setting now (it enters as that setting)."""
        if entered is None:
            return None
        fields = {f.name for f in dataclasses.fields(cls)}
        older = any(isinstance(k, str) and "." not in k and k not in fields for k in entered)
        return entered | {"settings"} if older else entered

    @classmethod
    def _coerce_plugin_settings(cls, d: dict, entered: set | None) -> dict:
        """Config dict `d` with the entering values of its chosen plugins' settings converted to
        their types (where `d` is made as expected; otherwise the checks say what is wrong)."""
        settings = d.get("settings")
        if not isinstance(settings, dict):
            return d
        chosen = cls._chosen_plugins(d)
        out = {}
        for kind, given in settings.items():
            own = cls._settings_class_of(kind, chosen.get(kind)) if kind in cls.PLUGIN_KINDS else None
            out[kind] = coerce_settings(own, given, f"{kind}.", entered) \
                if own is not None and isinstance(given, dict) else given
        return {**d, "settings": out}

    def _check_plugin_settings(self, entered: set | None) -> None:
        """The chosen plugins' settings: their shape, the entering values, the plugins' own rules."""
        if not isinstance(self.settings, dict) or not all(
                isinstance(v, dict) for v in self.settings.values()):
            raise ConfigError(f"settings: expected {{kind: {{setting: value}}}}, e.g. "
                              f'{{"attention": {{"window": 8}}}}; got {self.settings!r}'[:300])
        for kind, given in self.settings.items():
            if kind not in self.PLUGIN_KINDS:
                raise ConfigError(f"settings: unknown kind {kind!r}; the kinds with plugins are "
                                  f"{', '.join(self.PLUGIN_KINDS)}"[:300])
            check_settings(self._settings_class(kind), given, f"{kind}.",
                           f"{kind} plugin {getattr(self, kind)!r}", self, entered)
