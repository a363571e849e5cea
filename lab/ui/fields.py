"""Gradio's input components and Blocks, with one change: what Gradio itself refuses before the
lab's code runs (a choice not offered, a number below its minimum, text where a table goes, a file
of a type the field does not take, an event sent fewer values than it takes) comes back as one line
naming the field, and is one line in the server's log, not a traceback. A value is checked against
the component's data model before the component sees it; that check refuses the same way. The
frontend draws the components as the originals (`is_template`: Gradio names the Svelte component
after the base class)."""
from __future__ import annotations

import logging
from pathlib import Path

import gradio as gr
import pydantic
from gradio_client.utils import is_valid_file

log = logging.getLogger("lab.ui")


def refuse(message: str) -> gr.Error:
    """A person's mistake: one line for the page and one for the server's log, no traceback. The
    message stays until it is closed or the person's next action (lab/ui/__init__.py's HEAD), so
    the mark it leaves is never without its words."""
    log.warning("refused: %s", message)
    return gr.Error(message, duration=None, print_exception=False)


def _shown(value) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:80] + "..."


def _fitting(field, model):
    """`model` (a component's data model), refusing a value of another shape in one line that names
    `field` (pydantic's own error would reach the log as a traceback)."""
    def model_validate(cls, value, *args, **kwargs):
        try:
            return model.model_validate(value, *args, **kwargs)
        except pydantic.ValidationError:
            raise refuse(f"{field.label}: {_shown(value)} is not a value this field takes") from None
    return type(model.__name__, (model,), {"model_validate": classmethod(model_validate),
                                           "__module__": model.__module__})


def _checked(base):
    class Checked(base):
        is_template = True

        @property
        def data_model(self):
            """The base's data model (some components set theirs as they are built), fitted."""
            model = self.__dict__.get("_model", getattr(base, "data_model", None))
            if model is None:
                return None
            if getattr(self.__dict__.get("_fitted"), "__base__", None) is not model:
                self.__dict__["_fitted"] = _fitting(self, model)
            return self.__dict__["_fitted"]

        @data_model.setter
        def data_model(self, model):
            self.__dict__["_model"] = model

        def preprocess(self, payload):
            try:
                return super().preprocess(payload)
            except gr.Error as e:
                raise refuse(f"{self.label}: {e.message}") from None
            except Exception:
                raise refuse(f"{self.label}: {_shown(payload)} is not a value this field takes") from None
    Checked.__name__ = Checked.__qualname__ = base.__name__
    return Checked


Checkbox = _checked(gr.Checkbox)
Dataframe = _checked(gr.Dataframe)


class Dropdown(_checked(gr.Dropdown)):
    """A dropdown whose schema tells the truth: one that takes values beyond its choices (those
    listing what is in the store: checkpoints, jobs, sweeps, datasets, made before or after the app
    started) is a string in the API, not the choices it had when the app started."""

    def api_info(self) -> dict:
        info = super().api_info()
        if not self.allow_custom_value:
            return info
        text = {"type": "string"}
        return {"type": "array", "items": text} if self.multiselect else text


Number = _checked(gr.Number)
Radio = _checked(gr.Radio)
Textbox = _checked(gr.Textbox)


class File(_checked(gr.File)):
    """An upload field that names the file whose type it does not take."""

    def _process_single_file(self, f):
        if self.file_types and not is_valid_file(f.path, self.file_types):
            raise gr.Error(f"{Path(f.path).name} is not a file it takes (it takes "
                           f"{', '.join(self.file_types)})")
        return super()._process_single_file(f)


class Blocks(gr.Blocks):
    """gr.Blocks, refusing a call that gives an event fewer values than it takes in one line
    (Gradio's own refusal is a traceback in the log and no message for the caller), and whose API
    schema is the same whatever the store holds: a parameter listing what is in the store defaults
    to none chosen, not to what the page picked when it was built."""

    def get_api_info(self, *args, **kwargs):
        info = super().get_api_info(*args, **kwargs)
        for fn in self.fns.values():
            endpoint = info["named_endpoints"].get(f"/{fn.api_name}")
            if endpoint is None:
                continue
            shown = [b for b in fn.inputs if not self.blocks[b._id].skip_api]
            for block, parameter in zip(shown, endpoint["parameters"]):
                if isinstance(block, Dropdown) and block.allow_custom_value:
                    blank = [] if block.multiselect else ""       # none chosen: the call says which
                    parameter.update(example_input=blank, parameter_has_default=True, parameter_default=blank)
        return info

    def validate_inputs(self, block_fn, inputs):
        wanted = block_fn.inputs
        if len(inputs) < len(wanted):
            names = ", ".join(str(getattr(b, "label", None) or type(b).__name__) for b in wanted)
            raise refuse(f"{block_fn.api_name or block_fn.name or 'the event'} takes {len(wanted)} "
                         f"values ({names[:200]}), got {len(inputs)}")
        super().validate_inputs(block_fn, inputs)
