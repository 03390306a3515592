"""Folders of PKB solution files as samples, matched to PKB problems by name.

A PKB solution is ``<N>_<name>_<backend>.py`` (backend ``cuda``, ``triton`` or ``parallelkittens``);
a model's run is a folder of them, e.g. ``solutions_cuda_bf16_h100_8_<provider>_<model>/``. A folder
of such folders is several runs. The number is not trusted: PKB renumbered its problems, and files
written against an older numbering name another problem by number. The name decides, through
:data:`ALIASES` for names that changed; the number is only a tie-break and a recorded mismatch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pkb_ray.pkb.checkout import PREFIX

SOLUTION = re.compile(r"^(\d+)_([A-Za-z0-9_]+?)_(cuda|triton|parallelkittens)\.py$")
RUN_FOLDER = re.compile(r"^solutions_(?P<backend>[a-z]+)_(?P<precision>[a-z0-9]+)_(?P<hardware>[a-z0-9]+_\d+|none)_"
                        r"(?P<provider>[a-z0-9-]+)_(?P<model>.+)$")
# older PKB names -> current ones (lower case); None: the problem was removed upstream
ALIASES: dict[str, str | None] = {
    "gemm_allgather_at": "allgather_gemm_at",
    "gemm_allgather": "allgather_gemm",
    "gemm_allscatter": "gemm_allgather",
    "rms_norm": "tp_rms_norm",
    "fsdp_adamw_sharded": None,
}
REMOVED = "removed upstream"


def is_solution_folder(path: Path) -> bool:
    """A folder of PKB solution files, or of run folders holding them."""
    path = Path(path)
    return path.is_dir() and any(SOLUTION.match(p.name) for p in [*path.glob("*.py"), *path.glob("*/*.py")])


def read_solutions(path: str | Path, model: str | None = None) -> list[dict[str, Any]]:
    """Sample rows (as :func:`pkb_ray.generate.samples.read_samples` gives them) for every solution file."""
    root = Path(path)
    runs = [root] if any(SOLUTION.match(p.name) for p in root.glob("*.py")) else \
        sorted(p for p in root.iterdir() if p.is_dir() and any(SOLUTION.match(f.name) for f in p.glob("*.py")))
    rows: list[dict[str, Any]] = []
    taken: dict[tuple[str, str], int] = {}  # (model, problem) -> samples so far: indices never collide
    for run in runs:
        info = RUN_FOLDER.match(run.name)
        run_meta = {k: v for k, v in info.groupdict().items() if k not in ("backend", "model")} if info else {}
        name = model or (info.group("model") if info else run.name)
        if len(runs) > 1 and model:
            name = f"{model}/{run.name}"
        for file in sorted((f for f in run.glob("*.py") if SOLUTION.match(f.name)),
                           key=lambda f: (int(SOLUTION.match(f.name).group(1)), f.name)):
            row = _row(file, name, run_meta)
            row["sample_index"] = taken.get((name, row["problem_id"]), 0)
            taken[(name, row["problem_id"])] = row["sample_index"] + 1
            rows.append(row)
    return rows


def _row(file: Path, model: str, run_meta: dict[str, str]) -> dict[str, Any]:
    number, written_name, backend = SOLUTION.match(file.name).groups()
    key = written_name.lower()
    target = ALIASES.get(key, key)
    meta: dict[str, Any] = {"file": file.name, "format": "pkb", "pkb_number": str(int(number)), "pkb_name": written_name,
                            **run_meta}
    if key in ALIASES and target is not None:
        meta["pkb_alias"] = f"{key} -> {target}"
    problem_id = PREFIX + (target if target is not None else key)
    if target is None:
        meta["pkb_problem"] = REMOVED
    return {"problem_id": problem_id, "model": model, "sample_index": 0, "backend": backend,
            "source": file.read_text(errors="replace"), "metadata": meta}


def number_mismatches(rows: list[dict[str, Any]], numbers: dict[str, int]) -> None:
    """Record, in each row's metadata, where the file's number names another problem of the checkout
    (``numbers``: problem id -> its number there)."""
    for row in rows:
        meta = row.get("metadata")
        if not isinstance(meta, dict) or "pkb_number" not in meta:
            continue
        expected = numbers.get(row.get("problem_id"))
        if expected is not None and str(expected) != meta["pkb_number"]:
            meta["pkb_number_mismatch"] = f"file says {meta['pkb_number']}, the checkout's {row['problem_id']} " \
                                          f"is {expected}"
