"""Whether a checkpoint's weights can be trusted, decided once per version of its files.

The check: `model.safetensors` is there and not empty; its header (read by hand, so the message
names what is wrong rather than the reader's error code) parses, and the file's size is exactly
the header plus the bytes the header places; the tensors are exactly those the config's model has
(names and shapes, from the model built on the meta device: no memory, under 0.1 s); and
every value is finite. The last part reads every tensor (SmolLM2-135M's 538 MB: about 0.1-0.7 s
from the page cache on a busy shared 2-core CPU, 0.6-2.5 s from a cold disk), so the verdict is
kept.

Where it is kept: a small sidecar in the store, `STORE/.lab/health/NAME.json` (a run's resume
state: `.lab/health/runs/NAME.json`), with an in-memory copy in each process. A sidecar because
the web app, the job worker and every CLI command are separate processes; in memory alone, each
`python -m lab checkpoints` would read every checkpoint's tensors again. The verdict is keyed by
the size, mtime and ctime (nanoseconds) of both the weights and config.json (the shapes come from
the config), and by CHECKS: any write to either file, a copy that keeps the mtime included, makes
the next look check again. A store the lab cannot write keeps its verdicts in memory only.
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from lab.storage import store as store_mod
from lab.config import ModelConfig
from lab.modeling.model import build

WEIGHTS_FILE, CONFIG_FILE = "model.safetensors", "config.json"
CHECKS = 1                # raise when the checks change: verdicts made before are made again
MAX_HEADER = 100_000_000  # the safetensors format's own limit
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass(frozen=True)
class Health:
    ok: bool
    problem: str = ""        # one line: what is wrong with the weights ("" when ok)


class Damage(Exception):
    """What is wrong with a weights file, in words (internal: callers get a Health)."""


_memory: dict[str, tuple[list, str]] = {}        # folder -> (fingerprint, problem or "")
_checking = threading.Lock()


def weights(folder: Path, config: ModelConfig) -> Health:
    """The verdict on `folder`'s weights against `config`: kept in the store and in memory, and
    made again once either file changes."""
    verdicts = verdict_file(folder)
    try:
        key = fingerprint(folder)
    except OSError:                        # a file missing: cheap to say, nothing to keep
        return Health(False, problem(folder, config))
    kept = _memory.get(str(folder))
    if not (kept and kept[0] == key):
        with _checking:                    # concurrent first looks read the tensors once
            kept = _memory.get(str(folder))
            if not (kept and kept[0] == key):
                kept = _read(verdicts)     # another process's verdict
            if not (kept and kept[0] == key):
                kept = (key, problem(folder, config))
                _write(verdicts, *kept)
            _memory[str(folder)] = kept
    return Health(not kept[1], kept[1])


def fingerprint(folder: Path) -> list:
    """What changes when the weights or the config change: size, mtime and ctime of each."""
    out: list = [CHECKS]
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        st = (folder / name).stat()
        out += [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return out


def problem(folder: Path, config: ModelConfig) -> str:
    """What is wrong with `folder`'s weights ("" when nothing is): the whole check, uncached."""
    path = folder / WEIGHTS_FILE
    try:
        shapes = read_header(path)
        mismatch = describe_mismatch(expected_shapes(config), shapes)
        if mismatch:
            raise Damage(f"{WEIGHTS_FILE} does not match its {CONFIG_FILE}: {mismatch}")
        return nonfinite(path)
    except Damage as e:
        return str(e)
    except FileNotFoundError:
        return f"{WEIGHTS_FILE} is missing"
    except OSError as e:
        return f"{WEIGHTS_FILE} cannot be read ({e.strerror})"


def read_header(path: Path) -> dict[str, tuple]:
    """{tensor name: shape} from a safetensors file's header, held against the file's size."""
    size = path.stat().st_size
    if size == 0:
        raise Damage(f"{WEIGHTS_FILE} is empty (0 bytes)")
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise Damage(f"{WEIGHTS_FILE} is truncated: {size} bytes, too few for a safetensors header")
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER:
            raise Damage(f"{WEIGHTS_FILE} is not a safetensors file: it begins with a header length "
                         f"of {n:,} bytes")
        if n > size - 8:
            raise Damage(f"{WEIGHTS_FILE} is truncated: its header should be {n:,} bytes, the file "
                         f"holds {size - 8:,} after the header's length")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise Damage(f"{WEIGHTS_FILE} is corrupt: its header is not valid JSON") from None
    if not isinstance(header, dict):
        raise Damage(f"{WEIGHTS_FILE} is corrupt: its header is not a JSON object")
    header.pop("__metadata__", None)
    if not header:
        raise Damage(f"{WEIGHTS_FILE} holds no tensors")
    return _placed(header, size - 8 - n)


def _placed(header: dict, data_bytes: int) -> dict[str, tuple]:
    """The shapes of the header's tensors, each entry checked, their bytes laid end to end
    filling exactly the data after the header."""
    spans, shapes = [], {}
    for name, entry in header.items():
        try:
            dtype, shape, (start, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            ok = dtype in DTYPE_BYTES and all(isinstance(d, int) and d >= 0 for d in shape) \
                and isinstance(start, int) and isinstance(end, int) \
                and end - start == math.prod(shape) * DTYPE_BYTES[dtype] and start >= 0
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise Damage(f"{WEIGHTS_FILE} is corrupt: its header's entry for {name} is not valid")
        spans.append((start, end))
        shapes[name] = tuple(shape)
    spans.sort()
    placed = spans[-1][1]
    if placed > data_bytes:
        raise Damage(f"{WEIGHTS_FILE} is truncated: its header places {placed:,} bytes of tensors, "
                     f"the file holds {data_bytes:,}")
    if placed < data_bytes or any(a[1] != b[0] for a, b in zip(spans, spans[1:])) or spans[0][0]:
        raise Damage(f"{WEIGHTS_FILE} is corrupt: its tensors do not fill the file end to end "
                     f"({data_bytes:,} bytes of data, {placed:,} placed)")
    return shapes


def expected_shapes(config: ModelConfig) -> dict[str, tuple]:
    """{name: shape} of the tensors a checkpoint of `config` holds (tied embeddings are saved
    once, as transformer.wte.weight)."""
    with torch.device("meta"):
        model = build(config)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if config.tie_embeddings:
        shapes.pop("lm_head.weight", None)
    return shapes


def describe_mismatch(expected: dict[str, tuple], found: dict[str, tuple]) -> str:
    """Every missing, unexpected or mis-shaped tensor, in one line ("" when they match)."""
    def some(keys: list[str]) -> str:
        return ", ".join(keys[:5]) + (f" (and {len(keys) - 5} more)" if len(keys) > 5 else "")
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong = [f"{k}: file {tuple(found[k])} vs config {tuple(expected[k])}"
             for k in expected if k in found and tuple(found[k]) != tuple(expected[k])]
    parts = ([f"missing {some(missing)}"] if missing else []) \
        + ([f"unexpected {some(unexpected)}"] if unexpected else []) \
        + (["wrong shapes: " + "; ".join(wrong[:5])] if wrong else [])
    return "; ".join(parts)


def nonfinite(path: Path) -> str:
    """Where the file holds NaN or infinity ("" when every value is finite): reads every tensor,
    one at a time. A sum is finite only if every value is (NaN and inf carry through it), and
    summing is about ten times faster than testing each value, which is done only where a sum is
    not finite (a sum of finite values may overflow)."""
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(str(path), "pt") as f:
            return nonfinite_in((name, f.get_tensor(name)) for name in f.keys())
    except SafetensorError as e:
        raise Damage(f"{WEIGHTS_FILE} is corrupt ({e})") from None


def nonfinite_in(tensors, file: str = WEIGHTS_FILE) -> str:
    """nonfinite's test on (name, tensor) pairs, read from a file or still in memory; `file`:
    what the verdict calls where they came from."""
    bad = [(name, t) for name, t in tensors if t.is_floating_point()
           and not bool(torch.isfinite(t.sum())) and not bool(torch.isfinite(t).all())]
    if not bad:
        return ""
    name, t = bad[0]
    kinds = " and ".join(k for k, test in (("NaN", torch.isnan), ("inf", torch.isinf))
                         if bool(test(t).any()))
    count = int((~torch.isfinite(t)).sum())
    more = f"; {len(bad) - 1} more tensor(s) too" if len(bad) > 1 else ""
    return f"{file} holds {kinds} in {name} ({count:,} of {t.numel():,} values){more}"


def written(folder: Path, config: ModelConfig, state: dict) -> None:
    """Keep the verdict on weights the lab has just written to `folder`, from the tensors it wrote
    (still in memory): the first look after a save (a job's best checkpoint, shown by the page's
    poll) then reads nothing. The header and size are save_file's own; shapes and values are
    checked as `problem` checks them."""
    mismatch = describe_mismatch(expected_shapes(config), {k: tuple(v.shape) for k, v in state.items()})
    found = (f"{WEIGHTS_FILE} does not match its {CONFIG_FILE}: {mismatch}" if mismatch
             else nonfinite_in(state.items()))
    key = fingerprint(folder)
    _write(verdict_file(folder), key, found)
    _memory[str(folder)] = (key, found)


def _read(verdicts: Path | None) -> tuple[list, str] | None:
    if verdicts is None:
        return None
    try:
        doc = json.loads(verdicts.read_text())
        return list(doc["fingerprint"]), str(doc["problem"])
    except (OSError, ValueError, KeyError, TypeError):
        return None                 # none kept, or unreadable: check again


def _write(verdicts: Path | None, key: list, found: str) -> None:
    if verdicts is None:
        return
    try:
        verdicts.parent.mkdir(parents=True, exist_ok=True)
        tmp = verdicts.with_name(f".{verdicts.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"fingerprint": key, "problem": found,
                                   "checked": time.strftime("%Y-%m-%dT%H:%M:%S")}))
        os.replace(tmp, verdicts)
    except OSError:
        pass                        # a store the lab cannot write: the memory keeps it


def run_of(folder: Path) -> str | None:
    """The run whose resume state `folder` is (STORE/_runs/NAME/last), or None."""
    return folder.parent.name if folder.parent.parent.name == store_mod.RUNS else None


def verdict_file(folder: Path) -> Path | None:
    """Where a folder's verdict is kept: STORE/.lab/health/NAME.json for a checkpoint,
    .lab/health/runs/NAME.json for a run's resume state; None for a folder outside a store."""
    run = run_of(folder)
    root, key = (folder.parents[2], f"runs/{run}") if run else (folder.parent, folder.name)
    return root / store_mod.STATE / "health" / f"{key}.json" if (root / store_mod.STATE).is_dir() else None


def forget(folder: Path) -> None:
    """Drop the kept verdict of a folder being deleted."""
    _memory.pop(str(folder), None)
    verdicts = verdict_file(folder)
    if verdicts:
        verdicts.unlink(missing_ok=True)
