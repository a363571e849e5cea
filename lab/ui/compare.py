"""Compare tab: captions of two or more checkpoints side by side, each token shaded by the
probability the model gave it; and the decoder matrix (decoder x temperature)."""
from __future__ import annotations

import html
import math

import gradio as gr

from lab.ui.evaluate import COLUMNS as EVAL_COLUMNS
from lab.ui.evaluate import WIDTHS as EVAL_WIDTHS
from lab.ui.evaluate import run as evaluate_run
from lab.ui.fields import Checkbox, Dataframe, Number, Radio, Textbox
from lab.config import SEED_MAX, ConfigError
from lab.generate import MAX_PROMPT_CHARS, sample_captions
from lab.registry import DECODERS
from lab.ui.common import (MODELS, Context, checkpoint_dropdown, decode_config, decoder_inputs,
                           friendly, names_list, text, whole)

PER_MODEL_COLUMNS = ["checkpoint", "decoder", "temperature", "top_k", "top_p", "num_beams"]


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


def _settings_label(cfg) -> str:
    uses = DECODERS.get(cfg.decoder).meta.get("uses", ())
    return cfg.decoder + "".join(f", {u}={getattr(cfg, u)}" for u in uses)


def captions_table(columns: list[tuple[str, str, list[str]]]) -> str:
    """columns: (checkpoint, settings, caption cells). Row i of every column: same seed, same i."""
    head = "".join(f"<th>{html.escape(name)}<br><small>{html.escape(s)}</small></th>" for name, s, _ in columns)
    n = max(len(c) for _, _, c in columns)
    rows = "".join("<tr><td class='row-no'>" + str(i + 1) + "</td>" +
                   "".join(f"<td>{c[i] if i < len(c) else ''}</td>" for _, _, c in columns) + "</tr>"
                   for i in range(n))
    return (f"<table class='lab-compare'><thead><tr><th>#</th>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def compare(checkpoints_chosen, decoder, temperature, top_k, top_p, num_beams, seed, prefix, n,
            per_model, per_model_rows, store=None):
    chosen = names_list(checkpoints_chosen, "checkpoints to compare", store=store)
    n = whole(n, "number of captions", 1, 200)
    seed = whole(seed, "seed", 0, SEED_MAX)
    prefix = text(prefix, "prefix", MAX_PROMPT_CHARS).strip()
    overrides = {}
    if per_model and per_model_rows is not None:
        for row in _rows(per_model_rows):
            overrides[row["checkpoint"]] = row
    shared = {"decoder": decoder, "temperature": temperature, "top_k": top_k, "top_p": top_p,
              "num_beams": num_beams}
    settings = []
    for name in chosen:       # every setting checked before any model runs
        o = overrides.get(name, {})
        settings.append(decode_config(**{k: _cell(o.get(k), v) for k, v in shared.items()}, seed=seed))
    columns = []
    for name, cfg in zip(chosen, settings):
        ck = MODELS.get(name, store)
        caps = sample_captions(ck.model, ck.tokenizer, n, cfg, prompt=prefix)
        columns.append((name, _settings_label(cfg), [shade(ck.tokenizer, c) for c in caps]))
    return captions_table(columns)


def _cell(value, shared):
    """A per-checkpoint cell: blank (None, '', or the NaN of an empty table cell) takes the
    shared setting; anything else, 0 included, is that checkpoint's own."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return shared
    if isinstance(value, float) and math.isnan(value):
        return shared
    return value


def _rows(table) -> list[dict]:
    values = table.values.tolist() if hasattr(table, "values") else table
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
    chosen = names_list(checkpoints_chosen, "checkpoints", limit=4, store=store)
    n = whole(n, "captions per cell", 1, MATRIX_MAX_CAPTIONS)
    seed = whole(seed, "seed", 0, SEED_MAX)
    prefix = text(prefix, "prefix", MAX_PROMPT_CHARS).strip()
    raw = [t for t in text(temperatures, "temperatures", 200).replace(" ", "").split(",") if t]
    if not raw or len(raw) > MATRIX_MAX_TEMPERATURES:
        raise ConfigError(f"temperatures: give 1 to {MATRIX_MAX_TEMPERATURES} numbers separated by "
                          f"commas, e.g. 0.7,1.0; got {temperatures!r}")
    settings = []
    for dec in DECODERS.names():
        uses = DECODERS.get(dec).meta.get("uses", ())
        for t in (raw if "temperature" in uses else [1.0]):
            settings.append(decode_config(dec, t, 40, 0.9, 4, seed=seed))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in chosen)
    rows = []
    for cfg in settings:
        cells = []
        for name in chosen:
            ck = MODELS.get(name, store)
            caps = sample_captions(ck.model, ck.tokenizer, n, cfg, prompt=prefix)
            cells.append("<br>".join(shade(ck.tokenizer, c) for c in caps))
        rows.append(f"<tr><th>{html.escape(_settings_label(cfg))}</th>" +
                    "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f"<table class='lab-compare'><thead><tr><th>decoder</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def build(ctx: Context):
    gr.Markdown("Captions from each checkpoint side by side. Row *i* of every column comes from the "
                "same seed and position; each generated token is shaded by the probability the model "
                "gave it (hover for the number).")
    chosen = checkpoint_dropdown(ctx, "checkpoints", multiselect=True, elem_id="compare-checkpoints")
    dec = decoder_inputs("top_p")
    with gr.Row():
        seed = Number(0, label="seed", step=1)
        prefix = Textbox("", label="prefix (optional)", placeholder="A man")
        n = Number(8, label="captions", step=1)
    per_model = Checkbox(False, label="a different decoder for each checkpoint")
    per_model_rows = RowsTable(value=[], headers=PER_MODEL_COLUMNS, visible=False, interactive=True,
                                  label="decoder per checkpoint (blank cells take the shared setting)")
    go = gr.Button("Generate side by side", variant="primary", elem_id="compare-go")
    out = gr.HTML(elem_id="compare-out")

    def show_rows(on, names):
        return gr.update(visible=on, value=[[n, "", None, None, None, None] for n in (names or [])])
    per_model.change(show_rows, [per_model, chosen], per_model_rows, api_visibility="private")
    inputs = [chosen, *dec.components(), seed, prefix, n, per_model, per_model_rows]
    go.click(friendly(lambda *a: compare(*a, store=ctx.store)), inputs, out, api_name="compare")
    prefix.submit(friendly(lambda *a: compare(*a, store=ctx.store)), inputs, out,   # Enter generates
                  api_visibility="private")

    with gr.Accordion("Which is better? Score them on a seeded subset of the test split", open=False):
        with gr.Row():
            score_n = Radio([100, 500, 1000], value=100, label="test captions")
            go_s = gr.Button("Score and compare", elem_id="compare-score")
        scores = gr.Dataframe(headers=EVAL_COLUMNS, label="scores (live): each value with its 95% interval",
                              elem_id="compare-scores", wrap=True, column_widths=EVAL_WIDTHS)
        said = gr.Markdown(elem_id="compare-verdicts")
        go_s.click(friendly(lambda names, d, t, k, p, b, n, s: (yield from evaluate_run(
                       names, d, t, k, p, b, n, s, "auto", store=ctx.store, data_dir=ctx.data_dir))),
                   [chosen, *dec.components(), score_n, seed], [scores, said], api_name="compare_scores")

    with gr.Accordion("Decoder matrix: every decoder plugin x temperature", open=False):
        with gr.Row():
            temps = Textbox("0.7, 1.0", label="temperatures")
            n_m = Number(3, label="captions per cell", step=1)
        go_m = gr.Button("Build the matrix")
        out_m = gr.HTML()
        go_m.click(friendly(lambda *a: decoder_matrix(*a, store=ctx.store)),
                   [chosen, temps, n_m, seed, prefix], out_m, api_name="decoder_matrix")
