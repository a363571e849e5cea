"""Compare tab: captions of two or more checkpoints side by side, each token shaded by the
probability the model gave it; and the decoder matrix (decoder x temperature)."""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

import gradio as gr

from lab.ui.evaluate import COLUMNS as EVAL_COLUMNS
from lab.ui.evaluate import WIDTHS as EVAL_WIDTHS
from lab.ui.evaluate import scores
from lab.ui.evaluate import wire as wire_scores
from lab.storage import exports
from lab.inputs import tasks
from lab.ui import compare_report
from lab.errors import LabError
from lab.ui.fields import Checkbox, Dataframe, Number, Radio, Textbox
from lab.config import SEED_MAX, ConfigError, DecodeConfig
from lab.modeling.generate import MAX_PROMPT_CHARS, sample_captions
from lab.presets import DECODE_TO_SHOW
from lab.registry import DECODERS
from lab.ui.work import Work, progress_bar, streamed, within_budget
from lab.ui.common import (LOADED, RUNNING, Context, api, checkpoint_dropdown, section, friendly,
                           names_list, stop_button, stoppable, text, unfinished, unit_of, whole)
from lab.ui.decoding import decoder_inputs, decoders_of, form_decode

PER_MODEL_COLUMNS = ["checkpoint", "decoder", *DecodeConfig.setting_names()]
STOPPED = "<p class='lab-stopped'>Stopped before the end: nothing more is drawn.</p>"


class RowsTable(Dataframe):
    """The per-checkpoint decoder table: from a script, no table (None) means no rows."""

    def preprocess(self, payload):
        return [] if payload is None else super().preprocess(payload)


def shade(tokenizer, caption) -> str:
    """A caption as HTML: prompt tokens plain, each generated token shaded by its probability."""
    parts = [f'<span class="tok-prompt">{html.escape(tokenizer.decode(caption.tokens[:caption.n_prompt]))}</span>']
    new = caption.tokens[caption.n_prompt:]
    for tok, p in zip(tokenizer.token_strings(new), caption.probs):
        parts.append(f'<span class="tok" title="p={p:.3f}" style="background:rgba(37,99,235,{0.08 + 0.62 * p:.2f})">'
                     f'{html.escape(tok)}</span>')
    if not caption.finished:
        parts.append('<span class="tok-cut" title="cut at max_new_tokens">…</span>')
    return "".join(parts)


def captions_table(columns: list[tuple[str, str, list[str]]]) -> str:
    """columns: (checkpoint, settings, caption cells). Row i of every column: same seed, same i."""
    head = "".join(f"<th>{html.escape(name)}<br><small>{html.escape(s)}</small></th>" for name, s, _ in columns)
    n = max(len(c) for _, _, c in columns)
    rows = "".join("<tr><td class='row-no'>" + str(i + 1) + "</td>" +
                   "".join(f"<td>{c[i] if i < len(c) else ''}</td>" for _, _, c in columns) + "</tr>"
                   for i in range(n))
    return (f"<table class='lab-compare'><thead><tr><th>#</th>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table>")


@dataclass
class Comparison:
    """What a comparison draws: checked, and within the budget, before anything runs."""
    chosen: list[str]
    settings: list[DecodeConfig]        # each checkpoint's decoder
    seed: int
    prefix: str
    n: int
    held_out: int = 0                   # words of each held-out text its row starts with; 0: none
    prompts: list[str] | None = None    # a prompt a row (held-out starts), or the prefix for all
    texts: list[str] | None = None      # the held-out texts those prompts start
    unit: str = "texts"                 # what the rows are: their task's word (unit_of)


def plan(checkpoints_chosen, decode: dict, seed=0, prefix="", n=8,
         per_checkpoint: dict | None = None, store=None, held_out=0) -> Comparison:
    """A comparison's values, each checked where it enters, and its work within the budget (the
    API's and the form's one check). held_out: start row i with the first `held_out` words of a
    held-out text of the checkpoints' corpus (drawn by the seed) instead of the prefix."""
    chosen = names_list(checkpoints_chosen, "checkpoints to compare", store=store)
    unit = _unit(chosen, store)                 # captions, or the checkpoints' task's texts
    n = whole(n, f"number of {unit}", 1, 200)
    seed = whole(seed, "seed", 0, SEED_MAX)
    prefix = text(prefix, "prefix", MAX_PROMPT_CHARS).strip()
    held_out = whole(held_out or 0, "held-out prompt words", 0, tasks.MAX_PROMPT_WORDS)
    if held_out and prefix:
        raise ConfigError(f"a prefix ({prefix[:40]!r}) and held-out prompts ({held_out} words) both "
                          "given: clear the prefix, or set held-out prompt words to 0")
    settings = decoders_of(chosen, decode, per_checkpoint, seed)   # all checked before any runs
    within_budget("this comparison", n, settings, f"fewer {unit}, beams or checkpoints")
    prompts = held = None
    if held_out:
        cks = [LOADED.get(name, store) for name in chosen]
        prompts, held, _ = tasks.held_out_prompts(cks, n, seed, held_out)
        n = len(prompts)
    return Comparison(chosen, settings, seed, prefix, n, held_out, prompts, held, unit)


COUNT_LABELS = ("{}", "{} per cell")       # the rows field's label, the matrix's


def count_labels(names, store=None) -> list:
    """Both count fields' labels (COUNT_LABELS) for the chosen checkpoints, from one reading."""
    unit = _unit(names, store)
    return [gr.update(label=label.format(unit)) for label in COUNT_LABELS]


def _unit(names, store=None) -> str:
    """The chosen checkpoints' word for their texts; "texts" where they cannot be read (what runs
    on them says what is wrong)."""
    try:
        return unit_of(names if isinstance(names, list) else [], store)
    except LabError:
        return "texts"


def compare(checkpoints_chosen, decode: dict, seed=0, prefix="", n=8,
            per_checkpoint: dict | None = None, store=None, held_out=0):
    """Captions of each chosen checkpoint side by side: `decode` the shared decoder by name
    ({"decoder": "top_p", "temperature": 0.7}), `per_checkpoint` a checkpoint's own settings over
    it ({"scratch": {"decoder": "greedy"}}), `held_out` as plan() takes it. Returns (the table's
    HTML, the record)."""
    return captions(plan(checkpoints_chosen, decode, seed, prefix, n, per_checkpoint, store, held_out),
                    Work(), store)


def compare_stream(checkpoints_chosen, decode: dict, seed=0, prefix="", n=8,
                   per_checkpoint: dict | None = None, store=None, held_out=0):
    """compare() as a stream: (a progress line, RUNNING) at least every POLL_S while the captions
    are drawn, then compare()'s (table, record). Closed early, the drawing stops."""
    todo = plan(checkpoints_chosen, decode, seed, prefix, n, per_checkpoint, store, held_out)
    yield (yield from streamed(lambda work: captions(todo, work, store),
                               lambda said: (captions_progress(todo, said), RUNNING)))


def captions(todo: Comparison, work: Work, store=None):
    """The comparison's captions, a checkpoint after another, saying how far it is to `work` and
    stopping when it asks."""
    columns, texts = [], {}
    for i, (name, cfg) in enumerate(zip(todo.chosen, todo.settings)):
        work.say((i, 0))
        ck = LOADED.get(name, store)
        caps = sample_captions(ck.model, ck.tokenizer, todo.n, cfg, prompt=todo.prefix, probs=True,
                               abort=work.stop_asked, done=lambda k, i=i: work.say((i, k)),
                               prompts=todo.prompts)
        columns.append((name, cfg.label(), [shade(ck.tokenizer, c) for c in caps]))
        texts[name] = [c.text for c in caps]
    if todo.texts:
        columns.append(("held-out text", f"its first {todo.held_out} words are the row's prompt",
                        [html.escape(t) for t in todo.texts]))
    table = captions_table(columns)
    decoders = {name: cfg.to_dict() for name, cfg in zip(todo.chosen, todo.settings)}
    record = {"html": table, "captions": texts, "seed": todo.seed, "prefix": todo.prefix,
              "n": todo.n, "decoders": decoders, "held_out": todo.held_out,
              "held_out_texts": todo.texts, "unit": todo.unit}
    return table, record


def captions_progress(todo: Comparison, said) -> str:
    """How far the captions are: (checkpoint index, its captions done)."""
    i, k = said or (0, 0)
    return progress_bar((i + k / todo.n) / len(todo.chosen),
                        f"checkpoint {i + 1} of {len(todo.chosen)}: {todo.chosen[i]}, "
                        f"{k} of {todo.n} {todo.unit} …")


def _form(checkpoints_chosen, decoder, rest, what: str, store=None):
    """What the Compare form's fields say: the chosen checkpoints, the shared decoder by name,
    each checkpoint's own settings (the per-checkpoint table, while its box is ticked), and the
    fields after the decoder's (seed, prefix, n, ...)."""
    k = len(DecodeConfig.setting_names())
    values, after = rest[:k], rest[k:]
    per_model, per_model_rows = after[4], after[5]
    chosen = names_list(checkpoints_chosen, what, store=store)
    own = {}
    if per_model and per_model_rows is not None:
        for row in _rows(per_model_rows):
            if row["checkpoint"] in chosen:
                own[row["checkpoint"]] = {c: row[c] for c in PER_MODEL_COLUMNS[1:]
                                          if _cell(row.get(c), None) is not None}
    return chosen, form_decode(decoder, values), own, after


def compare_form(checkpoints_chosen, decoder, *rest, store=None):
    """The page's Compare: rest is the decoder settings' fields (DecodeConfig.setting_names()),
    seed, prefix, n, held-out prompt words, the per-checkpoint checkbox and its table; read as
    compare() takes them, streamed as compare_stream() streams."""
    chosen, decode, own, (seed, prefix, n, held_out, _, _) = _form(
        checkpoints_chosen, decoder, rest, "checkpoints to compare", store)
    yield from compare_stream(chosen, decode, seed, prefix, n, own, store=store, held_out=held_out)


def scores_form(checkpoints_chosen, decoder, *rest, store=None, data_dir=None):
    """The page's *Which is better?*: the Compare form's fields, then the subset size and BLEU
    tokens; each checkpoint is scored with the decoder its captions use."""
    chosen, decode, own, (seed, _, _, _, _, _, score_n, bleu_tokens) = _form(
        checkpoints_chosen, decoder, rest, "checkpoints to evaluate", store)
    yield from scores(chosen, decode, score_n, seed, bleu_tokens, store, data_dir, own)


def caption_files(record, store=None):
    """The last comparison's captions as CSV and JSON (one row per position, one column each)."""
    if not isinstance(record, dict):
        return None
    names = list(record["captions"])
    held = record.get("held_out_texts") or []
    rows = [[i + 1] + [record["captions"][n][i] for n in names] + held[i:i + 1]
            for i in range(record["n"])]
    about = {k: record.get(k) for k in ("seed", "prefix", "decoders", "held_out")}
    return exports.write_table(["row"] + names + (["held-out text"] if held else []), rows,
                               "captions-" + "-vs-".join(names), store, about)


def _cell(value, shared):
    """A per-checkpoint cell: blank (None, '', or the NaN of an empty table cell) takes the
    shared setting; anything else, 0 included, is that checkpoint's own."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return shared
    if isinstance(value, float) and math.isnan(value):
        return shared
    return value


def decoder_rows(on, names, table=None):
    """The per-checkpoint decoder table for the chosen checkpoints, shown while `on`: a row per
    name in order, a row typed in before kept by its checkpoint, a new one blank (the shared
    setting)."""
    try:
        had = {r["checkpoint"]: r for r in _rows(table)} if table is not None else {}
    except ConfigError:                 # not a table of rows: start again from blank ones
        had = {}
    rows = []
    for name in names if isinstance(names, list) else []:
        row = had.get(name, {"decoder": ""})
        rows.append([name] + [_blank_nan(row.get(c)) for c in PER_MODEL_COLUMNS[1:]])
    return gr.update(visible=bool(on), value=rows)


def _blank_nan(value):
    """A cell as the table shows it: an empty one comes back from the page as NaN."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _rows(table) -> list[dict]:
    values = table.values.tolist() if hasattr(table, "values") and not isinstance(table, dict) else table
    if isinstance(values, dict):                   # gradio_client's {"headers": [...], "data": [...]}
        values = values.get("data") or []
    if not isinstance(values, list) or len(values) > 64:
        raise ConfigError("the decoder-per-checkpoint table must be a list of at most 64 rows")
    rows = [dict(zip(PER_MODEL_COLUMNS, r)) for r in values if isinstance(r, list) and r and r[0]]
    if any(not isinstance(r["checkpoint"], str) for r in rows):
        raise ConfigError("the decoder-per-checkpoint table's first column holds checkpoint names")
    return rows


MATRIX_MAX_CAPTIONS, MATRIX_MAX_TEMPERATURES = 10, 6


def decoder_matrix(checkpoints_chosen, temperatures, n, seed, prefix, store=None):
    """Every decoder plugin x temperature, a row each, a column per checkpoint: streams the
    matrix so far (with a line saying which row is under way) at least every POLL_S, then the
    whole matrix and its captions for the downloads. Closed early, the drawing stops."""
    chosen, settings, n, prefix = _matrix_plan(checkpoints_chosen, temperatures, n, seed, prefix, store)
    texts = []                   # (settings label, checkpoint, caption, shaded) for the downloads

    def draw(work: Work):
        for i, cfg in enumerate(settings):
            work.say(i)
            for name in chosen:
                ck = LOADED.get(name, store)
                for c in sample_captions(ck.model, ck.tokenizer, n, cfg, prompt=prefix, probs=True,
                                         abort=work.stop_asked):
                    texts.append((cfg.label(), name, c.text, shade(ck.tokenizer, c)))
    yield from streamed(draw, lambda i: (matrix_table(chosen, settings, list(texts), doing=i or 0),
                                         RUNNING))
    yield matrix_table(chosen, settings, texts), texts


def _matrix_plan(checkpoints_chosen, temperatures, n, seed, prefix, store=None):
    """The matrix's checkpoints, its rows' decoders, texts per cell and prefix, checked."""
    chosen = names_list(checkpoints_chosen, "checkpoints", limit=4, store=store)
    unit = _unit(chosen, store)
    n = whole(n, f"{unit} per cell", 1, MATRIX_MAX_CAPTIONS)
    seed = whole(seed, "seed", 0, SEED_MAX)
    prefix = text(prefix, "prefix", MAX_PROMPT_CHARS).strip()
    raw = [t for t in text(temperatures, "temperatures", 200).replace(" ", "").split(",") if t]
    if not raw or len(raw) > MATRIX_MAX_TEMPERATURES:
        raise ConfigError(f"temperatures: give 1 to {MATRIX_MAX_TEMPERATURES} numbers separated by "
                          f"commas, e.g. 0.7,1.0; got {temperatures!r}")
    settings = []
    for dec in DECODERS.names():
        sampling = "temperature" in DecodeConfig(decoder=dec).settings
        for t in (raw if sampling else [None]):
            settings.append(DecodeConfig.from_dict({"decoder": dec, "seed": seed,
                                                    **({"temperature": t} if sampling else {})}))
    within_budget("this matrix", n, settings * len(chosen), f"fewer {unit} per "
                  "cell, temperatures or checkpoints", unit="cell")
    return chosen, settings, n, prefix


def matrix_table(chosen, settings, texts, doing: int | None = None) -> str:
    """The matrix so far: a row per decoder setting, a column per checkpoint; while it is being
    built, a line saying which row is under way."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in chosen)
    rows = []
    for cfg in settings:
        label = cfg.label()
        cells = ["<br>".join(t[3] for t in texts if t[0] == label and t[1] == name) for name in chosen]
        rows.append(f"<tr><th>{html.escape(label)}</th>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    note = "" if doing is None else progress_bar(
        doing / len(settings), f"row {doing + 1} of {len(settings)}: {settings[doing].label()} …")
    return (f"{note}<table class='lab-compare lab-matrix'><thead><tr><th>decoder</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def matrix_files(texts, store=None):
    if not texts:
        return None
    return exports.write_table(["decoder", "checkpoint", "caption"], [list(t[:3]) for t in texts],
                               "decoder-matrix", store)


@dataclass
class SideBySide:
    """What the getting-started panel drives: the chosen checkpoints, and `then(event)`, which
    generates side by side (with the downloads) once `event` succeeded."""
    chosen: gr.Dropdown
    then: object


def build(ctx: Context) -> SideBySide:
    ctx.empty_note("Use *Getting started* above, import SmolLM2 in the Checkpoints tab, or train a "
                   "model in the Train tab; then choose two checkpoints here.")
    gr.Markdown("Texts from each checkpoint side by side (captions, for a captions model). Row *i* "
                "of every column comes from the same seed and position; each generated token is "
                "shaded by the probability the model gave it (hover for the number).")
    chosen = checkpoint_dropdown(ctx, "checkpoints", multiselect=True, task="generate",
                                  elem_id="compare-checkpoints")
    dec = decoder_inputs(DECODE_TO_SHOW, elem_id="compare-decoder")
    seed, prefix, n, held_out = _prompt_fields(ctx, chosen)
    per_model, per_model_rows = _per_model_table(chosen)
    with gr.Row():
        go = gr.Button("Generate side by side", variant="primary", elem_id="compare-go")
        stop = stop_button("compare-stop")
    out = gr.HTML(elem_id="compare-out")
    inputs = [chosen, *dec.components(), seed, prefix, n, held_out, per_model, per_model_rows]
    last = gr.State(None)            # the last comparison, for its downloads and the report
    files = gr.File(label="download the rows (CSV, JSON)", file_count="multiple",
                    interactive=False, elem_id="compare-files")
    run = friendly(lambda *a: (yield from compare_form(*a, store=ctx.store)))
    save = friendly(lambda r: caption_files(r, ctx.store))
    drawing = stoppable(go, stop, lambda: go.click(run, inputs, [out, last], api_visibility="private",
                                                   show_progress="minimal"),
                        last, [out, last], lambda kept: unfinished(kept, STOPPED))
    drawing.success(save, last, files, api_visibility="private")
    _wire_api(ctx)

    def then(event):
        return event.success(run, inputs, [out, last], api_visibility="private",
                             show_progress="minimal").success(save, last, files, api_visibility="private")
    then(prefix.submit(lambda: None, None, None, api_visibility="private"))     # Enter generates

    scored = _scores_section(ctx, inputs)
    _report_section(ctx, last, scored)
    _name_counts(ctx, chosen, [n, _matrix_section(ctx, chosen, seed, prefix)])
    return SideBySide(chosen, then)


def _name_counts(ctx: Context, chosen, counts: list) -> None:
    """Both count fields (the rows', the matrix's) named by the chosen checkpoints' task (captions,
    texts, ...): those the page opens with, then one event as the choice changes."""
    unit = _unit(chosen.value, ctx.store)
    for field, label in zip(counts, COUNT_LABELS):
        field.label = label.format(unit)
    chosen.change(lambda names: count_labels(names, ctx.store), chosen, counts,
                  api_visibility="private", show_progress="hidden")


def _prompt_fields(ctx: Context, chosen):
    """Seed, prefix, how many rows (called captions or texts as the chosen checkpoints are:
    count_labels), and held-out prompts' words, in a row."""
    with gr.Row():
        seed = Number(0, label="seed", step=1)
        prefix = Textbox("", label="prefix (optional)", placeholder="A man")
        n = Number(8, label=tasks.unit(tasks.task_of(None)), step=1, elem_id="compare-n")
        held_out = Number(0, label="held-out prompts: first N words (0: none)", step=1, minimum=0,
                          maximum=tasks.MAX_PROMPT_WORDS, elem_id="compare-held-out",
                          info="each row continues the start of a different held-out text")
    return seed, prefix, n, held_out


def _per_model_table(chosen):
    """The checkbox and the table of a decoder per checkpoint; the table follows the checkbox and
    the chosen checkpoints (the page may change them itself)."""
    per_model = Checkbox(False, label="a different decoder for each checkpoint")
    rows = RowsTable(value=[], headers=PER_MODEL_COLUMNS, visible=False, interactive=True,
                     label="decoder per checkpoint (blank cells take the shared setting)",
                     elem_id="compare-per-model")
    for changed in (per_model, chosen):
        changed.change(decoder_rows, [per_model, chosen, rows], rows,
                       api_visibility="private", show_progress="hidden")
    return per_model, rows


def _wire_api(ctx: Context) -> None:
    def compare_api(checkpoints: list[str], decode: dict, seed: int = 0, prefix: str = "",
                    n: int = 8, per_checkpoint: dict | None = None, held_out: int = 0) -> str:
        """Captions side by side (HTML), streamed: a progress line (HTML) at least every half
        second while they are drawn, then the captions. decode: the shared decoder by name, e.g.
        {"decoder": "top_p", "temperature": 0.7}; per_checkpoint: {checkpoint: its own decoder
        settings}; held_out: start each row with the first N words of a held-out text of the
        checkpoints' corpus (drawn by the seed; 0: the prefix for every row)."""
        for shown, _ in compare_stream(checkpoints, decode, seed, prefix, n, per_checkpoint,
                                       store=ctx.store, held_out=held_out):
            yield shown
    api(compare_api, "compare", returns="the comparison (HTML), streamed")


def _scores_section(ctx: Context, compare_inputs: list) -> gr.State:
    """'Which is better?': the chosen checkpoints scored on a seeded test subset, with verdicts,
    each with the decoder its captions above use."""
    with section("Which is better? Score them on a seeded subset of the test split"):
        with gr.Row():
            score_n = Radio([100, 500, 1000], value=100, label="subset size")
            go_s = gr.Button("Score and compare", elem_id="compare-score")
            stop_s = stop_button("compare-score-stop")
        scores = gr.Dataframe(headers=EVAL_COLUMNS, label="scores (live): each value with its 95% interval",
                              elem_id="compare-scores", wrap=True, column_widths=EVAL_WIDTHS)
        said = gr.Markdown(elem_id="compare-verdicts")
        bleu_auto = gr.State("auto")
        return wire_scores(go_s, stop_s, [*compare_inputs, score_n, bleu_auto], [scores, said],
                           ctx, "compare_scores", form=scores_form)


def _report_section(ctx: Context, last: gr.State, scored: gr.State) -> None:
    with section("Save the comparison as one HTML file (opens offline, shareable)"):
        gr.Markdown("The captions above, the scores of *Which is better?* if you ran it, the "
                    "attention and logit lens of one row of each checkpoint, each one's last "
                    "results in *Inside the model* (heads ablated, each head in turn, patching), "
                    "every setting and provenance.")
        with gr.Row():
            row = Number(1, label="row for the attention view and the lens", step=1)
            go_r = gr.Button("Save the report", elem_id="compare-report")
        report_file = gr.File(label="report (HTML)", interactive=False, elem_id="compare-report-file")
        go_r.click(friendly(lambda r, sc, k, i: compare_report.save(r, sc, k, ctx.store, i)),
                   [last, scored, row, ctx.inside],
                   report_file, api_visibility="private")


def _matrix_section(ctx: Context, chosen, seed, prefix):
    """Every decoder x temperature for the chosen checkpoints; returns its count field."""
    with section("Decoder matrix: every decoder plugin x temperature"):
        with gr.Row():
            temps = Textbox("0.7, 1.0", label="temperatures")
            n_m = Number(3, label=COUNT_LABELS[1].format(tasks.unit(tasks.task_of(None))), step=1)
        with gr.Row():
            go_m = gr.Button("Build the matrix", elem_id="compare-matrix")
            stop_m = stop_button("compare-matrix-stop")
        out_m = gr.HTML(elem_id="compare-matrix-out", label="the matrix (HTML)")
        matrix = gr.State(None)
        files_m = gr.File(label="download the matrix (CSV, JSON)", file_count="multiple", interactive=False)

        def matrix_of(checkpoints: list, temperatures: str, n: float, seed: float, prefix: str):
            """Every decoder plugin x temperature (comma-separated) for the checkpoints: n texts
            per cell (captions for the captions task) from the seed (and the prefix, if any),
            streamed as HTML."""
            yield from decoder_matrix(checkpoints, temperatures, n, seed, prefix, store=ctx.store)
        build_it = friendly(matrix_of)
        building = stoppable(go_m, stop_m, lambda: go_m.click(
            build_it, [chosen, temps, n_m, seed, prefix], [out_m, matrix], api_name="decoder_matrix",
            show_progress="minimal"), matrix, [out_m, matrix], lambda kept: unfinished(kept, STOPPED))
        building.success(friendly(lambda t: matrix_files(t, ctx.store)), matrix, files_m,
                         api_visibility="private")
        return n_m
