"""A person's own text corpora as things in the store, read and written through `datasets`.

    STORE/_datasets/NAME/
      dataset.json           what it is: its source, text column, splits (rows, characters,
                             UTF-8 bytes), how the splits were made, a preview, tokens per tokenizer
      data/                  the texts, one column `text`, as DatasetDict.save_to_disk writes them
                             (Arrow files, memory-mapped when read: a corpus larger than memory is
                             never loaded whole)
      tokens/KEY/SPLIT-FINGERPRINT-vN.arrow
                             the split tokenized by tokenizer KEY with a batched `map`, kept by the
                             split's fingerprint: the second run reads it

An import is built in a temporary folder beside the others and renamed into place whole, under the
name's lock, so a kill at any moment leaves either the whole dataset or none of it (the temporary
folder goes at the next import). Names are checkpoint names (a letter or digit first), so no name
reaches `.tmp-` or `.del-` folders.
"""
from __future__ import annotations

import codecs
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from lab.config import SEED_MAX
from lab.errors import LabError, not_found, quoted, read_json
from lab.storage import checkpoints
from lab.storage import store as lab_store

FOLDER = lab_store.DATASETS
INFO = "dataset.json"
TEXT = "text"                         # the one column a stored dataset keeps
FORMATS = {".txt": "text", ".text": "text", ".jsonl": "json", ".json": "json", ".csv": "csv",
           ".tsv": "csv", ".parquet": "parquet"}
SPLIT_NAMES = {"train": "train", "validation": "dev", "valid": "dev", "dev": "dev", "test": "test"}
DEV_FRACTION = 0.05
SCAN_CHUNK = 2 ** 20                  # bytes read at a time when a text file is checked
PREVIEW = 3                           # texts shown, each cut to PREVIEW_CHARS
PREVIEW_CHARS = 200
MAP_BATCH = 1000                      # texts per call of the tokenizer in `map`
CACHE_FORMAT = 1                      # in the cache files' names: a new layout never reads an old one
IN_MEMORY_ROWS = 100_000              # an import's intermediate steps stay in memory below this
CUT_BATCH = 100_000                   # row numbers per call when an import's rows are chosen


def _datasets():
    """`datasets`, imported when first needed (the plugins load with every command), with its
    progress bars off: the lab says what it does in its own lines."""
    import datasets
    datasets.disable_progress_bars()
    return datasets


class DatasetError(LabError):
    """A source that cannot become a dataset, or a dataset that is not there."""


def root(store=None) -> Path:
    path = checkpoints.store_dir(store) / FOLDER
    path.mkdir(exist_ok=True)
    return path


def check_name(name: str) -> str:
    try:
        return checkpoints.check_name(name)
    except LabError as e:
        raise DatasetError(str(e).replace("checkpoint name", "dataset name")) from None


def path_of(name: str, store=None) -> Path:
    folder = root(store) / check_name(name)
    if not (folder / INFO).is_file():
        raise DatasetError(not_found("dataset", name, names(store), "the Train tab or `python -m lab "
                                     "data list`", "import one with `python -m lab data import FILE --name NAME`"))
    return folder


def names(store=None) -> list[str]:
    folder = checkpoints.store_dir(store) / FOLDER           # (listing creates nothing)
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p / INFO).is_file()) if folder.is_dir() else []


def info(name: str, store=None) -> dict:
    return read_json(path_of(name, store) / INFO, DatasetError, f"dataset {name!r} has no {INFO}")


def listing(store=None) -> list[dict]:
    return [info(n, store) for n in names(store)]


# ---------------------------------------------------------------- import

def import_source(source: str | Path, name: str, text_column: str | None = None,
                  dev_fraction: float = DEV_FRACTION, seed: int = 0, store=None,
                  label: str | None = None) -> dict:
    """A file (.txt one text a line, .jsonl/.json, .csv/.tsv, .parquet) or a folder written by
    Dataset.save_to_disk / DatasetDict.save_to_disk, as dataset NAME in the store. Splits come
    from the folder (train, validation or dev, test); a source without a dev split has one cut
    from its train rows by a seeded fraction. Returns its info (what `data show` prints).
    label: how the source is named in messages and the info (an upload's file name)."""
    check_name(name)
    if not 0 < dev_fraction < 1:
        raise DatasetError(f"dev fraction must be between 0 and 1 (e.g. 0.05), got {dev_fraction}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise DatasetError(f"the seed of the dev cut must be a whole number from 0 to {SEED_MAX:,}, "
                           f"got {quoted(seed)}")
    source = Path(source)
    label = label or str(source)
    base = root(store)
    _clear_leftovers(base)
    with lab_store.hold(lab_store.lock_path(f"dataset-{name}", store), f"dataset {name!r}"):
        if (base / name).exists():
            raise DatasetError(f"a dataset named {name!r} is already in the store; choose another "
                               f"name or delete it first (`python -m lab data delete {name}`)")
        tmp = base / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            splits, fmt, column, columns = _read(source, label, text_column, tmp / "cache")
            splits, made = _cut(splits, dev_fraction, seed, label, column, tmp / "cache")
            DatasetDict = _datasets().DatasetDict
            DatasetDict(splits).save_to_disk(str(tmp / "data"))
            saved = _datasets().load_from_disk(str(tmp / "data"))      # written whole, in order
            meta = _describe(name, dict(saved), label, fmt, column, columns, made)
            del saved
            shutil.rmtree(tmp / "cache", ignore_errors=True)
            _write_json(tmp / INFO, meta)
            lab_store.fault("dataset-import")
            os.replace(tmp, base / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return meta


def _clear_leftovers(base: Path) -> None:
    """Temporary and deleted folders a killed import or delete left."""
    for p in base.iterdir():
        if p.name.startswith((".tmp-", ".del-")):
            shutil.rmtree(p, ignore_errors=True)


def _read(source: Path, label: str, text_column: str | None, cache: Path):
    """({split: Dataset of one `text` column, empty rows still in}, format, the column chosen,
    the source's columns)."""
    if source.is_dir():
        raw, fmt = _read_folder(source, label), "saved dataset"
    elif source.is_file():
        fmt = FORMATS.get(source.suffix.lower())
        if fmt is None:
            raise DatasetError(f"{label}: a {source.suffix or 'file without an extension'} is not a "
                               f"corpus the lab reads; give .txt, .jsonl, .json, .csv, .tsv, .parquet "
                               f"or a folder written by save_to_disk")
        _check_file(source, label, fmt)
        raw = {"train": _load_file(source, label, fmt, cache)}
    else:
        raise DatasetError(f"{label}: no such file or folder")
    first = next(iter(raw.values()))
    columns = list(first.column_names)
    column = _choose_column(first, text_column, label)
    out = {}
    for split, ds in raw.items():
        if column not in ds.column_names:
            raise DatasetError(f"{label}: its {split} split has no column {column!r}; its columns are "
                               f"{', '.join(ds.column_names)}"[:300])
        ds = ds.select_columns([column])
        out[split] = ds.rename_column(column, TEXT) if column != TEXT else ds
    return out, fmt, column, columns


def _read_folder(source: Path, label: str) -> dict:
    d = _datasets()
    Dataset, DatasetDict, load_from_disk = d.Dataset, d.DatasetDict, d.load_from_disk
    if not ((source / "dataset_dict.json").is_file() or (source / "state.json").is_file()):
        raise DatasetError(f"{label}: a folder must be one written by Dataset.save_to_disk or "
                           f"DatasetDict.save_to_disk (it has neither dataset_dict.json nor state.json)")
    try:
        loaded = load_from_disk(str(source))
    except Exception as e:             # noqa: BLE001  (datasets raises many kinds)
        raise DatasetError(f"{label}: cannot be read as a saved dataset: {_first_line(e)}") from None
    if isinstance(loaded, Dataset):
        return {"train": loaded}
    assert isinstance(loaded, DatasetDict)
    known = {SPLIT_NAMES[s]: ds for s, ds in loaded.items() if s in SPLIT_NAMES}
    if "train" not in known:
        if len(loaded) != 1:
            raise DatasetError(f"{label}: its splits are {', '.join(loaded)}; the lab needs one "
                               f"named train (and may use validation or dev, and test)")
        known = {"train": next(iter(loaded.values()))}
    return known


def _check_file(path: Path, label: str, fmt: str) -> None:
    """An empty, binary or not-UTF-8 text file is refused in one line (with the byte offset)."""
    size = path.stat().st_size
    if size == 0:
        raise DatasetError(f"{label} is empty")
    with path.open("rb") as f:
        if fmt == "parquet":
            if f.read(4) != b"PAR1":
                raise DatasetError(f"{label} is not a Parquet file (it does not start with PAR1)")
            return
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        while chunk := f.read(SCAN_CHUNK):
            nul = chunk.find(b"\0", 0, 8192) if offset == 0 else -1
            if nul >= 0:
                raise DatasetError(f"{label} is a binary file, not text (a NUL byte at offset {nul})")
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as e:
                raise DatasetError(f"{label} is not UTF-8 text: byte offset {offset + e.start} "
                                   f"({chunk[e.start:e.start + 1]!r}) is not valid UTF-8; save it "
                                   f"as UTF-8") from None
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DatasetError(f"{label} is not UTF-8 text: it ends inside a character "
                               f"(byte offset {size - 1})") from None


def _load_file(path: Path, label: str, fmt: str, cache: Path):
    Dataset = _datasets().Dataset
    kwargs = {"cache_dir": str(cache)}
    try:
        if fmt == "text":
            return Dataset.from_text(str(path), **kwargs)
        if fmt == "json":
            return Dataset.from_json(str(path), **kwargs)
        if fmt == "csv":
            return Dataset.from_csv(str(path), sep="\t" if path.suffix.lower() == ".tsv" else ",",
                                    **kwargs)
        return Dataset.from_parquet(str(path), **kwargs)
    except Exception as e:             # noqa: BLE001  (pyarrow and datasets raise many kinds)
        raise DatasetError(f"{label}: cannot be read as {path.suffix.lower()[1:]}: "
                           f"{_first_line(e)}"[:400]) from None


def _first_line(e: BaseException) -> str:
    while e.__cause__ is not None or e.__context__ is not None:      # the innermost says most
        e = e.__cause__ or e.__context__
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def _choose_column(ds, given: str | None, label: str) -> str:
    """The column holding the texts: the one given, else `text`, else the first string column."""
    strings = [c for c, f in ds.features.items()
               if getattr(f, "dtype", None) in ("string", "large_string")]
    if given:
        if given not in ds.column_names:
            raise DatasetError(f"{label} has no column {given!r}; its columns are "
                               f"{', '.join(ds.column_names)}"[:300])
        if given not in strings:
            raise DatasetError(f"{label}: column {given!r} holds {_kind(ds.features[given])}, not text; "
                               f"its text columns are {', '.join(strings) or 'none'}"[:300])
        return given
    if TEXT in strings:
        return TEXT
    if not strings:
        raise DatasetError(f"{label} has no column of text; its columns are "
                           + ", ".join(f"{c} ({_kind(f)})" for c, f in ds.features.items())[:300])
    return strings[0]


def _scratch(rows: int, **files: Path) -> dict:
    """Where `datasets` keeps an intermediate result: in memory when small, else in the import's
    scratch folder (never beside a source folder the person gave)."""
    if rows < IN_MEMORY_ROWS:
        return {"keep_in_memory": True}
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in files.items()}


def _kind(feature) -> str:
    """A column's type in a word: int64, string, a list..."""
    return getattr(feature, "dtype", None) or type(feature).__name__.lower()


def _cut(splits: dict, fraction: float, seed: int, label: str, column: str,
         cache: Path) -> tuple[dict, dict]:
    """The splits without their empty rows, with a dev split cut from train's rows by a seeded
    fraction when there is none, each in the source's order; and how dev was made.
    Rows are chosen by a mask of one byte a row and one batched filter over the row numbers alone:
    `Dataset.select` turns an index array into a Python list (about 90 bytes a row, 3 GB for 33
    million texts), and a filter over a filtered dataset reads every text again."""
    texts = {split: _has_text(ds) for split, ds in splits.items()}
    if not any(m.any() for m in texts.values()):
        raise DatasetError(f"{label}: column {column!r} holds no text (every row is empty)")
    made = {"from": "source"}
    if "dev" not in splits or not texts["dev"].any():
        rows = np.flatnonzero(texts["train"])
        if len(rows) < 2:
            raise DatasetError(f"{label} has {len(rows)} text; a dataset needs at least 2 (one to "
                               f"train on, one for dev)")
        n_dev = max(1, round(fraction * len(rows)))
        texts["dev"] = np.zeros_like(texts["train"])
        texts["dev"][rows[np.random.default_rng(seed).permutation(len(rows))[:n_dev]]] = True
        texts["train"] &= ~texts["dev"]
        splits = {**splits, "dev": splits["train"]}
        made = {"from": "train", "dev_fraction": fraction, "seed": seed}
    return {split: _rows(ds, texts[split], cache / f"rows-{split}.arrow")
            for split, ds in splits.items()}, made


def _has_text(ds) -> np.ndarray:
    """Whether each row's text has more than white space, read column chunk by chunk."""
    import pyarrow as pa
    import pyarrow.compute as pc
    col = ds.data.column(TEXT)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return np.zeros(len(ds), dtype=bool)
    return np.concatenate([pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(chunk)), 0)
                           .fill_null(False).to_numpy(zero_copy_only=False)
                           for chunk in col.chunks] or [np.zeros(0, dtype=bool)])


def _rows(ds, keep: np.ndarray, cache_file: Path):
    """ds's rows where keep is true (ds itself when all are)."""
    if keep.all():
        return ds
    return ds.filter(lambda rows: keep[rows], with_indices=True, input_columns=[], batched=True,
                     batch_size=CUT_BATCH, **_scratch(len(ds), cache_file_name=cache_file))


def _describe(name, splits, label, fmt, column, columns, made) -> dict:
    import pyarrow.compute as pc
    stats = {}
    for split, ds in splits.items():
        col = ds.data.column(TEXT)
        stats[split] = {"rows": len(ds),
                        "characters": int(pc.sum(pc.utf8_length(col)).as_py() or 0),
                        "bytes": int(pc.sum(pc.binary_length(col)).as_py() or 0)}
    preview = [t[:PREVIEW_CHARS] for t in splits["train"][:PREVIEW][TEXT]]
    return {"name": name, "source": label, "format": fmt, "text_column": column, "columns": columns,
            "splits": stats, "split_from": made, "preview": preview, "tokens": {},
            "created": time.strftime("%Y-%m-%d %H:%M:%S")}


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------- delete

def delete(name: str, store=None) -> None:
    """Moved aside whole, then removed (a kill in between leaves a .del- folder the next import
    clears); under the name's lock, so an import of the same name waits."""
    folder = path_of(name, store)
    with lab_store.hold(lab_store.lock_path(f"dataset-{name}", store), f"dataset {name!r}"):
        trash = folder.parent / f".del-{name}-{uuid.uuid4().hex[:8]}"
        os.replace(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


# ---------------------------------------------------------------- reading

def split(name: str, which: str, store=None):
    """A split's texts as a memory-mapped Dataset (column `text`)."""
    load_from_disk = _datasets().load_from_disk
    folder = path_of(name, store)
    splits = info(name, store)["splits"]
    if which not in splits:
        raise DatasetError(f"dataset {name!r} has no {which} split; its splits are "
                           f"{', '.join(splits)}")
    return load_from_disk(str(folder / "data" / which))


def tokenizer_key(tok) -> str:
    """What names a tokenizer's cache: its kind and a hash of its saved files."""
    with tempfile.TemporaryDirectory() as d:
        tok.save(Path(d))
        h = hashlib.sha1()
        for p in sorted(Path(d).rglob("*")):
            if p.is_file():
                h.update(p.name.encode())
                h.update(p.read_bytes())
    kind = "".join(c if c.isalnum() or c in "-_." else "_" for c in tok.kind)[:40]
    return f"{kind}-{h.hexdigest()[:12]}"


def tokenized(name: str, which: str, tok, store=None, key: str | None = None):
    """The split tokenized (column `ids`: the text's tokens, no end-of-text around them) by a
    batched `map` with the fast tokenizer, written to the store's cache by the split's
    fingerprint and the tokenizer; a second call reads the cache. Records the token count."""
    ds = split(name, which, store)
    key = key or tokenizer_key(tok)
    cache = path_of(name, store) / "tokens" / key
    cache.mkdir(parents=True, exist_ok=True)
    d = _datasets()
    out = ds.map(_encode, batched=True, batch_size=MAP_BATCH, remove_columns=[TEXT],
                 fn_kwargs={"tok": tok}, load_from_cache_file=True,
                 features=d.Features({"ids": d.List(d.Value("int32"))}),
                 cache_file_name=str(cache / f"{which}-{ds._fingerprint}-v{CACHE_FORMAT}.arrow"),
                 new_fingerprint=f"{ds._fingerprint}-{key}"[:64], desc=None)
    _record_tokens(name, which, tok.kind, key, out, store)
    return out


def _encode(batch: dict, tok) -> dict:
    return {"ids": tok.encode_batch(batch[TEXT])}


def _record_tokens(name, which, kind, key, ds, store) -> None:
    import pyarrow.compute as pc
    meta = info(name, store)
    known = meta.setdefault("tokens", {}).setdefault(key, {"tokenizer": kind})
    if which in known:
        return
    known[which] = int(pc.sum(pc.list_value_length(ds.data.column("ids"))).as_py() or 0)
    with lab_store.hold(lab_store.lock_path(f"dataset-{name}", store), f"dataset {name!r}", wait_s=30):
        fresh = info(name, store)          # another process may have added its own count
        fresh.setdefault("tokens", {}).setdefault(key, {"tokenizer": kind})[which] = known[which]
        _write_json(path_of(name, store) / INFO, fresh)


def blocks(name: str, which: str, tok, length: int, store=None, key: str | None = None):
    """The split's texts joined, each after an end-of-text, and cut into blocks of `length`
    tokens (column `ids`), with the UTF-8 bytes and words the block's targets cover (`bytes`,
    `words`: an end-of-text target counts one of each, the newline it stands for). Joined MAP_BATCH
    texts at a time, as Hugging Face's run_clm does: each batch's last partial block is dropped.
    Cached beside the tokens by the split's fingerprint, the tokenizer and the length."""
    key = key or tokenizer_key(tok)
    ds = tokenized(name, which, tok, store, key=key)
    cache = path_of(name, store) / "tokens" / key
    d = _datasets()
    return ds.map(_group, batched=True, batch_size=MAP_BATCH, remove_columns=["ids"],
                  fn_kwargs={"tok": tok, "length": length}, load_from_cache_file=True,
                  features=d.Features({"ids": d.List(d.Value("int32")), "bytes": d.Value("int64"),
                                       "words": d.Value("int64")}),
                  cache_file_name=str(cache / f"blocks{length}-{which}-{ds._fingerprint}-v{CACHE_FORMAT}.arrow"),
                  new_fingerprint=f"{ds._fingerprint}-b{length}"[:64], desc=None)


def _group(batch: dict, tok, length: int) -> dict:
    eos = tok.eos_id
    stream = [t for ids in batch["ids"] for t in [eos, *ids]]
    out = {"ids": [], "bytes": [], "words": []}
    for i in range(0, len(stream) - length + 1, length):
        block = stream[i:i + length]
        ends = block[1:].count(eos)
        text = tok.decode([t for t in block[1:] if t != eos])
        out["ids"].append(block)
        out["bytes"].append(len(text.encode("utf-8")) + ends)
        out["words"].append(len(text.split()) + ends)
    return out
