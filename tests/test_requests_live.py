"""A web request stops when its caller does, asks for no more than the budget, and stopping the app
with requests in flight exits cleanly. The app runs in a subprocess on a store of tiny
checkpoints with random weights (their captions run to max_new_tokens, so a long request stays
long); the work a request does is read from the app's CPU time in /proc."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from lab.config import DecodeConfig
from lab.errors import LabError
from lab.inputs import tokenizers
from lab.modeling.model import build
from lab.storage import checkpoints
from lab.ui import compare, evaluate
from lab.ui.work import MAX_TOKEN_STEPS, STOPPING_MESSAGE
from tests.conftest import start_app, tiny_config

NAMES = ["a", "b", "c", "d"]
BEAMS = {"decoder": "beam", "num_beams": 8}
# about half the budget: minutes of beam search, a caption at a time
BIG_N = min(200, MAX_TOKEN_STEPS // 2 // (len(NAMES) * 8 * 35))
BIG = dict(checkpoints=NAMES, decode=BEAMS, seed=0, prefix="", n=BIG_N, per_checkpoint=None)
STOP_WITHIN_S = 5           # from the caller leaving to the app's CPU at rest
IDLE = 0.2                  # CPU seconds a second: at rest (the app alone idles near 0.03)


def _store(store):
    tok = tokenizers.gpt2()
    for i, name in enumerate(NAMES):
        torch.manual_seed(i)
        checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tok, name,
                         store, provenance={"source": "scratch"})
    deep = tiny_config(vocab_size=50257, n_positions=64, n_layer=16, n_embd=128)  # patching: long
    checkpoints.save(build(deep).eval(), tok, "deep", store, provenance={"source": "scratch"})


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The app (no job worker: the CPU measured is the requests') and its process."""
    store = tmp_path_factory.mktemp("requests-store")
    _store(store)
    proc, url = start_app(store, store / "app.log", LAB_WORKER="0")
    yield url, proc, store
    proc.terminate()
    proc.wait(timeout=90)


def _cpu_s(proc) -> float:
    """The process's CPU time so far (user + system), in seconds."""
    fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stopped(busy: float, idle: float) -> bool:
    """The app computed before its caller left (a tenth of a core at least) and rests after: a
    quarter of its rate before at most (on a machine busy with other work both rates fall
    together), and below IDLE."""
    return idle < IDLE and busy > max(4 * idle, 0.1)


def _cpu_rate(proc, seconds: float) -> float:
    """CPU seconds a second the process spends over the next `seconds`."""
    before = _cpu_s(proc)
    time.sleep(seconds)
    return (_cpu_s(proc) - before) / seconds


def _working(job, timeout: float = 120) -> str:
    """Wait until the request streams its first progress line; returns it."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        shown = job.outputs()
        if shown and "lab-progress" in shown[-1]:
            return shown[-1]
        assert not job.done(), f"the request ended early: {job.result()}"
        time.sleep(0.3)
    raise AssertionError("no progress streamed")


def _served_promptly(url):
    """A small request after the big one is answered at once: its slot and the CPU are free."""
    from gradio_client import Client
    t0 = time.time()
    shown = Client(url, verbose=False).predict(["a"], {"decoder": "greedy"}, 0, "", 1, None,
                                               api_name="/compare")
    assert "lab-compare" in shown and time.time() - t0 < 30


def test_a_request_stops_when_its_caller_cancels_it(live):
    """What the page's Stop does (gradio_client's cancel posts to /cancel the same way)."""
    from gradio_client import Client
    url, proc, _ = live
    job = Client(url, verbose=False).submit(**BIG, api_name="/compare")
    assert "checkpoint 1 of 4" in _working(job)
    busy = _cpu_rate(proc, 2)
    job.cancel()
    time.sleep(STOP_WITHIN_S)
    idle = _cpu_rate(proc, 3)
    assert _stopped(busy, idle), f"CPU seconds a second: {busy:.2f} before, {idle:.2f} after"
    _served_promptly(url)


def test_patching_and_the_lens_stop_when_their_caller_cancels(live):
    """/patch (the most the page allows: 64 tokens, a deep model) streams while it works and
    stops when cancelled; /lens answers through the same stream."""
    from gradio_client import Client
    url, proc, _ = live
    client = Client(url, verbose=False)
    prompt = " x" * 62
    job = client.submit(checkpoint="deep", clean=prompt, corrupted=" y" + prompt[2:], answer="",
                        wrong="", api_name="/patch")
    deadline = time.time() + 120
    while not (job.outputs() and "doing" in job.outputs()[-1]):
        assert not job.done() and time.time() < deadline, job.result() if job.done() else "no update"
        time.sleep(0.3)
    busy = _cpu_rate(proc, 2)
    job.cancel()
    time.sleep(STOP_WITHIN_S)
    idle = _cpu_rate(proc, 3)
    assert _stopped(busy, idle), f"CPU seconds a second: {busy:.2f} before, {idle:.2f} after"
    lensed = client.predict(checkpoint="a", text="A dog on a couch .", top=3, api_name="/lens")
    assert lensed["checkpoint"] == "a" and len(lensed["layers"]) == 3


CALLER = """
import sys, time
from gradio_client import Client
job = Client(sys.argv[1], verbose=False).submit(**eval(sys.argv[2]), api_name="/compare")
while not (job.outputs() and "lab-progress" in job.outputs()[-1]):
    time.sleep(0.3)
print("working", flush=True)
time.sleep(600)
"""


def test_a_request_stops_when_its_caller_leaves(live):
    """The caller's process dies mid-request (its connection closes without a word)."""
    url, proc, _ = live
    caller = subprocess.Popen([sys.executable, "-c", CALLER, url, repr(BIG)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert caller.stdout.readline().strip() == "working"
        busy = _cpu_rate(proc, 2)
    finally:
        caller.kill()
        caller.wait()
    time.sleep(STOP_WITHIN_S)
    idle = _cpu_rate(proc, 3)
    assert _stopped(busy, idle), f"CPU seconds a second: {busy:.2f} before, {idle:.2f} after"
    _served_promptly(url)


FAULT = ("this comparison asks for 8 checkpoints x 200 captions x 16 beams x 35 tokens = 896,000 "
         f"token-steps; one request may ask at most {MAX_TOKEN_STEPS:,}: fewer captions, beams or "
         f"checkpoints")


def _form_fields(decoder: dict) -> list:
    """The Compare form's decoder fields (every decoder's settings), as the page sends them."""
    return [decoder.get(name, 1.0) for name in DecodeConfig.setting_names()]


def test_a_request_over_the_budget_is_refused_the_same_through_the_api_and_the_form(live):
    from gradio_client import Client
    url, _, store = live
    c = Client(url, verbose=False)
    asked = dict(BIG, checkpoints=(NAMES * 2), decode={"decoder": "beam", "num_beams": 16}, n=200)
    with pytest.raises(Exception) as api:
        c.predict(**asked, api_name="/compare")
    assert FAULT in str(api.value) and "Traceback" not in str(api.value)
    form = compare.compare_form(NAMES * 2, "beam", *_form_fields({"num_beams": 16}), 0, "", 200, 0,
                                False, None, store=store)
    with pytest.raises(LabError) as said:
        next(form)
    assert str(said.value) == FAULT
    # scoring: three checkpoints on all 5,000 test captions, through the API and both forms
    scoring = ("this evaluation asks for 3 checkpoints x 5,000 captions x 1 beam x 35 tokens = "
               f"525,000 token-steps; one request may ask at most {MAX_TOKEN_STEPS:,}")
    with pytest.raises(Exception) as api:
        c.predict(NAMES[:3], {"decoder": "random"}, 5000, 0, "auto", None, api_name="/evaluate")
    assert scoring in str(api.value)
    for form in (evaluate.run(NAMES[:3], "random", *_form_fields({}), 5000, 0, "auto", store=store),
                 compare.scores_form(NAMES[:3], "random", *_form_fields({}), 0, "", 8, 0, False, None,
                                     5000, "auto", store=store)):
        with pytest.raises(LabError, match=scoring):
            next(form)


def test_the_largest_decoder_matrix_is_within_the_budget():
    """The matrix's own bounds (4 checkpoints, 6 temperatures, 10 captions a cell) keep it under."""
    chosen, settings, n, _ = compare._matrix_plan(NAMES, ",".join(["0.5"] * 6),
                                                  compare.MATRIX_MAX_CAPTIONS, 0, "")
    assert len(chosen) == 4 and n == 10 and len(settings) > 6


STOPS = {"compare-stop": "compare-go", "compare-matrix-stop": "compare-matrix",
         "compare-score-stop": "compare-score", "evaluate-stop": "evaluate-go"}


def test_each_long_action_of_the_page_has_a_stop_that_cancels_it(store):
    """Generate side by side, the decoder matrix, Which is better? and Evaluate: a Stop button
    beside each cancels its streaming request (tests/test_browser.py presses Compare's)."""
    import inspect
    from lab.ui import build_app
    demo = build_app(store=str(store))
    ids = {b.elem_id: i for i, b in demo.blocks.items() if getattr(b, "elem_id", None)}
    fns = list(demo.fns.values())
    for stop, go in STOPS.items():
        cancel = next(f for f in fns if f.is_cancel_function and (ids[stop], "click") in f.targets)
        cancelled = [f for f in fns if f._id in cancel.cancels]
        assert [(ids[go], "click")] == [t for f in cancelled for t in f.targets], stop
        assert all(inspect.isgeneratorfunction(f.fn) for f in cancelled), f"{go} does not stream"


def test_stopping_the_app_with_a_request_in_flight_exits_cleanly(tmp_path):
    """SIGTERM while a long /compare computes: the app (and its job worker) exits with 0, at
    once, and says nothing of an abort or a traceback."""
    from gradio_client import Client
    store = tmp_path / "store"
    _store(store)
    proc, url = start_app(store, tmp_path / "app.log")
    try:
        job = Client(url, verbose=False).submit(**BIG, api_name="/compare")
        _working(job)
        told = []
        waiting = threading.Thread(target=lambda: told.append(_result(job)), daemon=True)
        waiting.start()
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "app.log").read_text()
    assert rc == 0, log[-3000:]
    assert time.time() - t0 < 30
    assert "terminate called" not in log and "Traceback" not in log, log[-3000:]
    waiting.join(10)
    assert told == [f"AppError: {STOPPING_MESSAGE}"], told


def _result(job) -> str:
    """What the caller of a request was told when the app stopped under it."""
    try:
        return f"finished: {job.result()[:80]}"
    except Exception as e:      # the app stopping (one line) or the connection closing
        return f"{type(e).__name__}: {e}"
