"""The web lab: one file per tab; `build_app()` assembles them, and `launch_kwargs()` puts the login
gate (access.py) in front when there is a login. The browser's face, on the top floor: it may
import anything in lab/ and is the only Gradio code there; nothing imports it but app.py."""
from __future__ import annotations

import ipaddress
import os
import sys
import time

from lab.ui import stubless  # noqa: F401  (before Gradio: see the module)
import gradio as gr
from gradio.queueing import Queue
from starlette.middleware import Middleware

from lab.storage import smollm2
from lab.storage import store as lab_store
from lab.evaluation.attention_maps import VENDOR_DIR
from lab.errors import LabError
from lab.inputs.tokenizers import gpt2
from lab.registry import load_plugins
from lab.evaluation.report import CAPTIONS_CSS
from lab.ui import attention, checkpoints, compare, evaluate, experiments, inside, start, train
from lab.ui.access import LoginGate, Throttle
from lab.ui.first_script import FirstScript
from lab.ui.pulse import SCRIPT as PULSE_SCRIPT, PulseStamp
from lab.ui.common import Context, friendly, read_metas
from lab.ui.fields import Blocks

CSS = CAPTIONS_CSS + """
.lab-matrix th:first-child { width: 15em; overflow-wrap: anywhere; }
/* every table's header folds between its words, inside one only where a word alone is wider than its column */
th.header-cell, th.header-cell * { word-break: normal !important; overflow-wrap: break-word !important; }
.lab-progress { background: #e5e7eb; border-radius: 6px; height: 14px; overflow: hidden; }
.lab-progress .bar { background: #2563eb; height: 100%; transform-origin: left; transition: transform .5s; }
.lab-progress-text { font-size: 14px; margin-top: 4px; }
.lab-refused { border-left: 4px solid #dc2626; background: #fef2f2; color: #7f1d1d; padding: 6px 10px;
               border-radius: 4px; }
.dark .lab-refused { background: #450a0a; color: #fecaca; }
.lab-tick { min-width: 170px !important; }   /* the Train form's tick boxes: label and hint unclipped */
/* dark theme: bertviz draws black on white; inverted and hue-turned back, its colours keep their hue */
.dark .lab-attention-frame { filter: invert(0.88) hue-rotate(180deg); }
.dark .lab-progress { background: #374151; }
"""


def warm_up() -> None:
    """Load what the first requests would otherwise load at once from several threads: the
    plugins and GPT-2's tokenizer. transformers' classes are loaded when a request first needs
    one, under one lock (tokenizers.from_transformers)."""
    load_plugins()
    gpt2()


def build_app(store=None, data_dir=None) -> gr.Blocks:
    warm_up()
    gr.set_static_paths([VENDOR_DIR])        # bertviz's d3, jQuery and require.js, served locally
    ctx = Context(store=store, data_dir=data_dir)
    with Blocks(title="tfmr-lab") as demo:
        gr.Markdown("# tfmr-lab\nTrain, compare and understand small Transformer language models.")
        panel = start.build(ctx)
        # every tab's fields mounted with the page (Gradio mounts a tab's when it is first chosen
        # and, once it settled, resets them to their first values: what was typed meanwhile goes)
        with gr.Tabs() as tabs:
            with gr.Tab("Compare", id="compare", render_children=True):
                side_by_side = compare.build(ctx)
            with gr.Tab("Inside the model", id="attention", render_children=True):
                ctx.empty_note(f"Import SmolLM2 in the Checkpoints tab ({smollm2.TAKES}), or train a model "
                               "in the Train tab; then look inside it here: its attention, the "
                               "logit lens, heads ablated, activations patched.")
                with gr.Tabs():
                    with gr.Tab("Attention", id="attention-heads", render_children=True):
                        attention.build(ctx)
                    inside.build(ctx)
            with gr.Tab("Evaluate", id="evaluate", render_children=True):
                evaluate.build(ctx)
            with gr.Tab("Train", id="train", render_children=True):
                attached, latest, (to_sweep, train_form, train_said) = train.build(ctx)
            with gr.Tab("Experiments", id="experiments", render_children=True):
                _, sweep_form, sweep_note = experiments.build(ctx)
            with gr.Tab("Checkpoints", id="checkpoints", render_children=True):
                table = checkpoints.build(ctx)

        _compare_them(ctx, panel, tabs, side_by_side)
        # a message belongs to the tab it was said in: switching tabs dismisses it
        tabs.select(None, None, None, js=DISMISS_MESSAGES)
        _carry_to_sweep(tabs, to_sweep, train_form, train_said, sweep_form, sweep_note)
        _follow_the_store(ctx, table)
        _on_load(demo, ctx, panel, latest, attached)
        ctx.pulse.start(friendly)          # every tab has said what it refreshes
    return demo


def _on_load(demo, ctx: Context, panel, latest, attached) -> None:
    """What a page asks for as it opens, as one event: the store's checkpoints (_follow_the_store),
    the job list and the job the Train form re-attaches to (its fields then filled by an event of
    their own: train.reattached), the getting-started panel's times measured here and the load
    now, and whether the panel starts open."""
    ctx.opening.every(latest, [], attached)
    ctx.opening.every(lambda: start.words_now(ctx.store), [], [*panel.texts, panel.words_shown])
    ctx.opening.every(lambda: start.panel_open(ctx.store, panel.built_open), [],
                      [panel.accordion, panel.opened])
    ctx.opening.on_load(demo, friendly)


DISMISS_MESSAGES = "() => document.querySelectorAll('[data-testid=toast-close]').forEach(b => b.click())"
# a new action clears the last one's "Error" marks and closes its messages (which stay until then:
# lab/ui/fields.py's refuse): a button the person presses (but a mark's own Clear) presses Clear on
# every output still marked by an earlier failure; a click the page makes itself (its pulse's
# hidden button, a message closed here or as the tab changes) is no action
HEAD = """<script>
document.addEventListener("click", (e) => {
  const pressed = e.target.closest("button");
  if (!e.isTrusted || !pressed || pressed.closest(".clear-status")) return;
  document.querySelectorAll("[data-testid=status-tracker]").forEach((tracker) => {
    const clear = tracker.querySelector(".clear-status button");
    if (clear && tracker.querySelector(".error")) clear.click();
  });
  if (!pressed.closest("[data-testid=toast-body]")) (%s)();
}, true);
</script>""" % DISMISS_MESSAGES
# after the getting-started panel's "Compare them": the captions are below the panel, in view
SCROLL_TO_CAPTIONS = "() => document.getElementById('compare-out')?.scrollIntoView({block: 'start'})"


def _compare_them(ctx: Context, panel, tabs, side_by_side) -> None:
    """The panel's last step: the Compare tab opens on the two checkpoints, the page scrolls to
    where their captions come, they are generated, and the step says it is done."""
    def switch():
        return gr.Tabs(selected="compare"), start.ready_to_compare(ctx.store), True
    switched = panel.compare.click(friendly(switch), None, [tabs, side_by_side.chosen, panel.compared],
                                   api_visibility="private")
    side_by_side.then(switched.success(None, None, None, js=SCROLL_TO_CAPTIONS))
    switched.success(friendly(lambda c: start.statuses(ctx.store, c)), panel.compared, panel.shown,
                     api_visibility="private")


def _carry_to_sweep(tabs, to_sweep, train_form, train_said, sweep_form, sweep_note) -> None:
    """The Train tab's "to a sweep" button: its form's settings start a sweep in Experiments."""
    def to_experiments(*values):
        """The Train form's settings become the start of a sweep in the Experiments tab."""
        try:
            settings = train.sweep_settings(*values)
        except LabError as e:
            return [gr.skip()] * 8 + [f"**Not carried to a sweep:** {e}"]
        return [gr.Tabs(selected="experiments")] + experiments.from_train(settings) + [""]
    _, recipe, _, preset, parent, grid, settings = sweep_form[:7]
    split = sweep_form[9]
    to_sweep.click(friendly(to_experiments), train_form,
                   [tabs, recipe, preset, parent, grid, settings, split, sweep_note, train_said],
                   api_visibility="private")


def _follow_the_store(ctx: Context, table) -> None:
    """Every checkpoint dropdown, empty-store note and the Checkpoints table follow the store: on
    load and on each tick of the page's pulse."""
    # the names the page last saw and what the lab picked in each checkpoint dropdown
    known = gr.State({"names": ctx.checkpoint_names(),
                      "picks": [dd.value for dd in ctx.checkpoint_dropdowns]})

    def refresh(seen, *current):
        """New checkpoints (a job just wrote one) become choices in every tab at once; a
        dropdown the person has not touched follows the store (current: their values)."""
        names = ctx.checkpoint_names()
        if names == seen["names"]:
            return [gr.skip()] * (len(ctx.checkpoint_dropdowns) + len(ctx.empty_notes) + 1) + [seen]
        metas = read_metas(names, ctx.store)
        updates, picks = [], []
        for dd, value, pick in zip(ctx.checkpoint_dropdowns, current, seen["picks"]):
            update, pick = ctx.refreshed(dd, names, pick, value, metas)
            updates.append(update)
            picks.append(pick)
        notes = [gr.update(visible=not names) for _ in ctx.empty_notes]
        return updates + notes + [checkpoints.rows(ctx.store), {"names": names, "picks": picks}]
    fresh = ctx.checkpoint_dropdowns + ctx.empty_notes + [table, known]
    watched = [known] + ctx.checkpoint_dropdowns
    ctx.opening.every(refresh, watched, fresh)           # current from the start
    ctx.every(refresh, watched, fresh)


LOGIN_NOTE = (f"After {Throttle.free} failed logins from one address, its next try waits "
              f"{Throttle.first_wait_s:g} s, and each further failure doubles the wait (at most "
              f"{Throttle.max_wait_s / 60:g} min).")


def queued(demo: gr.Blocks) -> gr.Blocks:
    """demo behind Gradio's queue (four events of a kind at once). The queue looks for new events
    every 10 ms while they come and every 50 ms once none came for CALM_AFTER_S, and for progress
    to send every 50 ms: Gradio's own pace on Linux, every millisecond and every 10 ms, costs about
    5% of a core in an app nobody is using (on Windows it is 50 and 100 ms); at 10 ms, 2.7%; calm,
    0.9% (docs/benchmarks.md). An event waits at most 10 ms more to start, the first after a calm
    at most 50 ms."""
    demo.queue(default_concurrency_limit=4)
    demo._queue.__class__ = CalmQueue
    demo._queue.progress_update_sleep_when_free = 0.05
    return demo


class CalmQueue(Queue):
    """Gradio's queue whose loop looks for new events every BUSY_S while events come and every
    CALM_S once none came for CALM_AFTER_S (its loop reads sleep_when_free at each turn)."""
    BUSY_S, CALM_S, CALM_AFTER_S = 0.01, 0.05, 5.0
    _last_push = 0.0

    @property
    def sleep_when_free(self) -> float:
        calm = time.monotonic() - self._last_push > self.CALM_AFTER_S
        return self.CALM_S if calm else self.BUSY_S

    async def push(self, *args, **kwargs):
        self._last_push = time.monotonic()
        return await super().push(*args, **kwargs)


def launch_kwargs(store=None) -> dict:
    """Where to listen, the login (LAB_AUTH=user:password), which proxies' X-Forwarded-For to
    believe (LAB_TRUSTED_PROXIES), a warning when the lab is reachable from other machines
    without a login, and the page's pulse on `store` (the store build_app was given: a page
    launched without these refreshes nothing that follows the store, lab/ui/pulse.py)."""
    host = os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1")
    port = os.environ.get("GRADIO_SERVER_PORT", "7860")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise LabError(f"GRADIO_SERVER_PORT must be a port number (1-65535), got {port!r}")
    # the login throttle counts by the connection's own peer: uvicorn takes a client's address
    # from X-Forwarded-For only from the proxies LAB_TRUSTED_PROXIES names (none by default)
    os.environ["FORWARDED_ALLOW_IPS"] = os.environ.get("LAB_TRUSTED_PROXIES", "")
    kwargs = {"css": CSS, "head": HEAD + PULSE_SCRIPT, "server_name": host, "server_port": int(port),
              "allowed_paths": [str(lab_store.state_dir(None, "exports"))],
              "max_file_size": "2gb", "app_kwargs": {"middleware": [Middleware(FirstScript)]}}
    auth = os.environ.get("LAB_AUTH")
    if auth is not None:
        user, sep, password = auth.partition(":")
        if not sep or not user or not password:
            raise LabError("LAB_AUTH must be user:password (both non-empty)")
        kwargs["auth"] = (user, password)
        kwargs["auth_message"] = LOGIN_NOTE
        kwargs["app_kwargs"]["middleware"].append(Middleware(LoginGate))    # see lab/ui/access.py
    elif not _loopback(host):
        print(f"warning: the lab listens on {host}, reachable from other machines, with no login: "
              f"anyone who can reach it can train, delete and export. Set LAB_AUTH=user:password.",
              file=sys.stderr, flush=True)
    # inside the login gate: a page asks for the pulse's stamp only when logged in (lab/ui/pulse.py)
    kwargs["app_kwargs"]["middleware"].append(Middleware(PulseStamp, store=store))
    return kwargs


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
