"""A comparison as one self-contained HTML file that opens offline: the captions side by side,
the scores with their intervals and verdicts, attention of a chosen caption (bertviz's head view
with d3, jQuery and require.js written into the file), the logit lens, the heads ablated and the
activations patched in Inside the model, every setting and the provenance.
"""
from __future__ import annotations

import html
import json
import time

from lab.evaluation.attention_maps import CDN, VENDOR_DIR

# the captions table (Compare's, and the report's copy of it): one style for both
CAPTIONS_CSS = """
.lab-compare { border-collapse: collapse; width: 100%; table-layout: fixed; font-size: 14px; }
.lab-compare td { overflow-wrap: anywhere; }
.lab-compare td, .lab-compare th { border: 1px solid #ddd; padding: 6px 8px; vertical-align: top; text-align: left; }
.lab-compare .row-no, .lab-compare th:first-child { color: #888; width: 2.5em; }
.tok { border-radius: 3px; padding: 0 1px; white-space: pre-wrap; }
.tok-prompt { color: #666; white-space: pre-wrap; }
"""

STYLE = CAPTIONS_CSS + """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1300px; color: #111; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.6em; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
td, th { border: 1px solid #ddd; padding: 5px 8px; vertical-align: top; text-align: left; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; }
.attention { display: flex; flex-wrap: wrap; gap: 16px; }
.attention > div { flex: 1 1 560px; }
iframe { width: 100%; border: 1px solid #ddd; }
"""


def _inline(js: str) -> str:
    """Script text safe inside <script> ... </script>."""
    return js.replace("</script", "<\\/script")


def self_contained(document: str, asset_url: str) -> str:
    """A bertviz document made with `asset_url` for its scripts, with those scripts written in:
    d3 and jQuery first (they set window globals while no AMD loader exists), then require.js and
    two named modules, so bertviz's require(['jquery', 'd3']) loads nothing."""
    vendor = {name: _inline((VENDOR_DIR / f"{name}.js").read_text(encoding="utf-8"))
              for name in ("d3.min", "jquery.min", "require.min")}
    loader = (f"<script>{vendor['d3.min']}</script><script>{vendor['jquery.min']}</script>"
              f"<script>{vendor['require.min']}</script>"
              "<script>define('d3', [], function () { return window.d3; });"
              "define('jquery', [], function () { return window.jQuery; });</script>")
    require_tag = f'<script src="{asset_url}/require.min.js"></script>'
    if require_tag not in document:
        raise ValueError("the attention view does not load require.js where expected")
    document = document.replace(require_tag, loader)
    for local in CDN.values():                    # nothing may point outside the file
        document = document.replace(f"{asset_url}/{local}", f"inline:{local}")
    return document


def _frame(document: str, height: int) -> str:
    return (f'<iframe sandbox="allow-scripts" style="height:{height}px" '
            f'srcdoc="{html.escape(document, quote=True)}"></iframe>')


def _settings_table(settings: dict) -> str:
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                   for k, v in settings.items())
    return f"<table>{rows}</table>"


def evaluation(headers: list[str], rows: list[list], verdicts: list[str], provenance: dict) -> str:
    """The Evaluate tab's scores as one self-contained HTML file: the table with its intervals,
    the verdicts in words and how the figures were made (subset, seeds, decoders)."""
    names = list((provenance or {}).get("checkpoints") or [r[0] for r in rows])
    parts = [f"<h1>tfmr-lab evaluation: {html.escape(' vs '.join(map(str, names)))}</h1>",
             f"<p>Saved {time.strftime('%Y-%m-%d %H:%M:%S')}. This file needs no network. Each "
             f"figure is given with its 95% interval; every checkpoint was scored on the same "
             f"seeded subset.</p>", "<h2>Scores</h2>",
             _scores_table({"headers": headers, "rows": rows, "verdicts": verdicts,
                            "provenance": provenance})]
    return _page("tfmr-lab evaluation", parts)


def comparison(captions_html: str, settings: dict, checkpoints: dict, scores: dict | None = None,
               attention: list[tuple[str, str, str, int]] | None = None,
               lenses: list[dict] | None = None, inside: dict | None = None,
               left_out: list[str] | None = None) -> str:
    """The report. captions_html: the Compare tab's table; settings: what produced it (decoder,
    seed, prefix, n); checkpoints: {name: its config, provenance and metrics}; scores: the last
    'Which is better?' (a rows/provenance/verdicts dict); attention: (checkpoint, caption, self-
    contained bertviz document, its height in pixels) for each view; lenses: each checkpoint's
    logit lens of the same caption (lab.inside.lens's dicts with "checkpoint"); inside: the last
    results of Inside the model for these checkpoints ({"ablation": ablate()'s dict, "scan": [scan()'s
    dicts], "patch": patch()'s dict with "checkpoint"}, each optional); left_out: what the report
    could have held and does not, each with why and how to get it in."""
    parts = [f"<h1>tfmr-lab comparison: {html.escape(' vs '.join(checkpoints))}</h1>",
             f"<p>Saved {time.strftime('%Y-%m-%d %H:%M:%S')}. This file needs no network.</p>",
             "<h2>Captions side by side</h2>",
             "<p>Row <i>i</i> of every column comes from the same seed and position; each generated "
             "token is shaded by the probability the model gave it (hover for the number).</p>",
             captions_html, "<h2>Settings</h2>", _settings_table(settings)]
    if scores:
        parts += ["<h2>Scores</h2>", _scores_table(scores)]
    parts += _views(attention or [], lenses or [])
    if inside:
        parts += inside_parts(inside)
    if left_out:
        parts += ["<h2>Not in this report</h2><ul>",
                  *(f"<li>{html.escape(why)}</li>" for why in left_out), "</ul>"]
    parts.append("<h2>Checkpoints: config, provenance and metrics</h2>")
    for name, info in checkpoints.items():
        parts.append(f"<h3>{html.escape(name)}</h3><pre>{html.escape(json.dumps(info, indent=2, default=str))}</pre>")
    return _page("tfmr-lab comparison", parts)


def _page(title: str, parts: list[str]) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>")


def _views(attention: list, lenses: list[dict]) -> list[str]:
    """Each checkpoint's attention view of one row, then each one's logit lens of it."""
    parts = []
    if attention:
        parts.append("<h2>Attention</h2><div class='attention'>")
        for name, caption, document, height in attention:
            parts.append(f"<div><h3>{html.escape(name)}</h3><p>{html.escape(caption)}</p>"
                         f"{_frame(document, height)}</div>")
        parts.append("</div>")
    if lenses:
        parts.append("<h2>Logit lens</h2><p>Each layer's probability of the token that comes next "
                     "(the residual stream read through the final norm and the output layer); "
                     "hover a cell for the layer's top tokens.</p>")
        parts += [lens_table(r) for r in lenses]
    return parts


def lens_table(r: dict) -> str:
    """A logit lens as an HTML table (no script): layers x positions, each cell shaded by the
    probability of the next token, the top tokens in its tooltip."""
    head = "".join(f"<th>{html.escape(t)}</th>" for t in r["tokens"])
    rows = []
    for i, layer in enumerate(r["layers"]):
        cells = []
        for t in range(len(r["tokens"])):
            p = r["next_prob"][i][t]
            tops = ", ".join(f"{s!r} {q:.2f}" for s, q in r["top"][i][t][:3])
            if p is None:
                cells.append(f"<td title='{html.escape(tops, quote=True)}'></td>")
                continue
            tip = f"next {r['next'][t]!r}: rank {r['next_rank'][i][t]}, p {p:.3f}; top: {tops}"
            cells.append(f"<td style='background:rgba(31,119,180,{p:.3f})' "
                         f"title='{html.escape(tip, quote=True)}'>{p:.2f}</td>")
        rows.append(f"<tr><th>{html.escape(layer)}</th>{''.join(cells)}</tr>")
    return (f"<h3>{html.escape(r['checkpoint'])}</h3><table class='lens'><thead><tr><th></th>{head}"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def inside_parts(inside: dict) -> list[str]:
    """Inside the model's last results ({kind: [result, ...]}) as report sections: heads
    ablated, each head ablated in turn, patching."""
    parts = []
    if inside.get("ablation"):
        parts += ["<h2>Heads ablated</h2>"] + [ablation_summary(r) for r in inside["ablation"]]
    if inside.get("scan"):
        parts += ["<h2>Each head ablated in turn</h2><p>A cell is the change in perplexity with that "
                  "head ablated alone (red: worse without it; hover for its paired 95% interval).</p>"]
        parts += [scan_table(r) for r in inside["scan"]]
    if inside.get("patch"):
        parts += ["<h2>Activation patching</h2>"] + [patch_tables(r) for r in inside["patch"]]
    return parts


def ablation_summary(r: dict) -> str:
    """A set of heads ablated: perplexity and BLEU with their paired intervals, and the greedy
    continuations of the intact and the ablated model."""
    head, lines = ablation_words(r)
    rows = "".join(f"<tr><td>{html.escape(c['intact'])}</td><td>{html.escape(c['ablated'])}</td></tr>"
                   for c in r["continuations"])
    table = (f"<table><thead><tr><th>intact (greedy)</th><th>heads ablated (greedy)</th></tr>"
             f"</thead><tbody>{rows}</tbody></table>") if rows else ""
    return (f"<h3>{html.escape(r['checkpoint'])}</h3><p>{html.escape(head)}</p><ul>"
            + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>" + table)


def ablation_words(r: dict) -> tuple[str, list[str]]:
    """A set of heads ablated (lab.inside.ablation.ablate()'s dict) in words: its headline (the
    heads, how, the perplexity's change with its paired interval and verdict) and a line per BLEU
    figure. The Head ablation view says it in the same words."""
    lo, hi = r["change_ci"]
    mean = f" (their mean over {r['reference_n']} other {r['split']} texts)" if r["mode"] == "mean" else ""
    head = (f"{r['checkpoint']} with heads {', '.join(r['heads'])} {r['mode']}-ablated{mean}, on "
            f"{r['n']} {r['split']} texts (seed {r['seed']}): perplexity {r['perplexity']:.3f} → "
            f"{r['ablated_perplexity']:.3f}, change {r['change']:+.3f} [{lo:+.3f}, {hi:+.3f}] (paired "
            f"95% bootstrap): {r['verdict']}.")
    lines = []
    for name in ("forward", "backward", "harmonic") if r["bleu"] else ():
        b = r["bleu"][name]
        lo, hi = b["change_ci"]
        lines.append(f"{name} BLEU-4 of {r['n']} sampled texts: {b['intact']:.4f} → {b['ablated']:.4f}, "
                     f"change {b['change']:+.4f} [{lo:+.4f}, {hi:+.4f}]"
                     + (f": {b['verdict']}" if "verdict" in b else ""))
    return head, lines


def scan_table(r: dict) -> str:
    """Each head ablated alone: blocks x heads, each cell its change in perplexity."""
    scale = max((abs(v) for row in r["change"] for v in row), default=0.0)
    cells = [[(f"{v:+.2f}", _shade(v, scale), f"head {i + 1}.{h + 1}: {v:+.3f} [{lo:+.3f}, {hi:+.3f}]")
              for h, (v, (lo, hi)) in enumerate(zip(row, cis))]
             for i, (row, cis) in enumerate(zip(r["change"], r["change_ci"]))]
    most = "; ".join(f"{m['head']} {m['change']:+.3f}" for m in r["most"])
    return (f"<h3>{html.escape(r['checkpoint'])}</h3><p>perplexity {r['perplexity']:.3f} on {r['n']} "
            f"{html.escape(r['split'])} texts (seed {r['seed']}), {html.escape(r['mode'])} ablation; "
            f"the heads that matter most: {html.escape(most)}</p>"
            + _grid([f"block {i + 1}" for i in range(len(cells))],
                    [f"head {h + 1}" for h in range(len(cells[0]) if cells else 0)], cells))


def patch_tables(r: dict) -> str:
    """A patching: the share of the clean answer's logit difference each patch restores, for the
    residual stream (blocks x positions) and for each head (blocks x heads)."""
    def shares(rows):
        return [[(f"{v:.2f}", _shade(v, 1.0), f"{v:.3f}") for v in row] for row in rows]
    heads = len(r["heads"][0]) if r["heads"] else 0
    clean, corrupted = r.get("prompts") or (" | ".join(r["tokens"]), " | ".join(r["corrupted_tokens"]))
    return (f"<h3>{html.escape(r['checkpoint'])}</h3><p>clean “{html.escape(clean)}”, corrupted "
            f"“{html.escape(corrupted)}”; logit difference "
            f"{html.escape(repr(r['answer']))} − {html.escape(repr(r['wrong']))}: clean "
            f"{r['clean']:+.3f}, corrupted {r['corrupted']:+.3f}. A cell is the share of that gap its "
            f"patch restores (0 nothing, 1 all)."
            + (f" Note: {html.escape(r['warning'])}." if r.get("warning") else "") + "</p>"
            + "<p>The residual stream entering each block, at each position:</p>"
            + _grid(r["layers"], r["tokens"], shares(r["resid"]))
            + "<p>Each head's output:</p>"
            + _grid(r["layers"], [f"head {h + 1}" for h in range(heads)], shares(r["heads"])))


def _shade(v: float, scale: float) -> str:
    """A cell's background: red for a positive value, blue for a negative, as strong as |v| / scale."""
    a = min(abs(v) / scale, 1.0) if scale else 0.0
    return f"rgba(214,39,40,{a:.3f})" if v > 0 else f"rgba(31,119,180,{a:.3f})"


def _grid(rows: list[str], columns: list[str], cells: list[list[tuple[str, str, str]]]) -> str:
    """A table of shaded cells, no script: cells[i][j] = (text, background, tooltip)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(f"<tr><th>{html.escape(label)}</th>" + "".join(
        f"<td style='background:{bg}' title='{html.escape(tip, quote=True)}'>{html.escape(text)}</td>"
        for text, bg, tip in row) + "</tr>" for label, row in zip(rows, cells))
    return f"<table class='lens'><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>"


def _scores_table(scores: dict) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in scores["headers"])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in scores["rows"])
    verdicts = "".join(f"<li>{html.escape(v)}</li>" for v in scores.get("verdicts", []))
    prov = html.escape(json.dumps(scores.get("provenance", {}), indent=2, default=str))
    return (f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            + (f"<p><b>Verdicts</b> (paired bootstrap by caption, 95%; the first checkpoint is the "
               f"baseline):</p><ul>{verdicts}</ul>" if verdicts else "")
            + f"<p>Provenance:</p><pre>{prov}</pre>")


# ---------------------------------------------------------------- a sweep's report

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]


def _svg_curves(series: dict[str, list], title: str, width: int = 620, height: int = 300) -> str:
    """Overlaid line plots as inline SVG (no script, no network): {label: [[x, y], ...]}."""
    pts = [(x, y) for s in series.values() for x, y in s if x is not None and y is not None]
    if not pts:
        return f"<p>{html.escape(title)}: no points yet.</p>"
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    L, R, T, B = 60, 10, 24, 30

    def sx(x):
        return L + (x - x0) / (x1 - x0) * (width - L - R)

    def sy(y):
        return height - B - (y - y0) / (y1 - y0) * (height - T - B)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height + 18 * len(series)}' "
             f"font-size='11' font-family='sans-serif'>",
             f"<text x='{L}' y='14' font-size='13'>{html.escape(title)}</text>",
             f"<line x1='{L}' y1='{height - B}' x2='{width - R}' y2='{height - B}' stroke='#999'/>",
             f"<line x1='{L}' y1='{T}' x2='{L}' y2='{height - B}' stroke='#999'/>",
             f"<text x='{L}' y='{height - 12}'>{x0:g}</text>",
             f"<text x='{width - R}' y='{height - 12}' text-anchor='end'>step {x1:g}</text>",
             f"<text x='{L - 4}' y='{T + 8}' text-anchor='end'>{y1:.3g}</text>",
             f"<text x='{L - 4}' y='{height - B}' text-anchor='end'>{y0:.3g}</text>"]
    for i, (label, s) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s if x is not None and y is not None)
        if line:
            parts.append(f"<polyline fill='none' stroke='{color}' stroke-width='1.5' points='{line}'/>")
        if len(s) <= 30:                          # few points (an evaluation per epoch): mark each
            parts += [f"<circle cx='{sx(x):.1f}' cy='{sy(y):.1f}' r='3' fill='{color}'/>"
                      for x, y in s if x is not None and y is not None]
        parts.append(f"<text x='{L}' y='{height + 14 + 18 * i}' fill='{color}'>— {html.escape(label)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def sweep_report(t: dict, shown: tuple[list[str], list[list[str]]], how: str, curves: dict,
                 budget: str) -> str:
    """A sweep as one self-contained HTML file: its table (intervals, paired differences, the best
    rows marked), the overlaid curves of every run, the definition it ran."""
    headers, rows = shown
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    best_col = headers.index("best")
    body = "".join("<tr" + (" style='background:#eef7ee'" if r[best_col] else "") + ">"
                   + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in rows)
    parts = [f"<h1>tfmr-lab sweep: {html.escape(t['sweep'])}</h1>",
             f"<p>Saved {time.strftime('%Y-%m-%d %H:%M:%S')}. This file needs no network.</p>",
             f"<p><b>Budget:</b> {html.escape(budget)}.</p>",
             f"<div style='overflow-x:auto'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>",
             f"<p>{html.escape(how)}</p>", "<h2>Curves</h2><div class='attention'>",
             "<div>" + _svg_curves({k: v["dev"] for k, v in curves.items()}, "dev perplexity") + "</div>",
             "<div>" + _svg_curves({k: v["loss"] for k, v in curves.items()}, "training loss") + "</div>",
             "</div>", "<h2>Definition</h2>",
             f"<pre>{html.escape(json.dumps(t['spec'], indent=2, default=str))}</pre>"]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>tfmr-lab sweep</title>"
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>")
