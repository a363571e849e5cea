"""Named points inside a model: places to read an activation or put another in its place (the
logit lens, head ablation and activation patching read and write them; lab.inside).

A point is a `Point` module the forward passes its tensor through (TransformerLens's HookPoint in
spirit): an identity with no weights, so checkpoints and their state dicts do not change. Plain
torch forward hooks read or replace what passes: a hook that returns a tensor replaces it.

The standard decoder (lab.modeling.model.assemble: the gpt2 and llama families, with every
norm, attention, positional and MLP plugin) has, by name:

    embed                      token embedding + positions (after dropout): the stream's start
    blocks.L.resid_pre         the residual stream entering block L (0-based)
    blocks.L.attn.z            each head's output before the output projection, (B, n_head, T, head_dim)
    blocks.L.attn_out          the attention's output added to the stream (after the projection)
    blocks.L.resid_mid         the stream between attention and MLP
    blocks.L.mlp_out           the MLP's output added to the stream
    blocks.L.resid_post        the stream leaving block L
    final_norm                 the final norm's output, read by the output layer

Post-norm blocks (norm_position=post) keep the same names: resid_mid and resid_post are the norms'
outputs there, which is what the next part reads. Attention patterns are read with
`output_attentions=True` (the Attention tab's path), not through a point.

A family whose layers are not a plain stack of such blocks says why in `points_absent` (the
Perceiver's bottleneck, the Universal Transformer's repeated block, Transformer-XL's memory).
"""
from __future__ import annotations

from torch import nn


class Point(nn.Identity):
    """A named place in the forward pass: an identity that hooks can read and replace."""


def points(model: nn.Module) -> dict[str, Point]:
    """The model's points by name (the module docstring), in the order the forward meets them;
    empty where the family declares them absent."""
    if getattr(model, "points_absent", None):
        return {}
    found = {}
    for path, module in model.named_modules():
        if isinstance(module, Point):
            found[point_name(path)] = module
    return dict(sorted(found.items(), key=lambda kv: _order(kv[0])))


def point_name(module_path: str) -> str:
    """transformer.h.3.attn.hook_z -> blocks.3.attn.z; transformer.hook_embed -> embed."""
    parts = module_path.split(".")
    if parts[:2] == ["transformer", "h"]:
        parts = ["blocks"] + parts[2:]
    elif parts[0] == "transformer":
        parts = parts[1:]
    return ".".join(p.removeprefix("hook_") for p in parts)


ORDER = ("resid_pre", "attn.z", "attn_out", "resid_mid", "mlp_out", "resid_post")


def _order(name: str) -> tuple:
    if name == "embed":
        return (-1, 0)
    if name == "final_norm":
        return (10 ** 9, 0)
    _, layer, rest = name.split(".", 2)
    return (int(layer), ORDER.index(rest))


def n_layers(model: nn.Module) -> int:
    return len(model.transformer.h)
