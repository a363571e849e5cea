"""The library's layers, read from its source (no import runs): the import graph of lab/ has no
circle, and lab/ names no built-in task or decoder outside its presets.

Run against another tree with `LAB_LAYERS_ROOT=/path/to/checkout pytest tests/test_layers.py`.
"""
import ast
import os
from pathlib import Path

import pytest


ROOT = Path(os.environ.get("LAB_LAYERS_ROOT") or Path(__file__).resolve().parent.parent)
LAB = ROOT / "lab"

# lab/presets.py holds the lab's named choices (the decoders the views open with), so it names
# built-in decoders; each task's presets are in its own package
NAMED_CHOICES = {"presets.py"}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in sorted(LAB.rglob("*.py"))}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The lab modules `path` imports, at module level or inside functions."""
    here = _module(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            # `from lab.worker import jobs` imports lab.worker.jobs; `from lab.worker.jobs import x` imports lab.worker.jobs
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != here and name != "lab":
                out.add(name)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(p, set(modules)) for m, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _path_through(graph, comp: list[str]) -> str:
    """One circle inside a component, as `a -> b -> a`, for the message."""
    start, inside = comp[0], set(comp)
    prev, seen, todo = {start: None}, {start}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & inside):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return " -> ".join(reversed(path)) + f" -> {start}"
            if w not in seen:
                seen.add(w)
                prev[w] = v
                todo.append(w)
    return " <-> ".join(comp)


def test_lab_imports_form_no_circle():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import circles in lab/: " + "; ".join(_path_through(graph, c) for c in found)


# lab/'s floors, lowest first: a module imports only from its own package or from a floor below
# (training and evaluation share a floor and import neither each other)
FLOORS = {"errors": 0, "registry": 0, "settings": 0, "plugin_settings": 0, "overrides": 0,
          "config": 0, "presets": 0,
          "modeling": 1, "inputs": 2, "storage": 3, "training": 4, "evaluation": 4, "worker": 5,
          "inside": 5, "task": 5, "sweeps": 6, "cli": 7, "ui": 7, "__main__": 8}


def _floor_of(module: str) -> str:
    return module.split(".")[1]


def test_every_import_points_down_the_floors():
    graph = {a: {b for b in bs if b != "lab"} for a, bs in import_graph().items() if a != "lab"}
    assert {_floor_of(m) for m in graph} <= set(FLOORS), \
        f"a package without a floor: {sorted({_floor_of(m) for m in graph} - set(FLOORS))}"
    upward = [f"{a} -> {b}" for a, bs in graph.items() for b in bs
              if _floor_of(a) != _floor_of(b) and FLOORS[_floor_of(b)] >= FLOORS[_floor_of(a)]
              and not (FLOORS[_floor_of(a)] == 0 and FLOORS[_floor_of(b)] == 0)]
    assert not upward, f"imports that point up or across a floor: {upward}"


def test_each_package_says_what_it_owns():
    for init in sorted(LAB.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "import" in doc, f"{init.relative_to(ROOT)} needs a paragraph saying what it " \
                                        f"owns and what it may import"


def test_the_cycle_finder_names_a_circle():
    graph = {"lab.a": {"lab.b"}, "lab.b": {"lab.c"}, "lab.c": {"lab.a"}, "lab.d": {"lab.a"}}
    (comp,) = cycles(graph)
    assert comp == ["lab.a", "lab.b", "lab.c"]
    assert _path_through(graph, comp) == "lab.a -> lab.b -> lab.c -> lab.a"


def _names_used(path: Path, names: set, key: str) -> list[str]:
    """Plugin names (`names`, of the kind `key`: task, decoder) compared (any comparison), passed as
    key= or as a call's argument, or given as a dict's "key" value, with their line numbers. A
    setting's declared default (`setting("random", ...)`) is where a default is named, so it is not
    counted."""
    def named(node) -> bool:
        if isinstance(node, ast.Constant) and node.value in names:
            return True
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(named(e) for e in node.elts)

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and (                   # any comparison: ==, in, <=, is
                named(node.left) or any(named(c) for c in node.comparators)):
            found.append(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg == key and named(node.value):
            found.append(node.value.lineno)
        elif isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == key and named(v)
                for k, v in zip(node.keys, node.values)):
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) != "setting" and any(
                named(a) for a in node.args):
            found.append(node.lineno)
    return [f"{path.relative_to(ROOT)}:{n}" for n in sorted(found)]


def _plugin_names(kind: str) -> set[str]:
    """The built-in plugins of a kind, by the names they register (read from their source)."""
    found = set()
    for path in (ROOT / "plugins" / kind).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "register" \
                    and node.args and isinstance(node.args[0], ast.Constant):
                found.add(node.args[0].value)
    return found


# (model families are named by the converters of their formats, storage/interop.py and smollm2.py,
# and "gpt2" is a tokenizer kind too, so they are not enumerated here)
@pytest.mark.parametrize("kind,key", [("tasks", "task"), ("decoders", "decoder"), ("norms", "norm"),
                                      ("attention", "attention"), ("positional", "positional"),
                                      ("mlp", "mlp")])
def test_lab_names_no_built_in_plugin_outside_the_presets(kind, key):
    names = _plugin_names(kind)
    assert names, f"no {kind} plugins found"
    used = []
    for path in sorted(LAB.rglob("*.py")):
        if path.relative_to(LAB).as_posix() not in NAMED_CHOICES:
            used += _names_used(path, names, key)
    assert not used, (f"built-in {kind} named in lab/ (what differs between them belongs in their "
                      f"plugins; the lab's named choices in lab/presets.py): {used}")


def test_the_name_finder_sees_comparisons_keywords_arguments_and_dicts(tmp_path):
    src = tmp_path / "x.py"
    src.write_text('if cfg.task == "captions": pass\nf(task="birthplace")\n'
                   'ok = task in ("captions", "x")\nlabel = "captions"\n'
                   'd = {"task": "captions"}\ng("captions")\nt = setting("captions", "the task")\n'
                   'u = named <= {"captions"}\nv = x.startswith("birthplace")\n')
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert _names_used(src, {"captions", "birthplace"}, "task") == [
            "x.py:1", "x.py:2", "x.py:3", "x.py:5", "x.py:6", "x.py:8", "x.py:9"]
    finally:
        ROOT = saved


def _imports_inside_functions(path: Path) -> list[str]:
    found = []
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n.split(".")[0] in ("lab", "plugins") for n in names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def _discovery() -> set[str]:
    """The one deferred import by design: load_plugins imports the plugins, which sit above lab/."""
    source = (LAB / "registry.py").read_text().splitlines()
    return {f"lab/registry.py:{i + 1}" for i, line in enumerate(source) if line.strip() == "import plugins"}


def test_the_lab_imports_its_own_modules_at_the_top():
    """An import of the lab's own code inside a function hides a layer (or a circle); only heavy
    third-party imports are deferred, with a comment saying why."""
    found = [at for tree in ("lab", "plugins") for p in sorted((ROOT / tree).rglob("*.py"))
             for at in _imports_inside_functions(p) if at not in _discovery()]
    assert not found, f"lab imports inside functions: {found}"
    assert _imports_inside_functions(Path(__file__)) == []          # the finder itself runs


# what building a model may not load: the floors above the model and its plugins
UPPER_FLOORS = ("lab.ui", "lab.cli", "lab.worker", "lab.sweeps", "gradio")


def test_loading_the_plugins_loads_no_higher_floor():
    """Run, not read: a fresh process builds a config and a model (which loads every plugin) and
    has imported nothing from the faces, the worker or the sweeps."""
    import subprocess
    import sys
    probe = ("import sys; from lab.config import ModelConfig; from lab.modeling.model import build; "
             "build(ModelConfig(model='gpt2', vocab_size=97, n_positions=32, n_embd=32, n_layer=2, "
             "n_head=4)); from lab.registry import TASKS; assert 'captions' in TASKS.names(); "
             f"print(sorted(m for m in sys.modules if m.startswith({UPPER_FLOORS!r})))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout
