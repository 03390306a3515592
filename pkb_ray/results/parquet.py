"""The results folder: hive-partitioned Parquet that pandas, pyarrow.dataset and DuckDB open as is.

Layout: ``<results>/model=<model>/problem_id=<problem_id>/part-<id>.parquet``. The two partition
columns live in the folder names only (values percent-encoded, as pyarrow's hive partitioning
writes and reads them), so ``pandas.read_parquet(<results>)`` gets each column once.

A result is identified by :data:`RESULT_KEY`: the same sample evaluated at another world size,
layout, size, dtype, on other hardware or in another refinement round is another result. A
folder may hold a key twice (a resumed run evaluates evaluator faults again); readers keep the
newest row per key (:func:`newest`).

:class:`ResultSink` is the one writer of a run: each result is on disk within about a second of
being known, in files of up to ``max_rows`` rows, and :meth:`ResultSink.close` writes the rest.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Iterable
from urllib.parse import quote

import pyarrow as pa
import pyarrow.dataset as ds

from pkb_ray.results.storage import Folder
from pkb_ray.spec.schema import RESULT_SCHEMA, Result, Where, is_final, results_to_table

PARTITIONS = ("model", "problem_id")
RESULT_KEY = ("sample_key", "world_size", "nodes", "size", "dtype", "hardware", "round")
_FILE_SCHEMA = pa.schema([f for f in RESULT_SCHEMA if f.name not in PARTITIONS])
_PARTITIONING = ds.partitioning(pa.schema([RESULT_SCHEMA.field(n) for n in PARTITIONS]), flavor="hive")


def result_key(r: Result) -> tuple:
    return tuple(getattr(r, k) for k in RESULT_KEY)


def key_at(sample_key: str, round_: int, where: Where) -> tuple:
    """The :data:`RESULT_KEY` the result of sample ``sample_key`` (refinement round ``round_``)
    evaluated ``where`` will have, before there is a result."""
    fields = {"sample_key": sample_key, "round": round_, **where.fields}
    return tuple(fields[k] for k in RESULT_KEY)


def write_results(results: Iterable[Result], out_dir: str | Path | Folder) -> list[str]:
    """One new file per (model, problem) partition, whole or not at all (:mod:`pkb_ray.results.storage`:
    renamed from a dot-name on a disk, one put on an object store); returns their paths."""
    folder = Folder.of(out_dir)
    by_partition: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        by_partition.setdefault((r.model, r.problem_id), []).append(r)
    written = []
    for (model, problem), rows in sorted(by_partition.items()):
        rel = f"model={quote(model, safe='')}/problem_id={quote(problem, safe='')}/part-{uuid.uuid4().hex[:16]}.parquet"
        written.append(folder.write_table(rel, results_to_table(rows).drop_columns(list(PARTITIONS))))
    return written


def read_results(out_dir: str | Path | Folder):
    """Every row under ``out_dir`` (a folder or URI) as a pandas DataFrame (partition columns as plain strings)."""
    import pandas as pd

    table = _table(out_dir)
    if table is None:
        return pd.DataFrame(columns=RESULT_SCHEMA.names)
    df = table.to_pandas()
    return df.assign(nodes=df["nodes"].fillna(1).astype(int), round=df["round"].fillna(0).astype(int))


def read_result_records(out_dir: str | Path | Folder) -> list[Result]:
    """Every row under ``out_dir`` as a :class:`~pkb_ray.spec.schema.Result` (columns a file lacks: defaults)."""
    table = _table(out_dir)
    if table is None:
        return []
    out = []
    for row in table.to_pylist():
        row["versions"] = dict(row["versions"] or [])
        row["phase_seconds"] = dict(row["phase_seconds"] or [])
        out.append(Result.model_validate({k: v for k, v in row.items() if v is not None}))
    return out


def _table(out_dir: str | Path | Folder) -> "pa.Table | None":
    folder = Folder.of(out_dir)
    files = folder.files(".parquet")
    if not files:
        return None
    # the current schema: files written before a column existed read it as null
    return ds.dataset([folder.join(f) for f in files], filesystem=folder.fs, format="parquet",
                      partitioning=_PARTITIONING, partition_base_dir=folder.path, schema=RESULT_SCHEMA).to_table()


def newest(df):
    """One row per :data:`RESULT_KEY`: the newest."""
    if df.empty:
        return df
    return df.sort_values("finished_at").drop_duplicates(list(RESULT_KEY), keep="last")


def finished(out_dir: str | Path | Folder) -> set[tuple]:
    """The :data:`RESULT_KEY` of every final result under ``out_dir`` (what a resumed run skips)."""
    df = read_results(out_dir)
    if df.empty:
        return set()
    keep = [is_final(st, msg) for st, msg in zip(df["status"], df["message"])]
    rows = df[keep]
    return set(zip(*(rows[k].tolist() for k in RESULT_KEY)))


class ResultSink:
    """Writes a run's results as they come: a file when ``max_rows`` are waiting, or when the oldest
    waiting one is ``max_wait_s`` old (checked on every add, and by a timer thread in between)."""

    def __init__(self, out_dir: str | Path | Folder, max_rows: int = 64, max_wait_s: float = 1.0):
        self.out_dir = Folder.of(out_dir)
        self.max_rows, self.max_wait_s = max_rows, max_wait_s
        self.written = 0
        self._waiting: list[Result] = []
        self._since = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._tick, name="result-sink", daemon=True)
        self._timer.start()

    def add(self, result: Result) -> None:
        with self._lock:
            if not self._waiting:
                self._since = time.monotonic()
            self._waiting.append(result)
            if len(self._waiting) >= self.max_rows:
                self._write()

    def flush(self) -> None:
        with self._lock:
            self._write()

    def close(self) -> None:
        self._stop.set()
        self.flush()

    def _tick(self) -> None:
        while not self._stop.wait(self.max_wait_s / 4):
            with self._lock:
                if self._waiting and time.monotonic() - self._since >= self.max_wait_s:
                    self._write()

    def _write(self) -> None:
        if self._waiting:
            write_results(self._waiting, self.out_dir)
            self.written += len(self._waiting)
            self._waiting = []

    def __enter__(self) -> "ResultSink":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
