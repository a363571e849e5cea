"""The Train tab's section for the text task's data: import a corpus (a browser upload, or a folder
under LAB_ALLOWED_DIRS), see the store's datasets, delete one with confirmation. The task registers
it (`train_view` in its registration); lab/ui/train.py builds it above the form."""
from __future__ import annotations

from pathlib import Path

import gradio as gr

from lab.config import ConfigError
from lab.storage import store as lab_store
from lab.ui.common import Context, api, friendly, need, section, text
from lab.ui.fields import Checkbox, Dropdown, File, Number, Textbox
from plugins.tasks.text import corpora

MAX_UPLOAD_BYTES = 2 * 10 ** 9        # a corpus upload (the web app takes files up to 2 GB)
COLUMNS = ["name", "texts (train / dev / test)", "characters", "tokens", "text column", "source",
           "first text"]
WIDTHS = ["12%", "13%", "11%", "14%", "9%", "13%", "28%"]     # every header whole at 1400 px


def rows(store=None) -> list[list]:
    out = []
    for m in corpora.listing(store):
        s = m["splits"]
        tokens = "; ".join(f"{c['tokenizer']} {sum(v for k, v in c.items() if k != 'tokenizer'):,}"
                           for c in m.get("tokens", {}).values()) or "not yet tokenized"
        out.append([m["name"], " / ".join(f"{s[k]['rows']:,}" if k in s else "-"
                                          for k in ("train", "dev", "test")),
                    f"{sum(v['characters'] for v in s.values()):,}", tokens, m["text_column"],
                    m["source"], (m["preview"] or [""])[0][:80]])
    return out


def _options(name, column, fraction) -> tuple[str, str | None, float]:
    name = corpora.check_name(need(text(name, "name", 200).strip(), "a name for the dataset"))
    column = text(column, "text column", 200).strip() or None
    if fraction is None or not 0 < float(fraction) < 1:
        raise ConfigError(f"dev fraction must be between 0 and 1 (e.g. 0.05), got {fraction}")
    return name, column, float(fraction)


def _done(meta: dict, store) -> tuple:
    said = (f"Imported **{meta['name']}**: " + ", ".join(f"{k} {v['rows']:,} texts"
                                                        for k, v in meta["splits"].items())
            + f" (text column `{meta['text_column']}`). Train on it: choose task **text** below and "
              f"write **{meta['name']}** in task.dataset.")
    names = corpora.names(store)
    return said, rows(store), gr.update(choices=names, value=None)


def import_upload(upload, name, column, fraction, store=None):
    name, column, fraction = _options(name, column, fraction)
    if not upload:
        raise ConfigError("upload a corpus: a .txt (one text a line), .jsonl, .json, .csv, .tsv or "
                          ".parquet file")
    path = Path(upload if isinstance(upload, str) else getattr(upload, "name", upload))
    size = path.stat().st_size
    if size > MAX_UPLOAD_BYTES:
        raise ConfigError(f"the upload is {size / 1e9:.2f} GB, more than a corpus upload may hold "
                          f"({MAX_UPLOAD_BYTES / 1e9:.0f} GB); import a larger one from a server folder "
                          f"or with `python -m lab data import`")
    meta = corpora.import_source(path, name, column, fraction, store=store, label=path.name)
    return _done(meta, store)


def import_folder(folder, name, column, fraction, store=None):
    name, column, fraction = _options(name, column, fraction)
    path = lab_store.allowed_source(text(folder, "folder", 4096), "import a corpus")
    return _done(corpora.import_source(path, name, column, fraction, store=store), store)


def delete(name, sure, store=None):
    name = need(text(name, "dataset", 200), "the dataset to delete")
    corpora.path_of(name, store)
    if not sure:
        raise ConfigError(f"tick the box to confirm: deleting dataset {name!r} cannot be undone")
    corpora.delete(name, store)
    return f"Deleted dataset **{name}**.", rows(store), gr.update(choices=corpora.names(store), value=None)


def _actions(store):
    """The section's three actions as the API names and describes them."""
    def upload_dataset(file: str, name: str, column: str, dev_fraction: float):
        """Import an uploaded corpus as a dataset: one text a line (.txt), or a column of a .jsonl,
        .json, .csv, .tsv or .parquet file (blank column: `text`, else the first text column), a
        dev split cut by the seeded fraction unless it has one. Returns the message and the table."""
        return import_upload(file, name, column, dev_fraction, store=store)

    def folder_dataset(path: str, name: str, column: str, dev_fraction: float):
        """Import a corpus file or save_to_disk folder on the server (under LAB_ALLOWED_DIRS) as a
        dataset, as import_dataset_upload does. Returns the message and the table."""
        return import_folder(path, name, column, dev_fraction, store=store)

    def delete_dataset(dataset: str, confirm: bool):
        """Delete a dataset (confirm: true). Returns the message and the table."""
        return delete(dataset, confirm, store=store)
    return upload_dataset, folder_dataset, delete_dataset


def build(ctx: Context) -> None:
    with section("your own text data (the text task)", elem_id="text-data"):
        gr.Markdown("Import a corpus to train on: one text a line in a .txt, or a column of a .jsonl, "
                    ".json, .csv, .tsv or .parquet file (the column `text` unless you name another). "
                    "A dev split is cut from it by a seeded fraction unless it has one. Then choose "
                    "task **text** in the training section and the dataset in the task.dataset list.")
        with gr.Row():
            name = Textbox(label="dataset name", elem_id="data-name", placeholder="my-corpus")
            column = Textbox(label="text column (blank: text, else the first text column)",
                             elem_id="data-column")
            fraction = Number(corpora.DEV_FRACTION, label="dev fraction", minimum=0.0, maximum=1.0,
                              elem_id="data-dev-fraction")
        upload = File(label=f"upload a corpus (at most {MAX_UPLOAD_BYTES / 1e9:.0f} GB)",
                      file_types=list(corpora.FORMATS), elem_id="data-upload")
        with gr.Row():
            go = gr.Button("Import the upload", variant="primary", elem_id="data-import-upload")
            folder = Textbox(label="or a file or save_to_disk folder on the server",
                             info="under LAB_ALLOWED_DIRS", scale=3, elem_id="data-folder")
            go_folder = gr.Button("Import from the server", elem_id="data-import-folder")
        message = gr.Markdown(elem_id="data-message", label="message", show_label=False)
        table = gr.Dataframe(rows(ctx.store), headers=COLUMNS, interactive=False, wrap=True,
                             column_widths=WIDTHS, elem_id="data-table", label="datasets")
        with gr.Row():
            # custom values: a script names a dataset made after the page was built (checked on use)
            chosen = Dropdown(corpora.names(ctx.store), value=None, label="delete a dataset",
                              elem_id="data-delete-name", allow_custom_value=True)
            sure = Checkbox(False, label="yes, delete it", elem_id="data-delete-sure")
            gone = gr.Button("Delete", variant="stop", elem_id="data-delete")
    upload_dataset, folder_dataset, delete_dataset = _actions(ctx.store)
    go.click(friendly(upload_dataset), [upload, name, column, fraction], [message, table, chosen],
             api_name="import_dataset_upload")
    go_folder.click(friendly(folder_dataset), [folder, name, column, fraction], [message, table, chosen],
                    api_name="import_dataset")
    gone.click(friendly(delete_dataset), [chosen, sure], [message, table, chosen], api_name="delete_dataset")
    _follow(ctx, table, chosen)

    def datasets_api() -> list[dict]:
        """Every dataset in the store: its source, text column, splits, preview and tokens."""
        return corpora.listing(ctx.store)
    api(datasets_api, "datasets", returns="the datasets")


def _follow(ctx: Context, table, chosen) -> None:
    """The table and the delete dropdown follow the store on each tick of the page's pulse: a run
    that tokenizes a dataset, or an import from the CLI, shows without a reload."""
    seen = gr.State(None)

    def refresh(last):
        now = rows(ctx.store)
        if now == last:
            return gr.skip(), gr.skip(), last
        return now, gr.update(choices=corpora.names(ctx.store)), now
    ctx.every(refresh, [seen], [table, chosen, seen])
