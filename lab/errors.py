"""The one base class of every error a user's input can cause (a bad config value, a missing
checkpoint, a corrupt file, an unknown plugin). The CLI prints it as one line and exits 2, the UI
shows it as one message; any other exception is a bug and keeps its traceback for the log.
Also how a JSON file a person gave is read: a missing, unreadable or broken file is one line."""
import difflib
import errno
import json
import sys
from pathlib import Path


class LabError(ValueError):
    """Bad input, said in one line: what was wrong, which value, what is right."""


def not_found(what: str, name: str, have: list[str], listed_by: str, when_empty: str) -> str:
    """'no WHAT NAME in the store; ...', said alike to every caller (never a server path, never the
    list): a near name, or how many there are and `listed_by` what; `when_empty` if there are none."""
    near = difflib.get_close_matches(name, have, n=1)
    return f"no {what} {name!r} in the store; " + (
        when_empty if not have else f"did you mean {near[0]!r}?" if near else
        f"it holds {len(have)}: {listed_by} lists them")


def quoted(value, limit: int = 60) -> str:
    """A value as a message shows it: its repr, a long one cut (with how long it was)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value):,} characters" if isinstance(value, str) else f"{len(text):,} characters shown"
    return f"{text[:limit]}... ({size})"


class OutOfMemory(LabError):
    """A request the machine had no memory left for: said as a person's mistake (ask for less)."""


def out_of_memory(e: BaseException) -> OutOfMemory | None:
    """An allocation that failed (Python's MemoryError, the system's ENOMEM, or torch's error saying
    so, on the CPU or CUDA: torch.OutOfMemoryError is a RuntimeError) as the
    one line a person gets; None for any other error."""
    said = str(e).lower()
    if not (isinstance(e, MemoryError)
            or isinstance(e, OSError) and e.errno == errno.ENOMEM
            or isinstance(e, RuntimeError) and ("can't allocate memory" in said or "not enough memory"
                                                in said or "out of memory" in said)):
        return None
    return OutOfMemory("the machine ran out of memory for this; ask for less (a shorter text, "
                       "fewer texts or rows) or free some memory")


class ConfigError(LabError):
    """A config value a person can fix: the message says which key, what it was, what is right."""


class Aborted(Exception):
    """A long computation gave up because its caller asked it to (a training job told to stop)."""


def read_json(path, error: type[LabError] = LabError, missing: str | None = None):
    """A JSON file's value, or `error` in one line saying which file and what is wrong with it
    (`missing`: the words for a file that is not there, else "FILE does not exist")."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(missing or f"{path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path} is not valid JSON ({e})") from None
    except RecursionError:
        raise error(f"{path} nests its JSON too deeply to read (objects inside objects, "
                    f"about {sys.getrecursionlimit():,} levels at most)") from None
    except OSError as e:
        raise error(f"{path} cannot be read ({e.strerror})") from None
