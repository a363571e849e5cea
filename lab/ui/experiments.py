"""Experiments tab: build a sweep (from a recipe, or from the Train form's keys, a field becoming
a list of values), start it through the job ledger, watch every run (a progress line each,
overlaid curves) and read its results table with intervals; export CSV, JSON, Markdown, HTML."""
from __future__ import annotations

import html
import json

import gradio as gr

from lab import sweeps
from lab.config import ConfigError, DecodeConfig
from lab.errors import LabError
from lab.presets import names as preset_names
from lab.ui.common import Context, api, friendly, whole
from lab.ui.common import text as bounded_text
from lab.ui.fields import Dropdown, Number, Radio, Textbox
from lab.ui.jobs_view import progress_html
from lab.ui.train import form_fields

OWN = "(build your own)"
OWN_NOTE = ("Write a grid (one KEY=V1,V2 per line) or pick a field and its values below; every "
            "combination runs once per seed.")
# the form's own values, and what "(build your own)" puts back after a recipe filled it
# (the grid starts empty: what Add to the grid adds is the whole grid, no runs by surprise)
DEFAULTS = {"preset": "tiny", "grid": "", "settings": "epochs=1\nmax_train=1000",
            "seeds": "0", "n": 200, "split": "test", "decoders": "random,temperature=1.0"}


def _lines(value, what: str) -> list[str]:
    return [line.strip() for line in bounded_text(value, what, 20000).splitlines() if line.strip()]


def definition(name, recipe, budget, preset, parent, grid_text, set_text, seeds_text, n, split,
               decoders_text, checkpoints_text="") -> dict:
    """The sweep the form describes (the form is the whole definition: a recipe only fills it)."""
    doc = {"name": bounded_text(name, "sweep name", 100).strip(),
           "preset": preset or None, "parent": parent or None,
           "grid": sweeps.parse_grid(_lines(grid_text, "grid")), "set": _lines(set_text, "settings"),
           "seeds": sweeps.parse_seeds(bounded_text(seeds_text, "seeds", 400)) or [0],
           "score": {"n": whole(n, "captions scored", 1, sweeps.MAX_SCORE_N), "split": split,
                     "decoders": _lines(decoders_text, "decoders") or [dict(sweeps.DEFAULT_DECODER)]},
           "checkpoints": _lines(checkpoints_text, "checkpoints")}
    if recipe and recipe != OWN:
        doc["recipe"] = f"{recipe} ({budget})"
        info = sweeps.recipe_info(recipe)
        doc["about"] = info.get("about", "")
        doc["runs"] = sweeps.recipe(recipe, budget).get("runs", [])
        doc["score"]["pick_on_test"] = info.get("score", {}).get("pick_on_test", False)
    return doc


def recipe_form(recipe, budget) -> list:
    """A recipe at a budget written into the form: preset, grid, settings, seeds, scoring."""
    if not recipe or recipe == OWN:
        return [DEFAULTS[k] for k in ("preset", "grid", "settings", "seeds", "n", "split", "decoders")] \
            + [gr.skip(), OWN_NOTE]                 # the name a person typed stays
    doc = sweeps.recipe(recipe, budget)
    info = sweeps.recipe_info(recipe)
    sc = doc["score"]
    runs = doc.get("runs", [])
    note = (f"**{html.escape(info.get('about', ''))}.** Budget *{budget}*: "
            f"{html.escape(info['budgets'][budget].get('note', ''))}."
            + (f" Runs: {'; '.join(', '.join(f'{k}={v}' for k, v in r.items()) for r in runs)}."
               if runs else "")
            + (" Name the checkpoint to search below." if recipe == "decoder-search" else ""))
    decoders = [_decoder_line(d) for d in sc.get("decoders", [sweeps.DEFAULT_DECODER])]
    grid_text = "\n".join(f"{k}={','.join(map(str, v))}" for k, v in doc.get("grid", {}).items())
    return [doc.get("preset") or "", grid_text,
            "\n".join(doc.get("set", []) + doc.get("budget", [])),
            ",".join(map(str, doc.get("seeds", [0]))), sc.get("n", 500), sc.get("split", "test"),
            "\n".join(decoders), f"{recipe}-{budget}", note]


def _decoder_line(d: dict) -> str:
    return ",".join([d.get("decoder", DecodeConfig.default("decoder"))]
                    + [f"{k}={v}" for k, v in d.items() if k != "decoder"])


def add_to_grid(grid_text, key, values) -> str:
    if not key:
        raise ConfigError("choose the field to sweep over first")
    values = bounded_text(values, "values", 2000).strip()
    if not values:
        raise ConfigError(f"write the values of {key} to try, separated by commas, e.g. 1,4")
    kept = [line for line in _lines(grid_text, "grid") if line.split("=", 1)[0].strip() != key]
    return "\n".join(kept + [f"{key}={values}"]) + "\n"


def sweep_choices(store=None) -> list[str]:
    return [s["name"] for s in sweeps.list_sweeps(store)]


def runs_html(name, store=None) -> str:
    """A line per run: what it is, then its job's progress as the Train tab shows it."""
    if not name:
        return "<p>No sweep chosen. Start one above, or pick one.</p>"
    spec, runs = sweeps.get(name, store)
    lines = [f"<p><b>{html.escape(name)}</b>: {html.escape(sweeps.budget_text(spec.to_dict()))}.</p>"]
    for r in runs:
        job = r["job"] or {"status": "missing", "progress": {}, "error": None}
        status = sweeps.run_status(r, store)
        values = ", ".join(f"{k}={sweeps.value_text(v)}" for k, v in r["values"].items())
        lines.append(f"<div class='lab-sweep-run' data-status='{html.escape(status)}'>"
                     f"<div class='lab-progress-text'><b>{html.escape(r['name'])}</b> "
                     f"({html.escape(values or 'seed ' + str(r['seed']))})"
                     f"{' — its job ended without writing its scores' if status == 'done, not scored' else ''}"
                     f"</div>{progress_html(job)}</div>")
    return "".join(lines)


def curves_plot(name, store=None):
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, subplot_titles=("training loss", "dev perplexity"))
    if name:
        for i, (run, c) in enumerate(sweeps.curves(name, store).items()):
            color = f"hsl({(i * 47) % 360}, 65%, 45%)"
            if c["loss"]:
                fig.add_scatter(x=[p[0] for p in c["loss"]], y=[p[1] for p in c["loss"]], name=run,
                                legendgroup=run, line={"color": color}, row=1, col=1)
            if c["dev"]:
                fig.add_scatter(x=[p[0] for p in c["dev"]], y=[p[1] for p in c["dev"]], name=run,
                                legendgroup=run, showlegend=not c["loss"], mode="lines+markers",
                                line={"color": color}, row=1, col=2)
    fig.update_layout(height=360, margin={"l": 40, "r": 10, "t": 40, "b": 30})
    fig.update_xaxes(title_text="step")
    return fig


def results(name, store=None):
    if not name:
        return None, ""
    t = sweeps.table(name, store)
    headers, rows = sweeps.display(t)
    return {"headers": headers, "data": rows}, sweeps.how_text(t)


def signature(name, store=None) -> str:
    """What changed since the last poll: each run's status and last event."""
    if not name:
        return ""
    _, runs = sweeps.get(name, store)
    return json.dumps([(r["job"] or {}).get("status") for r in runs]
                      + [((r["job"] or {}).get("progress") or {}).get("event") for r in runs])


def check_form(values, store=None) -> str:
    """The form's Check: the runs it would queue, or why not, said under the button."""
    try:
        spec, runs = sweeps.check(definition(*values), store)
    except LabError as e:
        return f"**Not valid:** {e}"
    return (f"{sweeps.runs_text(len(runs))} would be queued ({sweeps.budget_text(spec.to_dict())}):\n\n"
            + "\n".join(f"- `{r.name}`: {sweeps.describe_run(r.values, r.seed)}" for r in runs))


def start_form(values, store=None):
    """The form's Start: the sweep chosen below once queued, and what was done, or why not."""
    try:
        doc = definition(*values)
        runs = sweeps.start(doc, store)
    except LabError as e:
        return gr.skip(), f"**Not started:** {e}"
    return (gr.update(choices=sweep_choices(store), value=doc["name"]),
            f"Queued {sweeps.runs_text(len(runs))} of sweep **{doc['name']}**; they run one after another in "
            f"the background worker. Their progress is below.")


def build(ctx: Context):
    gr.Markdown("Run a set of training runs over a grid of settings and seeds, each scored the same "
                "way when it ends, and read them as one table with 95% intervals. Each run is a job "
                "in the background worker, like the Train tab's. Start from a recipe (the assignment's "
                "tables) or build your own.")
    form, check_btn, go, message, note = _form(ctx)
    gr.Markdown("### Sweeps")
    chosen = _watch(ctx)

    check_btn.click(friendly(lambda *v: check_form(v, ctx.store)), form, message,
                    api_visibility="private")
    go.click(friendly(lambda *v: start_form(v, ctx.store)), form, [chosen, message],
             api_visibility="private")

    def check_api(definition: dict) -> list[dict]:
        """The runs a sweep definition would queue, queueing nothing. definition: one JSON object
        keyed as `sweep` definitions are (name, preset, parent, grid {key: [values]}, set
        ["KEY=VALUE"], seeds, score {...}, checkpoints, ...)."""
        return [{"name": r.name, "values": r.values, "seed": r.seed}
                for r in sweeps.check(definition, ctx.store)[1]]

    def start_api(definition: dict) -> list[str]:
        """Queue a sweep from its definition (as check_sweep takes it): the names of its runs."""
        return [r.name for r in sweeps.start(definition, ctx.store)]
    api(check_api, "check_sweep", returns="the runs it would queue")
    api(start_api, "start_sweep", returns="the runs queued")
    return chosen, form, note


FROM_TRAIN_NOTE = ("From the Train form: its preset, parent and every setting you changed are "
                   "below. Now pick a field to sweep over and its values (or write grid lines), "
                   "then Check and Start.")


BIRTHPLACE_NOTE = (" Birth-place fine-tunes are scored by their greedy answers to the dev "
                   "questions (accuracy): *captions scored* counts questions (500 at most) and "
                   "the decoders do not apply.")


def from_train(settings: tuple) -> list:
    """The Train form's settings written into the sweep form: recipe (build your own), preset,
    parent and the settings; an empty grid for the person to fill; the split its runs are scored
    on (dev for birth-place answers: the test questions have no places)."""
    preset, parent, lines, split = settings
    return [OWN, preset, parent, "", lines, split,
            FROM_TRAIN_NOTE + (BIRTHPLACE_NOTE if split == "dev" else "")]


def _scoring_fields():
    """How each run is scored: captions, split, decoders; or stored checkpoints scored as they are."""
    with gr.Row():
        n = Number(DEFAULTS["n"], label="captions scored", precision=0, elem_id="sweep-n",
                   info=f"per run and decoder, 1 to {sweeps.MAX_SCORE_N:,}")
        split = Radio(["test", "dev"], value=DEFAULTS["split"], label="scored on", elem_id="sweep-split")
        decoders = Textbox(DEFAULTS["decoders"], label="decoders: one per line", lines=3,
                           elem_id="sweep-decoders",
                           info="e.g. top_p,temperature=0.7,top_p=0.9 or greedy or beam,num_beams=4")
        checkpoints_box = Textbox("", label="checkpoints to score as they are (decoder search)",
                                  lines=2, elem_id="sweep-checkpoints",
                                  info="one name per line; no training, no grid")
    return n, split, decoders, checkpoints_box


def _form(ctx: Context):
    """The sweep's definition: a recipe fills it, a field and its values add a grid line."""
    with gr.Row():
        recipe = Dropdown([OWN] + sweeps.recipe_names(), value=OWN, label="recipe",
                          elem_id="sweep-recipe")
        budget = Radio(["cpu", "full"], value="cpu", label="budget",
                       info="cpu: minutes on this machine; full: the assignment's settings (a GPU)",
                       elem_id="sweep-budget")
        name = Textbox("", label="sweep name", placeholder="heads-cpu", elem_id="sweep-name")
    note = gr.Markdown(OWN_NOTE, elem_id="sweep-note")
    with gr.Row():
        preset = Dropdown([""] + preset_names(), value=DEFAULTS["preset"], label="preset",
                          elem_id="sweep-preset")
        parent = Dropdown([""] + ctx.checkpoint_names(), value="", label="fine-tune from (optional)",
                          elem_id="sweep-parent", allow_custom_value=True)
        ctx.add_dropdown(parent, "blank")
        seeds = Textbox(DEFAULTS["seeds"], label="seeds", info="each setting runs once per seed, e.g. 0,1,2",
                        elem_id="sweep-seeds")
    with gr.Row():
        key = Dropdown([""] + form_fields() + ["parent"], value="", label="sweep over (a form field)",
                       elem_id="sweep-key", allow_custom_value=True)
        key_values = Textbox("", label="its values", placeholder="1,4,8", elem_id="sweep-values")
        add = gr.Button("Add to the grid", elem_id="sweep-add")
    with gr.Row():
        grid = Textbox(DEFAULTS["grid"], label="grid: one KEY=V1,V2 per line", lines=4, elem_id="sweep-grid",
                       placeholder="n_head=1,4")
        settings = Textbox(DEFAULTS["settings"], label="every run: one KEY=VALUE per line",
                           lines=4, elem_id="sweep-set")
    n, split, decoders, checkpoints_box = _scoring_fields()
    with gr.Row():
        check_btn = gr.Button("Check (queue nothing)", elem_id="sweep-check")
        go = gr.Button("Start sweep", variant="primary", elem_id="sweep-start")
    message = gr.Markdown(elem_id="sweep-message")
    recipe_outputs = [preset, grid, settings, seeds, n, split, decoders, name, note]
    recipe.input(friendly(recipe_form), [recipe, budget], recipe_outputs, api_visibility="private")
    budget.input(friendly(recipe_form), [recipe, budget], recipe_outputs, api_visibility="private")
    add.click(friendly(add_to_grid), [grid, key, key_values], grid, api_visibility="private")
    form = [name, recipe, budget, preset, parent, grid, settings, seeds, n, split, decoders,
            checkpoints_box]
    return form, check_btn, go, message, note


def _watch(ctx: Context):
    """A chosen sweep: a progress line per run, the overlaid curves, the table, its actions."""
    with gr.Row():
        chosen = Dropdown(sweep_choices(ctx.store), value=None, label="sweep", elem_id="sweep-chosen",
                          allow_custom_value=True, scale=3)
        stop_btn = gr.Button("Stop all", elem_id="sweep-stop")
        resume_btn = gr.Button("Resume all", elem_id="sweep-resume")
        export_btn = gr.Button("Export", elem_id="sweep-export")
    said = gr.Markdown(elem_id="sweep-said", label="message", show_label=False)
    runs_view = gr.HTML("<p>No sweep chosen. Start one above, or pick one.</p>", elem_id="sweep-runs",
                        label="a progress line per run (HTML)")
    plot = gr.Plot(label="curves of every run", visible=False)
    table = gr.Dataframe(label="results (best rows marked; Δ: paired difference against the baseline row)",
                         interactive=False, wrap=True, elem_id="sweep-table", visible=False)
    how = gr.Markdown(elem_id="sweep-how", label="how to read the table", show_label=False)
    files = gr.File(label="downloads", file_count="multiple", elem_id="sweep-files", visible=False)
    outputs = [runs_view, plot, table, how]

    def show(sweep: str):
        """A sweep's runs (a progress line each, as HTML), their curves, the results table and
        how to read it."""
        table_value, how_text = results(sweep, ctx.store)
        return (runs_html(sweep, ctx.store), gr.update(value=curves_plot(sweep, ctx.store), visible=bool(sweep)),
                gr.update(value=table_value, visible=bool(sweep)), how_text, signature(sweep, ctx.store))
    seen = gr.State("")
    chosen.change(friendly(show), chosen, outputs + [seen], api_name="sweep_status")

    def poll(s, last):
        sig = signature(s, ctx.store) if s else last
        if sig == last and '"running"' not in sig:
            return [gr.skip()] * 5
        if sig == last:                         # a run moves on: its line, not the whole table
            return runs_html(s, ctx.store), gr.skip(), gr.skip(), gr.skip(), sig
        return show(s)
    ctx.every(poll, [chosen, seen], outputs + [seen])
    _wire_actions(ctx, chosen, (stop_btn, resume_btn, export_btn), said, files)
    return chosen


def _wire_actions(ctx: Context, chosen, buttons, said, files) -> None:
    """Stop all, Resume all and Export of the chosen sweep."""
    stop_btn, resume_btn, export_btn = buttons

    def stop_sweep(sweep: str):
        """Stop every queued or running job of a sweep (each running one saves where it stands)."""
        return "\n\n".join(sweeps.stop(_need(sweep), store=ctx.store))

    def resume_sweep(sweep: str):
        """Queue again every run of a sweep that stopped, failed or was interrupted."""
        return "\n\n".join(sweeps.resume(_need(sweep), store=ctx.store))

    def export_sweep(sweep: str):
        """A sweep's table as files: CSV, JSON, Markdown and a self-contained HTML report."""
        return sweeps.export(_need(sweep), store=ctx.store)
    stop_btn.click(friendly(stop_sweep), chosen, said, api_name="stop_sweep")
    resume_btn.click(friendly(resume_sweep), chosen, said, api_name="resume_sweep")
    export_btn.click(friendly(export_sweep), chosen, files, api_name="export_sweep").then(
        lambda: gr.update(visible=True), None, files, api_visibility="private")


def _need(s):
    if not s:
        raise ConfigError("choose a sweep first (start one above)")
    return sweeps.check_sweep_name(s)
