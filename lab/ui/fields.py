"""Gradio's input components, with one change: a value a component itself refuses (a choice not
offered, a number below its minimum, a table of the wrong shape) comes back as one line naming the
field, and prints no traceback in the server's terminal. The frontend draws them as the originals
(`is_template`: Gradio names the Svelte component after the base class)."""
from __future__ import annotations

import gradio as gr


def _checked(base):
    class Checked(base):
        is_template = True

        def preprocess(self, payload):
            try:
                return super().preprocess(payload)
            except gr.Error as e:
                raise gr.Error(f"{self.label}: {e.message}", print_exception=False) from None
            except Exception:
                shown = repr(payload)
                shown = shown if len(shown) <= 80 else shown[:80] + "..."
                raise gr.Error(f"{self.label}: {shown} is not a value this field takes",
                               print_exception=False) from None
    Checked.__name__ = Checked.__qualname__ = base.__name__
    return Checked


Checkbox = _checked(gr.Checkbox)
Dataframe = _checked(gr.Dataframe)
Dropdown = _checked(gr.Dropdown)
Number = _checked(gr.Number)
Radio = _checked(gr.Radio)
Textbox = _checked(gr.Textbox)
