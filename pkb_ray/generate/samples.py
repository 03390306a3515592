"""Reading samples: replay folders, JSONL, Parquet (results are :mod:`pkb_ray.results.parquet`).

A folder of another format (:mod:`pkb_ray.spec.formats`: e.g. a benchmark's solution files) is read by
that format. A replay folder holds one sub-folder per problem id and one ``.py`` file per sample, named
``<index>_<label>.py``; comment lines ``# key: value`` at the top become the sample's metadata
(the shipped set says ``# expect: <status>`` in each file). JSONL and Parquet rows have the
fields of :class:`pkb_ray.spec.schema.Sample`. Rows are returned as plain dicts: validating them
is the validate stage's job, so that a malformed row becomes a result instead of an exception.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pkb_ray.spec import formats
from pkb_ray.spec.names import Backend

_HEADER = re.compile(r"^#\s*([a-z_]+):\s*(.*?)\s*$")


def read_samples(path: str | Path, model: str = "replay", problems: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rows of a sample file or folder; with ``problems`` (id -> Problem, loaded), each format's
    notes that need them too (:meth:`pkb_ray.spec.formats.SampleFormat.annotate`)."""
    rows = _read(Path(path), model)
    if problems is not None:
        for fmt in formats.every():
            fmt.annotate(rows, problems)
    return rows


def _read(path: Path, model: str) -> list[dict[str, Any]]:
    if path.is_file():
        return _read_file(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such sample file or folder")
    for fmt in formats.every():  # a folder of another format's files
        rows = fmt.read(path, model)
        if rows is not None:
            return rows
    files = sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".parquet"))
    if files:
        return [row for f in files for row in _read_file(f)]
    return _read_replay(path, model)


def _read_file(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:  # a malformed line is still a row: validate reports it
                rows.append({"_error": f"{path}:{n}: not JSON ({exc.msg})"})
        return rows
    raise ValueError(f"{path}: samples must be .jsonl or .parquet")


def _read_replay(root: Path, model: str) -> list[dict[str, Any]]:
    rows = []
    for problem_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for file in sorted(problem_dir.glob("*.py")):
            index, _, label = file.stem.partition("_")
            source = file.read_text()
            meta = {"file": str(file.relative_to(root)), "label": label}
            for line in source.splitlines():
                m = _HEADER.match(line)
                if not m:
                    break
                meta[m.group(1)] = m.group(2)
            rows.append({"problem_id": problem_dir.name, "model": model,
                         "sample_index": int(index) if index.isdigit() else len(rows),
                         "backend": meta.pop("backend", Backend.TORCH), "source": source, "metadata": meta})
    return rows
