"""The lab's cache: what is slow to make and can be made again from a file the lab reads, kept
between runs (SmolLM2 read from its GGUF: smollm2.py). Nothing in it is the only copy of anything.

It lives in $LAB_CACHE, else $XDG_CACHE_HOME/tfmr-lab, else ~/.cache/tfmr-lab. An entry is a folder
named for what it was made from (the file's path, size and modification time, and the transformers
version that read it), so a changed file or library makes a new entry. An entry is written in a
temporary folder and renamed into place whole, so a kill mid-write leaves no entry that looks done;
an entry that cannot be read is removed and made again. Where the cache cannot be written (no
room, a read-only home) the lab goes on without it, noting why in the log.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

log = logging.getLogger("lab.storage.cache")

ROOM_FACTOR = 3          # an entry is written only where the disk has this many times its size free


def root() -> Path:
    """Where the cache lives ($LAB_CACHE, else the XDG cache folder's tfmr-lab)."""
    chosen = os.environ.get("LAB_CACHE") or \
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfmr-lab"
    return Path(chosen)


def folder_for(kind: str, source: Path) -> Path | None:
    """The entry made from file `source` (which may not exist yet), or None where the source
    cannot be described (then nothing is cached)."""
    import transformers
    try:
        st = source.stat()
    except OSError:
        return None
    key = f"{source.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{transformers.__version__}"
    return root() / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def keep(folder: Path, write: Callable[[Path], None], nbytes: int) -> None:
    """Make entry `folder` (about `nbytes`) with write(temporary folder), renamed into place when
    whole; an entry another process made meanwhile is kept. Never raises for the disk: the cache
    is an aid, not a duty."""
    if folder.exists():
        return
    tmp = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(folder.parent).free < ROOM_FACTOR * nbytes:
            log.info("cache %s: too little free disk to keep %s", folder.parent, folder.name)
            return
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        write(tmp)
        os.rename(tmp, folder)
        tmp = None
    except OSError as e:            # no room, read-only, or another process renamed first
        log.info("cache %s not kept: %s", folder.name, e)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def forget(folder: Path, why: str) -> None:
    """Remove an entry that could not be read (it is made again from its source)."""
    log.warning("cache %s could not be read (%s): made again", folder, why[:300])
    shutil.rmtree(folder, ignore_errors=True)
