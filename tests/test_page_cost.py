"""What an open page and an idle app cost while nothing happens: one timer for the page, Gradio's
status-tracker clock calmed before Gradio's own scripts run, the queue looking for work every 10 ms
rather than every millisecond, and no typing stubs written as the app starts. (What each saves is
measured in benchmarks/idle_tab.py, docs/benchmarks.md; these tests hold the mechanisms.)"""
import asyncio
import inspect
from pathlib import Path

import gradio as gr
from gradio.queueing import Queue

from lab.ui import build_app, launch_kwargs, queued
from lab.ui.first_script import CALM_CLOCK, FirstScript

UI = Path(__file__).resolve().parent.parent / "lab" / "ui"


def _blocks(block):
    yield block
    for child in getattr(block, "children", []) or []:
        yield from _blocks(child)


def test_the_page_ticks_on_one_timer(store):
    """Every part that follows the store or a job is refreshed by the pulse's one timer; the only
    other is the getting-started panel's, which ticks only while the panel is open."""
    demo = build_app(store=str(store))
    timers = [b for b in _blocks(demo) if isinstance(b, gr.Timer)]
    assert len(timers) == 2, timers
    ticks = [fn for fn in demo.fns.values() if fn.targets and fn.targets[0][1] == "tick"]
    assert len(ticks) == 2, "one tick for the checkpoint dropdowns, job view and sweep runs; the panel's"
    pulse = max(ticks, key=lambda fn: len(fn.outputs))
    assert len(pulse.outputs) > 20 and len({id(o) for o in pulse.outputs}) == len(pulse.outputs)


def test_a_failing_part_of_the_pulse_stops_no_other(caplog):
    from lab.errors import LabError
    from lab.ui.pulse import Pulse
    pulse = Pulse()

    def broken(x):
        raise RuntimeError("a bug")

    def unreadable(x):
        raise LabError("the ledger is busy")
    pulse.every(broken, ["a"], ["out1", "out2"])
    pulse.every(unreadable, ["b"], ["out3"])
    pulse.every(lambda x: x * 2, ["c"], ["out4"])
    out = pulse._tick(1, 2, 3)
    assert out[:3] == [gr.skip()] * 3 and out[3] == 6
    assert "a bug" in caplog.text


def _serve(html: bytes, path: str):
    """What FirstScript sends for a GET of `path` from an app answering `html` as text/html."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/html; charset=utf-8"),
                                (b"content-length", str(len(html)).encode())]})
        await send({"type": "http.response.body", "body": html[:10], "more_body": True})
        await send({"type": "http.response.body", "body": html[10:]})
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}
    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": []}
    asyncio.run(FirstScript(app)(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    length = dict(sent[0]["headers"])[b"content-length"]
    assert int(length) == len(body)
    return body


def test_the_calm_clock_goes_first_in_the_page_and_nowhere_else():
    page = b"<!doctype html><html><head><script type=module src=./assets/index.js></script></head></html>"
    served = _serve(page, "/")
    assert served.index(CALM_CLOCK) < served.index(b"index.js")        # before Gradio's scripts
    assert served.count(CALM_CLOCK) == 1
    assert _serve(page, "/gradio_api/file=report.html") == page         # a download is left whole
    assert launch_kwargs()["app_kwargs"]["middleware"][0].cls is FirstScript


def test_the_queue_looks_for_work_every_10_ms():
    """The pace is set on the attributes Gradio's queue loops read (a Gradio that renamed them
    would leave the lab's setting unread: this fails instead)."""
    reads = inspect.getsource(Queue.start_processing) + inspect.getsource(Queue.start_progress_updates)
    assert "self.sleep_when_free" in reads and "self.progress_update_sleep_when_free" in reads
    with gr.Blocks() as demo:
        gr.Markdown("x")
    queue = queued(demo)._queue
    assert queue.sleep_when_free == 0.01 and queue.progress_update_sleep_when_free == 0.05


def test_the_app_writes_no_typing_stubs_beside_its_code():
    from lab.ui.fields import _checked
    for stub in UI.glob("*.pyi"):
        stub.unlink()
    _checked(gr.Textbox)                 # a component class made as the app makes its own
    assert not list(UI.glob("*.pyi"))
