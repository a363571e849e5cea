"""Built-in plugins: every module in the kind packages below registers itself on import, so a new
plugin is one new file (no list to edit). A module named `view` is a plugin's section of the web
page (it imports lab.ui, which reads the registries): the page imports it when it is built, by the
name the plugin's registration gives, so the registries and the CLI load without the web stack."""
import importlib
import pkgutil


def import_all() -> None:
    for info in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        if info.name.rsplit(".", 1)[-1] != "view":
            importlib.import_module(info.name)
