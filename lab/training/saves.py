"""When a run saves where it stands: every `save_every_minutes` of wall time since its last save
of resumable state (a periodic one, a stop's, or the best checkpoint's, which holds its training
state too), so a crash loses at most that much training. Asked between steps: one clock read.
A saved state holds the random states too (rng_state), so a resumed run draws what the unbroken
one would.
"""
from __future__ import annotations

import time

import torch


class SaveClock:
    """minutes: the interval (0: never). saved: a resumable state is already on disk as training
    starts (a resumed run's), so the time since it is what a crash would lose."""

    def __init__(self, minutes: float, saved: bool = False):
        self.every_s = max(minutes, 0.0) * 60
        self.last, self.saved_any = time.monotonic(), saved

    def due(self) -> bool:
        return self.every_s > 0 and time.monotonic() - self.last >= self.every_s

    def saved(self) -> None:
        self.last, self.saved_any = time.monotonic(), True

    def said(self) -> dict:
        """What a progress line says about saving: seconds since the last save, or until the
        first one; nothing when periodic saves are off."""
        if not self.every_s:
            return {}
        ago = time.monotonic() - self.last
        return {"saved_s_ago": ago} if self.saved_any else {"next_save_s": max(self.every_s - ago, 0.0)}


def rng_state(device: torch.device) -> dict:
    """The random states dropout draws from, so a resumed run draws what the unbroken one would."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state[f"cuda{device.index or 0}"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    if "cpu" in state:
        torch.set_rng_state(state["cpu"])
    key = f"cuda{device.index or 0}"
    if device.type == "cuda" and key in state:
        torch.cuda.set_rng_state(state[key], device)
