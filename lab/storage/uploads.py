"""What a browser's upload may put on the server's disk. Its files are copied, or unpacked from a
.zip, into a scratch folder of the store's (`STORE/.lab/uploads/`), which goes when the import ends,
refused or not (and, if the process died, when the app next starts). Each file is taken by its base
name only, and only up to a limit the caller states for it: a .zip member whose header says it is
larger is refused before a byte is written, and since headers can lie, the bytes are counted as they
unpack and the file is refused the moment it passes its limit. All of an upload together stays
within MAX_UPLOAD_BYTES, and within the disk's free space as its headers state it, less what the
uploads still in flight on the store (in any process: the app's, another app's, a command's) have
said they will write and not written yet, and the checkpoint each then saves (about as large
again). Each upload's claim is a file in its scratch folder naming its process; a claim whose
process is gone (killed) claims nothing, and its folder is cleared when an app next starts.

This module knows no model format (lab/storage/interop.py says what a GPT-2 upload may hold); it
imports only the store below it.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lab.storage import store as lab_store
from lab.storage.checkpoints import CheckpointError

MiB = 2 ** 20
MAX_UPLOAD_BYTES = 8 * 2 ** 30     # one upload, unpacked; the web app takes files of at most 2 GB each
CHUNK = MiB                        # how much is unpacked, counted and written at a time

# {file name: (the most bytes it may hold, what says so, e.g. "a tokenizer file may hold")}
Limits = dict[str, tuple[int, str]]


CLAIM = ".claim"         # in a scratch folder: {"pid", "bytes"}, what its upload said it will hold


def uploads_dir(store=None) -> Path:
    return lab_store.state_dir(store, "uploads")


def clear(store=None) -> None:
    """Scratch folders an import left when its process died (the app calls this as it starts);
    one whose process still runs (a command's import beside the app) is left to it."""
    for leftover in uploads_dir(store).iterdir():
        if leftover.is_dir() and _claim(leftover) is None:
            shutil.rmtree(leftover, ignore_errors=True)


@contextmanager
def scratch(store=None) -> Iterator[Path]:
    """A fresh scratch folder, removed with all it holds when the block ends, however it ends."""
    folder = uploads_dir(store) / uuid.uuid4().hex
    folder.mkdir()
    _claim_bytes(folder, 0)          # its process's from the start: an app starting now leaves it
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _written(folder: Path) -> int:
    """What an upload in flight has written to its scratch folder so far."""
    try:
        return sum(f.stat().st_size for f in folder.iterdir() if f.is_file() and f.name != CLAIM)
    except OSError:                     # ended meanwhile
        return 0


def _claim(folder: Path) -> int | None:
    """The bytes a scratch folder's upload claimed, while the process that claimed them runs."""
    try:
        said = json.loads((folder / CLAIM).read_text())
        os.kill(int(said["pid"]), 0)
        return int(said["bytes"])
    except (OSError, ValueError, KeyError, TypeError):    # none, ended, or its process gone
        return None


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} bytes"


def _too_big(what: str, size: str, limit: tuple[int, str]) -> CheckpointError:
    return CheckpointError(f"{what} is {size}, more than {limit[1]} ({_mb(limit[0])})")


def _check_room(source: str, declared: int, dest: Path) -> None:
    """An upload as large as its files say fits within MAX_UPLOAD_BYTES and the disk's free space
    that other uploads in flight have not yet claimed; if so, it claims its own."""
    if declared > MAX_UPLOAD_BYTES:
        raise _too_big(source, f"{_mb(declared)} unpacked", (MAX_UPLOAD_BYTES, "an upload may hold"))
    locks = dest.parent.parent / "locks"            # the store's (STORE/.lab/locks)
    locks.mkdir(exist_ok=True)
    with lab_store.hold(locks / "uploads.lock", "the uploads' claims", wait_s=30):
        others = {f: n for f in dest.parent.iterdir()
                  if f != dest and f.is_dir() and (n := _claim(f)) is not None}
        # each still owes what it has yet to unpack, and the checkpoint its import then saves
        owed = sum(max(0, n - _written(f)) + n for f, n in others.items())
        free = shutil.disk_usage(dest).free
        if declared > free - owed:
            kept = (f", {_mb(owed)} of it kept for {len(others)} other upload(s) in progress"
                    if owed else "")
            raise CheckpointError(f"{source} unpacks to {_mb(declared)} and the store's disk has "
                                  f"{_mb(free)} free{kept}; free some space first"
                                  + ("" if not owed else ", or try again when they are done"))
        _claim_bytes(dest, _written(dest) + declared)


def _claim_bytes(folder: Path, n: int) -> None:
    """This process claims n bytes for the upload in `folder` (written whole, then renamed)."""
    part = folder / f"{CLAIM}.{uuid.uuid4().hex}"
    part.write_text(json.dumps({"pid": os.getpid(), "bytes": n}))
    os.replace(part, folder / CLAIM)


def copy(paths: list[Path], dest: Path, limits: Limits) -> list[str]:
    """The uploaded files named in `limits` into `dest`, each within its limit; the names taken."""
    chosen = [p for p in paths if p.name in limits]
    for p in chosen:
        if sum(q.name == p.name for q in chosen) > 1:
            raise CheckpointError(f"two files named {p.name} were uploaded; upload one checkpoint")
        if p.stat().st_size > limits[p.name][0]:
            raise _too_big(f"the uploaded {p.name}", _mb(p.stat().st_size), limits[p.name])
    _check_room("the upload", sum(p.stat().st_size for p in chosen), dest)
    for p in chosen:
        shutil.copyfile(p, dest / p.name)
    return [p.name for p in chosen]


def unzip(archive: Path, dest: Path, limits: Limits) -> list[str]:
    """The members of a .zip whose base names `limits` names into `dest` (from any folder inside
    it, never outside `dest`), each within its limit, counted as it unpacks; the names taken."""
    try:
        with zipfile.ZipFile(archive) as z:
            members = [m for m in z.infolist() if not m.is_dir() and Path(m.filename).name in limits]
            for m in members:
                name = Path(m.filename).name
                if sum(Path(o.filename).name == name for o in members) > 1:
                    raise CheckpointError(f"{archive.name} holds two {name} files; zip one "
                                          f"checkpoint folder")
                if m.file_size > limits[name][0]:
                    raise _too_big(f"{name} in {archive.name}", f"{_mb(m.file_size)} unpacked",
                                   limits[name])
            _check_room(archive.name, sum(m.file_size for m in members), dest)
            written = 0
            for m in members:
                written += _unpack(z, m, dest, archive.name, limits, MAX_UPLOAD_BYTES - written)
    except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError, EOFError, zlib.error) as e:
        raise CheckpointError(f"{archive.name} is not a readable .zip ({e})") from None   # encrypted too
    return [Path(m.filename).name for m in members]


def _unpack(z: zipfile.ZipFile, member: zipfile.ZipInfo, dest: Path, source: str,
            limits: Limits, room: int) -> int:
    """One member, written a chunk at a time and refused as soon as it passes its limit or the
    room the upload has left; the bytes written."""
    name = Path(member.filename).name
    limit, written = limits[name], 0
    with z.open(member) as src, open(dest / name, "wb") as out:
        while chunk := src.read(CHUNK):
            written += len(chunk)
            if written > limit[0]:
                raise _too_big(f"{name} in {source}", f"more than its header says "
                               f"({_mb(member.file_size)}) unpacked", limit)
            if written > room:
                raise _too_big(source, "more than its headers say unpacked",
                               (MAX_UPLOAD_BYTES, "an upload may hold"))
            out.write(chunk)
    return written
