"""`python -m lab birthplace ...`: the birth-place task's commands (the minGPT assignment):
pretrain, finetune, evaluate, baseline. The task registers them (`commands` in its registration);
lab.cli adds them to its parser, importing this module only then."""
from __future__ import annotations

import json
import os
from pathlib import Path

from lab.cli.output import print_events
from lab.config import ConfigError
from lab.presets import configs
from lab.training import runs
from plugins.tasks.birthplace import core as bp
from plugins.tasks.birthplace.presets import HW5_PERCEIVER


def cmd_birthplace(args):
    """The minGPT assignment's commands: pretrain, finetune, evaluate, baseline."""
    if args.action == "baseline":
        result = bp.baseline(args.split, args.data_dir)
        print(json.dumps(result) if args.json else bp.said(result))
        return
    if args.action == "evaluate":
        if not args.checkpoint:
            raise ConfigError("evaluate needs --checkpoint NAME (a fine-tuned birth-place model)")
        if args.split == "test" and not args.predictions:
            raise ConfigError("the test split has no places to score against: give --predictions "
                              "FILE to write the answers")
        import torch
        result = bp.evaluate(args.checkpoint, args.split, args.store, args.data_dir,
                             device="cuda" if torch.cuda.is_available() else "cpu")
        if args.predictions:
            _write_lines(args.predictions, result["predictions"])
        if args.json:
            print(json.dumps({k: v for k, v in result.items() if k != "predictions"}))
        elif "correct" in result:
            lo, hi = result["accuracy_ci"]
            print(f"{bp.said(result)} (95% interval {100 * lo:.1f}% to {100 * hi:.1f}%)")
        if args.predictions and not args.json:
            print(f"wrote {len(result['predictions'])} predictions to {args.predictions}")
        return
    _birthplace_train(args)


def _birthplace_train(args):
    if args.data_dir:             # the task reads its folder from here (the worker's jobs too)
        os.environ["LAB_BIRTHPLACE_DIR"] = str(bp.data_dir(args.data_dir))
    if not args.name:
        raise ConfigError(f"{args.action} needs --name NAME for the new checkpoint")
    if args.action == "pretrain":
        if args.parent:
            raise ConfigError("pretrain starts a new model; --parent is for finetune")
        preset = f"birthplace-{args.model}"
        model_cfg, train_cfg, _ = configs(preset, args.set)
    else:
        preset = "birthplace-finetune"
        scratch = [] if args.parent else ["epochs=75"]     # the assignment's, without pretraining
        if not args.parent and args.model == "perceiver":
            scratch += ["model=perceiver"] + [f"model.{k}={v}" for k, v in HW5_PERCEIVER.items()]
        model_cfg, train_cfg, changed = configs(preset, scratch + (args.set or []))
        if args.parent and changed:
            raise ConfigError(f"--parent keeps its architecture; cannot --set {', '.join(changed)}")
    print_events(runs.train(args.name, None if args.parent else model_cfg, train_cfg,
                            parent=args.parent, preset=preset, store=args.store), args.name, args.json)


def _write_lines(path: str, lines: list[str]) -> None:
    """One line per answer, written whole (a temporary file renamed over the target)."""
    target = Path(path)
    if "\0" in path or target.is_dir():
        raise ConfigError(f"--predictions {path!r} is not a file path")
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.replace(tmp, target)
    except OSError as e:
        raise ConfigError(f"cannot write --predictions {path}: {e.strerror}") from None


def _parser_birthplace(sub) -> None:
    p = sub.add_parser("birthplace", help="the birth-place task: pretrain, finetune, evaluate, "
                                          "baseline (the minGPT assignment)")
    p.add_argument("action", choices=["pretrain", "finetune", "evaluate", "baseline"])
    p.add_argument("--model", choices=["vanilla", "perceiver"], default="vanilla",
                   help="pretrain (and finetune without --parent): the vanilla GPT or the Perceiver")
    p.add_argument("--name", help="pretrain/finetune: the new checkpoint's name")
    p.add_argument("--parent", help="finetune: the pretrained checkpoint to start from")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a setting, e.g. epochs=5 or max_minutes=10")
    p.add_argument("--checkpoint", help="evaluate: the fine-tuned checkpoint")
    p.add_argument("--split", choices=["dev", "test"], default="dev")
    p.add_argument("--predictions", help="evaluate: write one answer per line to this file")
    p.add_argument("--data-dir", help="the cs224n-birthplaces folder (default $LAB_BIRTHPLACE_DIR "
                                      "or ../shared/data/cs224n-birthplaces)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_birthplace)


PARSERS = {"birthplace": _parser_birthplace}


def add_parsers(sub) -> None:
    """What lab.cli calls: this task's commands added to `python -m lab`."""
    for add in PARSERS.values():
        add(sub)
