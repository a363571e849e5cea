"""`python -m lab ...`: the same operations as the UI, scriptable.

Every error a person can fix (bad config value, unknown plugin, missing corpus or checkpoint)
prints one line, `error: ...`, and exits with status 2; no traceback.

The package owns the terminal's face: a module per group of commands, each holding its commands
and their parsers (PARSERS: a command's name -> the function that adds its parser): reference
(plugins, settings), train (train, jobs, worker, run-job, job-starter), evaluate (generate, evaluate, bleu,
attention, exposure), inside (lens, ablate, patch), store (checkpoints, delete, import, export)
and sweep; output holds what they print with; this module assembles the parser, adds the commands a task plugin registers
(`commands`: the module whose add_parsers(sub) adds them), and runs a command (main). May import
every floor below it, lab.sweeps included; never lab.ui.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from lab.cli import evaluate, inside, reference, store, sweep, train
from lab.cli.output import run_command
from lab.errors import LabError
from lab.registry import TASKS, load_plugins

GROUPS = (reference, train, evaluate, inside, store, sweep)
# the commands in the order `python -m lab --help` lists them (the tasks' own come last)
COMMANDS = ("plugins", "settings", "train", "generate", "evaluate", "bleu", "checkpoints", "delete",
            "import", "attention", "lens", "ablate", "patch", "worker", "run-job", "job-starter", "jobs",
            "sweep", "exposure", "export")


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line too, like every other error."""

    def error(self, message):
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    # `lab` (the installed command) or `python -m lab`, as the person typed it
    prog = "lab" if Path(sys.argv[0]).name == "lab" else "python -m lab"
    ap = _Parser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="checkpoint store (default $LAB_STORE or ./checkpoints)")
    sub = ap.add_subparsers(dest="command", required=True)
    adders = {name: add for group in GROUPS for name, add in group.PARSERS.items()}
    for name in sorted(adders, key=COMMANDS.index):      # a command missing from COMMANDS raises
        adders[name](sub)
    load_plugins()
    for task in TASKS.names():                           # a task's own commands
        module = TASKS.get(task).meta.get("commands")
        if module:
            importlib.import_module(module).add_parsers(sub)
    return ap


def main(argv=None) -> int:
    try:
        parser = build_parser()         # loads the plugins: one that breaks the contract is refused
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return run_command(args.fn, args)
