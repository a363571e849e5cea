"""What every command prints with: JSON for --json, and a run's training events as lines."""
from __future__ import annotations

import json
import os
import sys

from lab.errors import LabError, out_of_memory
from lab.training.progress import format_event


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def print_events(events, name: str, as_json: bool) -> None:
    for ev in events:
        print(json.dumps(ev) if as_json else format_event(ev, name), flush=True)


def run_command(fn, args) -> int:
    """Run one command, its errors said as every command says them: a person's mistake in one
    line (status 2), a bug in one line with the traceback on demand (LAB_DEBUG=1; status 1)."""
    try:
        fn(args)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:         # the reader left (`... --json | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (MemoryError, RuntimeError, OSError) as e:
        said = out_of_memory(e)
        if said is None:
            return _bug(e)
        print(f"error: {said}", file=sys.stderr)
        return 2
    except Exception as e:     # a bug, not the person's input: one line here, the traceback on demand
        return _bug(e)
    return 0


def _bug(e: Exception) -> int:
    if os.environ.get("LAB_DEBUG"):
        raise e
    print(f"error: internal error ({type(e).__name__}: {e}); this is a bug in the lab: run again "
          f"with LAB_DEBUG=1 for the traceback", file=sys.stderr)
    return 1
