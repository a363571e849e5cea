"""Train tab: a form built from the settings' descriptions (presets, every plugin choice and
hyperparameter) that queues a job for the background worker, and the job view (jobs_view.py)."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import typing
from dataclasses import dataclass

import gradio as gr

from lab.config import FAMILY_KEYS, ConfigError, ModelConfig, TrainConfig, describe_settings
from lab.errors import LabError
from lab.inputs import tokenizers
from lab.presets import FINE_TUNES, configs, description, get as get_preset, names as preset_names
from lab.registry import REGISTRIES, TASKS, load_plugins
from lab.settings import base_type, choices_of
from lab.storage import checkpoints
from lab.ui.common import Context, api, friendly, outputs, section
from lab.ui.common import text as bounded_text
from lab.ui.fields import Checkbox, Dropdown, Number, Radio, Textbox
from lab.ui.jobs_view import job_choices, jobs_section
from lab.worker import jobs

log = logging.getLogger("lab.ui")

# the form's sections: every described setting but the vocabulary (a new model's is its
# tokenizer's) and the plugin settings, which follow their plugin's dropdown
MODEL_FIELDS = [f.name for f in dataclasses.fields(ModelConfig) if f.name not in ("vocab_size", "settings")]
TRAIN_FIELDS = [f.name for f in dataclasses.fields(TrainConfig) if f.name != "settings"]
SETTING_KINDS = ModelConfig.PLUGIN_KINDS + TrainConfig.PLUGIN_KINDS     # the task's follow its field
_DESCRIBED = {f.name: f for cls in (ModelConfig, TrainConfig) for f in dataclasses.fields(cls)}


@functools.cache
def setting_fields() -> tuple[tuple[str, str, dataclasses.Field], ...]:
    """Every plugin setting the form shows: (kind, plugin, field), read from the registries (a new
    plugin's settings appear without UI code). Each is shown only while its plugin is chosen."""
    load_plugins()
    out = []
    for kind in SETTING_KINDS:
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


def setting_values(model: dict, train: dict | None = None) -> list:
    """The settings' form values for a model config and a train config (as dicts): the chosen
    plugins' own values, the defaults for the others; without a train config, the task's
    settings are left as they are (gr.skip())."""
    out = []
    for kind, plugin, f in setting_fields():
        cfg = train if kind in TrainConfig.PLUGIN_KINDS else model
        out.append(gr.skip() if cfg is None else cfg["settings"].get(kind, {}).get(f.name, f.default)
                   if cfg.get(kind) == plugin else f.default)
    return out


def form_values(model_cfg: ModelConfig, train_cfg: TrainConfig) -> list:
    """The form's values, in form_fields() order, for a pair of configs."""
    m = model_cfg.to_dict()
    return ([m[f] for f in MODEL_FIELDS] + [getattr(train_cfg, f) for f in TRAIN_FIELDS]
            + setting_values(m, train_cfg.to_dict()))


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
        common["elem_classes"] = [*common.get("elem_classes", []), "lab-tick"]
        return Checkbox(value, label=label, info=hint, min_width=150, **common)
    if kind is str:
        return Textbox(value, label=label, info=hint, **common)
    return Number(value, label=label, info=hint, **({"step": 1} if kind is int else {}), **common)


def _setting_component(kind: str, plugin: str, f: dataclasses.Field, visible: bool, value,
                       store=None):
    common = dict(visible=visible, elem_id=f"train-{kind}-{f.name}", elem_classes=["lab-plugin-setting"])
    named = f.metadata.get("store_choices")
    if named:          # the names the store holds (a dataset, ...): a list that follows the store
        dd = Dropdown(_store_choices(named, store), value=value, label=f"{kind}.{f.name}",
                      info=info(f, f"{plugin}: "), allow_custom_value=True, **common)
        dd.lab_store_choices = named
        return dd
    typ = typing.get_type_hints(REGISTRIES[kind].get(plugin).settings)[f.name]
    return _component(f"{kind}.{f.name}", f, typ, value, prefix=f"{plugin}: ", **common)


def _store_choices(named, store=None) -> list[tuple[str, str]]:
    """Blank (nothing chosen, saying when the store holds none yet), then the names a setting's
    `store_choices` finds in the store, as (label, value) choices."""
    try:
        names = list(named(store))
    except Exception:           # a store it cannot read now, or a plugin's bug: the blank choice alone
        log.warning("a setting's store_choices failed; offering none", exc_info=True)
        names = []
    return [("(none in the store yet)" if not names else "(none chosen)", "")] + [(n, n) for n in names]


def _follow_store_choices(ctx: Context, inputs: list) -> None:
    """The settings offered from the store (store_choices) take what it holds on each tick of
    the page's pulse; unchanged lists are left as they are."""
    for dd in inputs:
        named = getattr(dd, "lab_store_choices", None)
        if named is None:
            continue
        shown = gr.State(_store_choices(named, ctx.store))

        def refresh(seen, named=named):
            now = _store_choices(named, ctx.store)
            return (gr.skip(), gr.skip()) if now == seen else (gr.update(choices=now), now)
        ctx.every(refresh, [shown], [dd, shown])


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
        for key in [k for k in named if k in MODEL_FIELDS or k.split(".")[0] in ModelConfig.PLUGIN_KINDS]:
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
    name = bounded_text(name, "checkpoint name", 200)
    if not name.strip():
        raise ConfigError("give the new checkpoint a name (letters, digits, '.', '_', '-')")
    preset = bounded_text(preset, "preset", 200)
    parent = bounded_text(parent, "parent", 200)
    if preset and preset not in preset_names():
        raise ConfigError(f"unknown preset {preset!r}; choose one of: {', '.join(preset_names())}"[:300])
    model_cfg, train_cfg, changed = configs(preset or None, named=settings)
    if parent and changed:
        raise ConfigError(f"a fine-tune keeps {parent}'s architecture; these settings cannot "
                          f"change it: {', '.join(changed)}"[:300])
    job_id = jobs.submit(name, None if parent else model_cfg, train_cfg,
                         parent=parent or None, preset=preset or None, store=store)
    return job_id


def start(name, preset, parent, *values, store=None):
    """The form's Start: its fields as named settings, queued as start_job queues them."""
    parent = bounded_text(parent, "parent", 200).strip()
    job_id = start_job(name, preset, parent, form_settings(values, parent), store=store)
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
        m, t = get_preset(preset) if preset in preset_names() else (ModelConfig(), TrainConfig())
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
    return [v if isinstance(v, dict) and v.get("__type__") == "update" else
            gr.update(value=v, interactive=interactive)
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
        + [v if isinstance(v, dict) and v.get("__type__") == "update" else gr.update(value=v)
           for v in setting_values(m)]


def latest_active(store=None) -> list:
    """On page load: the job list, the running (or newest) job chosen, and the id of the job
    that runs or waits (the form then shows its settings: reattached), else gr.skip()."""
    rows = jobs.list_jobs(store)
    active = [j for j in rows if j["status"] == "running"] + [j for j in rows if j["status"] == "queued"]
    pick = (active or rows or [None])[0]
    chosen = gr.update(choices=job_choices(store), value=str(pick["id"]) if pick else None)
    return [chosen, active[0]["id"] if active else gr.skip()]


def reattached(job_id, store=None) -> list:
    """The form as job `job_id` was filled when it started (latest_active found it running or
    waiting as the page opened); every field as it is when it has gone since."""
    n_form = 3 + len(MODEL_FIELDS) + len(TRAIN_FIELDS) + len(setting_fields()) + 1
    if job_id is None:
        return [gr.skip()] * n_form
    try:
        return job_form(jobs.get(job_id, store), store)
    except LabError as e:         # the job or its parent was deleted since: the form stays as it was
        return [gr.skip()] * (n_form - 1) + [f"Job {job_id}'s settings cannot be shown: {e}"]


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
    preset_shown = gr.update(value=preset, info=description(preset))
    model_values, setting_updates = model_values[:len(MODEL_FIELDS)], model_values[len(MODEL_FIELDS):]
    train_cfg = TrainConfig.from_dict(spec["train"]).to_dict()
    setting_updates = [v if k in ModelConfig.PLUGIN_KINDS else own
                       for v, own, (k, _, _) in zip(setting_updates, setting_values({}, train_cfg),
                                                    setting_fields())]
    return ([job["name"], preset_shown, parent] + model_values + train_values + setting_updates
            + [f"The form shows the settings of job {job['id']} ({job['name']}) as it started; its "
               f"status is under Jobs below. {note}".strip()])


@dataclass
class Form:
    """The Train form's inputs: the model section with the chosen plugins' settings after their
    dropdowns, the training section."""
    preset: object
    name: object
    parent: object
    parent_note: object
    model: list
    settings: list
    train: list

    def values(self) -> list:
        """The inputs after name, preset and parent, in form_fields() order."""
        return [*self.model, *self.train, *self.settings]


def _form(ctx: Context) -> Form:
    with gr.Row():
        preset = Dropdown([""] + preset_names(), value="tiny", label="preset",
                          info=description("tiny"), elem_id="train-preset")
        name = Textbox("", label="checkpoint name", elem_id="train-name", placeholder="my-model")
        parent = Dropdown([""] + ctx.checkpoint_names(), value="", label="fine-tune from (optional)",
                          info="a stored checkpoint; its architecture and tokenizer are kept",
                          elem_id="train-parent", allow_custom_value=True)
    ctx.add_dropdown(parent, "blank")
    parent_note = gr.Markdown(elem_id="train-parent-note")
    m0, t0 = get_preset("tiny")
    values0 = setting_values(m0.to_dict(), t0.to_dict())
    setting_inputs: list = []
    with section("model"):
        with gr.Row():
            model_inputs = _fields(ModelConfig, MODEL_FIELDS, m0, values0, setting_inputs, ctx.store)
    with gr.Accordion("training", open=True):
        with gr.Row():
            train_inputs = _fields(TrainConfig, TRAIN_FIELDS, t0, values0, setting_inputs, ctx.store)
    for comp, f in zip(model_inputs + train_inputs, MODEL_FIELDS + TRAIN_FIELDS):
        comp.elem_id = f"train-{f}"
    _follow_store_choices(ctx, setting_inputs)
    return Form(preset, name, parent, parent_note, model_inputs, setting_inputs, train_inputs)


def _fields(cls, names: list[str], cfg, values0: list, setting_inputs: list, store=None) -> list:
    """A section's inputs, each plugin's settings right after the field that chooses it (they go
    to setting_inputs, in setting_fields() order: model kinds first, then the task's)."""
    inputs = []
    for f in names:
        inputs.append(_field_component(cls, f, getattr(cfg, f)))
        for (kind, plugin, sf), value in zip(setting_fields(), values0):
            if kind == f:
                setting_inputs.append(_setting_component(kind, plugin, sf, getattr(cfg, kind) == plugin,
                                                         value, store))
    return inputs


def fill(p, chosen_parent):
    """A preset fills the form, then its note, the parent and the parent's note. A fine-tune's
    preset (FINE_TUNES) keeps a chosen parent, whose model section stays; any other preset makes
    a new model, so it clears the parent and gives the model section back, the preset's."""
    n_model = len(MODEL_FIELDS) + len(setting_fields())
    if p not in preset_names():
        return [gr.skip()] * (n_model + len(TRAIN_FIELDS)) + [gr.update(info=""), gr.skip(), gr.skip()]
    m, t = get_preset(p)
    values = form_values(m, t)
    said = [gr.update(info=description(p))]
    if chosen_parent and p in FINE_TUNES:
        values = [gr.skip() if f not in TRAIN_FIELDS and f.split(".")[0] not in TrainConfig.PLUGIN_KINDS
                  or f == "tokenizer" else v for f, v in zip(form_fields(), values)]
        return values + said + [gr.skip(), gr.skip()]
    if chosen_parent:
        unlocked = [v if isinstance(v, dict) and v.get("__type__") == "update"
                    else gr.update(value=v, interactive=True) for v in values]
        return unlocked + said + [None, f"Preset **{p}** trains a new model, so the parent "
                                        f"{chosen_parent} is cleared; choose a parent again to fine-tune it."]
    return values + said + [gr.skip(), gr.skip()]


def _wire_form(ctx: Context, form: Form) -> None:
    """A preset fills the form, a parent locks the model section, a plugin shows its settings."""
    model, settings = form.model, form.settings
    form.preset.input(fill, [form.preset, form.parent],
                      model + form.train + settings + [form.preset, form.parent, form.parent_note],
                      api_visibility="private")
    fields = [form.train[TRAIN_FIELDS.index(f)] for f in ("train_layers", "tokenizer")]
    form.parent.input(friendly(lambda p, pr: parent_view(p, pr, ctx.store)), [form.parent, form.preset],
                      model + settings + fields + [form.parent_note], api_visibility="private")
    for kind in SETTING_KINDS:     # a plugin's settings show while it is chosen
        shown = [c for c, (k, _, _) in zip(settings, setting_fields()) if k == kind]
        field = model[MODEL_FIELDS.index(kind)] if kind in MODEL_FIELDS \
            else form.train[TRAIN_FIELDS.index(kind)]
        if shown:
            field.change(functools.partial(_visibility, kind), field, shown,
                         api_visibility="private", show_progress="hidden")
    model[0].input(family_parts, model[0], model + settings, api_visibility="private")


def _wire_api(ctx: Context) -> None:
    """/start_job and /settings: what the form does, with settings by name."""
    def start_job_api(name: str, preset: str = "", parent: str = "",
                      settings: dict | None = None) -> dict:
        """Queue a training job. settings: one JSON object keyed by setting name, KIND.SETTING for
        a plugin's (/settings lists them); a setting not named keeps the preset's value. Returns
        {"job": its id, "message": what the page says}."""
        job_id = start_job(name, preset, parent, settings or {}, store=ctx.store)
        return {"job": job_id, "message": f"Queued job {job_id} ({name})."}
    api(start_job_api, "start_job", returns="the job queued")
    api(describe_settings, "settings", returns="every setting")


def build(ctx: Context):
    ctx.empty_note("Train one from scratch with a preset below (`quick` writes readable captions; "
                   "*Getting started* above says how long it takes on this machine), or import "
                   "SmolLM2 in the Checkpoints tab to fine-tune it here.")
    gr.Markdown("Start a training job. It runs in the background worker (on a GPU when there is one); "
                "closing the browser never stops it, and reopening the page re-attaches.")
    for task in TASKS.names():          # a task's own section (its data): `train_view`
        view = TASKS.get(task).meta.get("train_view")
        if view:
            importlib.import_module(view).build(ctx)
    form = _form(ctx)
    _wire_form(ctx, form)
    with gr.Row():
        go = gr.Button("Start training", variant="primary", elem_id="train-start", scale=3)
        to_sweep = gr.Button("Sweep these settings…", elem_id="train-to-sweep", scale=1)
    message = gr.Markdown(elem_id="train-message", label="message", show_label=False)
    job = jobs_section(ctx, message)

    def start_or_refuse(*args):
        """A refused value stays written under the button (a toast alone is easy to miss)."""
        try:
            return start(*args, store=ctx.store)
        except LabError as e:
            return gr.skip(), f"**Not queued:** {e}"
    go.click(friendly(start_or_refuse), [form.name, form.preset, form.parent, *form.values()],
             [job, message], api_visibility="private")
    _wire_api(ctx)
    # the form re-attaches to a running or waiting job as an event of its own, sent only when the
    # page opens on one: its ~70 fields are most of what a page's opening would update, and each
    # output of an event costs the browser a walk of the page's layout, changed or not
    reattach = gr.State(None)
    reattach.change(friendly(lambda job_id: reattached(job_id, ctx.store)), reattach,
                    [form.name, form.preset, form.parent, *form.values(), form.parent_note],
                    api_visibility="private", show_progress="hidden")
    return [job, reattach], lambda: latest_active(ctx.store), (to_sweep, [form.preset, form.parent,
                                                                          *form.values()], message)
