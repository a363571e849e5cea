"""Built-in plugins: every module in the kind packages below registers itself on import, so a new
plugin is one new file (no list to edit). A module named `view` is a plugin's section of the web
page (it imports lab.ui, which reads the registries), and one named `cli` its commands (it imports
lab.cli): the page and the CLI import them by the names the plugin's registration gives, so the
registries load without either face."""

FACES = ("view", "cli")      # modules the faces import themselves
import importlib
import pkgutil


def import_all() -> None:
    for info in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        if info.name.rsplit(".", 1)[-1] not in FACES:
            importlib.import_module(info.name)
