"""Checkpoints tab: the store with each checkpoint's plugins, size, provenance and metrics;
import (HF GPT-2 directory with a layer selection), export, delete with confirmation."""
from __future__ import annotations

import gradio as gr

from lab import checkpoints, interop
from lab.config import ConfigError
from lab.ui.common import Context, friendly, need

COLUMNS = ["name", "model", "layers x width", "heads (kv)", "norm", "attention", "positional", "mlp",
           "source", "parent / pretrained", "dev perplexity", "size MB", "created"]


def rows(store=None) -> list[list]:
    out = []
    for name in checkpoints.names(store):
        try:
            i = checkpoints.info(name, store)
        except checkpoints.CheckpointError as e:
            out.append([name, "damaged", str(e)] + [""] * (len(COLUMNS) - 3))
            continue
        m, metrics = i["model"], i["metrics"]
        kv = m["kv_groups"] or m["n_head"]
        if m["attention"] == "mqa":
            kv = 1
        out.append([name, m["model"], f"{m['n_layer']} x {m['n_embd']}", f"{m['n_head']} ({kv})",
                    f"{m['norm']} ({m['norm_position']})", m["attention"], m["positional"], m["mlp"],
                    i.get("source", ""), i.get("parent") or i.get("pretrained") or "",
                    round(metrics["dev_perplexity"], 2) if "dev_perplexity" in metrics else "",
                    round(i["size_bytes"] / 1e6, 1), i.get("created", "")])
    return out


def details(name, store=None):
    return checkpoints.info(need(name, "a checkpoint"), store)


def import_gpt2(path, layers, name, store=None):
    path, name = need((path or "").strip(), "the HF GPT-2 directory"), need((name or "").strip(), "a name")
    selection = interop.parse_layers(layers) if (layers or "").strip() else None
    out = interop.import_hf_gpt2(path, name, selection, store)
    return f"Imported into {out}.", rows(store)


def export_hf(name, outdir, store=None):
    out = interop.export_hf_gpt2(need(name, "a checkpoint"), need((outdir or "").strip(),
                                                                  "an output directory"), store)
    return f"Exported {name} to {out}; it loads with GPT2LMHeadModel.from_pretrained."


def delete(name, confirm, store=None):
    need(name, "a checkpoint")
    if (confirm or "").strip() != name:
        raise ConfigError(f"to delete, type the checkpoint's name ({name}) in the confirmation box")
    checkpoints.delete(name, store)
    return f"Deleted {name}.", rows(store)


def build(ctx: Context):
    table = gr.Dataframe(rows(ctx.store), headers=COLUMNS, label="the store", interactive=False,
                         elem_id="checkpoints-table")
    refresh = gr.Button("Refresh")
    refresh.click(lambda: rows(ctx.store), None, table, api_name="checkpoints")
    with gr.Row():
        chosen = gr.Dropdown(ctx.checkpoint_names(), label="checkpoint", elem_id="checkpoints-chosen")
        ctx.checkpoint_dropdowns.append(chosen)
    info = gr.JSON(label="config, provenance and metrics")
    chosen.change(friendly(lambda n: details(n, ctx.store)), chosen, info, api_name="checkpoint_info")
    message = gr.Markdown(elem_id="checkpoints-message")
    with gr.Accordion("Import an HF GPT-2 directory", open=False):
        with gr.Row():
            path = gr.Textbox(label="directory (config.json + model.safetensors)")
            layers = gr.Textbox(label="layers (1-based, e.g. 1,6,12; blank: all)")
            new_name = gr.Textbox(label="name")
        gr.Button("Import").click(friendly(lambda *a: import_gpt2(*a, store=ctx.store)),
                                  [path, layers, new_name], [message, table], api_name="import_gpt2")
    with gr.Accordion("Export to HF GPT-2", open=False):
        outdir = gr.Textbox(label="output directory (new or empty)")
        gr.Button("Export").click(friendly(lambda *a: export_hf(*a, store=ctx.store)),
                                  [chosen, outdir], message, api_name="export_hf")
    with gr.Accordion("Delete", open=False):
        confirm = gr.Textbox(label="type the checkpoint's name to confirm", elem_id="checkpoints-confirm")
        gr.Button("Delete", variant="stop").click(friendly(lambda *a: delete(*a, store=ctx.store)),
                                                  [chosen, confirm], [message, table],
                                                  api_name="delete_checkpoint")
    return table
