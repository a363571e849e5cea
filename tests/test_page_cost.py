"""What an open page and an idle app cost while nothing happens: one pulse for the page, sent only
when what it shows may have changed, Gradio's status-tracker clock calmed before Gradio's own
scripts run, the queue looking for work every 10 ms rather than every millisecond, and no typing
stubs written as the app starts. (What each saves is
measured in benchmarks/idle_tab.py, docs/benchmarks.md; these tests hold the mechanisms.)"""
import asyncio
import inspect
from pathlib import Path

import gradio as gr
from gradio.queueing import Queue

from lab.ui import CSS, build_app, launch_kwargs, queued
from lab.ui import pulse as pulse_module
from lab.ui.first_script import CALM_CLOCK, FirstScript
from lab.ui.pulse import BUTTON, PATH, PulseStamp, stamp

UI = Path(__file__).resolve().parent.parent / "lab" / "ui"


def _blocks(block):
    yield block
    for child in getattr(block, "children", []) or []:
        yield from _blocks(child)


def test_the_page_follows_the_store_on_one_pulse(store):
    """Every part that follows the store or a job is refreshed by one event, the press of the
    pulse's hidden button (pressed again once the last press came back, which a frontend-only
    follow-up tells the page, or after STUCK_S: tests/test_browser.py); no timer sends events of its
    own (the getting-started panel's lines are a part of the pulse too); a page opening sends one
    event for all it asks for."""
    demo = build_app(store=str(store))
    timers = [b for b in _blocks(demo) if isinstance(b, gr.Timer)]
    assert timers == []
    button = next(b for b in _blocks(demo) if getattr(b, "elem_id", None) == BUTTON)
    assert button.visible == "hidden"
    pressed = [fn for fn in demo.fns.values() if fn.targets == [(button._id, "click")]]
    assert len(pressed) == 1 and pressed[0].trigger_mode == "multiple"
    back = [fn for fn in demo.fns.values() if fn.trigger_after == pressed[0]._id]
    assert len(back) == 1 and back[0].fn is None and "window.labPulseBack" in back[0].js
    assert len(pressed[0].outputs) > 20 and len({id(o) for o in pressed[0].outputs}) == len(pressed[0].outputs)
    assert f'document.getElementById("{BUTTON}")' in launch_kwargs()["head"]
    loads = [fn for fn in demo.fns.values() if fn.targets and fn.targets[0][1] == "load"]
    assert len(loads) == 1, "what a page asks for as it opens is one event"


def test_the_stamp_changes_with_what_the_pulse_reads_and_only_then(store, monkeypatch):
    """A checkpoint or dataset written, a job queued or moving on: the stamp changes; nothing
    happening: it stays, so the page sends no event; while a job runs it changes every tick."""
    from lab.inputs import tokenizers
    from lab.modeling.model import build
    from lab.storage import checkpoints
    from lab.storage import store as lab_store
    from lab.presets import get as get_preset
    from lab.worker import jobs, ledger
    from lab.training import estimate
    from tests.conftest import tiny_config
    monkeypatch.setattr(estimate, "load", lambda: (0.1, 2))        # an idle machine, whatever runs beside
    first = stamp(store)
    assert stamp(store) == first
    checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), "new", store)
    second = stamp(store)
    assert second != first and stamp(store) == second
    (lab_store.root(store) / lab_store.DATASETS / "mine").mkdir(parents=True)
    third = stamp(store)
    assert third != second
    model, train = get_preset("tiny")
    queued = jobs.submit("later", model, train, store=store)
    fourth = stamp(store)
    assert fourth != third and stamp(store) == fourth and not ledger.glance(store)[1]
    with ledger.connect(store) as con:
        con.execute("UPDATE jobs SET status='running' WHERE id=?", (queued,))
    assert ledger.glance(store)[1]
    clock = iter([100.0, 100.5, 103.0])
    monkeypatch.setattr(pulse_module.time, "time", lambda: next(clock))
    assert stamp(store) == stamp(store) != stamp(store)         # the same tick, then the next


def test_the_stamp_ticks_while_this_apps_own_work_is_under_way_and_step_1_says_so(store, tmp_path,
                                                                                monkeypatch):
    """Importing SmolLM2 (step 1 of getting started) is no job, and the store shows it only at
    the end: while it is under way the stamp of its store changes every tick, so that a page
    follows step 1's line, which says it is importing; another store's stamp does not."""
    from lab.training import estimate
    from lab.ui import start
    clock = [100.0]
    monkeypatch.setattr(pulse_module.time, "time", lambda: clock[0])
    monkeypatch.setattr(estimate, "load", lambda: (0.1, 2))         # an idle machine
    other = tmp_path / "other"
    start.step_status(start.SMOLLM2, store), stamp(other)      # the first look makes the ledger
    quiet, elsewhere = stamp(store), stamp(other)
    clock[0] += pulse_module.SECONDS
    assert stamp(store) == quiet and "not started" in start.step_status(start.SMOLLM2, store)
    seen = []

    def importing(name, layers, store):               # what the page sees while step 1 imports
        during = stamp(store)
        clock[0] += pulse_module.SECONDS + 5
        seen.append((stamp(store) != during, stamp(other) == elsewhere,
                     start.step_status(start.SMOLLM2, store)))
        with pulse_module.under_way(store, f"import {start.SMOLLM2}"):      # a second at once
            pass
        seen.append(start.step_status(start.SMOLLM2, store))
    monkeypatch.setattr(start.smollm2, "import_smollm2", importing)
    start.import_smollm2(store)
    ticked, untouched, line = seen[0]
    assert ticked and untouched and "importing: reading and de-quantizing the weights (7 s so far)" in line
    assert "importing" in seen[1]                     # the second's end does not end the first
    assert stamp(store) == quiet and "not started" in start.step_status(start.SMOLLM2, store)


def test_the_stamp_changes_as_the_machine_turns_busy_not_as_its_load_moves(store, monkeypatch):
    """The getting-started panel's load note comes and goes with the stamp; a busy machine's load
    moving (as it does every few seconds) sends no event of its own."""
    from lab.training import estimate
    load = {"now": (0.2, 2)}
    monkeypatch.setattr(estimate, "load", lambda: load["now"])
    idle = stamp(store)
    load["now"] = (0.3, 2)
    assert stamp(store) == idle
    load["now"] = (4.1, 2)
    busy = stamp(store)
    assert busy != idle
    load["now"] = (5.7, 2)
    assert stamp(store) == busy
    load["now"] = (0.1, 2)
    assert stamp(store) == idle


def _by_id(demo, elem_id):
    return next(b for b in _blocks(demo) if getattr(b, "elem_id", None) == elem_id)


def test_the_panels_lines_follow_on_the_pulse_only_while_it_is_open(store):
    """The getting-started panel's part of the pulse gives its step lines while the page holds the
    panel open, and nothing while it is closed; opening and closing it set which."""
    demo = build_app(store=str(store))
    pulse = next(fn for fn in demo.fns.values() if fn.targets == [(_by_id(demo, BUTTON)._id, "click")])
    accordion = _by_id(demo, "start")
    expand, collapse = (next(fn for fn in demo.fns.values() if fn.targets == [(accordion._id, event)])
                        for event in ("expand", "collapse"))
    opened = expand.outputs[0]
    assert collapse.outputs == [opened] and collapse.fn() is False
    assert expand.fn(False)[0] is True
    line = pulse.outputs.index(_by_id(demo, "start-status-2"))
    for is_open in (True, False):
        values = [is_open if block is opened else getattr(block, "value", None) for block in pulse.inputs]
        said = pulse.fn(*values)[line]
        assert said == ("<span class='lab-step-todo'>not started</span>" if is_open else gr.skip())


def test_a_page_opening_is_one_event_and_a_later_part_goes_over_an_earlier():
    """Two parts setting one component as a page opens (a dropdown's choices from the store, its
    value from another part): one output, the later value over the earlier choices, a skip
    leaving the other's update, a failing part the others'."""
    from lab.ui.pulse import Pulse
    pulse, loads = Pulse(), []

    class Page:
        def load(self, fn, inputs, outputs, **kwargs):
            loads.append((fn, inputs, outputs))
    pulse.every(lambda: gr.update(choices=["a", "b"]), [], ["parent"])
    pulse.every(lambda: ("b", gr.skip()), [], ["parent", "note"])
    pulse.every(lambda: gr.update(visible=True), [], ["note"])
    pulse.every(lambda: 1 / 0, [], ["table"])
    pulse.on_load(Page(), lambda fn: fn)
    (fn, inputs, outputs), = loads
    assert outputs == ["parent", "note", "table"] and inputs == []
    assert fn() == [{"__type__": "update", "choices": ["a", "b"], "value": "b"},
                    {"__type__": "update", "visible": True}, gr.skip()]


def test_the_train_form_reattaches_in_an_event_of_its_own_only_to_a_job_that_runs_or_waits(store):
    """A page opening updates some thirty outputs, not the Train form's seventy fields as well
    (each output of an event costs the browser a walk of the page, changed or not): the opening
    names the job to re-attach to in a State, whose change fills the form; with no job running or
    waiting it names none, and no second event is sent. (The reload: tests/test_browser.py.)"""
    from lab.presets import get
    from lab.ui import train
    from lab.worker import jobs
    demo = build_app(store=str(store))
    load, = [fn for fn in demo.fns.values() if fn.targets and fn.targets[0][1] == "load"]
    form = [b for b in _blocks(demo) if str(getattr(b, "elem_id", None)).startswith("train-")
            and isinstance(b, (gr.Number, gr.Checkbox))]
    assert len(form) > 20 and not {id(b) for b in form} & {id(o) for o in load.outputs}
    assert len(load.outputs) < 40
    reattach, = [fn for fn in demo.fns.values() if fn.targets and fn.targets[0][1] == "change"
                 and isinstance(demo.blocks[fn.targets[0][0]], gr.State)
                 and {id(b) for b in form} <= {id(o) for o in fn.outputs}]
    assert reattach.inputs == [demo.blocks[reattach.targets[0][0]]]
    assert train.latest_active(store)[1] == gr.skip()                 # nothing to re-attach to
    model, settings = get("tiny")
    job_id = jobs.submit("waits", model.to_dict(), {**settings.to_dict(), "epochs": 3}, preset="tiny",
                         store=store)
    assert train.latest_active(store)[1] == job_id
    values = train.reattached(job_id, store)
    assert values[0] == "waits" and len(values) == len(reattach.outputs)
    assert train.reattached(None, store) == [gr.skip()] * len(reattach.outputs)
    assert train.reattached(job_id + 1, store)[-1].startswith(f"Job {job_id + 1}'s settings cannot be shown")


def _ask(path: str, method: str = "GET"):
    """What PulseStamp sends for a request of `path` (the app behind it answers 404)."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"passed"})
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}
    asyncio.run(PulseStamp(app)(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_pulse_is_asked_by_a_plain_get(store, monkeypatch):
    """(Behind the login: tests/test_access.py.) A stamp that cannot be read answers all the same
    (the page then refreshes, and its parts say why), with no traceback."""
    from lab.training import estimate
    monkeypatch.setattr(estimate, "load", lambda: (0.1, 2))        # an idle machine, whatever runs beside
    assert _ask(PATH) == (200, stamp(store).encode())
    assert _ask(PATH, "POST") == (404, b"passed") and _ask("/lab/other") == (404, b"passed")

    def unreadable(store=None):
        raise OSError("the store's folder is gone")
    monkeypatch.setattr(pulse_module, "stamp", unreadable)
    status, body = _ask(PATH)
    assert status == 200 and body.startswith(b"unreadable ")


def test_a_part_that_hangs_holds_one_thread_and_a_late_press_changes_nothing(monkeypatch):
    """Each part runs one call at a time: while a part's last call hangs, later presses leave it
    out and the other parts go on (no press waits behind it); a press that comes back after
    STUCK_S (the page has pressed again since) changes nothing."""
    import threading
    from lab.ui.pulse import Pulse
    gate, entered = threading.Event(), threading.Event()

    def hangs(x):
        entered.set()
        gate.wait(30)
        return "hung's"
    pulse = Pulse()
    pulse.every(hangs, [1], ["a"])
    pulse.every(lambda y: y * 2, [2], ["b"])
    clock = [0.0]
    monkeypatch.setattr(pulse_module.time, "monotonic", lambda: clock[0])
    first = []
    hung = threading.Thread(target=lambda: first.append(pulse._tick(1, 21)))
    hung.start()
    assert entered.wait(10)
    second = pulse._tick(1, 4)                                        # not behind the hung one
    assert _is_skip(second[0]) and second[1] == 8
    clock[0] += pulse_module.STUCK_S + 1          # the hung call comes back after STUCK_S
    gate.set()
    hung.join(10)
    assert all(_is_skip(v) for v in first[0])
    assert pulse._tick(1, 5)[1] == 10 and pulse._tick(1, 5)[0] == "hung's"


def _is_skip(value) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update" and len(value) == 1


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
    pulse.every(lambda x: (x, x), ["d"], ["out5", "out6", "out7"])   # one too few
    out = pulse._tick(1, 2, 3, 4)
    assert out[:3] == [gr.skip()] * 3 and out[3] == 6 and out[4:] == [gr.skip()] * 3
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


def test_no_animation_lays_the_page_out_at_every_frame():
    """The lab's styles animate only what the compositor draws (transform, opacity): a progress
    bar moves to its new fraction scaled, not sized (a width's transition laid the page out about
    30 times a second while a job's view followed it); both kinds of bar are drawn so."""
    import re
    from lab.ui.jobs_view import progress_html
    from lab.ui.work import bar, progress_bar
    animated = re.findall(r"transition:\s*([^;}]+)", CSS)
    assert animated and all(a.split()[0] in ("transform", "opacity") for a in animated), animated
    assert bar(0.25) == "<div class='bar' style='transform:scaleX(0.250)'></div>"
    assert bar(1.7) == bar(1.0) and bar(-1) == bar(0.0)
    assert bar(0.5) in progress_bar(0.5, "half") and "width" not in progress_bar(0.5, "half")
    job = {"status": "queued", "error": None, "progress": {"step": 5, "total_steps": 20}}
    assert "scaleX(0.250)" in progress_html(job) and "width" not in progress_html(job)


def test_the_calm_clock_goes_first_in_the_page_and_nowhere_else():
    page = b"<!doctype html><html><head><script type=module src=./assets/index.js></script></head></html>"
    served = _serve(page, "/")
    assert served.index(CALM_CLOCK) < served.index(b"index.js")        # before Gradio's scripts
    assert served.count(CALM_CLOCK) == 1
    assert _serve(page, "/gradio_api/file=report.html") == page         # a download is left whole
    assert launch_kwargs()["app_kwargs"]["middleware"][0].cls is FirstScript


def test_the_queue_looks_for_work_every_10_ms_while_events_come_and_every_50_ms_once_calm(monkeypatch):
    """The pace is set on the attributes Gradio's queue loops read (a Gradio that renamed them
    would leave the lab's setting unread: this fails instead); an event pushed makes it brisk again."""
    import time as clock
    from lab.ui import CalmQueue
    reads = inspect.getsource(Queue.start_processing) + inspect.getsource(Queue.start_progress_updates)
    assert "self.sleep_when_free" in reads and "self.progress_update_sleep_when_free" in reads
    assert "async def push(" in inspect.getsource(Queue)
    with gr.Blocks() as demo:
        gr.Markdown("x")
    queue = queued(demo)._queue
    assert isinstance(queue, CalmQueue) and queue.progress_update_sleep_when_free == 0.05
    assert queue.sleep_when_free == 0.05                    # nothing came yet: calm
    now = {"t": 1000.0}
    monkeypatch.setattr(clock, "monotonic", lambda: now["t"])

    async def pushed():
        async def nothing(self, *args, **kwargs):
            return True, "", "success"
        monkeypatch.setattr(Queue, "push", nothing)
        return await queue.push(None, None, None)
    assert asyncio.run(pushed()) == (True, "", "success")
    assert queue.sleep_when_free == 0.01                    # an event came: brisk
    now["t"] += 4.9
    assert queue.sleep_when_free == 0.01
    now["t"] += 0.2
    assert queue.sleep_when_free == 0.05                    # none for 5 s: calm again


def test_the_app_writes_no_typing_stubs_beside_its_code():
    from lab.ui.fields import _checked
    for stub in UI.glob("*.pyi"):
        stub.unlink()
    _checked(gr.Textbox)                 # a component class made as the app makes its own
    assert not list(UI.glob("*.pyi"))
