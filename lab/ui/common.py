"""Pieces every tab shares: the checkpoint cache, error handling, decoder fields from the registry."""
from __future__ import annotations

import functools
import hashlib
import html
import inspect
import json
import logging
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
from gradio.context import get_blocks_context

from lab.ui import work
from lab.ui.pulse import Pulse
from lab.ui.fields import Dropdown, refuse
from lab.storage import checkpoints, exports, health
from lab.inputs import tasks
from lab.evaluation.attention_maps import VENDOR_DIR
from lab.config import ConfigError
from lab.errors import LabError, out_of_memory

log = logging.getLogger("lab.ui")


@dataclass
class Context:
    """What the tabs share: where the store and corpus are, and the dropdowns to keep fresh."""
    store: str | None = None
    data_dir: str | None = None
    checkpoint_dropdowns: list = field(default_factory=list)
    # how each dropdown is filled: "one" (the first name), "two" (two to compare: see picked),
    # "task" (the first two trained for its task, and no other) or "blank" (nothing chosen: an optional choice such as the parent of a fine-tune)
    fill: dict = field(default_factory=dict)
    task: dict = field(default_factory=dict)    # a dropdown's task: what it picks first
    only: dict = field(default_factory=dict)    # whether it offers only its task's checkpoints
    empty_notes: list = field(default_factory=list)     # shown while the store is empty
    pulse: Pulse = field(default_factory=Pulse)         # what the page's one pulse refreshes
    opening: Pulse = field(default_factory=Pulse)       # what a page asks for as it opens: one event
    _inside: object = None

    @property
    def inside(self) -> gr.State:
        """Inside the model's last results ({kind: {checkpoint: result}}), for Compare's report: one
        gr.State, made where it is first asked for (inside the page's Blocks)."""
        if self._inside is None:
            self._inside = gr.State({})
        return self._inside

    def every(self, fn, inputs: list, outputs: list) -> None:
        """Refresh `outputs` with fn(*inputs) on the page's one pulse, when the store or a job
        changed (lab/ui/pulse.py): fn returns gr.skip() for what has not changed."""
        self.pulse.every(fn, inputs, outputs)

    def empty_note(self, what_to_do: str) -> gr.Markdown:
        """A line at the top of a tab saying what to do first, shown only on an empty store."""
        note = gr.Markdown(f"**The store has no checkpoints yet.** {what_to_do}",
                           visible=not self.checkpoint_names(), elem_classes=["lab-empty-note"])
        self.empty_notes.append(note)
        return note

    def checkpoint_names(self) -> list[str]:
        return checkpoints.names(self.store)

    def add_dropdown(self, dd, fill: str = "one", task: str | None = None, only: bool = False):
        self.checkpoint_dropdowns.append(dd)
        self.fill[id(dd)] = fill
        self.task[id(dd)] = task
        self.only[id(dd)] = only
        return dd

    def offered(self, dd, names: list[str], metas: dict) -> list[str]:
        """The names a dropdown offers: its task's checkpoints only, when it takes no other."""
        task = self.task.get(id(dd))
        return [n for n in names if offers(metas.get(n), task)] if self.only.get(id(dd)) else names

    def picked(self, names: list[str], fill: str, task: str | None = None, metas: dict | None = None):
        """What a dropdown picks for the person: the first one or two names, those trained for
        its task first (a caption tab does not open on a birth-place model); two to compare are a
        model trained from scratch and a fine-tuned one when the store holds both (the lab's
        main comparison), else the first two; a damaged one never comes first. metas:
        {name: checkpoint_meta}, read once by the caller (read here when not given)."""
        metas = read_metas(names, self.store) if metas is None else metas
        names = sorted(names, key=lambda n: metas.get(n) is None)
        if fill == "task":
            return [n for n in names if offers(metas.get(n), task)][:2]
        if task:        # its task's first; for one, the lab's own (trained here) before imports
            names = sorted(names, key=lambda n: (not offers(metas.get(n), task), fill == "one" and (
                metas.get(n) or {}).get("source") == "import"))
        if fill != "two":
            return names[0] if names else None
        return self.scratch_and_tuned(names, task, metas) or _alike(names, metas) or names[:2]

    @staticmethod
    def scratch_and_tuned(names: list[str], task: str | None, metas: dict) -> list[str] | None:
        """The Getting started panel's pair when the store holds it, else the first model trained
        from scratch and the first fine-tuned one trained on the same task and data (for `task`),
        or None when the store holds no such pair."""
        mine = [n for n in names if task is None or offers(metas.get(n), task)]
        if all(n in mine for n in GETTING_STARTED_PAIR):
            return list(GETTING_STARTED_PAIR)
        source = lambda n: (metas.get(n) or {}).get("source")       # noqa: E731
        for scratch in (n for n in mine if source(n) == "scratch"):
            tuned = next((n for n in mine if source(n) == "finetune"
                          and trained_on(metas.get(n)) == trained_on(metas.get(scratch))), None)
            if tuned:
                return [scratch, tuned]
        return None

    def refreshed(self, dd, names: list[str], pick, current, metas: dict | None = None):
        """(update, the lab's pick now) for a checkpoint dropdown when the store's names change.
        pick: what the lab last picked for it; current: its value. One the person changed keeps
        their choice, unless it names a checkpoint gone from the store. One the person has not
        touched gets a new pick when its pick is incomplete (too few checkpoints of its task, or
        one gone), and two to compare move to a scratch model and a fine-tune once the store
        holds both; otherwise the value stays."""
        fill = self.fill[id(dd)]
        if fill == "blank":
            return gr.update(choices=[""] + names), pick
        metas = read_metas(names, self.store) if metas is None else metas
        names = self.offered(dd, names, metas)
        values, mine = _as_list(current), _as_list(pick)
        if values != mine and all(v in names for v in values):
            return gr.update(choices=names), pick                    # the person's choice
        task = self.task[id(dd)]
        on_task = [n for n in mine if n in names and (task is None or offers(metas.get(n), task))]
        incomplete = len(on_task) < (1 if fill == "one" else 2) or len(on_task) < len(mine)
        pair = fill == "two" and self.scratch_and_tuned(names, task, metas)
        gone = any(v not in names for v in values)
        if not (gone or incomplete or pair and self.scratch_and_tuned(mine, task, metas) is None):
            return gr.update(choices=names), pick
        new = self.picked(names, fill, task, metas)
        return gr.update(choices=names, value=new), new


def _as_list(value) -> list:
    """A dropdown's value as a list of names (none, one, or a multiselect's)."""
    if value in (None, ""):
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


# the checkpoints the Getting started panel makes: a model trained from scratch, a fine-tune
GETTING_STARTED_PAIR = ("quick-scratch", "smollm2-captions")


def trained_on(meta: dict | None) -> str:
    """What a checkpoint was trained on, as a key two of the same task and data share: its task
    and the task settings its run recorded that name its data (tasks.data_settings; all of them
    for a task whose plugin is not installed here)."""
    task = tasks.task_of(meta)
    recorded = ((meta or {}).get("train") or {}).get("settings", {}).get("task", {})
    try:
        data = tasks.data_settings(task)
    except LabError:
        data = list(recorded)
    return json.dumps([task, {k: v for k, v in recorded.items() if k in data}], sort_keys=True)


def _alike(names: list[str], metas: dict) -> list[str] | None:
    """The first two names (in order) trained on the same task and data, or None."""
    keys = [trained_on(metas.get(n)) for n in names]
    return next(([a, b] for i, a in enumerate(names) for j, b in enumerate(names)
                 if i < j and keys[i] == keys[j]), None)


def read_metas(names: list[str], store=None) -> dict:
    """{name: checkpoint_meta} for names, each config read once."""
    return {n: checkpoint_meta(n, store) for n in names}


def offers(meta: dict | None, view: str) -> bool:
    """Whether a tab's view ("generate", "answers": its task's plugin lists the view in its
    `tabs`, lab/inputs/tasks.py) or a task's name takes a checkpoint; False for one that cannot be read."""
    if meta is None:
        return False
    task = tasks.task_of(meta)
    try:
        return view == task or view in tasks.meta(task).get("tabs", ())
    except LabError:            # a task whose plugin is not installed here
        return False


def checkpoint_meta(name: str, store=None) -> dict | None:
    """A stored checkpoint's provenance (source, parent, task, ...); None for a damaged one (its
    weights' verdict is kept, so this is cheap once made)."""
    try:
        return checkpoints.info(name, store)
    except (LabError, OSError, ValueError):
        return None


class ModelCache:
    """Loaded checkpoints, shared by all users (read-only in eval mode), least recently used out.
    Concurrent requests for the same checkpoint wait for one load instead of each loading it."""

    def __init__(self, size: int = 4):
        self.size, self._items, self._lock = size, OrderedDict(), threading.Lock()
        self._loading: dict[tuple, threading.Lock] = {}

    def get(self, name: str, store=None):
        if not isinstance(name, str):
            raise ConfigError(f"a checkpoint is chosen by its name, got {name!r}")
        path = checkpoints.resolve(name, store)
        try:                       # a write to the weights or the config loads (and checks) anew
            key = (str(path), *health.fingerprint(path))
        except OSError:
            key = (str(path), 0)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._lock:
                if key in self._items:
                    return self._items[key]
            ck = checkpoints.load(name, store)
            with self._lock:
                self._items[key] = ck
                self._loading.pop(key, None)
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        return ck


LOADED = ModelCache()      # the checkpoints loaded for the tabs (not the model registry)


def _refusal(e: Exception) -> gr.Error:
    """A person's mistake (a LabError) is one line on the page and one in the log; anything else
    is a bug: its traceback goes to the log, and the page says so."""
    if isinstance(e, LabError):
        return refuse(str(e))
    log.exception("unexpected error in a UI callback")
    return gr.Error(f"Something went wrong ({type(e).__name__}: {e}). The server log has the details.",
                    duration=None, print_exception=False)


def refused_note(message: str) -> str:
    """A refusal said where the action's result would have been (it stays until the next action)."""
    return f"<div class='lab-refused' role='alert'><b>Not done:</b> {html.escape(message)}</div>"


def _said(e: Exception, note: tuple | None):
    """The outputs that say a person's mistake in an action's note (note = (index, outputs) or
    (index, outputs, indices to empty)); anything else raised. Memory the machine did not have is
    said as a mistake (ask for less), not a bug."""
    ran_out = out_of_memory(e)
    if ran_out is not None:
        log.warning("out of memory: %s: %s", type(e).__name__, e)
        e = ran_out
    if note is None or not isinstance(e, LabError):
        raise _refusal(e) from None
    log.warning("refused: %s", e)
    values = [gr.skip()] * note[1]
    for i in (note[2] if len(note) > 2 else ()):
        values[i] = None
    values[note[0]] = refused_note(str(e))
    return tuple(values)


def friendly(fn, note: tuple | None = None):
    """Turn every exception into one gr.Error message: no traceback reaches the browser. The call
    (each step of a generator) counts as in flight until it returns: the app waits for it before
    it exits. note=(index, outputs): a page-only action whose output `index` of `outputs` is its
    note; a person's mistake is said there (refused_note), the other outputs left as they are."""
    said = functools.partial(_said, note=note)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*args, **kwargs):
            steps = fn(*args, **kwargs)
            try:
                while True:
                    with work.call():
                        value = next(steps, _END)
                    if value is _END:
                        return
                    yield value
            except gr.Error:
                raise
            except Exception as e:
                yield said(e)
            finally:
                steps.close()           # closed early (its caller left, or Stop): its work stops
        return gen

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with work.call():
                return fn(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as e:
            return said(e)
    return wrapper


_END = object()      # a generator's end, as next() returns it


def clicked(button, fn, inputs, outputs: list, api_name: str, note: int, event: str = "click",
            cleared: tuple = ()) -> None:
    """The button (or a field's `event`) runs fn for the page, a refusal said in its note
    (outputs[note]) until the next action, the outputs at `cleared` emptied with it (a download
    of an earlier action must not stand beside it); scripts call the same fn as `api_name`, a refusal
    raised to them (gradio_client's AppError). The endpoint belongs to a button never shown, so
    both keep one schema; it is registered first, so the page's own (private) event does not
    take its name."""
    gr.Button(visible=False).click(friendly(fn), inputs, outputs, api_name=api_name)
    getattr(button, event)(friendly(fn, note=(note, len(outputs), cleared)), inputs, outputs,
                           api_visibility="private", api_name=f"{api_name}_from_the_page")


def only_changed(values, sent: list | None) -> tuple[list, list]:
    """A timer's answer with each value the page already has (its digest in `sent`, what the last
    answer sent) turned into gr.skip(): a plot sent again is drawn again, every tick. Returns
    the answer and the digests to keep for the next."""
    digests = [hashlib.sha1(json.dumps(v, default=_whole).encode()).hexdigest() for v in values]
    sent = sent if isinstance(sent, list) and len(sent) == len(digests) else [None] * len(digests)
    return [gr.skip() if d == old else v for v, d, old in zip(values, digests, sent)], digests


def _whole(value):
    """A value json cannot write, whole (a figure or a table as its JSON, an array as its list)."""
    for whole in ("to_json", "tolist"):
        if callable(getattr(value, whole, None)):
            return getattr(value, whole)()
    return repr(value)


def api(fn, api_name: str, returns: str) -> None:
    """An endpoint for scripts (no button of its own): fn's typed parameters and docstring are its
    schema and description; `returns` names what it returns (Gradio's own label is "1st")."""
    dependency = gr.api(friendly(fn), api_name=api_name)
    for output in get_blocks_context().fns[dependency["id"]].outputs:
        output.label = returns


def section(label: str, elem_id: str | None = None) -> gr.Accordion:
    """A section of a tab, open when the page loads (a person may fold it). Gradio mounts a closed
    accordion's fields only when it first opens and, once the page has settled, sets them to their
    first values again, wiping what a person typed meanwhile (seen: a typed block selection lost
    to the SmolLM2 import's default, 1 try in 12 on a busy machine); so no section starts closed."""
    return gr.Accordion(label, open=True, elem_id=elem_id)


def stop_button(elem_id: str) -> gr.Button:
    """The Stop button of a long action, beside the button that starts it; shown while it runs."""
    return gr.Button("Stop", variant="stop", visible=False, elem_id=elem_id, scale=0, min_width=90)


RUNNING = "running"      # what a request's kept record holds until it ends (see `stoppable`)


def stoppable(go: gr.Button, stop: gr.Button, start, reads, writes: list, after):
    """`stop` shows while the request `start()` makes (go's click) runs; pressing it cancels the
    request, whose work stops at its next step. When the request ends (done, failed or stopped),
    the components `writes` get after(the value of `reads`): what the page says of a request
    stopped before its end (gr.skip() each to leave them). Returns the request's event."""
    # registered before the request: in Gradio 6.31 a quick update registered after a streaming
    # one on the same trigger did not show
    go.click(lambda: gr.update(visible=True), None, stop, queue=False, api_visibility="private")
    running = start()
    hidden = gr.update(visible=False)
    # `.then` runs after a stop too, on the last values the request sent
    running.then(lambda *values: [hidden, *after(*values)], reads, [stop, *writes], queue=False,
                 api_visibility="private")
    # a request refused before its first update (no checkpoint chosen): Stop goes too
    running.failure(lambda: hidden, None, stop, queue=False, api_visibility="private")
    stop.click(lambda: hidden, None, stop, cancels=[running], queue=False, api_visibility="private")
    return running


def unfinished(kept, said: str) -> list:
    """After a request whose record is kept in a state (RUNNING until its end): one stopped (or
    failed) before its end leaves `said` in place of its progress line, and no record."""
    return [said, None] if kept == RUNNING else [gr.skip(), gr.skip()]


def need(value, what: str):
    if value is None or (isinstance(value, (str, list)) and not value):
        raise ConfigError(f"choose {what} first")
    return value


EMPTY_STORE = ("the store has no checkpoints yet: import SmolLM2 in the Checkpoints tab, or train "
               "one in the Train tab")


def need_checkpoint(value, what: str, store=None) -> str:
    """A chosen checkpoint name; none chosen on an empty store says where to get one."""
    if (value is None or value == "") and not checkpoints.names(store):
        raise ConfigError(EMPTY_STORE)
    return need(value, what)


def whole(value, name: str, lo: int, hi: int) -> int:
    """A whole number from a form field or an API call, within [lo, hi], or one message."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    if isinstance(value, str):
        value = value.strip()
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name} must be a whole number from {lo} to {hi}, got {value!r}") from None
    if not math.isfinite(number) or not number.is_integer() or not lo <= number <= hi:
        raise ConfigError(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else int(number)


def text(value, name: str, limit: int = 4000) -> str:
    """Text from a form field or an API call, bounded before anything tokenizes it."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise ConfigError(f"{name} is {len(value)} characters; at most {limit} are accepted")
    return value


def names_list(value, what: str, limit: int = 8, store=None) -> list[str]:
    """One or more checkpoint names from a multiselect or an API call."""
    if isinstance(value, str):
        value = [value]
    if not value:
        raise ConfigError(EMPTY_STORE if not checkpoints.names(store) else f"choose {what} first")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what}: expected a list of checkpoint names, got {value!r}")
    if len(value) > limit:
        raise ConfigError(f"{what}: at most {limit} at once, got {len(value)}")
    return value


def outputs(updates: list):
    """A handler's value for a list of output components built at start-up (their number comes
    from the registries): Gradio takes one output's value bare, several as a list."""
    return updates[0] if len(updates) == 1 else updates


def beside_dropdown(ctx: Context, elem_id: str, label: str = "side by side with (optional)") -> gr.Dropdown:
    """An optional second checkpoint to show beside the first: any stored one, none picked."""
    return ctx.add_dropdown(Dropdown([""] + ctx.checkpoint_names(), value="", label=label,
                                     allow_custom_value=True, elem_id=elem_id), "blank")


def checkpoint_dropdown(ctx: Context, label: str, multiselect: bool = False, task: str | None = None,
                        **kw) -> gr.Dropdown:
    """The stored checkpoints `task` takes (a view such as "generate" that tasks offer their
    checkpoints to, or a task's name; only=False: every one, those first), the first one (or two,
    multiselect) picked (fill="task": the first two of the task's, or none)."""
    names = ctx.checkpoint_names()
    metas = read_metas(names, ctx.store)
    fill = kw.pop("fill", None) or ("two" if multiselect else "one")
    only = kw.pop("only", task is not None)
    if only:
        names = [n for n in names if offers(metas.get(n), task)]
    # custom values: a script reaches checkpoints made after the page was built (checked on use)
    dd = Dropdown(names, value=ctx.picked(names, fill, task, metas), label=label,
                  multiselect=multiselect, allow_custom_value=True, **kw)
    return ctx.add_dropdown(dd, fill, task, only)


def table_files(table, stem: str, store=None, about: dict | None = None) -> list[str] | None:
    """A table shown on the page (a Dataframe's value) as CSV and JSON downloads."""
    if table is None:
        return None
    headers = list(table.columns) if hasattr(table, "columns") else table["headers"]
    rows = table.values.tolist() if hasattr(table, "values") else table["data"]
    return exports.write_table(headers, rows, stem, store, about)


def asset_url() -> str:
    return f"/gradio_api/file={Path(VENDOR_DIR).resolve()}"


def unit_of(names, store=None) -> str:
    """What a comparison's rows are called: their task's word (its `unit`: captions, texts, ...)
    while the checkpoints share a task (an import follows the others), else texts."""
    metas = [checkpoints.info(name, store) for name in names]
    named = {tasks.task_of(m) for m in metas if m.get("task")} or {tasks.task_of(None)}
    return tasks.unit(named.pop()) if len(named) == 1 else "texts"
