"""Scratch vs fine-tuned SmolLM2 layer selections on the caption corpus (docs/results.md's
SmolLM2 table).

Every run sees the same captions in the same order (seed 0) for the same number of steps, with the
assignment's training defaults (Adam 1e-4, batch 32); dev perplexity per word is measured every
`--eval-every` steps on the same dev captions, so the curves of models with different tokenizers
share one axis. Then each best checkpoint is scored on the test split: per-word perplexity on all
of it, and BLEU-4 on words for three decoders on one seeded subset.

    python experiments/smollm2_finetune.py                  # every run not done yet, then the report
    python experiments/smollm2_finetune.py --runs first3    # one run
    python experiments/smollm2_finetune.py --report         # only redraw the table and figure

Results go to logs/smollm2/ (results.json, one log per run, curves.html); the store gets the
imported parents (smol-RUN) and the fine-tuned checkpoints (smol-RUN-ft), and the
baseline (scratch-1ep).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.storage import checkpoints  # noqa: E402
from lab.config import DecodeConfig  # noqa: E402

# run -> SmolLM2 blocks kept (1-based), None for the GPT-2-tokenized Tfmr-scratch baseline
RUNS = {"first3": [1, 2, 3], "scratch": None, "1-15-30": [1, 15, 30], "last3": [28, 29, 30],
        "all30": list(range(1, 31))}
DECODERS = {"random, tau 1.0": DecodeConfig.from_dict({"decoder": "random", "temperature": 1.0}),
            "random, tau 0.7": DecodeConfig.from_dict({"decoder": "random", "temperature": 0.7}),
            "top-p 0.9, tau 1.0": DecodeConfig.from_dict({"decoder": "top_p", "top_p": 0.9, "temperature": 1.0})}
OUT = ROOT / "logs" / "smollm2"
COLORS = ["#1f77b4", "#2ca02c", "#d62728", "#ff7f0e", "#9467bd"]


def load_results() -> dict:
    path = OUT / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_results(results: dict) -> None:
    tmp = OUT / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(OUT / "results.json")


def run_one(run: str, args) -> None:
    from lab.training import runs
    from lab.presets import configs
    from lab.storage.smollm2 import import_smollm2
    from lab.training.progress import format_event

    layers = RUNS[run]
    name = "scratch-1ep" if layers is None else f"smol-{run}-ft"
    log = open(OUT / f"{run}.log", "a")

    def say(line: str) -> None:
        print(f"[{run}] {line}", flush=True)
        log.write(line + "\n"); log.flush()

    overrides = [f"epochs={args.epochs}", f"eval_every={args.eval_every}",
                 f"max_dev={args.dev}", "early_stop=none"]
    if args.train:
        overrides.append(f"max_train={args.train}")
    entry = {"layers": layers, "overrides": overrides}
    if layers is not None:
        parent = f"smol-{run}"
        if parent not in checkpoints.names():
            t0 = time.time()
            import_smollm2(parent, layers)
            say(f"imported SmolLM2 blocks {layers} as {parent!r} in {time.time() - t0:.0f}s")
        entry["dev_word_perplexity_before"] = dev_word_perplexity(parent, args.dev)
        say(f"before fine-tuning: dev perplexity per word {entry['dev_word_perplexity_before']:.2f}")
        model_cfg, train_cfg, _ = configs("tfmr-finetune", overrides)
    else:
        parent = None
        model_cfg, train_cfg, _ = configs("tfmr-scratch", overrides)
    if name in checkpoints.names():
        checkpoints.delete(name)
    run_dir = runs.run_dir_for(name)
    if (run_dir / "metrics.jsonl").exists():
        (run_dir / "metrics.jsonl").unlink()       # a fresh curve, not appended to an old one
    t0 = time.time()
    for ev in runs.train(name, None if parent else model_cfg, train_cfg, parent=parent,
                         preset="tfmr-finetune" if parent else "tfmr-scratch"):
        say(format_event(ev, name))
    entry["train_s"] = round(time.time() - t0, 1)
    entry["curve"] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

    entry |= score_test(name, args.n_bleu, say)
    results = load_results()
    results[run] = entry
    save_results(results)


def dev_word_perplexity(name: str, n_dev: int) -> float:
    """Per-word perplexity on the first n_dev dev captions: the ones the trainer scores."""
    from lab.inputs import data
    from lab.evaluation.metrics import perplexity
    ck = checkpoints.load(name)
    dev = data.load_split("dev")[:n_dev]
    seqs = data.encode_captions(dev, ck.tokenizer, ck.config.n_positions)
    return perplexity(ck.model, seqs, ck.tokenizer.eos_id,
                      n_words=[len(c.split()) for c in dev])["word_perplexity"]


def score_test(name: str, n_bleu: int, say) -> dict:
    """Test perplexity (all captions) and word BLEU for every decoder on one seeded subset."""
    from lab.evaluation.evaluate import evaluate
    ck = checkpoints.load(name)
    entry, t0 = {}, time.time()
    entry["test"] = evaluate(name, split="test", ck=ck, skip_bleu=True)["perplexity"]
    say(f"test perplexity per word {entry['test']['word_perplexity']:.3f} "
        f"(per sentence on its own tokens {entry['test']['perplexity']:.3f}) in {time.time() - t0:.0f}s")
    entry["bleu"] = {}
    for label, decode in DECODERS.items():
        r = evaluate(name, split="test", n=n_bleu, decode=decode, bleu_tokens="words", ck=ck,
                     skip_perplexity=True)
        entry["bleu"][label] = {**{k: r["bleu"][k] for k in ("forward", "backward", "harmonic")},
                                "generate_s": r["timing"]["generate_s"], "samples": r["samples"][:3],
                                "subset_hash": r["provenance"]["subset_hash"]}
        say(f"BLEU-4 on words, {label}: forward {r['bleu']['forward']:.4f} backward "
            f"{r['bleu']['backward']:.4f} harmonic {r['bleu']['harmonic']:.4f} "
            f"({r['timing']['generate_s']:.0f}s to generate {n_bleu})")
    return entry


def report(results: dict) -> str:
    rows = ["| model | trained steps | dev ppl/word before | dev ppl/word after | test ppl/word | "
            + " | ".join(f"BLEU {d} (fwd / bwd / harm)" for d in DECODERS) + " |",
            "| --- | ---: | ---: | ---: | ---: |" + " --- |" * len(DECODERS)]
    for run in RUNS:
        if run not in results:
            continue
        e = results[run]
        evals = [c for c in e["curve"] if c["event"] == "eval"]
        label = "Tfmr-scratch (GPT-2 BPE)" if e["layers"] is None else f"SmolLM2 blocks {_span(e['layers'])}"
        before = e.get("dev_word_perplexity_before")
        rows.append(f"| {label} | {evals[-1]['step']} | {'%.1f' % before if before else '-'} | "
                    f"{evals[-1]['dev_word_perplexity']:.2f} | {e['test']['word_perplexity']:.2f} | "
                    + " | ".join("%.3f / %.3f / %.3f" % tuple(e["bleu"][d][k] for k in
                                                            ("forward", "backward", "harmonic"))
                                 for d in DECODERS) + " |")
    return "\n".join(rows)


def _span(layers: list[int]) -> str:
    return "1-30" if layers == list(range(1, 31)) else ",".join(map(str, layers))


def figure(results: dict):
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "dev perplexity per word (1,000 dev captions)", "train loss (per token of each model's own tokenizer)"))
    for run, e in results.items():
        label = "Tfmr-scratch" if e["layers"] is None else f"SmolLM2 {_span(e['layers'])}"
        evals = [c for c in e["curve"] if c["event"] == "eval"]
        xs = [0] + [c["step"] for c in evals] if e.get("dev_word_perplexity_before") else []
        ys = [e["dev_word_perplexity_before"]] if xs else []
        xs = xs or [c["step"] for c in evals]
        ys += [c["dev_word_perplexity"] for c in evals]
        color = COLORS[list(RUNS).index(run) % len(COLORS)]     # one colour per run in both panels
        fig.add_scatter(x=xs, y=ys, name=label, mode="lines+markers", legendgroup=run,
                        line_color=color, row=1, col=1)
        steps = [c for c in e["curve"] if c["event"] == "step"]
        fig.add_scatter(x=[c["step"] for c in steps], y=[c["train_loss"] for c in steps], name=label,
                        mode="lines", legendgroup=run, showlegend=False, line_color=color, row=1, col=2)
    # the imported 3-block selections start near 1e9 per word (blocks cut from a 30-block stack):
    # the table has those; the axis shows where the runs compete
    fig.update_yaxes(type="log", range=[1, 3], title_text="perplexity per word (log)", row=1, col=1)
    fig.update_yaxes(range=[2, 8], title_text="loss per token", row=1, col=2)
    fig.update_xaxes(title_text="step (32 captions each)")
    fig.update_layout(width=1100, height=420, margin=dict(l=50, r=20, t=40, b=40))
    return fig


def main() -> None:
    global OUT
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of: {', '.join(RUNS)}")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=94, help="steps between dev evaluations")
    p.add_argument("--train", type=int, default=0, help="train captions used (0: all 15,000)")
    p.add_argument("--out", type=Path, default=OUT, help="where results.json, logs and the figure go")
    p.add_argument("--dev", type=int, default=1000, help="dev captions scored")
    p.add_argument("--n-bleu", type=int, default=1000, help="test captions generated and references")
    p.add_argument("--redo", action="store_true", help="run again even if results.json has the run")
    p.add_argument("--report", action="store_true", help="only print the table and redraw the figure")
    p.add_argument("--png", type=Path, help="also save the figure as this PNG (Chromium draws it)")
    args = p.parse_args()
    OUT = args.out
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in wanted if r not in RUNS]
    if unknown:
        p.error(f"unknown run(s) {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    if not args.report:
        for run in wanted:
            if run in load_results() and not args.redo:
                print(f"[{run}] already in {OUT / 'results.json'}; --redo runs it again")
                continue
            run_one(run, args)
    results = load_results()
    print(report(results))
    figure(results).write_html(OUT / "curves.html", include_plotlyjs=True)
    print(f"figure: {OUT / 'curves.html'}")
    if args.png:
        render_png(OUT / "curves.html", args.png)
        print(f"picture: {args.png}")


def render_png(html: Path, png: Path) -> None:
    """The figure as a picture, drawn by Debian's Chromium headless shell (`make test` installs it;
    plotly.js is inline: nothing is fetched)."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium-headless-shell", headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1120, "height": 440})
        page.goto(html.resolve().as_uri())
        page.wait_for_selector(".main-svg")
        page.screenshot(path=str(png), full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
