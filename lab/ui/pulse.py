"""One timer for the page. What follows the store or a running job (every checkpoint dropdown, the
chosen job's progress, the chosen sweep's runs, a task's own tables) is refreshed by one tick every
two seconds, not by a timer each: every event a page receives costs its browser a walk over the
whole layout and the app a round through Gradio's queue, whatever the event brings. Each part
returns gr.skip() for what has not changed; a part that cannot be read this time (LabError), or
fails (a bug: logged with its traceback), leaves its outputs as they are, and the other parts go
on."""
from __future__ import annotations

import logging

import gradio as gr

from lab.errors import LabError

log = logging.getLogger("lab.ui")
SECONDS = 2.0


class Pulse:
    """The parts the page's one timer refreshes, in the order they were added."""

    def __init__(self):
        self.parts: list[tuple] = []

    def every(self, fn, inputs: list, outputs: list) -> None:
        """Call fn(*the inputs' values) on each tick; it returns one value per output (for a
        single output, the value alone)."""
        self.parts.append((fn, list(inputs), list(outputs)))

    def start(self, wrap) -> gr.Timer | None:
        """The timer, wired to every part added (once, after every tab is built); wrap: what
        every event handler of the page is wrapped in (lab.ui.common.friendly)."""
        outputs = [c for _, _, outs in self.parts for c in outs]
        if len({id(c) for c in outputs}) != len(outputs):
            raise ValueError("two parts of the pulse update the same component")
        if not self.parts:
            return None
        timer = gr.Timer(SECONDS)
        timer.tick(wrap(self._tick), [c for _, ins, _ in self.parts for c in ins], outputs,
                   api_visibility="private", show_progress="hidden")
        return timer

    def _tick(self, *values) -> list:
        out, at = [], 0
        for fn, ins, outs in self.parts:
            try:
                result = fn(*values[at:at + len(ins)])
                result = [result] if len(outs) == 1 else list(result)
            except LabError as e:
                log.info("not refreshed this time: %s", e)
                result = [gr.skip()] * len(outs)
            except Exception:       # a bug in one part (a task's view, say) stops no other part
                log.exception("a part of the page's pulse failed (a bug): %s", getattr(fn, "__name__", fn))
                result = [gr.skip()] * len(outs)
            at += len(ins)
            out.extend(result)
        return out
