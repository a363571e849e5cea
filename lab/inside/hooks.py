"""Reading and replacing activations at named points (lab.modeling.points), with plain torch
forward hooks: a point is an identity module, so a hook that returns a tensor replaces what
passes. Hooks are removed when the `with` block ends, whatever happens inside it, and act only on
the thread that set them: the app shares a loaded model between requests, and another request's
pass through it (a Compare tab's generation) sees the model intact."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable

import torch

from lab.config import ConfigError
from lab.modeling.points import points


def check_model(model) -> dict:
    """The model's points, or one clear refusal naming why its family has none."""
    absent = getattr(model, "points_absent", None)
    if absent:
        raise ConfigError(f"the {model.config.model} family has no named points inside: {absent}")
    return points(model)


@contextmanager
def hooked(model, read=(), replace: dict[str, Callable[[torch.Tensor], torch.Tensor]] | None = None):
    """with hooked(model, read=[names], replace={name: fn}) as seen: run the model; `seen[name]`
    then holds what passed each read point (detached), and each replaced point passed fn(tensor)
    on instead. A point read and replaced is read after its replacement."""
    found = check_model(model)
    unknown = [n for n in [*read, *(replace or {})] if n not in found]
    if unknown:
        raise ConfigError(f"no point named {unknown[0]!r}; this model has "
                          f"{', '.join(list(found)[:8])}, ... ({len(found)} in all)")
    seen: dict[str, torch.Tensor] = {}
    handles = []
    owner = threading.get_ident()   # a loaded model is shared: other requests' passes are left alone

    def replacing(fn):
        return lambda m, i, out: fn(out) if threading.get_ident() == owner else None

    def reading(name):
        def keep(m, i, out):
            if threading.get_ident() == owner:
                seen[name] = out.detach()
        return keep
    try:
        for name, fn in (replace or {}).items():
            handles.append(found[name].register_forward_hook(replacing(fn)))
        for name in read:
            handles.append(found[name].register_forward_hook(reading(name)))
        yield seen
    finally:
        for h in handles:
            h.remove()


def residual_names(model) -> list[str]:
    """The residual stream's states a lens reads: the embeddings, then each block's output."""
    return ["embed"] + [f"blocks.{i}.resid_post" for i in range(len(model.transformer.h))]


def unembed(model, stream: torch.Tensor) -> torch.Tensor:
    """The output layer's logits for residual-stream states: through the final norm, as the
    model reads its last block's output."""
    return model.lm_head(model.transformer.ln_f(stream))
