"""Weights read one tensor at a time: an import holds the model it builds and the one tensor it is
copying, never a second copy of the whole file (a 355M-parameter GPT-2 raised an import's peak to
about three copies when every tensor was read first).

`Lazy` maps names to shapes it knows without reading, and to tensors it reads when asked, each
checked for NaN and infinity then. Renamings and reshapings (a transpose, a concatenation) are
`Lazy` maps over another, so nothing is read before it is copied into its place.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from lab.storage import health
from lab.storage.checkpoints import CheckpointError


class Lazy(Mapping):
    """{name: tensor}, each tensor made by its thunk when asked; shape(name) without making it."""

    def __init__(self, entries: dict[str, tuple[tuple, Callable[[], torch.Tensor]]]):
        self._entries = entries

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._entries[name][1]()

    def __contains__(self, name) -> bool:      # without reading the tensor
        return name in self._entries

    def __iter__(self):
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def shape(self, name: str) -> tuple:
        return self._entries[name][0]

    def drop(self, name: str) -> None:
        """Leave `name` out (if there), unread."""
        self._entries.pop(name, None)


def safetensors_files(files: list[Path], where: str) -> Lazy:
    """The tensors of one or more safetensors files (a sharded checkpoint's shards), read one at a
    time when asked and refused by name when one holds NaN or infinity."""
    from safetensors import SafetensorError, safe_open
    entries = {}
    for file in files:
        try:
            handle = safe_open(str(file), framework="pt")
            for name in handle.keys():
                entries[name] = (tuple(handle.get_slice(name).get_shape()),
                                 _checked(lambda h=handle, n=name: h.get_tensor(n), name, where))
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"{file} cannot be read ({e}); the file is truncated or "
                                  f"corrupt") from None
    return Lazy(entries)


def tensors(state: dict, where: str) -> Lazy:
    """Tensors already at hand (e.g. memory-mapped by torch.load), checked as they are taken."""
    return Lazy({name: (tuple(t.shape), _checked(lambda t=t: t, name, where))
                 for name, t in state.items()})


def _checked(read: Callable[[], torch.Tensor], name: str, where: str) -> Callable[[], torch.Tensor]:
    def thunk() -> torch.Tensor:
        t = read()
        bad = health.nonfinite_in([(name, t)], "the weights file")
        if bad:
            raise CheckpointError(f"{where}: {bad}; nothing imported")
        return t
    return thunk
