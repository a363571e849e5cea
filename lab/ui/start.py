"""Getting started: the lab's three flows for a first visit, as buttons over an empty store.

Import SmolLM2, train a quick model from scratch, fine-tune SmolLM2 on the captions, then compare
the two side by side. Each step says where it stands (done, queued, running with its progress,
failed and why), read from the store and the job ledger, so a reload or a second tab sees the same.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import gradio as gr

from lab.storage import checkpoints
from lab.storage import smollm2
from lab.worker import jobs
from lab.config import ConfigError
from lab.presets import configs
from lab.training import estimate
from lab.training.runs import last_dir
from lab.ui import pulse
from lab.ui.common import GETTING_STARTED_PAIR, Context, friendly
from lab.ui.jobs_view import progress_html

SMOLLM2 = "smollm2"
SCRATCH, FINETUNE = GETTING_STARTED_PAIR
SCRATCH_PRESET, FINETUNE_PRESET = "quick", "smollm2-quick"

INTRO = ("**New here?** These steps take you from an empty lab to a model trained from scratch and "
         "a fine-tuned SmolLM2 side by side{time}. Training jobs queue and run one after another in "
         "the background: start steps 1 to 3 now (or press *Do steps 1-3*), then watch them here or "
         "in the Train tab. Closing the page stops nothing.{busy}")


def _job_for(name: str, store=None) -> dict | None:
    """The newest job writing checkpoint `name`, if any."""
    return next((j for j in jobs.list_jobs(store) if j["name"] == name), None)


def step_status(name: str, store=None) -> str:
    """Where the step that makes checkpoint `name` stands, as a short HTML line."""
    since = pulse.began(store, f"import {name}")         # step 1 is no job: this app imports it
    if since is not None:
        return (f"<span class='lab-step-todo'>importing: reading and de-quantizing the weights "
                f"({time.time() - since:.0f} s so far)</span>")
    job = _job_for(name, store)
    if job is not None and job["status"] in ("queued", "running"):
        return progress_html(job)
    if name in checkpoints.names(store):
        return f"<span class='lab-step-done'>✓ done: checkpoint <b>{name}</b> is in the store</span>"
    if job is None:
        return "<span class='lab-step-todo'>not started</span>"
    return progress_html(job) + ("<div class='lab-progress-text'>Press the button again: it goes on "
                                 "where it stopped, or starts anew if it kept nothing.</div>"
                                 if job["status"] != "done" else "")


def statuses(store=None, compared: bool = False) -> list:
    """Each step's line, and the compare button: highlighted once both checkpoints exist (before,
    pressing it says what is missing). compared: this page has pressed it."""
    ready = all(n in checkpoints.names(store) for n in (SCRATCH, FINETUNE))
    return ([step_status(n, store) for n in (SMOLLM2, SCRATCH, FINETUNE)]
            + [compare_status(store, compared)]
            + [gr.update(variant="primary" if ready and not compared else "secondary")])


def panel_open(store=None, built_open: bool | None = None):
    """On page load: the panel is open on an empty store and while one of its jobs is under way,
    and its lines follow the store only while it is open (the panel's accordion, and whether the
    page holds it open).
    built_open: how the page was built; when that is already right, the panel is left alone (a
    person may have opened or closed it while the page loaded)."""
    busy = any(j["name"] in (SCRATCH, FINETUNE) and j["status"] in ("queued", "running")
               for j in jobs.list_jobs(store))
    want = busy or not checkpoints.names(store)
    return (gr.skip(),) * 2 if want == built_open else (gr.update(open=want), want)


def compare_status(store=None, compared: bool = False) -> str:
    have = checkpoints.names(store)
    missing = [n for n in (SCRATCH, FINETUNE) if n not in have]
    if missing:
        return f"<span class='lab-step-todo'>waits for {' and '.join(missing)}</span>"
    if compared:
        return (f"<span class='lab-step-done'>✓ done: {SCRATCH} and {FINETUNE} side by side in the "
                f"Compare tab below; press again for the same captions</span>")
    return "<span class='lab-step-done'>ready: press the button</span>"


def import_smollm2(store=None) -> str:
    """Step 1; nothing to do when it is already in the store."""
    if SMOLLM2 not in checkpoints.names(store):
        with pulse.under_way(store, f"import {SMOLLM2}"):      # the page follows its line
            smollm2.import_smollm2(SMOLLM2, None, store)
    return f"SmolLM2-135M is in the store as **{SMOLLM2}**."


def _queue(name: str, preset: str, parent: str | None, store=None) -> str:
    if name in checkpoints.names(store):
        return f"**{name}** is already in the store."
    job = _job_for(name, store)
    if job is not None and job["status"] in ("queued", "running"):
        return f"Job {job['id']} is already making **{name}**."
    if job is not None and job["status"] in ("stopped", "interrupted", "failed") \
            and last_dir(name, store).is_dir():              # it kept where it stood: go on from there
        return f"Queued job {jobs.resume(job['id'], store)}: {name} goes on where job {job['id']} stopped."
    model_cfg, train_cfg, _ = configs(preset)
    job_id = jobs.submit(name, None if parent else model_cfg, train_cfg,
                         parent=parent, preset=preset, store=store)
    return f"Queued job {job_id}: **{name}** (preset `{preset}`)."


def train_scratch(store=None) -> str:
    return _queue(SCRATCH, SCRATCH_PRESET, None, store)


def finetune(store=None) -> str:
    """Step 3 needs SmolLM2 in the store: it imports it first when it is not there yet."""
    said = [] if SMOLLM2 in checkpoints.names(store) else [import_smollm2(store)]
    return " ".join(said + [_queue(FINETUNE, FINETUNE_PRESET, SMOLLM2, store)])


def all_steps(store=None) -> str:
    """Steps 1-3: the scratch job first, so the worker trains while SmolLM2 is imported."""
    return " ".join([train_scratch(store), finetune(store)])


def ready_to_compare(store=None) -> list[str]:
    have = checkpoints.names(store)
    missing = [n for n in (SCRATCH, FINETUNE) if n not in have]
    if missing:
        raise ConfigError(f"{' and '.join(missing)} not in the store yet: run steps 2 and 3 first "
                          f"and wait until they are done")
    return [SCRATCH, FINETUNE]


# each step's action, endpoint and what the endpoint does
API_STEPS = [
    (import_smollm2, "start_import", "Getting started, step 1: import SmolLM2-135M as the checkpoint "
                                     "`smollm2` (nothing to do when it is there). Returns the message."),
    (train_scratch, "start_scratch", f"Getting started, step 2: queue the scratch model (preset "
                                     f"`{SCRATCH_PRESET}`). Returns the message."),
    (finetune, "start_finetune", f"Getting started, step 3: queue SmolLM2's fine-tune (preset "
                                 f"`{FINETUNE_PRESET}`), importing it first if needed. Returns the message."),
]

# what the message says while each step's button works
PENDING = [f"Importing SmolLM2-135M as **{SMOLLM2}**: reading and de-quantizing the weights ({smollm2.TAKES}) …",
           "Queuing the scratch job …",
           f"Queuing SmolLM2's fine-tune (importing SmolLM2 first when **{SMOLLM2}** is not in the store: "
           f"{smollm2.TAKES}) …"]

STEPS = [
    ("1. **Import SmolLM2-135M**, the lab's pretrained model", "Import SmolLM2"),
    (f"2. **Train a small model from scratch** (preset `{SCRATCH_PRESET}`: 2 layers, width 128, one "
     f"epoch over 12,000 training captions{{time}})", "Train from scratch"),
    (f"3. **Fine-tune SmolLM2 on the captions** (preset `{FINETUNE_PRESET}`: all 30 blocks, one pass "
     f"over 800 captions{{time}}; it starts once step 2 is done)", "Fine-tune SmolLM2"),
    ("4. **Compare the two side by side** in the Compare tab", "Compare them")]


# Before a run here has timed a preset: how long it took in the lab's own measured first visit on
# an idle 2-core CPU (docs/results.md, `make newcomer`: the scratch job 34 s -> 209 s, the
# fine-tune 209 s -> 355 s)
REFERENCE_S = {SCRATCH_PRESET: 175, FINETUNE_PRESET: 146}


def minutes_text(seconds: float) -> str:
    return f"about {max(1, round(seconds / 60))} minute{'s' if round(seconds / 60) > 1 else ''}"


def preset_seconds(preset: str, store=None) -> float | None:
    """The preset's run at the speed its last run on this machine measured (None before one)."""
    speed = estimate.measured(preset, store)
    return None if speed is None else estimate.run_seconds(speed, configs(preset)[1])


def panel_texts(scratch_s: float | None, finetune_s: float | None, busy: str) -> list[str]:
    """The intro and each step's text: the times this machine measured (or that the first run
    here measures them), and what a busy machine means."""
    both = scratch_s is not None and finetune_s is not None
    time_ = f", in {minutes_text(scratch_s + finetune_s)} at the speed this machine measured" if both else ""
    intro = INTRO.format(time=time_, busy=f" Now {busy}." if busy else "")
    times = [None, scratch_s, finetune_s, None]
    presets = [None, SCRATCH_PRESET, FINETUNE_PRESET, None]
    return [intro] + [what.format(time=f"; {minutes_text(t)} here, by its last run" if t is not None
                                  else f"; its first run here measures its time: "
                                       f"{minutes_text(REFERENCE_S[p])} on an idle 2-core CPU when "
                                       f"the lab measured it") if "{time}" in what
                      else what for (what, _), t, p in zip(STEPS, times, presets)]


def texts(store=None) -> list[str]:
    """panel_texts for now: the measured times, and the load (the lab's own jobs' share apart)."""
    return panel_texts(preset_seconds(SCRATCH_PRESET, store), preset_seconds(FINETUNE_PRESET, store),
                       pulse.busy_note(store))


def follow(store=None, compared: bool = False, said: list | None = None) -> list:
    """A tick of the open panel: each step's line and the compare button (statuses), then its
    words (the measured times, and the load, which changes while the page is open) and what the
    page now shows, both left as they are when nothing changed (said: what it shows)."""
    words = texts(store)
    if words == said:
        return statuses(store, compared) + [gr.skip()] * (len(words) + 1)
    return statuses(store, compared) + words_now(store, words)


def words_now(store=None, words: list | None = None) -> list:
    """The panel's words (texts(), unless given), then the same list for what the page shows."""
    words = texts(store) if words is None else words
    return [*words, words]


@dataclass
class Panel:
    """What the app wires: the compare button (it switches to the Compare tab and generates),
    `compared` (this page pressed it), the lines it updates, and the panel (opened or closed as
    each page loads: panel_open)."""
    compare: gr.Button
    compared: gr.State
    shown: list
    accordion: gr.Accordion
    opened: gr.State        # whether the panel is open on this page: its lines follow then
    built_open: bool
    texts: list             # the intro and each step's words: texts() as each page loads
    words_shown: gr.State   # the words the page shows (a tick sends them only when they change)


def build(ctx: Context) -> Panel:
    """The panel and its steps."""
    built_open = not ctx.checkpoint_names()
    with gr.Accordion("Getting started", open=built_open, elem_id="start") as panel:
        words = texts(ctx.store)
        said_texts = [gr.Markdown(words[0])]
        every = gr.Button("Do steps 1-3", elem_id="start-all", variant="primary", size="md")
        said = gr.Markdown(elem_id="start-message", label="message", show_label=False)
        buttons, shown = [], []
        for i, (_, button) in enumerate(STEPS):
            with gr.Row():
                with gr.Column(scale=5, min_width=300):
                    said_texts.append(gr.Markdown(words[i + 1]))
                    shown.append(gr.HTML(elem_id=f"start-status-{i + 1}"))
                buttons.append(gr.Button(button, elem_id=f"start-step-{i + 1}", scale=1, size="md",
                                         min_width=180))
    shown = shown + [buttons[3]]          # statuses() updates the compare button too
    compared = gr.State(False)
    refresh = friendly(lambda c: statuses(ctx.store, c))
    for button, (action, api, about), pending in zip(buttons, API_STEPS, PENDING):
        button.click(lambda p=pending: p, None, said, api_visibility="private").then(
            friendly(lambda a=action: a(ctx.store)), None, said, api_name=api, api_description=about).then(
            refresh, compared, shown, api_visibility="private")
    every.click(lambda: "Queuing the scratch job, importing SmolLM2, then queuing the fine-tune …",
                None, said, api_visibility="private").then(
        friendly(lambda: all_steps(ctx.store)), None, said, api_name="start_all",
        api_description="Getting started, steps 1-3: queue the scratch model, import SmolLM2, queue "
                        "its fine-tune. Returns the message.").then(
        refresh, compared, shown, api_visibility="private")
    # its lines follow the store on the page's pulse, and only while it is open (lab/ui/pulse.py:
    # an event when the store, a job or whether the machine is busy changed, not one every tick)
    opened = gr.State(built_open)
    words_shown = gr.State(words)
    outputs = [*shown, *said_texts, words_shown]
    ctx.every(lambda c, w, o: follow(ctx.store, c, w) if o else [gr.skip()] * len(outputs),
              [compared, words_shown, opened], outputs)
    panel.expand(lambda c: [True, *statuses(ctx.store, c)], compared, [opened, *shown],
                 api_visibility="private")
    panel.collapse(lambda: False, None, opened, api_visibility="private")
    return Panel(buttons[3], compared, shown, panel, opened, built_open, said_texts, words_shown)
