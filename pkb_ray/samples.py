"""Reading samples (replay folders, JSONL, Parquet) and writing results (partitioned Parquet).

A folder of ParallelKernelBench solution files is read by :mod:`pkb_ray.pkb.solutions`. A replay
folder holds one sub-folder per problem id and one ``.py`` file per sample, named
``<index>_<label>.py``; comment lines ``# key: value`` at the top become the sample's metadata
(the shipped set says ``# expect: <status>`` in each file). JSONL and Parquet rows have the
fields of :class:`pkb_ray.schema.Sample`. Rows are returned as plain dicts: validating them
is the validate stage's job, so that a malformed row becomes a result instead of an exception.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, Iterable

import pyarrow.parquet as pq

from pkb_ray.pkb.solutions import is_solution_folder, read_solutions
from pkb_ray.schema import RESULT_SCHEMA, Result, is_final, results_to_table

_HEADER = re.compile(r"^#\s*([a-z_]+):\s*(.*?)\s*$")


def read_samples(path: str | Path, model: str = "replay") -> list[dict[str, Any]]:
    path = Path(path)
    if path.is_file():
        return _read_file(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such sample file or folder")
    if is_solution_folder(path):  # ParallelKernelBench's <N>_<name>_<backend>.py files
        return read_solutions(path, None if model == "replay" else model)
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
                         "backend": meta.pop("backend", "torch"), "source": source, "metadata": meta})
    return rows


def write_results(results: Iterable[Result], out_dir: str | Path) -> list[Path]:
    """Write results as Parquet partitioned by model and problem (hive layout), one new file each.

    Each file is written under a temporary name and renamed, so a reader never sees half a file.
    """
    by_partition: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        by_partition.setdefault((r.model, r.problem_id), []).append(r)
    written = []
    for (model, problem), rows in sorted(by_partition.items()):
        part = Path(out_dir) / f"model={_safe(model)}" / f"problem_id={_safe(problem)}"
        part.mkdir(parents=True, exist_ok=True)
        final = part / f"part-{uuid.uuid4().hex[:12]}.parquet"
        tmp = final.with_suffix(".parquet.tmp")
        pq.write_table(results_to_table(rows), tmp)
        tmp.rename(final)
        written.append(final)
    return written


def read_results(out_dir: str | Path):
    """All results under ``out_dir`` as a pandas DataFrame (partition columns restored)."""
    import pyarrow.dataset as ds

    files = sorted(str(p) for p in Path(out_dir).rglob("*.parquet"))
    if not files:
        import pandas as pd

        return pd.DataFrame()
    # the current schema: files written before a column existed read it as null; before `nodes`
    # existed, every gang was on one node
    df = ds.dataset(files, format="parquet", schema=RESULT_SCHEMA).to_table().to_pandas()
    return df.assign(nodes=df["nodes"].fillna(1).astype(int))


def newest(df):
    """One row per evaluation (sample, world size, nodes, hardware) of :func:`read_results`: the
    newest. A resumed run evaluates evaluator faults again, and one folder may be read twice."""
    if df.empty:
        return df
    return df.sort_values("finished_at").drop_duplicates(["sample_key", "world_size", "nodes", "hardware"],
                                                         keep="last")


def finished(out_dir: str | Path) -> set[tuple[str, int, int]]:
    """(sample_key, world_size, nodes) of the final results already under ``out_dir`` (for resuming)."""
    df = read_results(out_dir)
    if df.empty:
        return set()
    keep = [is_final(st, msg) for st, msg in zip(df["status"], df["message"])]
    return set(zip(df["sample_key"][keep], df["world_size"][keep].astype(int), df["nodes"][keep]))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)
