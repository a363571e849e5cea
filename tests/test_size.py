"""Sizes, read from the source (no import runs): in lab/ and plugins/ no function over 40 lines and
no module over 500. A function that needs a scroll bar is two functions.

Run against another tree with `LAB_LAYERS_ROOT=/path/to/checkout pytest tests/test_size.py`.
"""
import ast
import os
from pathlib import Path


ROOT = Path(os.environ.get("LAB_LAYERS_ROOT") or Path(__file__).resolve().parent.parent)
TREES = ("lab", "plugins")
MAX_FUNCTION_LINES = 40         # from `def` (decorators not counted) to its last line
MAX_MODULE_LINES = 500

# Exceptions, each at most the size it has (empty: every module and function is within the limits);
# the test says when an entry is within the limits and can go
LONG_MODULES: dict[str, int] = {}
LONG_FUNCTIONS: dict[str, int] = {}


def _sources() -> list[Path]:
    return [p for tree in TREES for p in sorted((ROOT / tree).rglob("*.py"))]


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def module_sizes() -> dict[str, int]:
    return {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in _sources()}


def function_sizes() -> dict[str, int]:
    out = {}
    for p in _sources():
        where = p.relative_to(ROOT).as_posix()
        for name, lines in _functions(ast.parse(p.read_text(encoding="utf-8"))):
            out[f"{where}::{name}"] = max(lines, out.get(f"{where}::{name}", 0))
    return out


def _over(sizes: dict[str, int], limit: int, allowed: dict[str, int]) -> list[str]:
    return [f"{name} ({n} lines)" + (f", {allowed[name]} allowed" if name in allowed else "")
            for name, n in sorted(sizes.items()) if n > max(limit, allowed.get(name, 0))]


def test_no_function_over_40_lines():
    over = _over(function_sizes(), MAX_FUNCTION_LINES, LONG_FUNCTIONS)
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (split each in two): {over}"


def test_no_module_over_500_lines():
    over = _over(module_sizes(), MAX_MODULE_LINES, LONG_MODULES)
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split each by role): {over}"


def test_the_allow_lists_name_only_what_is_still_over():
    functions, modules = function_sizes(), module_sizes()
    fixed = [name for name in LONG_FUNCTIONS if functions.get(name, 0) <= MAX_FUNCTION_LINES] + \
            [name for name in LONG_MODULES if modules.get(name, 0) <= MAX_MODULE_LINES]
    assert not fixed, f"within the limits now: remove {fixed} from tests/test_size.py's allow-lists"


def test_the_counter_sees_nested_functions_and_methods():
    tree = ast.parse("def f():\n    def g():\n        pass\n\nclass C:\n    def m(self):\n"
                     "        x = 1\n        return x\n")
    assert dict(_functions(tree)) == {"f": 3, "f.g": 2, "C.m": 3}
