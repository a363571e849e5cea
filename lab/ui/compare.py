"""Compare tab: captions of two or more checkpoints side by side, each token shaded by the
probability the model gave it; and the decoder matrix (decoder x temperature)."""
from __future__ import annotations

import html

import gradio as gr

from lab.config import ConfigError
from lab.generate import sample_captions
from lab.registry import DECODERS
from lab.ui.common import (MODELS, Context, checkpoint_dropdown, decode_config, decoder_inputs,
                           friendly)

PER_MODEL_COLUMNS = ["checkpoint", "decoder", "temperature", "top_k", "top_p", "num_beams"]


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
    if not checkpoints_chosen:
        raise ConfigError("choose at least one checkpoint (two or more to compare)")
    n = int(n)
    if not 1 <= n <= 200:
        raise ConfigError(f"number of captions must be between 1 and 200, got {n}")
    overrides = {}
    if per_model and per_model_rows is not None:
        for row in _rows(per_model_rows):
            overrides[row["checkpoint"]] = row
    columns = []
    for name in checkpoints_chosen:
        o = overrides.get(name, {})
        cfg = decode_config(o.get("decoder") or decoder, o.get("temperature") or temperature,
                            o.get("top_k") or top_k, o.get("top_p") or top_p,
                            o.get("num_beams") or num_beams, seed=int(seed))
        ck = MODELS.get(name, store)
        caps = sample_captions(ck.model, ck.tokenizer, n, cfg, prompt=(prefix or "").strip())
        columns.append((name, _settings_label(cfg), [shade(ck.tokenizer, c) for c in caps]))
    return captions_table(columns)


def _rows(table) -> list[dict]:
    values = table.values.tolist() if hasattr(table, "values") else table
    return [dict(zip(PER_MODEL_COLUMNS, r)) for r in values if r and r[0]]


def decoder_matrix(checkpoints_chosen, temperatures, n, seed, prefix, store=None):
    if not checkpoints_chosen:
        raise ConfigError("choose at least one checkpoint")
    try:
        temps = [float(t) for t in str(temperatures).replace(" ", "").split(",") if t]
    except ValueError:
        raise ConfigError(f"temperatures must be numbers separated by commas, e.g. 0.7,1.0; "
                          f"got {temperatures!r}") from None
    if not temps or any(t <= 0 for t in temps):
        raise ConfigError("temperatures must be positive numbers, e.g. 0.7,1.0")
    settings = []
    for dec in DECODERS.names():
        uses = DECODERS.get(dec).meta.get("uses", ())
        for t in (temps if "temperature" in uses else [1.0]):
            settings.append(decode_config(dec, t, 40, 0.9, 4, seed=int(seed)))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in checkpoints_chosen)
    rows = []
    for cfg in settings:
        cells = []
        for name in checkpoints_chosen:
            ck = MODELS.get(name, store)
            caps = sample_captions(ck.model, ck.tokenizer, int(n), cfg, prompt=(prefix or "").strip())
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
        seed = gr.Number(0, label="seed", precision=0)
        prefix = gr.Textbox("", label="prefix (optional)", placeholder="A man")
        n = gr.Number(8, label="captions", precision=0)
    per_model = gr.Checkbox(False, label="a different decoder for each checkpoint")
    per_model_rows = gr.Dataframe(value=[], headers=PER_MODEL_COLUMNS, visible=False, interactive=True,
                                  label="decoder per checkpoint (blank cells take the shared setting)")
    go = gr.Button("Generate side by side", variant="primary", elem_id="compare-go")
    out = gr.HTML(elem_id="compare-out")

    def show_rows(on, names):
        return gr.update(visible=on, value=[[n, "", None, None, None, None] for n in (names or [])])
    per_model.change(show_rows, [per_model, chosen], per_model_rows, api_visibility="private")
    go.click(friendly(lambda *a: compare(*a, store=ctx.store)),
             [chosen, *dec.components(), seed, prefix, n, per_model, per_model_rows], out,
             api_name="compare")

    with gr.Accordion("Decoder matrix: every decoder plugin x temperature", open=False):
        with gr.Row():
            temps = gr.Textbox("0.7, 1.0", label="temperatures")
            n_m = gr.Number(3, label="captions per cell", precision=0)
        go_m = gr.Button("Build the matrix")
        out_m = gr.HTML()
        go_m.click(friendly(lambda *a: decoder_matrix(*a, store=ctx.store)),
                   [chosen, temps, n_m, seed, prefix], out_m, api_name="decoder_matrix")
