"""Files a person takes away: tables as CSV and JSON, comparison reports as one HTML file.

They are written under the store's `.lab/exports/` (the one folder the web app serves downloads
from), each under a fresh name, and the oldest are pruned so that downloads never fill the disk.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
import time
import uuid
from pathlib import Path

from lab.storage import store as lab_store

KEEP_FILES = 200                 # downloads kept in .lab/exports; older ones go
KEEP_BYTES = 4 * 2 ** 30         # and at most this much of them (export .zip files are large)


def _stem(stem: str) -> str:
    """A safe file name part: letters, digits, '.', '_' and '-' only, at most 60 characters."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.")[:60] or "table"


def fresh(stem: str, suffix: str, store=None) -> Path:
    """A new path in the exports folder (older downloads pruned first)."""
    folder = lab_store.state_dir(store, "exports")
    prune(folder)
    return folder / f"{_stem(stem)}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}{suffix}"


def prune(folder: Path, keep: int = KEEP_FILES, keep_bytes: int = KEEP_BYTES) -> None:
    """Remove the oldest files until, with room for one more, at most `keep` files and `keep_bytes`
    bytes remain (export .zip archives included). A file another request removed first is skipped."""
    files = []
    for p in folder.iterdir():
        try:
            st = p.stat()
        except OSError:
            continue
        if p.is_file():
            files.append((st.st_mtime, st.st_size, p))
    files.sort()
    total = sum(size for _, size, _ in files)
    for i, (_, size, p) in enumerate(files):
        if len(files) - i < keep and total <= keep_bytes:
            break
        p.unlink(missing_ok=True)
        total -= size


def _plain(value):
    """JSON-safe: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def table_csv(headers: list[str], rows: list[list]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(headers)
    writer.writerows([[_plain(v) for v in row] for row in rows])
    return out.getvalue()


def table_json(headers: list[str], rows: list[list], about: dict | None = None) -> str:
    """{"columns": [...], "rows": [{column: value}], **about} (about: provenance and the like)."""
    records = [{h: _plain(v) for h, v in zip(headers, row)} for row in rows]
    return json.dumps({**(about or {}), "columns": headers, "rows": records}, indent=2, default=str)


def write_table(headers: list[str], rows: list[list], stem: str, store=None,
                about: dict | None = None) -> list[str]:
    """The table as a .csv and a .json file (about: extra JSON fields such as provenance)."""
    csv_path, json_path = fresh(stem, ".csv", store), fresh(stem, ".json", store)
    csv_path.write_text(table_csv(headers, rows), encoding="utf-8")
    json_path.write_text(table_json(headers, rows, about), encoding="utf-8")
    return [str(csv_path), str(json_path)]


def write_html(document: str, stem: str, store=None) -> str:
    path = fresh(stem, ".html", store)
    path.write_text(document, encoding="utf-8")
    return str(path)
