"""Attention tab: per-head and model views (bertviz, served offline), a Plotly layer x head grid,
grouped-query head sharing, for one checkpoint or two side by side, and the heads that differ
most between the two (any tokenizers: compared word by word)."""
from __future__ import annotations

from contextlib import contextmanager

import gradio as gr

from lab.ui.fields import Checkbox, Number, Textbox
from lab.evaluation import attention_maps
from lab.inputs import tasks
from lab.config import SEED_MAX, ConfigError, DecodeConfig
from lab.errors import LabError
from lab.presets import DECODE_TO_SHOW
from lab.modeling.generate import MAX_PROMPT_CHARS, sample_captions
from lab.ui.work import streamed
from lab.ui.common import (LOADED, Context, asset_url, beside_dropdown, checkpoint_dropdown, friendly,
                           section, need, need_checkpoint, table_files, whole)
from lab.ui.common import text as bounded_text

MAX_TOKENS = 64
ALIGNMENT = """\
- **Words**: each checkpoint reads the text with its own tokenizer; its tokens are matched to the
  text's words (split at spaces), and BOS is a word of its own, `<bos>`.
- **A word's attention is the mean of its sub-tokens' rows, summed over the key word's
  sub-tokens**, so each row still sums to 1 over the words.
- **Distance** between two heads: the mean, over the text's words, of the total-variation distance
  between their rows (0 same, 1 disjoint).
- For each head of the first checkpoint: the distance to the head with the same layer and number in
  the second (blank if it has none), and the second's closest head; the least matched first."""


def diff_headers(other: str) -> list[str]:
    return ["layer", "head", f"distance to the same head of {other}", f"closest head of {other}",
            "distance to the closest"]


@contextmanager
def reading(ck):
    """An error while a checkpoint reads the text (too long, a character its tokenizer lacks)
    names the checkpoint: with two of them, the message must say which."""
    try:
        yield
    except LabError as e:
        raise ConfigError(f"{ck.name}: {e}") from None


def _capture(name, text, generate, seed, store):
    """The checkpoint, its capture, and the text shown (a generated caption, if asked; a task
    that continues text its own way, such as answering a question, does so)."""
    text = bounded_text(text, "the text", MAX_PROMPT_CHARS).strip()
    cfg = DecodeConfig.from_dict({**DECODE_TO_SHOW, "seed": whole(seed, "seed", 0, SEED_MAX)})
    ck = LOADED.get(need_checkpoint(name, "a checkpoint", store), store)
    own = getattr(tasks.get(tasks.of_checkpoint(ck)), "continue_text", None)
    if generate and own:
        limit = min(MAX_TOKENS * 2, ck.config.n_positions)
        with reading(ck):
            shown, n_prompt = own(ck.model, ck.tokenizer, text, limit)
            return ck, attention_maps.capture(ck.model, ck.tokenizer, shown, n_prompt=n_prompt,
                                              max_tokens=limit), shown
    if generate:      # a caption just generated: attention over the generated tokens too
        cap = sample_captions(ck.model, ck.tokenizer, 1, cfg, prompt=text)[0]
        n_prompt = 1 + cap.n_prompt
        return ck, attention_maps.capture(ck.model, ck.tokenizer, ids=cap.tokens, n_prompt=n_prompt,
                                     max_tokens=MAX_TOKENS), cap.text
    if not text:
        raise ConfigError("type a text, or tick 'generate a caption' to continue from the prefix")
    return ck, attention_maps.capture(ck.model, ck.tokenizer, text, max_tokens=MAX_TOKENS), text


def per_token_markdown(cap) -> str:
    """Values a model reports per token (the Universal Transformer's steps), one line each."""
    def shown(tok: str) -> str:       # a code span: Markdown shows its text as text
        return "`" + tok.replace("`", "'").replace("\n", " ") + "`"
    return "".join(f"\n\n**{name} per token**: " + ", ".join(
        f"{shown(tok)} {value:g}" for tok, value in zip(cap.tokens, values))
        for name, values in cap.per_token.items())


def groups_markdown(cap) -> str:
    return _groups_markdown(cap) + per_token_markdown(cap)


def _groups_markdown(cap) -> str:
    if cap.kv_heads == cap.n_head:
        return f"Multi-head attention: each of the {cap.n_head} query heads has its own key/value head."
    groups = attention_maps.head_groups(cap.n_head, cap.kv_heads)
    lines = [f"- KV head {g + 1}: query heads {', '.join(str(h + 1) for h in hs)}"
             for g, hs in enumerate(groups)]
    kind = "Multi-query" if cap.kv_heads == 1 else "Grouped-query"
    return f"{kind} attention: {cap.n_head} query heads share {cap.kv_heads} key/value head(s).\n" + "\n".join(lines)


def blocks(ck) -> str:
    """Which blocks of the imported model a selection's layers are ("" when they are all, in order)."""
    layers = ck.meta.get("layers")
    if not isinstance(layers, list) or layers == list(range(1, len(layers) + 1)):
        return ""
    return (f"; its layers {', '.join(map(str, range(1, len(layers) + 1)))} are blocks "
            f"{', '.join(map(str, layers))} of {ck.meta.get('pretrained', 'the imported model')}")


def views(cap, ck, note: str) -> tuple:
    """note, head view, model view, grid and head groups of one checkpoint's capture."""
    head = attention_maps.iframe(attention_maps.bertviz_html(cap, "head", asset_url(), title=ck.name),
                                 height=attention_maps.view_height(cap, "head"))
    model = attention_maps.iframe(attention_maps.bertviz_html(cap, "model", asset_url(), title=ck.name),
                                  height=attention_maps.view_height(cap, "model"))
    if cap.n_layer != ck.config.n_layer:     # a block applied more than once (recurrent steps)
        note += (f"; the views' {cap.n_layer} layers are its {ck.config.n_layer} block(s) at each "
                 f"step they were applied")
    return (f"**{ck.name}**: {note}{blocks(ck)}", head, model,
            attention_maps.heatmap_grid(cap, title=ck.name), groups_markdown(cap))


def show(name, text, generate, seed, store=None):
    """The views of the first checkpoint, and the text shown (a generated caption, if asked)."""
    ck, cap, shown = _capture(name, text, generate, seed, store)
    note = f"*{shown}* — {len(cap.tokens)} tokens"
    if cap.n_prompt < len(cap.tokens):
        note += f" (generated from token {cap.n_prompt + 1} on)"
    return *views(cap, ck, note), shown


def show_stream(name, text, generate, seed, store=None):
    """show() as a stream: a note saying what is under way at least every POLL_S (the views
    blank), then show()'s views and text."""
    under_way = (f"*Reading the text with {name} and drawing its attention …*", *NO_VIEWS[1:], "")
    yield (yield from streamed(lambda work: show(name, text, generate, seed, store),
                               lambda said: under_way))


def show_beside(other, shown, generated, store=None):
    """The views of the checkpoint side by side with the first, on the text the first showed."""
    if not other:
        return NO_VIEWS
    ck = LOADED.get(other, store)
    with reading(ck):
        cap = attention_maps.capture(ck.model, ck.tokenizer, shown, max_tokens=MAX_TOKENS)
    whose = "the caption the first checkpoint wrote" if generated else "the same text"
    return views(cap, ck, f"{whose}, its own tokenizer — {len(cap.tokens)} tokens")


def by_words(ck, text: str):
    with reading(ck):
        cap = attention_maps.capture(ck.model, ck.tokenizer, text, max_tokens=MAX_TOKENS)
        return attention_maps.by_words(cap, ck.tokenizer, text)


def differences(name_a, name_b, text, store=None):
    text = bounded_text(text, "the text", MAX_PROMPT_CHARS).strip()
    a = LOADED.get(need_checkpoint(name_a, "the first checkpoint", store), store)
    b = LOADED.get(need(name_b, "a checkpoint to show side by side"), store)
    rows = attention_maps.head_differences(by_words(a, need(text, "a text")), by_words(b, text), top=12)
    data = [[r["layer"], r["head"], r["distance"], r["closest"], r["closest_distance"]] for r in rows]
    return {"headers": diff_headers(name_b), "data": data}


NO_VIEWS = ("", "", "", None, "")


def cleared(other):
    """Another pair: the views shown belong to the last one, so they go, and so do the differing
    heads and their downloads; the second column is there only while a second checkpoint is
    chosen."""
    press = f"Press *Show attention* for {'these checkpoints' if other else 'this checkpoint'}."
    beside = [gr.update(value=v, visible=bool(other)) for v in NO_VIEWS]
    return (press, *NO_VIEWS[1:], *beside, [], None)


def view_columns() -> tuple[list, list]:
    """The views of the first checkpoint and, beside them (shown only while there is a second
    checkpoint), those of the second: note, head view, model view, grid, head groups."""
    a, b = {}, {}
    with gr.Row():
        a["note"], b["note"] = (gr.Markdown(label="note", show_label=False),
                                gr.Markdown(elem_id="attention-other-note", visible=False))
    with gr.Tabs():
        with gr.Tab("Head view"):
            with gr.Row():
                a["head"] = gr.HTML(elem_id="attention-head-view", label="head view (HTML)")
                b["head"] = gr.HTML(elem_id="attention-other-head-view", visible=False)
        with gr.Tab("Model view"):      # 970 px wide each: one above the other
            a["model"] = gr.HTML(elem_id="attention-model-view", label="model view (HTML)")
            b["model"] = gr.HTML(elem_id="attention-other-model-view", visible=False)
        with gr.Tab("Layer x head grid"):
            with gr.Row():
                a["grid"] = gr.Plot(elem_id="attention-grid", label="layer x head grid", show_label=False)
                b["grid"] = gr.Plot(elem_id="attention-other-grid", show_label=False, visible=False)
    with gr.Row():
        a["groups"], b["groups"] = gr.Markdown(label="head groups", show_label=False), gr.Markdown(visible=False)
    return list(a.values()), list(b.values())


def build(ctx: Context):
    gr.Markdown("Attention of every layer and head, for one checkpoint or two side by side on the "
                "same text. The head and model views are bertviz's, served from this machine (no "
                "network needed); the grid shows every layer x head at once. Layers and heads are "
                "numbered from 1.")
    with gr.Row():
        # its first text is a caption: a caption model first (a birth-place one reads questions)
        name = checkpoint_dropdown(ctx, "checkpoint", task="generate", only=False,
                                   elem_id="attention-checkpoint")
        other = beside_dropdown(ctx, "attention-other")
        text = Textbox("A man riding a wave on top of a surfboard .", label="text (or prefix)",
                       elem_id="attention-text", scale=2)
    with gr.Row():
        generate = Checkbox(False, label="generate a caption from this prefix and show it (a "
                                         "birth-place model answers the question)")
        seed = Number(0, label="seed", step=1)
        go = gr.Button("Show attention", variant="primary", elem_id="attention-go")
    shown = gr.State("")      # the text the first checkpoint showed: the second shows the same
    outs_a, outs_b = view_columns()

    def attention(checkpoint: str, text: str, generate: bool, seed: float):
        """Attention of every layer and head of a checkpoint over a text (or a caption it generates
        from the text as a prefix, with the seed), streamed: a note, the head view and model view
        (HTML), the layer x head grid (a plot), the head groups."""
        yield from show_stream(checkpoint, text, generate, seed, store=ctx.store)
    go.click(lambda: NO_VIEWS, None, outs_b, api_visibility="private", queue=False).then(
        friendly(attention), [name, text, generate, seed], outs_a + [shown], api_name="attention").success(
        friendly(lambda o, s, g: show_beside(o, s, g, store=ctx.store)), [other, shown, generate],
        outs_b, api_visibility="private")
    table, files = _differences_section(ctx, name, other, text)
    for dd in (name, other):
        dd.change(cleared, other, outs_a + outs_b + [table, files], api_visibility="private")


def _differences_section(ctx: Context, name, other, text):
    """The heads of the first checkpoint, the least matched in the second first; its downloads."""
    with section("Heads that differ most between the two checkpoints (any tokenizers: "
                 "compared word by word)"):
        gr.Markdown(ALIGNMENT, elem_id="attention-alignment")
        go_d = gr.Button("Find the differing heads", elem_id="attention-differences-go")
        table = gr.Dataframe(headers=diff_headers("the second"), elem_id="attention-differences",
                             label="heads of the first checkpoint, the least matched first")
        files = gr.File(label="download the table (CSV, JSON)", file_count="multiple", interactive=False,
                        elem_id="attention-differences-files")
        def head_differences(checkpoint: str, other: str, text: str):
            """The heads of the first checkpoint whose attention over the text is least matched by
            any head of the other (compared word by word: any tokenizers), as a table."""
            return differences(checkpoint, other, text, store=ctx.store)
        go_d.click(friendly(head_differences), [name, other, text], table,
                   api_name="head_differences").success(
            friendly(lambda t, a, b, x: table_files(t, f"head-differences-{a}-vs-{b}", ctx.store,
                                                    {"text": x, "first": a, "second": b})),
            [table, name, other, text], files, api_visibility="private")
    return table, files
