"""A job's heartbeat: while a phase is under way (`with phase("saving the checkpoint"):`), a
daemon thread writes a progress event every BEAT_S seconds that names the phase and how long it
has run. A job's line then stays fresh however long one step, the data preparation, loading the
parent, a save or an evaluation takes. Every event goes through one lock, so the trainer's
events and the beats never interleave. Without a started beat (the CLI, the trainer alone) a
phase only marks.

    beat = heartbeat.start(write)     # write(event): the job's log and ledger
    with heartbeat.phase("preparing the captions"):
        ...                           # a beat every BEAT_S: {"event": "progress", "doing": ...}
    heartbeat.stop()
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable

BEAT_S = 2.0            # a beat when nothing was written for this long (the docs promise 3 s)


class Beat:
    """write(event) is called under the lock, from the main thread (write) or the beat's."""

    def __init__(self, write: Callable[[dict], None], every_s: float | None = None):
        self._write, self.every_s = write, every_s or BEAT_S
        self._lock, self._stopped = threading.Lock(), threading.Event()
        self.phases: list[list] = []    # [what, more, started], the innermost last
        self.last = time.time()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def write(self, ev: dict) -> None:
        with self._lock:
            ev.setdefault("time", round(time.time(), 3))
            self._write(ev)
            self.last = time.time()

    def _run(self) -> None:
        while not self._stopped.wait(self.every_s / 8):
            if time.time() - self.last >= self.every_s and self.phases:
                try:
                    self.write(self.beat())
                except Exception:        # a beat never ends a job; the next one tries again
                    self.last = time.time()

    def beat(self) -> dict:
        """The innermost phase: what it does (a text, or a function saying it now), for how long,
        and the fields the innermost `more` adds (a trainer's step, total steps and ETA)."""
        what, _, started = self.phases[-1]
        more = next((m for _, m, _ in reversed(self.phases) if m), None)    # the nearest given
        return {**(more() if more else {}), "event": "progress", "phase": "working",
                "doing": what() if callable(what) else what, "phase_s": time.time() - started}

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)


_beat: Beat | None = None


def start(write: Callable[[dict], None], every_s: float | None = None) -> Beat:
    """The process's beat (one at a time: a started one is stopped first)."""
    global _beat
    stop()
    _beat = Beat(write, every_s)
    return _beat


def stop() -> None:
    global _beat
    if _beat is not None:
        _beat.stop()
    _beat = None


@contextmanager
def phase(what: str | Callable[[], str], more: Callable[[], dict] | None = None):
    """Mark a phase: while it lasts the beats say `what` (a text, or a function returning the
    text now, like "training step 12 of 40"); more() adds fields to each beat."""
    beat, entry = _beat, [what, more, time.time()]
    if beat is not None:
        beat.phases.append(entry)
    try:
        yield
    finally:
        if beat is not None:      # by identity: phases of generators may close out of order
            beat.phases = [e for e in beat.phases if e is not entry]
