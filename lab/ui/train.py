"""Train tab: a form (presets, every plugin choice and hyperparameter) that queues a job for the
background worker, and a live view of any job: progress with ETA, loss curves, log tail, the
checkpoint it keeps. Jobs live in the durable ledger, so a reload re-attaches."""
from __future__ import annotations

import dataclasses
import functools
import html
import json
import time
import typing
from pathlib import Path

import gradio as gr

from lab.ui.fields import Checkbox, Dropdown, Number, Radio, Textbox
from lab.storage import checkpoints
from lab.worker import jobs
from lab.inputs import tokenizers
from lab.storage import store as lab_store
from lab.config import FAMILY_KEYS, ConfigError, ModelConfig, TrainConfig, describe_settings
from lab.settings import base_type, choices_of
from lab.errors import LabError
from lab.presets import PRESETS, configs, get as get_preset
from lab.registry import REGISTRIES, TASKS, load_plugins
from lab.training.runs import run_dir_for
from lab.training.progress import format_duration, phase_text
from lab.ui.common import Context, friendly, outputs, whole
from lab.ui.common import text as bounded_text

# the form's sections: every described setting but the vocabulary (a new model's is its
# tokenizer's) and the plugin settings, which follow their plugin's dropdown
MODEL_FIELDS = [f.name for f in dataclasses.fields(ModelConfig) if f.name not in ("vocab_size", "settings")]
TRAIN_FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]
_DESCRIBED = {f.name: f for cls in (ModelConfig, TrainConfig) for f in dataclasses.fields(cls)}


@functools.cache
def setting_fields() -> tuple[tuple[str, str, dataclasses.Field], ...]:
    """Every plugin setting the form shows: (kind, plugin, field), read from the registries (a new
    plugin's settings appear without UI code). Each is shown only while its plugin is chosen."""
    load_plugins()
    out = []
    for kind in ModelConfig.PLUGIN_KINDS:
        reg = REGISTRIES[kind]
        for name in reg.names():
            cls = reg.get(name).settings
            out += [(kind, name, f) for f in dataclasses.fields(cls)] if cls else []
    return tuple(out)


def form_fields() -> list[str]:
    """The form's inputs after name, preset and parent, in order: the model section, the
    training section, then every plugin setting as KIND.SETTING (only the chosen plugins' count).
    The page's own order: an API client names its settings instead (start_job)."""
    return MODEL_FIELDS + TRAIN_FIELDS + [f"{k}.{f.name}" for k, _, f in setting_fields()]


def setting_values(model: dict) -> list:
    """The settings' form values for a model config (as a dict): the chosen plugins' own values,
    the defaults for the others."""
    return [model["settings"].get(kind, {}).get(f.name, f.default) if model.get(kind) == plugin
            else f.default for kind, plugin, f in setting_fields()]


def form_values(model_cfg: ModelConfig, train_cfg: TrainConfig) -> list:
    """The form's values, in form_fields() order, for a pair of configs."""
    m = model_cfg.to_dict()
    return ([m[f] for f in MODEL_FIELDS] + [getattr(train_cfg, f) for f in TRAIN_FIELDS]
            + setting_values(m))


def info(f: dataclasses.Field, prefix: str = "") -> str:
    """A field's hint: its help and what blank means, from its one description."""
    blank = f.metadata.get("blank")
    zero = " (0 or blank)" if _zero_is_blank(f) else ""
    return prefix + f.metadata.get("help", "") + (f"; blank{zero}: {blank}" if blank else "")


def _zero_is_blank(f: dataclasses.Field) -> bool:
    """An optional number that cannot be 0: the form's empty Number comes back as 0."""
    return f.default is None and "blank" in f.metadata and f.metadata.get("min", 0) > 0


def _component(label: str, f: dataclasses.Field, typ, value, **common):
    """The input a described setting gets: its choices, a tick box, text or a number."""
    choices = choices_of(f)
    if choices is not None:
        many = callable(f.metadata["choices"]) and getattr(f.metadata["choices"], "plugin_kind", None)
        widget = Dropdown if many or len(choices) > 4 else Radio
        return widget(choices, value=value, label=label, info=info(f, common.pop("prefix", "")), **common)
    kind, hint = base_type(typ), info(f, common.pop("prefix", ""))
    if kind is bool:
        return Checkbox(value, label=label, info=hint, min_width=150, **common)
    if kind is str:
        return Textbox(value, label=label, info=hint, **common)
    return Number(value, label=label, info=hint, **({"step": 1} if kind is int else {}), **common)


def _setting_component(kind: str, plugin: str, f: dataclasses.Field, visible: bool, value):
    typ = typing.get_type_hints(REGISTRIES[kind].get(plugin).settings)[f.name]
    return _component(f"{kind}.{f.name}", f, typ, value, prefix=f"{plugin}: ", visible=visible,
                      elem_id=f"train-{kind}-{f.name}", elem_classes=["lab-plugin-setting"])


def _field_component(cls, name, value):
    if name == "objective":             # each task declares its own: offered as one list
        load_plugins()
        objectives = [o for t in REGISTRIES["task"].names()
                      for o in REGISTRIES["task"].get(t).meta["objectives"]]
        return Dropdown([""] + list(dict.fromkeys(objectives)), value=value, label=name,
                        info=info(_DESCRIBED[name]))
    return _component(name, _DESCRIBED[name], typing.get_type_hints(cls)[name], value)


def form_settings(values, parent: str = "") -> dict:
    """The form's inputs (form_fields() order) as named settings, read as the form means them: an
    empty field is blank, and an empty optional Number that comes back as 0 too. A fine-tune
    keeps its parent's architecture (the model section only shows it) and its tokenizer (its
    field is locked with nothing chosen); only the chosen plugins' settings count."""
    given = dict(zip(form_fields(), values))
    named = {}
    for key in MODEL_FIELDS + TRAIN_FIELDS:
        f, v = _DESCRIBED[key], given[key]
        named[key] = None if v == "" or (v == 0 and _zero_is_blank(f)) else v
    for kind, plugin, f in setting_fields():
        v = given[f"{kind}.{f.name}"]
        if named.get(kind) == plugin:
            blank = v in ("", None) or (v == 0 and f.default is None and f.metadata.get("min", 0) > 0)
            named[f"{kind}.{f.name}"] = f.default if blank else v
    if parent:
        for key in [k for k in named if k in MODEL_FIELDS or "." in k]:
            del named[key]
        if named.get("tokenizer") is None:
            del named["tokenizer"]
    elif named.get("tokenizer") is None:
        *rest, last = choices_of(_DESCRIBED["tokenizer"])
        raise ConfigError(f"choose a tokenizer for a new model: {', '.join(rest)} or {last}")
    return named


def start_job(name, preset, parent, settings: dict, store=None):
    """Queue a training job: a new model from `preset` (or a fine-tune of `parent`), with
    `settings` keyed by setting name (`KIND.SETTING` for a plugin's); a setting not named keeps
    the preset's value. A fine-tune's architecture is its parent's: a model setting is refused."""
    name = bounded_text(name, "checkpoint name", 200).strip()
    if not name:
        raise ConfigError("give the new checkpoint a name (letters, digits, '.', '_', '-')")
    preset = bounded_text(preset, "preset", 200).strip()
    parent = bounded_text(parent, "parent", 200).strip()
    if preset and preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of: {', '.join(sorted(PRESETS))}"[:300])
    model_cfg, train_cfg, changed = configs(preset or None, named=settings)
    if parent and changed:
        raise ConfigError(f"a fine-tune keeps {parent}'s architecture; these settings cannot "
                          f"change it: {', '.join(changed)}"[:300])
    job_id = jobs.submit(name, None if parent else model_cfg.to_dict(), train_cfg.to_dict(),
                         parent=parent or None, preset=preset or None, store=store)
    return job_id


def start(name, preset, parent, *values, store=None):
    """The form's Start: its fields as named settings, queued as start_job queues them."""
    parent = bounded_text(parent, "parent", 200).strip()
    job_id = start_job(name, preset, parent, form_settings(values, parent), store=store)
    name = bounded_text(name, "checkpoint name", 200).strip()
    return gr.update(choices=job_choices(store), value=str(job_id)), f"Queued job {job_id} ({name})."


def sweep_settings(preset, parent, *values) -> tuple[str, str, str, str]:
    """The Train form as the start of a sweep: (preset, parent, one KEY=VALUE line per setting
    that differs from the preset's, the split to score on), checked as a job would check them. A
    fine-tune keeps its parent's architecture, so only training settings are carried."""
    parent = bounded_text(parent, "parent", 200).strip()
    model_cfg, train_cfg, _ = configs(preset or None, named=form_settings(values, parent))
    m0, t0 = configs(preset or None)[:2]
    lines = [] if parent else _changed(m0.to_dict(), model_cfg.to_dict())
    lines += _changed(t0.to_dict(), train_cfg.to_dict())
    return preset or "", parent, "\n".join(lines), TASKS.get(train_cfg.task).meta["score_split"]


def _changed(before: dict, after: dict, prefix: str = "") -> list[str]:
    """KEY=VALUE for every value of `after` that differs from `before` (plugin settings as
    KIND.SETTING)."""
    out = []
    for k, v in after.items():
        if k == "settings":
            for kind, sets in (v or {}).items():
                out += _changed((before.get("settings") or {}).get(kind, {}), sets, f"{kind}.")
        elif before.get(k) != v:
            out.append(f"{prefix}{k}={'' if v is None else str(v).lower() if isinstance(v, bool) else v}")
    return out


def parent_view(parent, preset, store=None) -> list:
    """Choosing a parent fills the model section from it and locks it, and the tokenizer field
    with nothing chosen (a fine-tune keeps its parent's architecture and tokenizer); clearing it
    gives both back to the preset. The model section's updates, then train_layers' hint, the
    tokenizer field's and the note."""
    parent = bounded_text(parent, "parent", 200).strip()
    if not parent:
        m, t = get_preset(preset) if preset in PRESETS else (ModelConfig(), TrainConfig())
        return (_model_updates(m.to_dict(), interactive=True)
                + [gr.update(info="'all' or 1-based blocks, e.g. 1,3"),
                   gr.update(value=t.tokenizer, interactive=True, info=info(_DESCRIBED["tokenizer"])), ""])
    m = ModelConfig.from_dict(checkpoints.info(parent, store)["model"]).to_dict()
    n = m["n_layer"]
    return (_model_updates(m, interactive=False)
            + [gr.update(info=f"'all', or some of {parent}'s blocks 1 to {n}, e.g. "
                              f"{','.join(str(i) for i in range(max(1, n - 1), n + 1))}"),
               _kept_tokenizer(parent, store) or gr.update(value=None, interactive=False),
               f"Fine-tuning **{parent}** ({m['model']}, {n} x {m['n_embd']}, {m['n_head']} heads): "
               f"its architecture and tokenizer are kept, so the model section shows them and "
               f"cannot be changed."])


def _kept_tokenizer(name: str, store=None):
    """The tokenizer field for a run that keeps checkpoint `name`'s tokenizer (a fine-tune of it,
    or its resume): locked, nothing chosen, naming it; None when `name` cannot be read."""
    try:
        path = checkpoints.resolve(name, store)
        kind = tokenizers.check_files(path)["kind"]
        vocab = checkpoints.read_config(path)[0].vocab_size
    except (LabError, OSError):
        return None
    return gr.update(value=None, interactive=False,
                     info=f"kept from {name}: its own tokenizer ({kind}, {vocab:,} tokens)")


def _model_updates(m: dict, interactive: bool) -> list:
    """The model section and the plugin settings showing a model config (a dict)."""
    return [gr.update(value=v, interactive=interactive)
            for v in [m[f] for f in MODEL_FIELDS] + setting_values(m)]


def _visibility(kind: str, chosen: str) -> list:
    """Show the settings of the plugin chosen for `kind`, hide the others'."""
    return outputs([gr.update(visible=plugin == chosen) for k, plugin, _ in setting_fields() if k == kind])


def family_parts(model: str) -> list:
    """Choosing a family fills the parts it decides with its own (any may be changed after)."""
    m = ModelConfig(model=model).to_dict() if model in REGISTRIES["model"] else None
    if m is None:
        return [gr.skip()] * (len(MODEL_FIELDS) + len(setting_fields()))
    return [gr.update(value=m[f]) if f in m and f in FAMILY_KEYS else gr.skip() for f in MODEL_FIELDS] \
        + [gr.update(value=v) for v in setting_values(m)]


def job_choices(store=None) -> list[tuple[str, str]]:
    return [(f"{j['id']}: {j['name']} ({j['status']})", str(j["id"])) for j in jobs.list_jobs(store)]


def progress_html(job: dict) -> str:
    """The bar, and a line saying what the job does now (training, evaluating N dev captions,
    saving), with its ETA (evaluations counted) and how long ago it last reported."""
    p = job["progress"] or {}
    status = job["status"]
    frac = p["step"] / p["total_steps"] if p.get("total_steps") else 0.0
    text = {"queued": "queued: waiting for the worker"}.get(status, status)
    event = p.get("event")
    if event in ("step", "progress") and status == "running":
        doing = phase_text(p) if event == "progress" else f"training, loss {p['train_loss']:.3f}"
        text = (f"{doing} — epoch {p['epoch']}, step {p['step']}/{p['total_steps']}, "
                f"elapsed {format_duration(p['elapsed_s'])}, ETA {format_duration(p['eta_s'])}")
    elif event == "scoring":
        text = f"{status}: training ended; scoring {html.escape(p['what'])}"
    elif event == "scored":
        text = f"{status}: {html.escape(p['summary'])}"
    elif event == "final_dev":
        text = f"{status}: all {p['final_dev_captions']:,} dev captions, perplexity {p['final_dev_perplexity']:.2f}"
    elif event == "eval":
        where = f"step {p['step']}" if p.get("mid_epoch") else f"epoch {p['epoch']}"
        text = f"{status}: {where} dev perplexity {p['dev_perplexity']:.2f}"
    elif event in ("data", None) and status == "running":      # nothing reported yet: loading
        text = "running: loading the data and the model"
    elif event == "start" and status == "running":
        text = f"running: training on {p['device']}, the first step under way"
    elif status in ("stopped", "interrupted"):
        text = stopped_text(status, p)
    if status == "running" and p.get("time"):
        text += f" (updated {format_duration(max(0, time.time() - p['time']))} ago)"
    if status == "done":
        frac = 1.0
    if job["error"]:
        text += f" — {html.escape(job['error'])}"
    return (f"<div class='lab-progress' data-status='{status}'><div class='bar' style='width:{100 * frac:.1f}%'>"
            f"</div></div><div class='lab-progress-text'>{text}</div>")


def stopped_text(status: str, p: dict) -> str:
    """Where a stopped (or interrupted) run stands and how to go on, said in the status line."""
    if p.get("event") == "stopped":
        where = f"at epoch {p['epoch']}, step {p['step']} ({p.get('reason') or 'stopped'})"
        after = ("its state is saved: Resume goes on from there" if p.get("saved")
                 else "nothing was saved: Resume starts it again")
        return f"{status} {where}; {after}"
    if not p or p.get("event") in ("data", None):
        return f"{status} before its first step"
    return f"{status} at step {p.get('step', '?')}: Resume goes on from its last save"


class _Curve:
    """A run's metrics.jsonl read incrementally: each 2-second poll parses only the new lines."""

    def __init__(self):
        self.inode, self.offset, self.steps, self.train, self.dev_steps, self.dev = None, 0, [], [], [], []

    def update(self, path: Path) -> "_Curve":
        st = path.stat() if path.exists() else None
        size, inode = (st.st_size, st.st_ino) if st else (0, None)
        if inode != self.inode or size < self.offset:      # a new file: start afresh
            self.__init__()
            self.inode = inode
        if size > self.offset:
            with open(path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(size - self.offset)
            complete = chunk[:chunk.rfind(b"\n") + 1]      # a line being written waits
            self.offset += len(complete)
            for line in complete.decode(errors="replace").splitlines():
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if ev.get("event") == "step":
                    self.steps.append(ev["step"]); self.train.append(ev["train_loss"])
                elif ev.get("event") == "eval":
                    self.dev_steps.append(ev["step"]); self.dev.append(ev["dev_loss"])
        return self


_CURVES: dict[Path, _Curve] = {}


def curves(job: dict, store=None):
    import plotly.graph_objects as go
    path = run_dir_for(job["name"], store) / "metrics.jsonl"
    c = _CURVES.setdefault(path, _Curve()).update(path)
    steps, train, dev_steps, dev = c.steps, c.train, c.dev_steps, c.dev
    fig = go.Figure()
    fig.add_scatter(x=steps, y=train, name="train loss", mode="lines+markers",   # a first point shows
                    marker=dict(size=4))
    fig.add_scatter(x=dev_steps, y=dev, name="dev loss", mode="lines+markers")
    if not steps:
        every = job["spec"]["train"].get("log_every", 20)
        fig.add_annotation(text=f"the first training loss is plotted at step {every}", showarrow=False,
                           x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(height=300, margin=dict(l=40, r=10, t=30, b=30), xaxis_title="step",
                      yaxis_title="loss", title=f"job {job['id']}: {job['name']}",
                      # transparent, mid-grey text and grid: readable in the light and dark themes
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      font=dict(color="#8a8f98"))
    fig.update_xaxes(gridcolor="rgba(128,128,128,0.25)")
    fig.update_yaxes(gridcolor="rgba(128,128,128,0.25)")
    return fig


def log_tail(job: dict, store=None, lines: int = 15, max_bytes: int = 65536) -> str:
    path = lab_store.log_path(job["id"], store)
    if not path.exists():
        return "(no log yet: the job waits for the worker)" if job["status"] == "queued" else ""
    with open(path, "rb") as f:           # the end of the file only: logs of long runs grow
        f.seek(max(0, path.stat().st_size - max_bytes))
        return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])


def written(job: dict, store=None) -> str:
    if job["name"] not in checkpoints.names(store):
        if (run_dir_for(job["name"], store) / "last").is_dir():
            return ("No checkpoint yet: the run stopped before its first dev evaluation and saved "
                    "where it stood. Resume goes on from there.")
        return "No checkpoint yet (one is written after each epoch whose dev score improves)."
    try:
        m = checkpoints.info(job["name"], store)["metrics"]
    except checkpoints.CheckpointError as e:
        return f"Checkpoint **{job['name']}** is damaged: {e}"
    ppl = f", dev perplexity {m['dev_perplexity']:.2f}" if "dev_perplexity" in m else ""
    if "final_dev_perplexity" in m:
        ppl += f" ({m['final_dev_perplexity']:.2f} on all {m['final_dev_captions']:,} dev captions)"
    return f"Checkpoint **{job['name']}**: best epoch {m.get('epoch', '?')}{ppl}. It is a choice in the other tabs."


def job_id_of(value) -> int:
    """A job as the dropdown or an API call gives it: its id, as a number or text."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ConfigError("select a job first")
    return whole(value, "job id", 1, 2 ** 63 - 1)


def view(job_id, store=None):
    if not job_id:
        return "<div class='lab-progress-text'>No job selected.</div>", None, "", ""
    job = jobs.get(job_id_of(job_id), store)
    return progress_html(job), curves(job, store), log_tail(job, store), written(job, store)


def poll(job_id, shown_choices, store=None):
    """The timer's view: the job's progress, and the job list's labels when a status changed. With
    no job chosen, a job started elsewhere (the getting-started panel, a script) is chosen once it
    runs or waits, so the page never says 'no job' while one is under way."""
    choices = [list(c) for c in job_choices(store)]
    labels = gr.update(choices=choices) if choices != shown_choices else gr.skip()
    if not job_id:
        active = [j for j in jobs.list_jobs(store) if j["status"] in ("running", "queued")]
        if active:
            job_id = str(active[-1]["id"])           # the oldest under way: the one running first
            labels = gr.update(choices=choices, value=job_id)
    return (*view(job_id, store), labels, choices)


def stop(job_id, mode, store=None):
    job = jobs.request_stop(job_id_of(job_id), mode, store)
    return f"Job {job['id']}: stop requested ({mode.replace('_', ' ')})." if job["status"] == "running" \
        else f"Job {job['id']} is {job['status']}."


def resume(job_id, store=None):
    new = jobs.resume(job_id_of(job_id), store)
    return gr.update(choices=job_choices(store), value=str(new)), f"Queued job {new}, resuming job {job_id}."


def latest_active(store=None) -> list:
    """On page load: the job list, the running (or newest) job chosen; while that job runs or waits,
    the form shows its own settings, as it was filled when the job started."""
    rows = jobs.list_jobs(store)
    active = [j for j in rows if j["status"] == "running"] + [j for j in rows if j["status"] == "queued"]
    pick = (active or rows or [None])[0]
    chosen = gr.update(choices=job_choices(store), value=str(pick["id"]) if pick else None)
    n_form = 3 + len(MODEL_FIELDS) + len(TRAIN_FIELDS) + len(setting_fields()) + 1
    try:
        return [chosen] + job_form(active[0], store) if active else [chosen] + [gr.skip()] * n_form
    except LabError as e:         # its parent was deleted since: the form stays as it was
        return [chosen] + [gr.skip()] * (n_form - 1) + [f"Job {active[0]['id']}'s settings cannot be "
                                                         f"shown: {e}"]


def job_form(job: dict, store=None) -> list:
    """A job's own settings as the form's values: name, preset, parent, the model section (the
    parent's, locked, for a fine-tune), the training section, train_layers' hint and the note."""
    spec = job["spec"]
    parent = spec.get("parent") or ""
    train_values = [spec["train"].get(f) for f in TRAIN_FIELDS]
    n_model = len(MODEL_FIELDS) + len(setting_fields())
    if parent:
        model = parent_view(parent, spec.get("preset"), store)
        model_values, hint, note = model[:n_model], model[-3], model[-1]
        train_values[TRAIN_FIELDS.index("tokenizer")] = model[-2]
    elif spec.get("model"):
        model_values = _model_updates(ModelConfig.from_dict(spec["model"]).to_dict(), interactive=True)
        hint, note = None, ""
    else:                           # a resumed run: its model and tokenizer are the checkpoint's
        model_values, hint, note = [gr.skip()] * n_model, None, ""
        kept = _kept_tokenizer(job["name"], store)
        if kept is not None:
            train_values[TRAIN_FIELDS.index("tokenizer")] = kept
    if isinstance(hint, dict) and hint.get("__type__") == "update":    # the parent's blocks
        i = TRAIN_FIELDS.index("train_layers")
        train_values[i] = {**hint, "value": train_values[i]}
    preset = spec.get("preset") or ""
    preset_shown = gr.update(value=preset, info=PRESETS[preset][1] if preset in PRESETS else "")
    model_values, setting_updates = model_values[:len(MODEL_FIELDS)], model_values[len(MODEL_FIELDS):]
    return ([job["name"], preset_shown, parent] + model_values + train_values + setting_updates
            + [f"The form shows the settings of job {job['id']} ({job['name']}) as it started; its "
               f"status is under Jobs below. {note}".strip()])


def build(ctx: Context):
    ctx.empty_note("Train one from scratch with a preset below (`quick` writes readable captions in "
                   "about 5 minutes), or import SmolLM2 in the Checkpoints tab to fine-tune it here.")
    gr.Markdown("Start a training job. It runs in the background worker (on a GPU when there is one); "
                "closing the browser never stops it, and reopening the page re-attaches.")
    with gr.Row():
        preset = Dropdown([""] + sorted(PRESETS), value="tiny", label="preset",
                          info=PRESETS["tiny"][1], elem_id="train-preset")
        name = Textbox("", label="checkpoint name", elem_id="train-name", placeholder="my-model")
        parent = Dropdown([""] + ctx.checkpoint_names(), value="", label="fine-tune from (optional)",
                          info="a stored checkpoint; its architecture and tokenizer are kept",
                          elem_id="train-parent", allow_custom_value=True)
    ctx.add_dropdown(parent, "blank")
    parent_note = gr.Markdown(elem_id="train-parent-note")
    m0, t0 = get_preset("tiny")
    values0 = setting_values(m0.to_dict())
    with gr.Accordion("model", open=False):
        with gr.Row():
            model_inputs, setting_inputs = [], []
            for f in MODEL_FIELDS:          # a plugin's settings sit right after its dropdown
                model_inputs.append(_field_component(ModelConfig, f, getattr(m0, f)))
                for (kind, plugin, sf), value in zip(setting_fields(), values0):
                    if kind == f:
                        setting_inputs.append(_setting_component(
                            kind, plugin, sf, getattr(m0, kind) == plugin, value))
    with gr.Accordion("training", open=True):
        with gr.Row():
            train_inputs = [_field_component(TrainConfig, f, getattr(t0, f)) for f in TRAIN_FIELDS]
    for comp, f in zip(model_inputs + train_inputs, MODEL_FIELDS + TRAIN_FIELDS):
        comp.elem_id = f"train-{f}"

    def fill(p, chosen_parent):
        """A preset fills the form; with a parent chosen, the model section stays the parent's."""
        n_model = len(MODEL_FIELDS) + len(setting_fields())
        if p not in PRESETS:
            return [gr.skip()] * (n_model + len(TRAIN_FIELDS)) + [gr.update(info="")]
        m, t = get_preset(p)
        values = form_values(m, t)
        if chosen_parent:
            values = [gr.skip() if f not in TRAIN_FIELDS or f == "tokenizer" else v
                      for f, v in zip(form_fields(), values)]
        return values + [gr.update(info=PRESETS[p][1])]
    preset.input(fill, [preset, parent], model_inputs + train_inputs + setting_inputs + [preset],
                 api_visibility="private")
    layers_field = train_inputs[TRAIN_FIELDS.index("train_layers")]
    tokenizer_field = train_inputs[TRAIN_FIELDS.index("tokenizer")]
    parent.input(friendly(lambda p, pr: parent_view(p, pr, ctx.store)), [parent, preset],
                 model_inputs + setting_inputs + [layers_field, tokenizer_field, parent_note],
                 api_visibility="private")
    for kind in ModelConfig.PLUGIN_KINDS:   # a plugin's settings show while it is chosen
        shown = [c for c, (k, _, _) in zip(setting_inputs, setting_fields()) if k == kind]
        if shown:
            model_inputs[MODEL_FIELDS.index(kind)].change(
                functools.partial(_visibility, kind), model_inputs[MODEL_FIELDS.index(kind)], shown,
                api_visibility="private", show_progress="hidden")
    model_inputs[0].input(family_parts, model_inputs[0], model_inputs + setting_inputs,
                          api_visibility="private")

    with gr.Row():
        go = gr.Button("Start training", variant="primary", elem_id="train-start", scale=3)
        to_sweep = gr.Button("Sweep these settings…", elem_id="train-to-sweep", scale=1)
    message = gr.Markdown(elem_id="train-message")
    gr.Markdown("### Jobs")
    with gr.Row():
        job = Dropdown([], label="job", elem_id="train-job", scale=3,
                          allow_custom_value=True)    # a script names any job, made before or after
        stop_now = gr.Button("Stop now", elem_id="train-stop-now")
        stop_after = gr.Button("Stop after the next checkpoint")
        resume_btn = gr.Button("Resume", elem_id="train-resume")
    progress = gr.HTML(elem_id="train-progress")
    plot = gr.Plot(label="loss curves")
    written_md = gr.Markdown(elem_id="train-written")
    # no line numbers: a tail's line 1 is not the log's, and Gradio's gutter drifted from the text
    tail = gr.Code(label="log tail", language=None, interactive=False, show_line_numbers=False)

    def start_or_refuse(*args):
        """A refused value stays written under the button (a toast alone is easy to miss)."""
        try:
            return start(*args, store=ctx.store)
        except LabError as e:
            return gr.skip(), f"**Not queued:** {e}"
    go.click(friendly(start_or_refuse),
             [name, preset, parent, *model_inputs, *train_inputs, *setting_inputs], [job, message],
             api_visibility="private")

    def start_job_api(name: str, preset: str = "", parent: str = "",
                      settings: dict | None = None) -> dict:
        """Queue a training job. settings: one JSON object keyed by setting name, KIND.SETTING for
        a plugin's (/settings lists them); a setting not named keeps the preset's value. Returns
        {"job": its id, "message": what the page says}."""
        job_id = start_job(name, preset, parent, settings or {}, store=ctx.store)
        return {"job": job_id, "message": f"Queued job {job_id} ({str(name).strip()})."}
    gr.api(friendly(start_job_api), api_name="start_job")
    gr.api(friendly(describe_settings), api_name="settings")
    outputs = [progress, plot, tail, written_md]
    show = friendly(lambda j: view(j, ctx.store))
    job.change(show, job, outputs, api_name="job_status")
    shown = gr.State([])
    gr.Timer(2.0).tick(friendly(lambda j, c: poll(j, c, ctx.store)), [job, shown],
                       outputs + [job, shown], api_visibility="private", show_progress="hidden")
    stop_now.click(friendly(lambda j: stop(j, "now", ctx.store)), job, message, api_name="stop_job")
    stop_after.click(friendly(lambda j: stop(j, "after_checkpoint", ctx.store)), job, message,
                     api_name="stop_job_after_checkpoint")
    resume_btn.click(friendly(lambda j: resume(j, ctx.store)), job, [job, message], api_name="resume_job")
    on_load = [job, name, preset, parent, *model_inputs, *train_inputs, *setting_inputs, parent_note]
    form = [preset, parent, *model_inputs, *train_inputs, *setting_inputs]
    return on_load, lambda: latest_active(ctx.store), (to_sweep, form, message)
