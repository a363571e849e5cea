"""What every command prints with: JSON for --json, and a run's training events as lines."""
from __future__ import annotations

import json

from lab.training.progress import format_event


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def print_events(events, name: str, as_json: bool) -> None:
    for ev in events:
        print(json.dumps(ev) if as_json else format_event(ev, name), flush=True)
