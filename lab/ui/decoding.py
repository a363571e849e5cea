"""The decoder fields of a form (one per decoder setting, from the decoder plugins' own settings)
and the named decoder settings an API caller gives, read into DecodeConfigs."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import gradio as gr

from lab.config import ConfigError, DecodeConfig
from lab.registry import DECODERS
from lab.ui.fields import Dropdown, Number
from lab.ui.common import outputs


@dataclass
class DecoderInputs:
    decoder: gr.Dropdown
    fields: list            # one per decoder setting name (DecodeConfig.setting_names())

    def components(self) -> list:
        return [self.decoder, *self.fields]


def _settings_of(decoder: str) -> set[str]:
    cls = DecodeConfig.settings_class(decoder)
    return {f.name for f in dataclasses.fields(cls)} if cls else set()


def decoder_inputs(opening: dict, label_prefix: str = "", elem_id: str | None = None) -> DecoderInputs:
    """Decoder dropdown and a field per decoder setting, from the decoders' own settings classes
    (a new decoder plugin needs no UI code), opening on `opening` (a named decoder, such as
    presets.DECODE_TO_SHOW); the fields of settings the chosen decoder does not have are hidden."""
    declared = DecodeConfig.declared()
    names = list(declared)
    default = opening["decoder"]
    with gr.Row():
        decoder = Dropdown(DECODERS.names(), value=default, label=f"{label_prefix}decoder",
                           info="how the next token is chosen", allow_custom_value=True,
                           elem_id=elem_id)
        fields = []
        for name, (f, _) in declared.items():
            fields.append(Number(opening.get(name, f.default), label=name, info=f.metadata.get("help"),
                                 **({"step": 1} if isinstance(f.default, int) else {}),
                                 visible=name in _settings_of(default)))

    def show(chosen):
        has = _settings_of(chosen)
        return outputs([gr.update(visible=n in has) for n in names])
    decoder.change(show, decoder, fields, api_visibility="private")
    return DecoderInputs(decoder, fields)


def form_decode(decoder, values) -> dict:
    """A form's decoder fields (DecodeConfig.setting_names() order) as the named object an API
    caller gives: the decoder and its own settings only (the form shows every decoder's)."""
    own = {f.name for f in dataclasses.fields(DecodeConfig.settings_class(decoder) or _NoSettings)}
    return {"decoder": decoder, **{k: v for k, v in zip(DecodeConfig.setting_names(), values)
                                   if k in own}}


@dataclass
class _NoSettings:
    """A decoder without settings (or an unknown one, which DecodeConfig names)."""


def decode_of(decode, seed, what: str = "decode", lenient: bool = False) -> DecodeConfig:
    """An API caller's named decoder settings, e.g. {"decoder": "top_p", "temperature": 0.7}."""
    if not isinstance(decode, dict):
        raise ConfigError(f'{what}: expected a JSON object such as {{"decoder": "top_p", '
                          f'"temperature": 0.7}}, got {type(decode).__name__}')
    return DecodeConfig.from_dict({**decode, "seed": seed}, lenient=lenient)


def decoders_of(chosen: list[str], decode, per_checkpoint, seed) -> list[DecodeConfig]:
    """Each chosen checkpoint's decoder: the shared one, with its own settings over it (a setting
    of the shared decoder that its own decoder lacks is dropped)."""
    decode_of(decode, seed)                                         # the shared one is whole
    per_checkpoint = {} if per_checkpoint is None else per_checkpoint
    if not isinstance(per_checkpoint, dict) or not all(isinstance(v, dict) for v in per_checkpoint.values()):
        raise ConfigError("per_checkpoint: expected a JSON object of checkpoint name -> decoder "
                          "settings, e.g. {\"scratch\": {\"decoder\": \"greedy\"}}")
    stray = sorted(set(per_checkpoint) - set(chosen))
    if stray:
        raise ConfigError(f"per_checkpoint names {', '.join(stray)}, not among the chosen "
                          f"checkpoints {', '.join(chosen)}"[:300])
    return [decode_of({**decode, **per_checkpoint.get(name, {})}, seed, f"decoder of {name}",
                      lenient=name in per_checkpoint) for name in chosen]
