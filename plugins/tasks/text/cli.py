"""`python -m lab data ...`: the store's datasets (the text task's corpora): import, list, show,
delete. The task registers these commands (`commands` in its registration)."""
from __future__ import annotations

from lab.cli.output import print_json
from lab.config import ConfigError
from plugins.tasks.text import corpora


def cmd_data(args):
    if args.action == "list":
        rows = corpora.listing(args.store)
        if args.json:
            print_json(rows)
        elif not rows:
            print(f"no datasets in {corpora.root(args.store)}; add one with `python -m lab data "
                  f"import FILE --name NAME`")
        for r in [] if args.json else rows:
            print(f"{r['name']:<24} {_sizes(r)}  from {r['source']}")
        return
    if not args.name:
        raise ConfigError(f"data {args.action} needs --name NAME" if args.action == "import"
                          else f"data {args.action} needs the dataset's name: data {args.action} NAME")
    if args.action == "import":
        if not args.source:
            raise ConfigError("data import needs a FILE or FOLDER: data import FILE --name NAME")
        meta = corpora.import_source(args.source, args.name, args.text_column,
                                     args.dev_fraction, args.seed, args.store)
        print_json(meta) if args.json else print(_said(meta, imported=True))
    elif args.action == "show":
        meta = corpora.info(args.name, args.store)
        print_json(meta) if args.json else print(_said(meta))
    else:
        corpora.path_of(args.name, args.store)            # a name that is not there says so first
        if not args.yes:
            raise ConfigError(f"deleting dataset {args.name!r} cannot be undone; add --yes to confirm")
        corpora.delete(args.name, args.store)
        print(f"deleted dataset {args.name}")


def _sizes(meta: dict) -> str:
    return ", ".join(f"{s} {v['rows']:,} texts ({v['characters']:,} characters)"
                     for s, v in meta["splits"].items())


def _said(meta: dict, imported: bool = False) -> str:
    made = meta["split_from"]
    how = ("the source's own splits" if made["from"] == "source" else
           f"dev cut from train: {made['dev_fraction']:g} of its texts, seed {made['seed']}")
    lines = [f"{'imported' if imported else 'dataset'} {meta['name']} from {meta['source']} "
             f"({meta['format']}; text column {meta['text_column']!r} of {', '.join(meta['columns'])})",
             f"  splits: {_sizes(meta)} ({how})"]
    for key, counts in meta.get("tokens", {}).items():
        lines.append(f"  tokens ({counts['tokenizer']}): " + ", ".join(
            f"{s} {n:,}" for s, n in counts.items() if s != "tokenizer"))
    lines += ["  preview:"] + [f"    {t!r}" for t in meta["preview"]]
    if imported:
        lines.append(f"train on it: python -m lab train --preset tiny --name MODEL --set task=text "
                     f"--set task.dataset={meta['name']}")
    return "\n".join(lines)


def _parser_data(sub) -> None:
    p = sub.add_parser("data", help="your own text datasets: import, list, show, delete (the text task)")
    p.add_argument("action", choices=["import", "list", "show", "delete"])
    p.add_argument("source", nargs="?", help="import: a .txt (one text a line), .jsonl, .json, .csv, "
                                             ".tsv or .parquet file, or a save_to_disk folder; "
                                             "show/delete: the dataset's name")
    p.add_argument("--name", help="import: the new dataset's name")
    p.add_argument("--text-column", help="import: the column holding the texts (default: 'text', "
                                         "else the first text column)")
    p.add_argument("--dev-fraction", type=float, default=corpora.DEV_FRACTION,
                   help="import: the part of train cut off as dev when the source has no dev split")
    p.add_argument("--seed", type=int, default=0, help="import: the seed of that cut")
    p.add_argument("--yes", action="store_true", help="delete: confirm")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_run)


def _run(args):
    if args.action in ("show", "delete") and args.name is None:
        args.name = args.source             # data show NAME
    cmd_data(args)


PARSERS = {"data": _parser_data}


def add_parsers(sub) -> None:
    for add in PARSERS.values():
        add(sub)
