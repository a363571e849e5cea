"""Gradio without its typing stubs. As each component class is made, Gradio parses the source file
that defines it and writes a `.pyi` stub beside it (`create_or_modify_pyi` in
gradio/component_meta.py): a help for Gradio's own development that costs about a second of every
start of the app, CPU the first page waits on, and writes into the lab's folders and Gradio's.
Imported before Gradio (lab/ui/__init__.py's first import), this makes that step do nothing; the
classes are made as before. Where Gradio was imported first, its own classes have their stubs
already, and the lab's are still made without."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

MODULE = "gradio.component_meta"


def _stubless(module) -> None:
    module.create_or_modify_pyi = lambda *args, **kwargs: None


class _Finder(importlib.abc.MetaPathFinder):
    """Finds Gradio's component_meta as the import system would, and changes it once it has run."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _stubless(module)
        spec.loader.exec_module = exec_module
        return spec


if MODULE in sys.modules:
    _stubless(sys.modules[MODULE])
elif not any(isinstance(finder, _Finder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
