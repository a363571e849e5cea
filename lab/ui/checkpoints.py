"""Checkpoints tab: the store with each checkpoint's plugins, size, provenance and metrics (a
damaged one listed with what is wrong, unreadable metrics as such, and folders that cannot be
checkpoints with why); import (an HF GPT-2 or Llama folder with a block selection), export,
delete with confirmation. Server folders outside the store only under LAB_ALLOWED_DIRS."""
from __future__ import annotations

import shutil

import gradio as gr

from lab.storage import smollm2
from lab.ui.fields import Dropdown, File, Radio, Textbox
from lab.storage import checkpoints, exports, gguf_export, interop
from lab.storage import store as lab_store
from lab.config import ConfigError, ModelConfig
from lab.modeling.model import kv_heads
from lab.ui.common import EMPTY_STORE, Context, clicked, friendly, need, section, text

COLUMNS = ["name", "model", "layers x width", "heads (kv)", "norm", "attention", "positional", "mlp",
           "source", "parent / pretrained", "dev perplexity", "weights MB", "created"]
SMOLLM2_TAKES = smollm2.TAKES      # (the section's own handler is named smollm2)
WIDTHS = ["10%", "5%", "7%", "6%", "8%", "8%", "9%", "6%", "7%", "9%", "10%", "7%", "8%"]    # every column in view at 1400 px


def _when(created: str) -> str:
    """A checkpoint's creation time as the table (and its download) shows it: the date and the
    time apart, so a narrow column folds between them, not inside a number."""
    return created.replace("T", " ")


def rows(store=None) -> list[list]:
    out = []
    for i in checkpoints.listing(store):
        name = i["name"]
        if "damaged" in i or "unusable" in i:
            out.append([name, "damaged" if "damaged" in i else "not usable",
                        i.get("damaged") or i["unusable"]] + [""] * (len(COLUMNS) - 3))
            continue
        m, metrics = i["model"], i["metrics"]
        ppl = ("unreadable" if "metrics_unreadable" in i else
               round(metrics["dev_perplexity"], 2) if "dev_perplexity" in metrics else "")
        kv = kv_heads(ModelConfig.from_dict(m))
        out.append([name, m["model"], f"{m['n_layer']} x {m['n_embd']}", f"{m['n_head']} ({kv})",
                    f"{m['norm']} ({m['norm_position']})", m["attention"], m["positional"], m["mlp"],
                    i.get("source", ""), i.get("parent") or i.get("pretrained") or "",
                    ppl, round(i["size_bytes"] / 1e6, 1), _when(i.get("created", ""))])
    return out


def details(name, store=None):
    """The chosen checkpoint's config, provenance and metrics; nothing while none is chosen."""
    if name is None or name == "":
        return {}
    return checkpoints.info(name, store)


def import_hf(path, layers, name, store=None):
    """A GPT-2 or Llama folder on the server, under LAB_ALLOWED_DIRS."""
    name = checkpoints.check_name(need(text(name, "name", 200), "a name"))
    layers = text(layers, "layers", 2000)
    folder = lab_store.allowed_source(text(path, "directory", 4096), "import")
    selection = interop.parse_layers(layers) if layers.strip() else None
    interop.import_hf(folder, name, selection, store)
    return f"Imported **{name}**.", rows(store)


def import_smollm2(layers, name, store=None):
    """SmolLM2-135M from the installed package, with a block selection (blank: all 30). Says what
    it does first: the import takes some seconds (smollm2.TAKES)."""
    name = checkpoints.check_name(need(text(name, "name", 200).strip(), "a name"))
    layers = text(layers, "layers", 200)
    selection = interop.parse_layers(layers, 30) if layers.strip() else None
    checkpoints.refuse_existing(name, store)
    yield (f"Importing SmolLM2-135M as **{name}**: reading and de-quantizing the weights "
           f"({smollm2.TAKES}) …"), gr.skip()
    smollm2.import_smollm2(name, selection, store)
    said = f"Imported **{name}**: SmolLM2-135M, " + (
        "all 30 blocks. It writes fluent text already; fine-tune it on the captions in the Train tab."
        if selection is None or selection == list(range(1, 31)) else
        f"blocks {', '.join(map(str, selection))} of 30. A cut of the model writes garbage until "
        f"it is fine-tuned: fine-tune it in the Train tab before comparing.")
    yield said, rows(store)


def import_hf_upload(files, layers, name, store=None):
    name = need(text(name, "name", 200).strip(), "a name")
    layers = text(layers, "layers", 2000)
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files) or len(files) > 10:
        raise ConfigError("upload the checkpoint's files (config.json, model.safetensors) or one .zip")
    selection = interop.parse_layers(layers) if layers.strip() else None
    interop.import_hf_upload(files, name, selection, store)
    return f"Imported **{name}**.", rows(store)


def _to_export(name, outdir, store=None) -> tuple[str, str]:
    """The checkpoint's name and the output folder ("" for a download), as a person gave them."""
    if not name:                        # what to do next, as Delete says it
        raise ConfigError(EMPTY_STORE if not checkpoints.names(store) else
                          "choose the checkpoint to export in the list beside the output directory")
    return checkpoints.check_name(name), text(outdir, "output directory", 4096).strip()


def export_hf(name, outdir, store=None):
    """Into an allowed server folder when one is given; otherwise into the store's exports,
    offered as a .zip download."""
    name, outdir = _to_export(name, outdir, store)
    if outdir:
        out = interop.export_hf(name, lab_store.allowed_path(outdir, "export"), store)
        return f"Exported {name} to {out}; it loads with AutoModelForCausalLM.from_pretrained.", None
    folder = interop.export_hf(name, exports.fresh(f"{name}-hf", "", store), store)
    archive = shutil.make_archive(str(folder), "zip", root_dir=folder)
    shutil.rmtree(folder, ignore_errors=True)
    return (f"Exported {name}: download the .zip below; unzipped, it loads with "
            f"AutoModelForCausalLM.from_pretrained."), archive


def export_gguf(name, kind, outdir, store=None):
    """NAME-KIND.gguf and its Ollama Modelfile: into an allowed server folder when one is given;
    otherwise into the store's exports, both offered as downloads."""
    name, outdir = _to_export(name, outdir, store)
    if kind not in gguf_export.TYPES:
        raise ConfigError(f"GGUF type must be one of {', '.join(gguf_export.TYPES)}, got {text(kind, 'type', 40)!r}")
    if outdir:
        folder = lab_store.allowed_path(outdir, "export")
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / f"{name}-{kind}.gguf"
        if out.exists():
            raise ConfigError(f"{out} exists; give another output directory, or remove it first")
        out = gguf_export.export_gguf(name, out, kind, store)
        return f"Exported {name} to {out}, with {gguf_export.modelfile_path(out).name} beside it.", None
    out = gguf_export.export_gguf(name, exports.fresh(f"{name}-{kind}", ".gguf", store), kind, store)
    return (f"Exported {name} as GGUF ({kind}): download both files below. `llama-cli -m "
            f"{out.name}` runs it; `ollama create {name} -f {gguf_export.modelfile_path(out).name}` "
            f"adds it to Ollama."), [str(out), str(gguf_export.modelfile_path(out))]


def delete(name, confirm, store=None):
    if not name:                        # what to do next, rather than what is missing
        raise ConfigError(EMPTY_STORE if not checkpoints.names(store) else
                          "choose the checkpoint to delete in the list beside the confirmation box")
    checkpoints.check_name(name)
    if text(confirm, "confirmation", 200).strip() != name:
        raise ConfigError(f"to delete, type the checkpoint's name ({name}) in the confirmation box")
    children = [i["name"] for i in checkpoints.listing(store) if i.get("parent") == name]
    checkpoints.delete(name, store)
    said = f"Deleted {name}."
    if children:
        said += (f" Fine-tuned from it: {', '.join(children)}; they keep their own weights, and their "
                 f"provenance still names {name}.")
    return said, rows(store), {}, gr.update(value=None), ""


def build(ctx: Context):
    ctx.empty_note(f"Import SmolLM2 below ({smollm2.TAKES}), or train a model in the Train tab.")
    table = _store_table(ctx)
    with gr.Row():
        chosen = Dropdown(ctx.checkpoint_names(), value=None, label="checkpoint", elem_id="checkpoints-chosen",
                          allow_custom_value=True)
        ctx.add_dropdown(chosen, "blank")
    info = gr.JSON(label="config, provenance and metrics")

    def checkpoint_info(checkpoint: str):
        """A stored checkpoint's config, provenance and metrics."""
        return details(checkpoint, ctx.store)
    chosen.change(friendly(checkpoint_info), chosen, info, api_name="checkpoint_info")
    message = gr.Markdown(elem_id="checkpoints-message", label="message", show_label=False)
    _import_smollm2_section(ctx, message, table)
    _import_hf_section(ctx, message, table)
    _export_section(ctx, chosen)
    _delete_section(ctx, chosen, message, table, info)
    return table


def _following(ctx: Context, chosen, label: str, elem_id: str):
    """A section's own checkpoint field: the one chosen at the top, or another."""
    target = Dropdown(ctx.checkpoint_names(), value=None, label=label, elem_id=elem_id,
                      allow_custom_value=True)
    ctx.add_dropdown(target, "blank")
    chosen.change(lambda n: gr.update(value=n), chosen, target, api_visibility="private",
                  show_progress="hidden")
    return target


def _export_section(ctx: Context, chosen) -> None:
    """The checkpoint to export (the one chosen above, or another), where to, the button, and
    what came of it (its message and the .zip), in that order in one section."""
    with section("Export (a gpt2 or llama checkpoint): a Hugging Face folder (GPT2LMHeadModel or "
                 "LlamaForCausalLM), or one GGUF file", elem_id="checkpoints-export"):
        with gr.Row():
            target = _following(ctx, chosen, "checkpoint to export", "export-name")
            outdir = Textbox(label="output directory (optional)", elem_id="export-outdir",
                             info="blank: download here; or a folder under LAB_ALLOWED_DIRS "
                                  "(new or empty for Hugging Face)")
        with gr.Row():
            button = gr.Button("Export to Hugging Face", elem_id="export-go")
            kind = Radio(list(gguf_export.TYPES), value="f16", label="GGUF weights",
                            elem_id="export-gguf-type", min_width=320,
                            info="f16: half of f32's size; q8_0: a quarter")
            gguf_button = gr.Button("Export GGUF (llama.cpp, Ollama, LM Studio)",
                                    elem_id="export-gguf-go")
        said = gr.Markdown(elem_id="export-message", label="message", show_label=False)
        download = gr.File(label="export", interactive=False, elem_id="export-file")
        files = gr.File(label="GGUF export", interactive=False, elem_id="export-gguf-files",
                        file_count="multiple")

    def export(checkpoint: str, outdir: str):
        """A gpt2 or llama checkpoint as a Hugging Face folder: a .zip to download (outdir blank),
        or written to a new folder under LAB_ALLOWED_DIRS. Returns the message and the .zip."""
        return export_hf(checkpoint, outdir, store=ctx.store)
    clicked(button, export, [target, outdir], [said, download], "export_hf", note=0, cleared=(1,))

    def gguf(checkpoint: str, gguf_type: str, outdir: str):
        """A gpt2 or llama checkpoint as one GGUF file (f32, f16 or q8_0 weights) with an Ollama
        Modelfile beside it: downloads (outdir blank), or written into a folder under
        LAB_ALLOWED_DIRS. Returns the message and the files."""
        return export_gguf(checkpoint, gguf_type, outdir, store=ctx.store)
    clicked(gguf_button, gguf, [target, kind, outdir], [said, files], "export_gguf", note=0, cleared=(1,))
    # one export's files, not the other's, stand under the message
    button.click(lambda: None, None, files, api_visibility="private", show_progress="hidden")
    gguf_button.click(lambda: None, None, download, api_visibility="private", show_progress="hidden")


def _delete_section(ctx: Context, chosen, message, table, info) -> None:
    """Pick and confirm together: the checkpoint to delete (the one chosen above, or another) and
    its name typed again, side by side."""
    with section("Delete", elem_id="checkpoints-delete"):
        with gr.Row():
            target = _following(ctx, chosen, "checkpoint to delete", "checkpoints-delete-name")
            confirm = Textbox(label="type its name to confirm", elem_id="checkpoints-confirm")
        button = gr.Button("Delete", variant="stop", elem_id="checkpoints-delete-go")
    def delete_checkpoint(checkpoint: str, confirm: str):
        """Delete a stored checkpoint; confirm is its name typed again. Returns the message and the
        store's table (then the page's fields, cleared)."""
        return (*delete(checkpoint, confirm, store=ctx.store), gr.update(value=None))
    clicked(button, delete_checkpoint, [target, confirm], [message, table, info, chosen, confirm, target],
            "delete_checkpoint", note=0)


def _store_table(ctx: Context):
    """The store's table, with its Refresh and Download buttons."""
    # wide: its cells wrap so every column is in view (a long name folds instead of pushing the
    # last columns past the edge)
    table = gr.Dataframe(rows(ctx.store), headers=COLUMNS, label="the store", interactive=False,
                         wrap=True, column_widths=WIDTHS, elem_id="checkpoints-table")
    with gr.Row():
        refresh = gr.Button("Refresh")
        download = gr.Button("Download the table (CSV, JSON)", elem_id="checkpoints-download")
    table_download = gr.File(label="the store's table", file_count="multiple", interactive=False,
                             visible=False, elem_id="checkpoints-files")
    def store_table():
        """The store as a table: a row per checkpoint."""
        return rows(ctx.store)
    refresh.click(friendly(store_table), None, table, api_name="checkpoints")
    download.click(friendly(lambda: gr.update(value=exports.write_table(
        COLUMNS, rows(ctx.store), "checkpoints", ctx.store, {"details": checkpoints.listing(ctx.store)}),
        visible=True)), None, table_download, api_visibility="private")
    return table


def _import_smollm2_section(ctx: Context, message, table) -> None:
    with section(f"Import SmolLM2-135M, the lab's pretrained model ({SMOLLM2_TAKES})",
                 elem_id="checkpoints-smollm2"):
        with gr.Row():
            smol_layers = Textbox("", label="blocks to keep (1-based, e.g. 1,15,30; blank: all 30)",
                                  elem_id="smollm2-layers")
            smol_name = Textbox("smollm2", label="name", elem_id="smollm2-name")

        def smollm2(layers: str, name: str):
            """Import SmolLM2-135M from its package as a checkpoint, keeping the blocks listed
            (1-based, e.g. "1,15,30"; blank: all 30). Streams the message, then the store's table."""
            yield from import_smollm2(layers, name, store=ctx.store)
        clicked(gr.Button("Import SmolLM2", variant="primary", elem_id="smollm2-import"), smollm2,
                [smol_layers, smol_name], [message, table], "import_smollm2", note=0)


def _import_hf_section(ctx: Context, message, table) -> None:
    """An HF GPT-2 or Llama checkpoint, uploaded or from a folder on the server."""
    with section("Import an HF GPT-2 or Llama checkpoint (upload, or a server folder)"):
        with gr.Row():
            layers = Textbox(label="layers (1-based, e.g. 1,6,12; blank: all)", elem_id="hf-layers")
            new_name = Textbox(label="name", elem_id="gpt2-name")
        upload = File(label="upload config.json + model.safetensors (and the tokenizer's files), or "
                            "one .zip of the folder save_pretrained wrote", file_count="multiple",
                      file_types=[".json", ".safetensors", ".txt", ".jinja", ".zip"], elem_id="gpt2-upload")

        def upload_hf(files: list, layers: str, name: str):
            """Import an uploaded HF GPT-2 or Llama checkpoint (its config.json, model.safetensors
            and tokenizer files, or one .zip of the folder), keeping the layers listed (1-based;
            blank: all). Returns the message and the store's table."""
            return import_hf_upload(files, layers, name, store=ctx.store)
        clicked(gr.Button("Import the upload", elem_id="gpt2-import-upload"), upload_hf,
                [upload, layers, new_name], [message, table], "import_hf_upload", note=0)
        with gr.Row():
            path = Textbox(label="or a directory on the server (config.json + model.safetensors)",
                           info="a folder under LAB_ALLOWED_DIRS", scale=3)

        def folder_hf(folder: str, layers: str, name: str):
            """Import an HF GPT-2 or Llama checkpoint from a folder on the server under
            LAB_ALLOWED_DIRS, keeping the layers listed (1-based; blank: all). Returns the message
            and the store's table."""
            return import_hf(folder, layers, name, store=ctx.store)
        clicked(gr.Button("Import the folder"), folder_hf, [path, layers, new_name], [message, table],
                "import_hf", note=0)
