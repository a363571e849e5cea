"""Built-in plugins: every module in the kind packages below registers itself on import, so a new
plugin is one new file (no list to edit)."""
import importlib
import pkgutil


def import_all() -> None:
    for info in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        importlib.import_module(info.name)
