"""Attention tab: per-head and model views (bertviz, served offline), a Plotly layer x head grid,
grouped-query head sharing, and the heads that differ most between two checkpoints."""
from __future__ import annotations

import gradio as gr

from lab.ui.fields import Checkbox, Number, Textbox
from lab import attention
from lab.config import SEED_MAX, ConfigError
from lab.generate import MAX_PROMPT_CHARS, sample_captions
from lab.ui.common import (MODELS, Context, asset_url, checkpoint_dropdown, decode_config, friendly,
                           need, need_checkpoint, whole)
from lab.ui.common import text as bounded_text


def _capture(name, text, generate, seed, store):
    text = bounded_text(text, "text", MAX_PROMPT_CHARS).strip()
    cfg = decode_config("top_p", 0.7, 40, 0.9, 4, seed=whole(seed, "seed", 0, SEED_MAX))
    ck = MODELS.get(need_checkpoint(name, "a checkpoint", store), store)
    if generate:      # a caption just generated: attention over the generated tokens too
        cap = sample_captions(ck.model, ck.tokenizer, 1, cfg, prompt=text)[0]
        n_prompt = 1 + cap.n_prompt
        return attention.capture(ck.model, ck.tokenizer, ids=cap.tokens, n_prompt=n_prompt,
                                 max_tokens=64), cap.text
    if not text:
        raise ConfigError("type a text, or tick 'generate a caption' to continue from the prefix")
    return attention.capture(ck.model, ck.tokenizer, text, max_tokens=64), text


def groups_markdown(cap) -> str:
    if cap.kv_heads == cap.n_head:
        return f"Multi-head attention: each of the {cap.n_head} query heads has its own key/value head."
    groups = attention.head_groups(cap.n_head, cap.kv_heads)
    lines = [f"- KV head {g + 1}: query heads {', '.join(str(h + 1) for h in hs)}"
             for g, hs in enumerate(groups)]
    kind = "Multi-query" if cap.kv_heads == 1 else "Grouped-query"
    return f"{kind} attention: {cap.n_head} query heads share {cap.kv_heads} key/value head(s).\n" + "\n".join(lines)


def show(name, text, generate, seed, store=None):
    cap, shown = _capture(name, text, generate, seed, store)
    head = attention.iframe(attention.bertviz_html(cap, "head", asset_url()), height=560)
    model = attention.iframe(attention.bertviz_html(cap, "model", asset_url()),
                             height=min(2400, 160 * cap.n_layer + 120))
    note = f"**{shown}** — {len(cap.tokens)} tokens"
    if cap.n_prompt < len(cap.tokens):
        note += f" (generated from token {cap.n_prompt + 1} on)"
    return note, head, model, attention.heatmap_grid(cap), groups_markdown(cap)


def differences(name_a, name_b, text, store=None):
    bounded_text(text, "text", MAX_PROMPT_CHARS)
    a = MODELS.get(need_checkpoint(name_a, "the first checkpoint", store), store)
    b = MODELS.get(need(name_b, "the second checkpoint"), store)
    if a.tokenizer.kind != b.tokenizer.kind or a.tokenizer.vocab_size != b.tokenizer.vocab_size:
        raise ConfigError(f"{name_a} and {name_b} use different tokenizers ({a.tokenizer.kind} vs "
                          f"{b.tokenizer.kind}); head differences need the same tokens")
    text = need(bounded_text(text, "text", MAX_PROMPT_CHARS).strip(), "a text")
    ca = attention.capture(a.model, a.tokenizer, text, max_tokens=64)
    cb = attention.capture(b.model, b.tokenizer, text, max_tokens=64)
    rows = attention.head_differences(ca, cb, top=12)
    return [[r["layer"], r["head"], r["distance"]] for r in rows]


def build(ctx: Context):
    gr.Markdown("Attention of every layer and head. The head and model views are bertviz's, served "
                "from this machine (no network needed); the grid shows every layer x head at once.")
    with gr.Row():
        name = checkpoint_dropdown(ctx, "checkpoint", elem_id="attention-checkpoint")
        text = Textbox("A man riding a wave on top of a surfboard .", label="text (or prefix)",
                          elem_id="attention-text", scale=3)
    with gr.Row():
        generate = Checkbox(False, label="generate a caption from this prefix and show it")
        seed = Number(0, label="seed", step=1)
        go = gr.Button("Show attention", variant="primary", elem_id="attention-go")
    note = gr.Markdown()
    with gr.Tabs():
        with gr.Tab("Head view"):
            head = gr.HTML(elem_id="attention-head-view")
        with gr.Tab("Model view"):
            model = gr.HTML(elem_id="attention-model-view")
        with gr.Tab("Layer x head grid"):
            grid = gr.Plot(elem_id="attention-grid")
    groups = gr.Markdown()
    go.click(friendly(lambda *a: show(*a, store=ctx.store)), [name, text, generate, seed],
             [note, head, model, grid, groups], api_name="attention")
    # another checkpoint: the views shown belong to the last one, so they go
    name.change(lambda _: ("Press *Show attention* for this checkpoint.", "", "", None, ""), name,
                [note, head, model, grid, groups], api_visibility="private")
    with gr.Accordion("Heads that differ most between two checkpoints (same tokenizer)", open=False):
        with gr.Row():
            other = checkpoint_dropdown(ctx, "compare with")
            go_d = gr.Button("Find the differing heads")
        table = gr.Dataframe(headers=["layer", "head", "distance"], label="mean total-variation "
                             "distance between the heads' attention rows (0 same, 1 disjoint)")
        go_d.click(friendly(lambda *a: differences(*a, store=ctx.store)), [name, other, text], table,
                   api_name="head_differences")
