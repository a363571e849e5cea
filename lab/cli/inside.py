"""`lens`, `ablate`, `patch`: looking inside a stored model (lab.inside): the logit lens over a
text, heads ablated (a set, or each in turn) with paired intervals, and activation patching
between a clean and a corrupted prompt."""
from __future__ import annotations

import json

from lab.config import ConfigError
from lab.inside import ablation, lens, patching
from lab.storage import checkpoints


def cmd_lens(args):
    if not args.text.strip():
        raise ConfigError("type a text: --text is empty")
    if not 1 <= args.top <= 50:
        raise ConfigError(f"--top must be between 1 and 50, got {args.top}")
    results = []
    for name in args.checkpoint:
        ck = checkpoints.load(name, args.store)
        results.append({"checkpoint": ck.name, **lens.logit_lens(ck.model, ck.tokenizer, args.text, args.top)})
    if args.json:
        print(json.dumps(results if len(results) > 1 else results[0]))
        return
    for r in results:
        print(f"{r['checkpoint']}: the rank of the next token at each layer (1: the lens's first choice)")
        for t, (tok, nxt) in enumerate(zip(r["tokens"], r["next"])):
            if nxt is None:
                continue
            ranks = " ".join(f"{r['next_rank'][layer][t]:>5}" for layer in range(len(r["layers"])))
            first = r["first_layer"][t]
            print(f"  {tok!r:>14} -> {nxt!r:<14} {ranks}   first at: "
                  f"{'never' if first is None else r['layers'][first]}")
        print(f"  columns: {', '.join(r['layers'])}")


def _check_ablate(args) -> None:
    """The command's own bounds, before the checkpoint is read."""
    most = ablation.MAX_SCAN_TEXTS if args.each else ablation.MAX_TEXTS
    if not 1 <= args.n <= most:
        raise ConfigError(f"--n must be between 1 and {most}{' with --each' if args.each else ''}, "
                          f"got {args.n}")
    if not 1 <= args.n_ref <= 5000:
        raise ConfigError(f"--n-ref must be between 1 and 5000, got {args.n_ref}")
    if args.each and args.heads:
        raise ConfigError("--heads and --each both given: ablate the heads named, or each head in "
                          "turn (--each), not both")


def cmd_ablate(args):
    _check_ablate(args)
    ck = checkpoints.load(args.checkpoint, args.store)
    if args.each:
        ablation.check_scan(ck.name, len(ck.model.transformer.h) * ck.model.config.n_head, args.n)
        r = ablation.scan(ck, args.mode, args.split, args.n, args.seed, args.n_ref, args.data_dir)
        if args.json:
            print(json.dumps(r))
            return
        print(f"{ck.name}: each head {args.mode}-ablated alone, {r['n']} {args.split} texts "
              f"(seed {args.seed}); perplexity {r['perplexity']:.3f}; change per block and head:")
        for i, row in enumerate(r["change"]):
            print(f"  block {i + 1:>2}: " + " ".join(f"{c:+8.3f}" for c in row))
        e = r["estimate"]
        print(f"  attribution patching's estimate (one forward and backward pass, {e['elapsed_s']:.1f} s "
              f"against the scan's {r['scan_s']:.1f} s) ranks the heads with Spearman "
              f"{e['rank_agreement']:+.2f} against the exact scan")
        print("  the heads that matter most:")
        for m in r["most"]:
            lo, hi = m["change_ci"]
            print(f"    {m['head']:>6} {m['change']:+.3f} [{lo:+.3f}, {hi:+.3f}]  {m['verdict']}")
        return
    heads = ablation.parse_heads(args.heads or "", len(ck.model.transformer.h), ck.model.config.n_head)
    r = ablation.ablate(ck, heads, args.mode, args.split, args.n, args.seed, args.n_ref,
                        data_dir=args.data_dir)
    if args.json:
        print(json.dumps(r))
        return
    lo, hi = r["change_ci"]
    print(f"{ck.name} with heads {', '.join(r['heads'])} {args.mode}-ablated, on {r['n']} {args.split} "
          f"texts (seed {args.seed}): perplexity {r['perplexity']:.3f} -> {r['ablated_perplexity']:.3f}, "
          f"change {r['change']:+.3f} [{lo:+.3f}, {hi:+.3f}]: {r['verdict']}")
    if r["bleu"]:                   # a task whose checkpoints write text
        h = r["bleu"]["harmonic"]
        lo, hi = h["change_ci"]
        print(f"  harmonic BLEU-4 of {r['n']} sampled texts ({r['bleu']['bleu_tokens']} tokens): "
              f"{h['intact']:.4f} -> {h['ablated']:.4f}, change {h['change']:+.4f} "
              f"[{lo:+.4f}, {hi:+.4f}]: {h['verdict']}")
    for c in r["continuations"]:
        print(f"  intact:  {c['intact']}\n  ablated: {c['ablated']}")


def cmd_patch(args):
    ck = checkpoints.load(args.checkpoint, args.store)
    r = patching.patch(ck.model, ck.tokenizer, args.clean, args.corrupted, args.answer, args.wrong)
    if args.json:
        print(json.dumps({"checkpoint": ck.name, **r}))
        return
    print(f"{ck.name}: logit difference {r['answer']!r} - {r['wrong']!r} at the last position: "
          f"clean {r['clean']:+.3f}, corrupted {r['corrupted']:+.3f}")
    if r["warning"]:
        print(f"  note: {r['warning']}")
    print("  restored by the residual stream entering each block, per position:")
    print("            " + " ".join(f"{t[:7]:>7}" for t in r["tokens"]))
    for label, row in zip(r["layers"], r["resid"]):
        print(f"  {label:>9} " + " ".join(f"{v:+7.2f}" for v in row))
    print("  restored by each head's output (all positions):")
    for label, row in zip(r["layers"], r["heads"]):
        print(f"  {label:>9} " + " ".join(f"{v:+7.2f}" for v in row))


def _parser_lens(sub) -> None:
    p = sub.add_parser("lens", help="the logit lens: each layer's guess at the next token")
    p.add_argument("--checkpoint", required=True, action="append",
                   help="a stored model; give it twice to read two side by side")
    p.add_argument("--text", required=True)
    p.add_argument("--top", type=int, default=5, help="top tokens kept per layer and position")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_lens)


def _parser_ablate(sub) -> None:
    p = sub.add_parser("ablate", help="heads ablated: the change in perplexity with its paired "
                                      "interval, and captions side by side")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--heads", help="BLOCK.HEAD pairs from 1, e.g. 1.3,2.1")
    p.add_argument("--each", action="store_true", help="ablate each head in turn (a blocks x heads grid)")
    p.add_argument("--mode", default="zero", choices=list(ablation.MODES),
                   help="zero the heads' outputs, or put their mean over a reference subset")
    p.add_argument("--split", default="test", choices=["train", "dev", "test"])
    p.add_argument("--n", type=int, default=200, help="texts scored (a seeded subset)")
    p.add_argument("--n-ref", dest="n_ref", type=int, default=200,
                   help="texts of the reference subset the means come from (--mode mean)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_ablate)


def _parser_patch(sub) -> None:
    p = sub.add_parser("patch", help="activation patching between a clean and a corrupted prompt")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--clean", required=True)
    p.add_argument("--corrupted", required=True, help="as long as --clean in tokens")
    p.add_argument("--answer", help="the clean answer (its first token; default: the model's choice)")
    p.add_argument("--wrong", help="the corrupted answer (default: the corrupted prompt's first "
                                   "choice other than the clean answer)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_patch)


PARSERS = {"lens": _parser_lens, "ablate": _parser_ablate, "patch": _parser_patch}
