"""Plugin registries: register / get / names / build, with metadata per entry.

A plugin is a factory registered under a unique name with a one-line description and, when it has
settings of its own, a typed dataclass of them (timm's `_registry.py` in spirit; unlike timm, a
duplicate name raises). A factory receives only what its signature names: from what the builder
offers its kind (`n_embd`, `n_head`, ...) and, when it declares settings, `settings`, an instance of
its dataclass. Only the model builder touches the registries; modules receive their parts.

A settings field may carry metadata: `help` (one line), `min` / `max` (bounds), `choices`, `short`
(a short name for labels, such as `t` for temperature). A
settings class may define `check(self, model_config)` for rules that cross fields; it raises
`lab.config.ConfigError` with a one-line message.
"""
from __future__ import annotations

import dataclasses
import inspect
import threading
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable

from lab.errors import LabError

ENTRY_POINT_GROUP = "tfmr_lab.plugins"


class PluginError(LabError):
    """An unknown plugin name or a bad plugin registration."""


@dataclass(frozen=True)
class Entry:
    name: str
    factory: Callable[..., Any]
    description: str
    settings: type | None = None      # a dataclass of the plugin's own settings, if it has any
    meta: dict = field(default_factory=dict)

    def params(self) -> list[dict]:
        """The settings as plain dicts (name, type, default, help, bounds): what the UI and CLI show."""
        if self.settings is None:
            return []
        out = []
        for f in dataclasses.fields(self.settings):
            default = f.default if f.default is not dataclasses.MISSING else None
            out.append({"name": f.name, "type": getattr(f.type, "__name__", str(f.type)),
                        "default": default, "help": f.metadata.get("help", ""),
                        **{k: f.metadata[k] for k in ("min", "max", "choices") if k in f.metadata}})
        return out

    def describe(self) -> dict:
        return {"name": self.name, "description": self.description,
                "params": self.params(), **self.meta}


class Registry:
    """required_meta: what every registration of this kind must declare; required: what the object
    its factory builds must have (checked by check_built once the plugins are loaded)."""
    def __init__(self, kind: str, required_meta: tuple = (), required: tuple = ()):
        self.kind, self.required_meta, self.required = kind, required_meta, required
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, description: str, settings: type | None = None, **meta):
        """Decorator: `@NORMS.register("rmsnorm", "Root-mean-square norm (Zhang & Sennrich 2019)")`;
        `settings=` names the plugin's settings dataclass."""
        if not description or "\n" in description:
            raise PluginError(f"{self.kind} plugin {name!r} needs a one-line description")
        if settings is not None and not dataclasses.is_dataclass(settings):
            raise PluginError(f"{self.kind} plugin {name!r}: settings must be a dataclass, "
                              f"got {settings!r}")

        def deco(factory):
            missing = [k for k in self.required_meta if k not in meta]
            if missing:
                raise PluginError(f"{self.kind} plugin {name!r} (package {_package(factory)}) does "
                                  f"not declare {', '.join(missing)} at its registration "
                                  f"(docs/plugins.md says what a {self.kind} declares)")
            if name in self._entries:
                raise PluginError(f"{self.kind} plugin {name!r} is already registered "
                                  f"(by {self._entries[name].factory.__module__})")
            self._entries[name] = Entry(name, factory, description, settings, meta)
            return factory
        return deco

    def get(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise PluginError(f"unknown {self.kind} plugin {name!r}; "
                              f"choose one of: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def build(self, name: str, *args, settings=None, **offered):
        """Call the plugin's factory with the positional `args`, the keywords of `offered` that its
        signature names, and `settings` when it declares settings."""
        entry = self.get(name)
        params = inspect.signature(entry.factory).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        kwargs = {k: v for k, v in offered.items() if takes_any or k in params}
        if entry.settings is not None:
            kwargs["settings"] = settings if settings is not None else entry.settings()
        return entry.factory(*args, **kwargs)

    def check_built(self) -> None:
        """Every entry's object has what this kind requires: refused by name, naming the package,
        before anything is trained."""
        for name in self.names() if self.required else ():
            entry = self._entries[name]
            try:
                built = self.build(name)
            except Exception as e:
                raise PluginError(f"{self.kind} plugin {name!r} (package {_package(entry.factory)}) "
                                  f"could not be built: {type(e).__name__}: {e}"[:400]) from None
            missing = [m for m in self.required if not callable(getattr(built, m, None))]
            if missing:
                raise PluginError(f"{self.kind} plugin {name!r} (package {_package(entry.factory)}) "
                                  f"has no {', '.join(m + '()' for m in missing)}: a {self.kind} "
                                  f"provides {', '.join(self.required)} (docs/plugins.md)")

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(self.names())


MODELS = Registry("model")
NORMS = Registry("norm")
ATTENTION = Registry("attention")
POSITIONAL = Registry("positional")
MLP = Registry("mlp")
DECODERS = Registry("decoder")
# a task's contract: lab/task.py and docs/plugins.md, "Writing a task"
TASKS = Registry("task", required_meta=("objectives", "keep_best"),
                 required=("scratch_tokenizer", "prepare"))

REGISTRIES = {r.kind: r for r in (MODELS, NORMS, ATTENTION, POSITIONAL, MLP, DECODERS, TASKS)}

_loaded = False


_load_lock = threading.Lock()


def load_plugins() -> None:
    """Import the built-in plugins, then third-party ones from the entry-point group. Safe from
    several threads at once: none returns before every plugin is registered."""
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if _loaded:
            return
        import plugins
        plugins.import_all()     # the built-ins: every module under plugins/ registers itself
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            ep.load()
        for registry in REGISTRIES.values():
            registry.check_built()
        _loaded = True


def _package(factory) -> str:
    """The top-level package a plugin's factory comes from (its error names it)."""
    return factory.__module__.split(".")[0]


def describe_all() -> dict:
    load_plugins()
    return {kind: [reg.get(n).describe() for n in reg.names()] for kind, reg in REGISTRIES.items()}
