"""`generate`, `evaluate`, `bleu`, `attention`, `exposure`: reading a stored model, its captions,
scores, attention and exposure bias, and the BLEU of two caption files."""
from __future__ import annotations

import json

from lab.cli.output import print_json
from lab.config import ConfigError, DecodeConfig
from lab.evaluation import attention_maps, exposure
from lab.evaluation.evaluate import evaluate
from lab.evaluation.metrics import bleu
from lab.inputs import tasks
from lab.inputs.data import read_hypotheses, read_lines
from lab.inputs.tokenizers import gpt2
from lab.modeling.generate import sample_captions
from lab.storage import checkpoints


def _decode_cfg(args) -> DecodeConfig:
    given = {k: getattr(args, k) for k in DecodeConfig.setting_names() if getattr(args, k) is not None}
    return DecodeConfig.from_dict({"decoder": args.decoder, "max_new_tokens": args.max_new_tokens,
                                   "seed": args.seed, **given})


def cmd_generate(args):
    cfg = _decode_cfg(args)
    ck = checkpoints.load(args.checkpoint, args.store)
    n, prompts, held = args.n, None, None
    if args.held_out:
        if args.prompt:
            raise ConfigError("--prompt and --held-out both given: continue one prompt, or the "
                              "starts of held-out texts")
        prompts, held, _ = tasks.held_out_prompts([ck], args.n, cfg.seed, args.held_out)
        n = len(prompts)
    gen = sample_captions(ck.model, ck.tokenizer, n, cfg, prompt=args.prompt or "", probs=True,
                          prompts=prompts)
    if args.json:
        print_json({"checkpoint": ck.name, "decode": cfg.to_dict(), "prompt": args.prompt or "",
                    "held_out": args.held_out,
                    "captions": [{"text": g.text, "tokens": g.tokens, "probs": g.probs,
                                  "finished": g.finished, **({"held_out_text": held[i]} if held else {})}
                                 for i, g in enumerate(gen)]})
    else:
        for i, g in enumerate(gen):
            print(g.text if not held else f"{g.text}\n    held out: {held[i]}")


def cmd_evaluate(args):
    result = evaluate(args.checkpoint, split=args.split, n=args.n, decode=_decode_cfg(args),
                      bleu_tokens=args.bleu_tokens, data_dir=args.data_dir, store=args.store,
                      skip_bleu=args.no_bleu, **({"device": args.device} if args.device else {}))
    if args.json:
        print_json(result)
        return
    if "metrics" in result:                 # a task that scores its own checkpoints
        print(_task_line(result))
        return
    p = result["perplexity"]
    prov = result["provenance"]
    texts = f"{p['sentences']} {prov['unit']}" + (f" of {prov['named']}" if prov.get("named") else "")
    print(f"{result['checkpoint']} on {result['split']} ({texts}): perplexity "
          f"{p['perplexity']:.3f}, token-weighted {p['token_perplexity']:.3f}, "
          f"per word {p['word_perplexity']:.3f}, {p['bits_per_byte']:.4f} bits per byte"
          + (f" ({result['provenance']['note']})" if "note" in result["provenance"] else ""))
    if "bleu" in result:
        b = result["bleu"]
        print(f"BLEU-4 ({result['provenance']['bleu_tokens']} tokens, {b['n_generated']} generated "
              f"vs {b['n_references']} references): forward {b['forward']:.4f} "
              f"backward {b['backward']:.4f} harmonic {b['harmonic']:.4f}")
    elif "bleu_skipped" in result["provenance"]:
        print(f"BLEU not scored: {result['provenance']['bleu_skipped']}")


def _task_line(result: dict) -> str:
    """A task's own scores: each by its name, with its 95% interval."""
    def said(m):
        f = (lambda v: f"{100 * v:.1f}%") if m.get("percent") else (lambda v: f"{v:.4f}")
        lo, hi = m.get("interval") or (None, None)
        return f"{m['label']} {f(m['value'])}" + (f" [{f(lo)}, {f(hi)}]" if lo is not None else "")
    return (f"{result['checkpoint']} on {result['split']} ({result['n']} {result.get('unit', 'examples')}): "
            + ", ".join(said(m) for m in result["metrics"].values()))


def cmd_bleu(args):
    hyps, refs = read_hypotheses(args.hypotheses), read_lines(args.references)
    if not hyps or not refs:
        raise ConfigError(f"{args.hypotheses if not hyps else args.references} holds no lines to score")
    empty = sum(not h.strip() for h in hyps)
    if args.tokens == "gpt2":
        tok = gpt2()
        hyps, refs = tok.encode_batch(hyps), tok.encode_batch(refs)
    else:
        hyps, refs = [h.split() for h in hyps], [r.split() for r in refs]
    result = bleu(hyps, refs)
    counts = {"hypotheses": len(hyps), "empty_hypotheses": empty, "references": len(refs)}
    if args.json:
        print_json({k: result[k] for k in ("forward", "backward", "harmonic")} | counts)
    else:
        print(f"forward {result['forward']:.4f} backward {result['backward']:.4f} "
              f"harmonic {result['harmonic']:.4f} ({len(hyps)} hypotheses, {empty} of them empty, "
              f"vs {len(refs)} references)")


def cmd_attention(args):
    if not args.text.strip():
        raise ConfigError("type a text: --text is empty")
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


def cmd_exposure(args):
    """Exposure bias of a captions checkpoint: continuation loss after gold vs own prefixes."""
    if not 1 <= args.n <= 5000:
        raise ConfigError(f"--n must be between 1 and 5000, got {args.n}")
    ck = checkpoints.load(args.checkpoint, args.store)
    rows, n = exposure.on_split(ck, args.split, args.n, args.seed, args.data_dir)
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


def _add_decode_args(p):
    """--decoder, then a flag per decoder setting (from the decoders' own settings classes); a
    flag left out takes the chosen decoder's default, a flag the decoder does not have is refused."""
    p.add_argument("--decoder", default=DecodeConfig.default("decoder"), help="decoder plugin (see `plugins`)")
    for setting, (f, owners) in DecodeConfig.declared().items():
        p.add_argument("--" + setting.replace("_", "-"), dest=setting, type=type(f.default),
                       default=None, help=f"{f.metadata.get('help', '')} ({', '.join(owners)}; "
                                          f"default {f.default})")
    p.add_argument("--max-new-tokens", dest="max_new_tokens", type=int,
                   default=DecodeConfig.default("max_new_tokens"))
    p.add_argument("--seed", type=int, default=DecodeConfig.default("seed"))


def _parser_generate(sub) -> None:
    p = sub.add_parser("generate", help="sample texts (captions, or its task's) from a checkpoint")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--prompt", default="")
    p.add_argument("--held-out", dest="held_out", type=int, default=0, metavar="WORDS",
                   help="start each row with the first WORDS words of a held-out text of the "
                        "checkpoint's corpus (its dev split, drawn by --seed)")
    _add_decode_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_generate)


def _parser_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="perplexity and BLEU of a checkpoint on a split")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--split", default="test", choices=["train", "dev", "test"])
    p.add_argument("--n", type=int, default=5000, help="texts generated and references used "
                                                           "(captions for a captions model)")
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


PARSERS = {"generate": _parser_generate, "evaluate": _parser_evaluate, "bleu": _parser_bleu,
           "attention": _parser_attention, "exposure": _parser_exposure}
