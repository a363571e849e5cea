"""The web lab: one file per tab; `build_app()` assembles them. The only Gradio code in lab/."""
from __future__ import annotations

import gradio as gr

from lab.attention import VENDOR_DIR
from lab.ui import attention, checkpoints, compare, evaluate, train
from lab.ui.common import Context

CSS = """
.lab-compare { border-collapse: collapse; width: 100%; table-layout: fixed; font-size: 14px; }
.lab-compare td { overflow-wrap: anywhere; }
.lab-compare td, .lab-compare th { border: 1px solid #ddd; padding: 6px 8px; vertical-align: top; text-align: left; }
.lab-compare .row-no, .lab-compare th:first-child { color: #888; width: 2.5em; }
.tok { border-radius: 3px; padding: 0 1px; white-space: pre-wrap; }
.tok-prompt { color: #666; white-space: pre-wrap; }
.lab-progress { background: #e5e7eb; border-radius: 6px; height: 14px; overflow: hidden; }
.lab-progress .bar { background: #2563eb; height: 100%; transition: width .5s; }
.lab-progress-text { font-size: 14px; margin-top: 4px; }
"""


def build_app(store=None, data_dir=None) -> gr.Blocks:
    gr.set_static_paths([VENDOR_DIR])        # bertviz's d3, jQuery and require.js, served locally
    ctx = Context(store=store, data_dir=data_dir)
    with gr.Blocks(title="tfmr-lab") as demo:
        gr.Markdown("# tfmr-lab\nTrain, compare and understand small Transformer language models.")
        with gr.Tabs():
            with gr.Tab("Compare", id="compare"):
                compare.build(ctx)
            with gr.Tab("Attention", id="attention"):
                attention.build(ctx)
            with gr.Tab("Evaluate", id="evaluate"):
                evaluate.build(ctx)
            with gr.Tab("Train", id="train"):
                job, latest = train.build(ctx)
            with gr.Tab("Checkpoints", id="checkpoints"):
                table = checkpoints.build(ctx)

        known = gr.State(ctx.checkpoint_names())

        def refresh(previous):
            """New checkpoints (a job just wrote one) become choices in every tab at once."""
            names = ctx.checkpoint_names()
            if names == previous:
                return [gr.skip()] * (len(ctx.checkpoint_dropdowns) + 1) + [previous]
            updates = [gr.update(choices=[""] + names if dd.label == "fine-tune from (optional)" else names)
                       for dd in ctx.checkpoint_dropdowns]
            return updates + [checkpoints.rows(ctx.store), names]
        gr.Timer(3.0).tick(refresh, known, ctx.checkpoint_dropdowns + [table, known],
                           api_visibility="private", show_progress="hidden")
        demo.load(latest, None, job, api_visibility="private")   # re-attach to the running job
    return demo


def launch_kwargs() -> dict:
    return {"css": CSS}
