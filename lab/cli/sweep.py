"""`sweep`: start, watch, stop, resume, show and export sweeps of training runs; list the recipes
and the BLEU between the corpus's splits."""
from __future__ import annotations

from lab import sweeps
from lab.cli.output import print_json
from lab.config import ConfigError


def sweep_definition(args) -> dict:
    """The sweep a `sweep start` command line asks for: a recipe at a budget (or nothing), then
    the flags over it."""
    doc = sweeps.recipe(args.recipe, args.budget) if args.recipe else {}
    if args.budget != "cpu" and not args.recipe:
        raise ConfigError("--budget chooses one of a recipe's budgets; give --recipe too")
    doc["name"] = args.name
    for key in ("preset", "parent"):
        if getattr(args, key):
            doc[key] = getattr(args, key)
    if args.checkpoints:
        doc["checkpoints"] = args.checkpoints
    doc["grid"] = {**doc.get("grid", {}), **sweeps.parse_grid(args.grid or [], "--grid")}
    doc["set"] = doc.get("set", []) + (args.set or [])
    if args.seeds:
        doc["seeds"] = sweeps.parse_seeds(args.seeds, "--seeds")
    score = dict(doc.get("score", {}))
    if args.n is not None:
        score["n"] = args.n
    if args.split:
        score["split"] = args.split
    if args.decoders:
        score["decoders"] = args.decoders
    if args.bleu_tokens:
        score["bleu_tokens"] = args.bleu_tokens
    doc["score"] = score
    return doc


def _sweep_recipes(args):
    for name in sweeps.recipe_names():
        info = sweeps.recipe_info(name)
        print(f"{name:<14} {info.get('about', '')}")
        for budget, b in info.get("budgets", {}).items():
            print(f"{'':<14}   {budget}: {b.get('note', '')}")


def _sweep_splits(args):
    result = sweeps.split_bleu(args.data_dir)
    if args.json:
        return print_json(result)
    print("BLEU-4 between the splits (GPT-2 tokens; forward = the first split's captions against "
          "the second's):")
    for r in result["rows"]:
        lo, hi = r["harmonic_ci"]
        print(f"  {r['pair']:<11} {r['captions']:>17}  forward {r['forward']:.3f}  backward "
              f"{r['backward']:.3f}  harmonic {r['harmonic']:.3f} [{lo:.3f}, {hi:.3f}]  "
              f"(report: {r['report']:.3f})")


def _sweep_list(args):
    rows = sweeps.list_sweeps(args.store)
    if args.json:
        return print_json(rows)
    for r in rows:
        counts = ", ".join(f"{n} {s}" for s, n in r["statuses"].items())
        print(f"{r['name']:<24} {r['runs']} runs ({counts})"
              + (f"  recipe {r['recipe']}" if r["recipe"] else ""))
    if not rows:
        print("no sweeps yet: `python -m lab sweep start NAME --recipe heads` starts one "
              "(`python -m lab sweep recipes` lists the recipes)")


def _sweep_start(args):
    if args.dry_run:
        spec, runs = sweeps.check(sweep_definition(args), args.store)
        print(f"sweep {spec.name}: {sweeps.runs_text(len(runs))} ({sweeps.budget_text(spec.to_dict())}); nothing queued")
        for r in runs:
            print(f"  {r.name}: {sweeps.describe_run(r.values, r.seed)}")
        return
    runs = sweeps.start(sweep_definition(args), args.store)
    if args.json and not args.wait:
        print_json([{"run": r.name, "values": r.values, "seed": r.seed} for r in runs])
    elif not args.json:
        print(f"sweep {args.name}: queued {sweeps.runs_text(len(runs))}: {', '.join(r.name for r in runs)}")


def _sweep_table(args, baseline=None):
    t = sweeps.table(args.name, args.store, baseline=baseline)
    if args.json:
        print_json(t)
    else:
        print(sweeps.markdown(t), end="")


def cmd_sweep(args):
    named = {"start": _sweep_start,
             "stop": lambda a: print("\n".join(sweeps.stop(a.name, a.run, a.mode, a.store))),
             "resume": lambda a: print("\n".join(sweeps.resume(a.name, a.run, a.store))),
             "show": lambda a: _sweep_table(a, a.baseline),
             "export": lambda a: print("\n".join(sweeps.export(a.name, a.out, a.store)))}
    unnamed = {"recipes": _sweep_recipes, "splits": _sweep_splits, "list": _sweep_list}
    if args.action in unnamed:
        return unnamed[args.action](args)
    if not args.name:
        raise ConfigError(f"sweep {args.action} needs the sweep's NAME")
    named[args.action](args)
    if args.action in ("start", "resume") and args.wait and not args.dry_run:
        sweeps.wait(args.name, args.store, args.data_dir, executor=args.executor,
                    say=(lambda line: None) if args.json else (lambda line: print(line, flush=True)))
        _sweep_table(args)


def _parser_sweep(sub) -> None:
    p = sub.add_parser("sweep", help="start, watch, stop, resume and read sweeps of training runs")
    p.add_argument("action", choices=["start", "show", "list", "stop", "resume", "export", "recipes",
                                           "splits"])
    p.add_argument("name", nargs="?", help="the sweep's name (its runs are NAME-...)")
    p.add_argument("--recipe", help="start from a recipe (`sweep recipes` lists them)")
    p.add_argument("--budget", default="cpu", help="the recipe's budget: cpu or full")
    p.add_argument("--preset")
    p.add_argument("--parent", help="fine-tune this stored checkpoint in every run")
    p.add_argument("--checkpoint", dest="checkpoints", action="append", metavar="NAME",
                   help="score this stored checkpoint as it is, no training (repeatable; the "
                        "decoder-search recipe)")
    p.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                   help="a key and its values (several --grid: every combination)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a setting of every run")
    p.add_argument("--seeds", help="seeds, e.g. 0,1,2: each setting runs once per seed")
    p.add_argument("--n", type=int, help="examples each run is scored on (default 500)")
    p.add_argument("--split", choices=["dev", "test"], help="the split runs are scored on")
    p.add_argument("--decoder", dest="decoders", action="append", metavar="DECODER[,K=V...]",
                   help="a decoder to score with, e.g. top_p,temperature=0.7,top_p=0.9 (repeatable)")
    p.add_argument("--bleu-tokens", choices=["auto", "gpt2", "words"],
                   help="BLEU's units: GPT-2 tokens, whitespace words, or auto (GPT-2 tokens for "
                        "GPT-2-tokenized models; words when the sweep's grid varies the tokenizer)")
    p.add_argument("--run", help="stop/resume: one run (its name or number) instead of all")
    p.add_argument("--mode", default="now", choices=["now", "after_checkpoint"])
    p.add_argument("--baseline", type=int, help="show: the row (#) differences are paired "
                                                "against (default the sweep's, 1)")
    p.add_argument("--out", help="export: the folder to write into (default the store's exports)")
    p.add_argument("--executor", choices=["local", "ray"],
                   help="--wait: where the runs run: local processes (default) or Ray tasks, one "
                        "per run (RAY_ADDRESS names a cluster; default $LAB_EXECUTOR)")
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="start: check and list the runs, queue nothing")
    p.add_argument("--wait", action="store_true", help="serve the runs with a local worker and "
                   "return when all have ended, printing the table")
    p.add_argument("--data-dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_sweep)


PARSERS = {"sweep": _parser_sweep}
