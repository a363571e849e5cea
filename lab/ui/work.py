"""A web request's work: the budget one request may ask for, and the thread its computation runs
in, which stops when the request does.

Gradio cancels a streaming request (a generator) at its next yield: a request whose caller has
left is dropped after its next update, and Stop (`/cancel`) closes the generator, retrying while
it runs (gradio/queueing.py `process_events`, gradio/utils.py `SyncToAsyncIterator.aclose`). A
computation run inside the generator would be noticed only at its next yield, minutes later for a
long one. So `streamed` runs it in a thread of its own and yields an update at least every POLL_S
while it runs; closing the stream sets the work's stop flag, which the computation reads before
each decoding step (generate's `abort`), so it stops within a step.

Stopping the app (`stop_every_request`, then `wait_for_requests`) sets every work's flag and waits
for the threads and for the callbacks in flight (`call`): a thread still inside torch while the
interpreter finalizes is ended by pthread_exit, whose unwinding through torch's C++ aborts the
process ("terminate called without an active exception"). The work threads are not daemons, so
the interpreter waits for them too.

No Gradio here; it imports the lab's floors below the UI only."""
from __future__ import annotations

import html
import threading
import time
from collections import Counter
from contextlib import contextmanager

from lab.config import ConfigError, DecodeConfig
from lab.errors import Aborted, LabError
from lab.modeling.generate import rows_per_caption

POLL_S = 0.5        # a streaming request sends an update at least this often while its work runs

# The work one request may ask for, in token-steps: checkpoints x captions x the rows each caption
# decodes (a beam search's beams, else 1) x max_new_tokens. The limit keeps the largest request the
# page offers, and one checkpoint scored on all 5,000 test captions (175,000), within a few
# minutes on a small CPU, and refuses what belongs in the CLI or a sweep's scoring job (8
# checkpoints x 200 captions x 16 beams is 896,000). What each size takes, measured:
# docs/benchmarks.md, "A web request's budget" (benchmarks/request_budget.py).
MAX_TOKEN_STEPS = 200_000


def _count(k: int, word: str) -> str:
    return f"{k:,} {word}{'' if k == 1 else 's'}"


def within_budget(what: str, captions: int, decoders: list[DecodeConfig], fewer: str,
                  unit: str = "checkpoint") -> int:
    """The token-steps a request asks for: `captions` with each of `decoders` (one per
    checkpoint, or per `unit`); over MAX_TOKEN_STEPS, refused in one line naming the ask, the
    limit and `fewer` (what to ask for less of)."""
    groups = Counter((rows_per_caption(cfg), cfg.max_new_tokens) for cfg in decoders)
    asked = sum(k * captions * rows * tokens for (rows, tokens), k in groups.items())
    if asked <= MAX_TOKEN_STEPS:
        return asked
    terms = " + ".join(f"{_count(k, unit)} x {_count(captions, 'caption')} x {rows} "
                       f"beam{'' if rows == 1 else 's'} x {_count(tokens, 'token')}"
                       for (rows, tokens), k in groups.items())
    raise ConfigError(f"{what} asks for {terms} = {asked:,} token-steps; one request may ask at "
                      f"most {MAX_TOKEN_STEPS:,}: {fewer}")


class Work:
    """What a computation sees of its request: whether to stop, and where to say how far it is."""

    def __init__(self):
        self.stopped = threading.Event()
        self.said = None            # how far it is, in whatever form the stream's `show` reads

    def stop_asked(self) -> bool:
        return self.stopped.is_set() or _STOPPING.is_set()

    def say(self, value) -> None:
        self.said = value


_STOPPING = threading.Event()       # the app is stopping: every work stops at its next step
_threads: set[threading.Thread] = set()
_lock = threading.Condition()       # guards _threads and _in_flight
_in_flight = [0]                    # callbacks running (`call`)

STOPPING_MESSAGE = "the app is stopping, so this request was not finished; ask again once it is back"


def streamed(compute, show):
    """Run compute(work) in a thread of its own; while it runs, yield show(work.said) at least
    every POLL_S; return its result (or raise its error). Closing the stream before the end (its
    caller left, or pressed Stop) stops the work at its next step."""
    if _STOPPING.is_set():
        raise LabError(STOPPING_MESSAGE)
    work, box = Work(), {}
    # not a daemon (as the thread serving the request is): the interpreter waits for it
    thread = threading.Thread(target=_run, args=(compute, work, box), name="lab-request",
                              daemon=False)
    with _lock:
        _threads.add(thread)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(POLL_S)
            if thread.is_alive():
                yield show(work.said)
    finally:
        work.stopped.set()
    if isinstance(box.get("error"), Aborted) and _STOPPING.is_set():
        raise LabError(STOPPING_MESSAGE)
    if "error" in box:
        raise box["error"]
    return box["result"]


def _run(compute, work: Work, box: dict) -> None:
    try:
        box["result"] = compute(work)
    except BaseException as e:          # the stream raises it, if anyone still listens
        box["error"] = e
    finally:
        with _lock:
            _threads.discard(threading.current_thread())
            _lock.notify_all()


@contextmanager
def call():
    """A callback in flight: the app waits for it before it exits."""
    with _lock:
        _in_flight[0] += 1
    try:
        yield
    finally:
        with _lock:
            _in_flight[0] -= 1
            _lock.notify_all()


def stop_every_request() -> None:
    """The app is stopping: every request's work stops at its next step, and new work at once."""
    _STOPPING.set()


def wait_for_requests(grace_s: float) -> int:
    """Wait up to grace_s for the work threads and the callbacks in flight to end; how many are
    still running."""
    deadline = time.monotonic() + grace_s
    with _lock:
        _lock.wait_for(lambda: not _threads and not _in_flight[0],
                       timeout=max(0.0, deadline - time.monotonic()))
        return len(_threads) + _in_flight[0]


def progress_bar(fraction: float, text: str) -> str:
    """The lab's progress line: a bar `fraction` full and what is under way."""
    return (f"<div class='lab-progress'>{bar(fraction)}</div>"
            f"<p class='lab-progress-text'>{html.escape(text)}</p>")


def bar(fraction: float) -> str:
    """A progress bar's fill, `fraction` full. It is scaled, not sized: its move to a new fraction
    is drawn by the compositor, where a width's would lay the page out again at every frame
    (about 30 times a second while a job's view follows it: benchmarks/busy_tab.py)."""
    return f"<div class='bar' style='transform:scaleX({min(1.0, max(0.0, fraction)):.3f})'></div>"
