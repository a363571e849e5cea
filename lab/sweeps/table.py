"""A sweep's results table: one row per run, kept checkpoint and decoder, with bootstrap
intervals, paired differences against a baseline row and the best rows marked; the table as
people read it (display, Markdown, the paragraph saying what its figures are) and its exports
(CSV, JSON, Markdown, HTML report), and each run's training curves.
"""
from __future__ import annotations

import json
from pathlib import Path

from lab.evaluation import metrics
from lab.evaluation.evaluate import paired_intervals
from lab.evaluation.report import sweep_report
from lab.inputs import tasks
from lab.storage import exports
from lab.sweeps.ledger import get, run_status
from lab.sweeps.scoring import read_results, training_figures
from lab.sweeps.spec import value_text
from lab.training import runs
from lab.training.progress import format_duration

COLUMNS = ["kept_by", "checkpoint", "epoch", "decoder", "split", "status", "params", "train_s",
           "tokens_per_s", "dev_perplexity", "dev_harmonic_bleu", "perplexity", "perplexity_ci",
           "word_perplexity", "word_perplexity_ci", "forward_bleu", "forward_bleu_ci",
           "backward_bleu", "backward_bleu_ci", "harmonic_bleu", "harmonic_bleu_ci",
           "kv_bytes_per_token", "gen_tokens_per_s", "perplexity_diff", "perplexity_diff_ci",
           "harmonic_bleu_diff", "harmonic_bleu_diff_ci", "exposure_gap", "exposure_gap_ci",
           "accuracy", "accuracy_ci", "accuracy_diff", "accuracy_diff_ci", "best"]


def table(name: str, store=None, baseline: int | None = None, n_boot: int = 1000) -> dict:
    """One row per run, kept checkpoint and decoder: the swept values, status, size, training time
    and speed, dev and scored perplexity, BLEU with 95% intervals, cache bytes and generation
    speed, and the paired difference against the baseline row (a row number from 1).
    {"columns", "rows", "baseline_row", "swept", "spec", ...}."""
    spec, runs = get(name, store)
    swept = spec.swept_keys() + (["seed"] if len(spec.seeds) > 1 else [])
    rows, figures = _rows(name, runs, swept, store)
    scored = [i for i, f in enumerate(figures) if f is not None]
    baseline = spec.baseline if baseline is None else baseline
    base_i = baseline - 1 if 0 < baseline <= len(rows) and figures[baseline - 1] is not None \
        else (scored[0] if scored else None)
    # tokenizers differ: a caption's per-token perplexities differ in kind, per word they pair
    per_word = len({figures[i]["tokenizer"] for i in scored}) > 1
    _intervals(rows, figures, base_i, n_boot, spec.score["seed"], per_word)
    _mark_best(rows, scored, per_word)
    columns = ["row", "run"] + swept + COLUMNS
    answers = any(tasks.meta(tasks.task_of(r["train"])).get("sweep_figures") == "answers"
                  for r in runs) or bool(scored) and all("correct" in figures[i] for i in scored)
    # what a run keeps its checkpoint by unless told otherwise: its task's first metric
    usual = sorted({next(iter(tasks.metrics(tasks.task_of(r["train"])).values())).label for r in runs})
    return {"sweep": name, "spec": spec.to_dict(), "columns": columns,
            "rows": [{c: row.get(c) for c in columns} for row in rows],
            "baseline_row": rows[base_i]["row"] if base_i is not None else None,
            "swept": swept, "bootstrap": n_boot, "per_word": per_word, "answers": answers,
            "usual_kept_by": usual}


def _rows(name: str, runs: list[dict], swept: list[str], store=None) -> tuple[list[dict], list]:
    """The table's rows without their intervals, and each row's per-caption figures (None for a
    run not scored yet)."""
    rows, figures = [], []
    for r in runs:
        res = read_results(name, r["name"], store)
        base = {"run": r["name"], "status": run_status(r, store),
                **{k: r["values"].get(k, r["seed"] if k == "seed" else "") for k in swept}}
        if res is None:
            figs = training_figures(_metrics_path(r["name"], store))
            found = [({**base, "train_s": figs["train_s"] or None,
                       "tokens_per_s": figs["tokens_per_s"]}, None)]
        else:
            found = [pair for entry in res["kept"] for split, s in entry["splits"].items()
                     for pair in _scored_rows(base, res, entry, split, s)]
        for row, figure in found:
            rows.append({"row": len(rows) + 1, **row})
            figures.append(figure)
    return rows, figures


def _scored_rows(base: dict, res: dict, entry: dict, split: str, s: dict) -> list[tuple[dict, dict]]:
    """A kept checkpoint's rows on one split, each with its figures: one row of answers (right or
    wrong), its accuracy; or one row per decoder, its per-caption figures."""
    common = {**base, "kept_by": entry["kept_by"], "checkpoint": entry["checkpoint"],
              "epoch": entry["epoch"], "split": split, "params": entry["params"],
              "train_s": res.get("train_s"), "tokens_per_s": res.get("tokens_per_s"),
              "dev_perplexity": entry["dev_perplexity"],
              "kv_bytes_per_token": entry["kv_bytes_per_token"]}
    figure = {"hash": s["subset_hash"], "tokenizer": entry.get("tokenizer")}
    if "correct" in s:
        right = sum(s["correct"])
        return [({**common, "decoder": s["decoders"][0]["label"],
                  "gen_tokens_per_s": s["decoders"][0]["tokens_per_s"],
                  "accuracy": right / s["n"], "accuracy_ci": metrics.wilson(right, s["n"])},
                 {**figure, "correct": s["correct"]})]
    return [({**common, "decoder": d["label"], "dev_harmonic_bleu": entry["dev_harmonic_bleu"],
              "gen_tokens_per_s": d["tokens_per_s"], **_exposure_gap(s)},
             {**figure, "nll": [a / b for a, b in zip(s["nll"], s["count"])],
              "cap_nll": s["nll"], "cap_words": s["words"], "fwd": d["forward"], "bwd": d["backward"]})
            for d in s["decoders"]]


def _exposure_gap(split_results: dict) -> dict:
    """The exposure-bias gap after the longest own prefix measured (8 tokens), when measured."""
    rows = split_results.get("exposure")
    if not rows:
        return {}
    last = rows[-1]
    return {"exposure_gap": last["gap"], "exposure_gap_ci": last["gap_ci"],
            "exposure_prefix": last["prefix"]}


def _intervals(rows: list[dict], figures: list, base_i: int | None, n_boot: int, seed: int,
               per_word: bool = False) -> None:
    """Each scored row's intervals, and its paired difference against the baseline row where both
    scored the same captions (perplexity only between different checkpoints or splits; per word
    when the tokenizers differ)."""
    groups: dict[str, list[int]] = {}
    for i, f in enumerate(figures):
        if f is not None:
            groups.setdefault(f["hash"], []).append(i)
    for members in groups.values():
        if base_i in members:                     # the baseline first: differences against it
            members = [base_i] + [i for i in members if i != base_i]
        if "correct" in figures[members[0]]:
            if base_i in members:
                _accuracy_differences(rows, figures, members, n_boot, seed)
            continue
        shown, diffs = paired_intervals({i: {k: v for k, v in figures[i].items()
                                             if k not in ("hash", "tokenizer")}
                                         for i in members}, n_boot, seed)
        for i in members:
            rows[i].update({k: v for k, v in shown[i].items() if k in COLUMNS})
        if base_i not in members:
            continue
        for d in diffs:
            row, base = rows[d["model"]], rows[base_i]
            row["harmonic_bleu_diff"], row["harmonic_bleu_diff_ci"] = d["harmonic_bleu_diff"], d["harmonic_bleu_diff_ci"]
            if (row["checkpoint"], row["split"]) != (base["checkpoint"], base["split"]):
                kind = "word_perplexity" if per_word else "perplexity"
                row["perplexity_diff"], row["perplexity_diff_ci"] = d[f"{kind}_diff"], d[f"{kind}_diff_ci"]


def _accuracy_differences(rows: list[dict], figures: list, members: list[int], n_boot: int,
                          seed: int) -> None:
    """Each row's accuracy minus the baseline's (members[0]), paired by question."""
    base = figures[members[0]]["correct"]
    idx = metrics.bootstrap_indices(len(base), n_boot, seed)
    for i in members[1:]:
        rows[i]["accuracy_diff"], rows[i]["accuracy_diff_ci"] = \
            metrics.paired_difference(figures[i]["correct"], base, idx)


def _mark_best(rows: list[dict], scored: list[int], per_word: bool = False) -> None:
    """In each split, the rows of the lowest perplexity (per word when tokenizers differ) and the
    row of the best harmonic BLEU; among birth-place rows, those of the best accuracy."""
    answered = [i for i in scored if rows[i].get("accuracy") is not None]
    if answered:
        top = max(rows[i]["accuracy"] for i in answered)
        for i in answered:
            rows[i]["best"] = "best accuracy" if rows[i]["accuracy"] == top else ""
    scored = [i for i in scored if i not in answered]
    ppl = "word_perplexity" if per_word else "perplexity"
    for split in {rows[i]["split"] for i in scored}:
        here = [i for i in scored if rows[i]["split"] == split]
        low = min(rows[i][ppl] for i in here)
        top = max(here, key=lambda i: rows[i]["harmonic_bleu"])
        for i in here:
            rows[i]["best"] = ", ".join((["lowest perplexity"] if rows[i][ppl] == low else [])
                                        + (["best harmonic BLEU"] if i == top else []))


def _metrics_path(run: str, store=None) -> Path:
    return runs.run_dir_for(run, store) / "metrics.jsonl"


def curves(name: str, store=None) -> dict[str, dict]:
    """Each run's dev perplexity and training loss by step, for overlaid plots."""
    _, runs = get(name, store)
    out = {}
    for r in runs:
        figs = training_figures(_metrics_path(r["name"], store))
        out[r["name"]] = {"dev": figs["dev_curve"], "loss": figs["loss_curve"]}
    return out


# ---------------------------------------------------------------- reading the table

def _fmt(v, digits: int) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _with_ci(row: dict, key: str, digits: int) -> str:
    v, ci = row.get(key), row.get(f"{key}_ci")
    if v is None:
        return ""
    return f"{v:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else f"{v:.{digits}f}"


def display(t: dict) -> tuple[list[str], list[list[str]]]:
    """The table as people read it: figures rounded, intervals in brackets, times in minutes; a
    "kept by" column when a run's checkpoint was kept by other than its task's usual metric."""
    usual = {None, "", "as stored", *t.get("usual_kept_by", ())}
    two = len({r["kept_by"] for r in t["rows"] if r["kept_by"]}) > 1 \
        or any(r["kept_by"] not in usual for r in t["rows"])
    vs = f" vs #{t['baseline_row']}" if t["baseline_row"] else ""
    if t.get("answers"):
        return _display_answers(t, vs)
    headers = ["#", *t["swept"], *(["kept by", "epoch"] if two else []), "decoder", "split", "status",
               "params", "train time", "tok/s", "dev ppl", "ppl [95%]", "ppl/word [95%]", "fwd BLEU", "bwd BLEU",
               "harmonic BLEU [95%]", "KV B/tok", "gen tok/s",
               f"Δppl{vs} [95%]", f"Δharmonic{vs} [95%]"]
    exposure = any(r.get("exposure_gap") is not None for r in t["rows"])
    headers += (["exposure gap @8 [95%]"] if exposure else []) + ["best"]
    rows = []
    for r in t["rows"]:
        rows.append([str(r["row"]), *[value_text(r[k]) if r[k] is not None else "" for k in t["swept"]],
                     *([r["kept_by"] or "", _fmt(r["epoch"], 0)] if two else []), r["decoder"] or "", r["split"] or "", r["status"],
                     f"{r['params'] / 1e6:.2f}M" if r["params"] else "",
                     format_duration(r["train_s"]) if r["train_s"] else "",
                     f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "",
                     _fmt(r["dev_perplexity"], 2), _with_ci(r, "perplexity", 2),
                     _with_ci(r, "word_perplexity", 2), _with_ci(r, "forward_bleu", 3),
                     _with_ci(r, "backward_bleu", 3), _with_ci(r, "harmonic_bleu", 3),
                     f"{r['kv_bytes_per_token']:,.0f}" if r["kv_bytes_per_token"] is not None else "",
                     f"{r['gen_tokens_per_s']:,.0f}" if r["gen_tokens_per_s"] else "",
                     _with_ci(r, "perplexity_diff", 2), _with_ci(r, "harmonic_bleu_diff", 3),
                     *([_with_ci(r, "exposure_gap", 4)] if exposure else []), r["best"] or ""])
    return headers, rows


def _display_answers(t: dict, vs: str) -> tuple[list[str], list[list[str]]]:
    """A birth-place sweep: accuracy, its Wilson interval and the paired difference."""
    headers = ["#", *t["swept"], "decoder", "split", "status", "params", "train time", "tok/s",
               "dev ppl", "accuracy [95%]", f"Δaccuracy{vs} [95%]", "best"]
    pct = lambda r, k: "" if r.get(k) is None else (
        f"{100 * r[k]:.1f}%" + (f" [{100 * r[k + '_ci'][0]:.1f}, {100 * r[k + '_ci'][1]:.1f}]"
                                if r.get(k + "_ci") else ""))
    rows = [[str(r["row"]), *[value_text(r[k]) if r[k] is not None else "" for k in t["swept"]],
             r["decoder"] or "", r["split"] or "", r["status"],
             f"{r['params'] / 1e6:.2f}M" if r["params"] else "",
             format_duration(r["train_s"]) if r["train_s"] else "",
             f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "",
             _fmt(r["dev_perplexity"], 2), pct(r, "accuracy"), pct(r, "accuracy_diff"), r["best"] or ""]
            for r in t["rows"]]
    return headers, rows


def runs_text(n: int) -> str:
    """"1 run", "3 runs"."""
    return f"{n} run" if n == 1 else f"{n} runs"


def budget_text(spec: dict) -> str:
    parts = [f"preset {spec['preset']}"] if spec.get("preset") else []
    if spec.get("parent"):
        parts.append(f"fine-tuning {spec['parent']}")
    parts += spec.get("set", []) + spec.get("budget", [])
    sc = spec["score"]
    parts.append(f"scored on {sc['n']:,} {sc['split']} captions (seed {sc['seed']})"
                 + ("; the best decoder on dev then on test" if sc.get("pick_on_test") else ""))
    if len(spec.get("seeds", [])) > 1:
        parts.append(f"seeds {', '.join(map(str, spec['seeds']))}")
    return "; ".join(parts)


def markdown(t: dict) -> str:
    headers, rows = display(t)
    esc = lambda s: str(s).replace("|", "\\|")
    lines = [f"Sweep `{t['sweep']}`" + (f" (recipe {t['spec']['recipe']})" if t["spec"].get("recipe") else "")
             + f": {budget_text(t['spec'])}.", "",
             "| " + " | ".join(map(esc, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    lines += ["", how_text(t)]
    return "\n".join(lines) + "\n"


def how_text(t: dict) -> str:
    """What the table's figures are, in one paragraph."""
    against = f"row #{t['baseline_row']}" if t["baseline_row"] else "the baseline row, once one is scored"
    if t.get("answers"):
        return (f"Accuracy: the greedy answer (up to the next \u2047) equal to the place, over the "
                f"dev questions; 95% Wilson interval; differences (in points) paired by question "
                f"against {against}, percentile bootstrap over questions ({t['bootstrap']} "
                f"resamples). The London baseline scores 5.0% on dev.")
    words = ("; the runs' tokenizers differ, so runs compare per word (the lowest perplexity "
             "and Δppl are per word) and BLEU is on whitespace words") if t.get("per_word") else ""
    return (f"Perplexity is the assignment's (mean over captions of the per-token loss, then exp), "
            f"per word beside it{words}; BLEU-4 forward = each generated caption against every caption of "
            f"the split, backward = each reference of the subset against the generated ones; "
            f"intervals: percentile bootstrap over captions ({t['bootstrap']} resamples), differences "
            f"paired by caption against {against}.")


def csv_rows(t: dict) -> tuple[list[str], list[list]]:
    """Raw figures, each interval as two columns (_lo, _hi)."""
    headers = []
    for c in t["columns"]:
        headers += [f"{c}_lo", f"{c}_hi"] if c.endswith("_ci") else [c]
    rows = []
    for r in t["rows"]:
        row = []
        for c in t["columns"]:
            if c.endswith("_ci"):
                row += list(r[c]) if r[c] else [None, None]
            else:
                row.append(value_text(r[c]) if isinstance(r[c], list) else r[c])
        rows.append(row)
    return headers, rows


def export(name: str, out_dir: Path | None = None, store=None) -> list[str]:
    """The sweep's table as CSV, JSON, Markdown and a self-contained HTML report."""
    t, drawn = table(name, store), curves(name, store)
    files = {".csv": exports.table_csv(*csv_rows(t)),
             ".json": json.dumps({**t, "curves": drawn}, indent=2, default=str),
             ".md": markdown(t),
             ".html": sweep_report(t, display(t), how_text(t), drawn, budget_text(t["spec"]))}
    written = []
    for suffix, text in files.items():
        path = Path(out_dir) / f"{name}{suffix}" if out_dir else exports.fresh(f"sweep-{name}", suffix, store)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(str(path))
    return written
