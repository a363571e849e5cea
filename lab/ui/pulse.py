"""One pulse for the page. What follows the store or a running job (every checkpoint dropdown, the
chosen job's progress, the chosen sweep's runs, a setting's choices from the store) is refreshed by
one event, not by a timer each: every event a page receives costs its browser a walk over the
whole layout and the app a round through Gradio's queue, whatever the event brings. The page asks
a plain question every two seconds instead (GET /lab/pulse: a stamp of what those parts read,
answered by PulseStamp without Gradio's queue) and sends the event only when the stamp changed,
and at least every QUIET_TICKS questions all the same (what a stamp cannot see, such as a
plugin's own store_choices, is then at most that late). A tab the person cannot see asks
nothing until it is shown again. The page presses again only once the last press has come back
(the event's frontend-only follow-up says so), or after STUCK_S all the same: a press whose answer
never reaches the page (lost on its way) delays the page, never freezes it. A part that hangs
holds one thread: later presses leave that part out (each part runs one call at a time), so the
other parts go on and presses cannot pile up behind it; a press that comes back after STUCK_S
changes nothing (what it read is older than what later presses showed).

Each part returns gr.skip() for what has not changed; a part that cannot be read this time
(LabError), or fails (a bug: logged with its traceback), leaves its outputs as they are, and the
other parts go on."""
from __future__ import annotations

import logging
import os
import threading
import time
import zlib
from contextlib import contextmanager

import anyio
import gradio as gr

from lab.errors import LabError
from lab.storage import store as lab_store
from lab.training import estimate
from lab.ui.access import app_path
from lab.worker import ledger

log = logging.getLogger("lab.ui")
SECONDS = 2.0           # how often the page asks whether anything changed
QUIET_TICKS = 10        # an event at least every this many questions (20 s), changed or not
STUCK_S = 20            # a press not back after this long is given up on: the page presses again
SLOW_S = 10             # a part of the pulse taking longer than this is logged, with its name
PATH = "/lab/pulse"
BUTTON = "lab-pulse"    # the hidden button the page presses to send the event

SCRIPT = f"""<script>
(() => {{
  // pressed: when the page last pressed; window.labPulseBack: when a press last came back
  let last = null, asked = 0, busy = false, pressed = 0;
  // the app's path from Gradio's root, on this page's own origin (behind a proxy the root's
  // scheme or port can differ from the page's)
  const where = () => {{
    const root = (window.gradio_config && window.gradio_config.root) || location.href.split(/[?#]/)[0];
    return location.origin + new URL(root, location.href).pathname.replace(/\\/+$/, "") + "{PATH}";
  }};
  async function beat() {{
    const button = document.getElementById("{BUTTON}");
    if (document.hidden || !button || busy) return;
    busy = true;
    let now = null;
    try {{
      const answer = await fetch(where(), {{cache: "no-store", signal: AbortSignal.timeout(10000)}});
      if (answer.ok) now = await answer.text();
    }} catch (e) {{}} finally {{ busy = false; }}
    asked += 1;       // an unanswered question counts too: the page refreshes every 20 s all the same
    if ((now !== null && now !== last) || asked >= {QUIET_TICKS}) {{
      // the last press still under way: this change is pressed for at the next question
      if (pressed > (window.labPulseBack || 0) && performance.now() - pressed < {STUCK_S * 1000}) return;
      if (now !== null) last = now;
      pressed = performance.now();
      asked = 0;
      button.click();
    }}
  }}
  setInterval(beat, {int(SECONDS * 1000)});
  document.addEventListener("visibilitychange", () => {{ if (!document.hidden) {{ last = null; beat(); }} }});
}})();
</script>"""


class Pulse:
    """The parts the page's one pulse refreshes, in the order they were added."""

    def __init__(self):
        self.parts: list[tuple] = []
        self._running: dict[int, threading.Lock] = {}      # a part's call under way, by part

    def every(self, fn, inputs: list, outputs: list) -> None:
        """Call fn(*the inputs' values) on each tick; it returns one value per output (for a
        single output, the value alone)."""
        self.parts.append((fn, list(inputs), list(outputs)))

    def start(self, wrap) -> gr.Button | None:
        """The hidden button the page's SCRIPT presses, wired to every part added (once, after
        every tab is built); wrap: what every event handler of the page is wrapped in
        (lab.ui.common.friendly). The page's SCRIPT presses while the last press is under way only
        once it has waited STUCK_S for it; Gradio runs such a press beside the lost one."""
        outputs = [c for _, _, outs in self.parts for c in outs]
        if len({id(c) for c in outputs}) != len(outputs):
            raise ValueError("two parts of the pulse update the same component")
        if not self.parts:
            return None
        button = gr.Button("refresh", visible="hidden", elem_id=BUTTON)
        button.click(wrap(self._tick), [c for _, ins, _ in self.parts for c in ins], outputs,
                     api_visibility="private", show_progress="hidden", trigger_mode="multiple",
                     ).then(None, js="() => { window.labPulseBack = performance.now(); }")   # in the page alone
        return button

    def on_load(self, demo: gr.Blocks, wrap) -> None:
        """The same parts as one event when a page opens (one round through Gradio's queue and
        one walk of the layout, not one each). Two parts may set one component: a later part's
        update goes over an earlier one's (its value over the other's, their other keys kept)."""
        outputs = list({id(c): c for _, _, outs in self.parts for c in outs}.values())
        at = {id(c): i for i, c in enumerate(outputs)}
        where = [at[id(c)] for _, _, outs in self.parts for c in outs]

        def opened(*values):
            merged = [gr.skip()] * len(outputs)
            for i, value in zip(where, self._tick(*values)):
                merged[i] = _over(merged[i], value)
            return merged
        opened.__name__ = "page_opened"
        demo.load(wrap(opened), [c for _, ins, _ in self.parts for c in ins], outputs,
                  api_visibility="private")

    def _tick(self, *values) -> list:
        began = time.monotonic()
        lab_store.fault("pulse.tick")
        out, at = [], 0
        for i, (fn, ins, outs) in enumerate(self.parts):
            t0 = time.monotonic()
            running = self._running.setdefault(i, threading.Lock())
            if not running.acquire(blocking=False):        # its last call has not come back
                log.warning("a part of the page's pulse is still under way, left out: %s", _name(fn))
                at += len(ins)
                out.extend([gr.skip()] * len(outs))
                continue
            try:
                result = fn(*values[at:at + len(ins)])
                result = [result] if len(outs) == 1 else list(result)
                if len(result) != len(outs):
                    raise ValueError(f"{len(result)} values for {len(outs)} outputs")
            except LabError as e:
                log.info("not refreshed this time: %s", e)
                result = [gr.skip()] * len(outs)
            except Exception:       # a bug in one part (a task's view, say) stops no other part
                log.exception("a part of the page's pulse failed (a bug): %s", _name(fn))
                result = [gr.skip()] * len(outs)
            finally:
                running.release()
            if (took := time.monotonic() - t0) > SLOW_S:
                log.warning("a part of the page's pulse took %.0f s: %s", took, _name(fn))
            at += len(ins)
            out.extend(result)
        if time.monotonic() - began > STUCK_S:      # the page has pressed again since: older news
            return [gr.skip()] * len(out)
        return out


def _name(fn) -> str:
    """A part's function as a log line names it: where it is defined (most parts are lambdas)."""
    code = getattr(fn, "__code__", None)
    where = f" ({os.path.basename(code.co_filename)}:{code.co_firstlineno})" if code else ""
    return f"{getattr(fn, '__qualname__', fn)}{where}"


def _over(earlier, later):
    """One component's update from two parts: the later's keys over the earlier's (a plain value
    is an update of the value alone); a skip leaves the other as it is."""
    if _is_update(later) and len(later) == 1:           # gr.skip(): nothing to say
        return earlier
    if _is_update(earlier) and len(earlier) == 1:
        return later

    def as_update(v):
        return v if _is_update(v) else {"__type__": "update", "value": v}
    return {**as_update(earlier), **as_update(later)}


def _is_update(v) -> bool:
    return isinstance(v, dict) and v.get("__type__") == "update"


_UNDER_WAY_LOCK = threading.Lock()
_UNDER_WAY: dict = {}       # (store, what) -> [when this app began it, how many run]: shown only at their end


@contextmanager
def under_way(store, what: str):
    """Work of this app that the store shows only once it ends (an import): while the block runs,
    the stamp of `store` changes every tick, as while a job runs, so that a page follows the
    work's own line; began() says since when (the first of those under way at once)."""
    key = (str(store), what)
    with _UNDER_WAY_LOCK:
        _UNDER_WAY.setdefault(key, [time.time(), 0])[1] += 1
    try:
        yield
    finally:
        with _UNDER_WAY_LOCK:
            _UNDER_WAY[key][1] -= 1
            if not _UNDER_WAY[key][1]:
                del _UNDER_WAY[key]


def began(store, what: str) -> float | None:
    """When this app began `what` on `store` (under_way), None when it is not under way."""
    got = _UNDER_WAY.get((str(store), what))
    return got[0] if got else None


def busy_note(store=None) -> str:
    """Whether the machine is busy with other work than the lab's own jobs, as the getting-started
    panel says it (estimate.busy_text): their share of the load comes from their spans in the
    ledger, read only when the load could say busy at all."""
    load_avg, cores = estimate.load()
    if load_avg < estimate.BUSY_SHARE * cores:       # not even with the lab's own counted in
        return ""
    return estimate.busy_text(load_avg, cores, estimate.own_load(ledger.spans(store), time.time()))


def stamp(store=None) -> str:
    """What the pulse's parts read, as text that changes when they may have: the store's folder
    and its datasets' (their entries and times: a checkpoint or dataset written, renamed or
    removed), the jobs in the ledger (ledger.glance: a job queued, claimed, reporting, stopped or
    ended; a running job writes a heartbeat every few seconds), whether the machine is busy (the
    getting-started panel's load note: it comes and goes at once, its figure follows within
    QUIET_TICKS), and, while a job runs or this app's own work is under way (under_way), the time
    in ticks (a job's log grows between those writes; an import shows only when it ends).
    Nothing the pulse's parts show is written."""
    ledger_line, running = ledger.glance(store)     # first: finding the ledger makes the lab's folder
    root = lab_store.root(store)
    parts = []
    for watched in (root, root / lab_store.DATASETS):
        try:
            names = sorted(os.listdir(watched))
            parts.append(f"{os.stat(watched).st_mtime_ns}:{zlib.crc32(chr(0).join(names).encode())}")
        except OSError:
            parts.append("-")
    parts.append(ledger_line)
    if busy_note(store):
        parts.append("busy")
    if running or any(where == str(store) for where, _ in list(_UNDER_WAY)):
        parts.append(str(int(time.time() // SECONDS)))
    return " ".join(parts)


class PulseStamp:
    """ASGI middleware: GET /lab/pulse answers stamp() as plain text, off the event loop and
    outside Gradio's queue; every other request passes as it is. Placed inside the login gate
    (lab/ui/access.py), so a page must be logged in to ask."""

    def __init__(self, app, store=None):
        self.app, self.store = app, store

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "GET" or app_path(scope) != PATH:
            return await self.app(scope, receive, send)
        try:
            body = (await anyio.to_thread.run_sync(stamp, self.store)).encode()
        except Exception as e:      # a store it cannot read now: the page refreshes and hears why
            log.info("the pulse's stamp cannot be read: %s", e)
            body = f"unreadable {int(time.time() // SECONDS)}".encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"cache-control", b"no-store"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
