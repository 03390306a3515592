"""Static checks of a sample row, before anything runs.

A row that cannot be evaluated as given becomes an ``invalid_sample`` result: not a valid Sample
record, an unknown problem, a world size the problem does not support, an unknown backend, empty
or oversized source, no top-level ``solution`` function, or a ``solution`` whose parameters
differ from the reference's (a format whose benchmark calls ``solution`` positionally needs only as
many: :attr:`pkb_ray.spec.formats.SampleFormat.positional`). A sample that needs NVLink multicast on
hardware that has it off becomes ``unsupported_hardware`` (:mod:`pkb_ray.problems.backend_rules`): it is
never built or launched. Source that does not parse is left to the compile stage, which
reports it as ``compile_error`` with the compiler's message.
"""

from __future__ import annotations

import ast
import hashlib
from typing import Any

from pydantic import ValidationError

from pkb_ray.problem import Problem
from pkb_ray.problems.backend_rules import multicast_use, pk_world_size
from pkb_ray.spec import formats
from pkb_ray.spec.names import BACKENDS, Backend, Status
from pkb_ray.spec.schema import Result, Sample, Where

MAX_SOURCE_BYTES = 512 * 1024


def validate(row: dict[str, Any], problems: dict[str, Problem], where: Where | int,
             multicast: bool = False) -> Sample | Result:
    """The row as a Sample, or its final Result (evaluated ``where``: a world size, or a Where).
    ``multicast``: whether the hardware lets samples use NVLink multicast."""
    where = Where.of(where)
    world_size = where.layout.world_size
    sample, error = _as_sample(row)
    if sample is None:
        digest = hashlib.sha256(repr(sorted(row.items())).encode()).hexdigest()[:16]  # stable across runs
        return Result(sample_key=f"invalid/{digest}", problem_id=str(row.get("problem_id", "")),
                      model=str(row.get("model", "")), sample_index=_int(row.get("sample_index")),
                      backend=str(row.get("backend", "")), status=Status.INVALID_SAMPLE, message=error,
                      source=str(row.get("source", ""))[:MAX_SOURCE_BYTES], **where.fields)
    problem = problems.get(sample.problem_id)
    category = problem.meta.category if problem else ""
    found = "" if multicast else multicast_use(sample.source, sample.backend)
    if found:
        return Result.for_sample(sample, Status.UNSUPPORTED_HARDWARE, f"needs NVLink multicast, which hardware "
                                 f"{where.hardware or '(this profile)'} has off (nvlink_multicast: false): {found}",
                                 category=category, **where.fields)
    why = _problem_mismatch(sample, problem, world_size) or _source_problem(sample, problem)
    if why:
        return Result.for_sample(sample, Status.INVALID_SAMPLE, why, category=category, **where.fields)
    return sample


def _as_sample(row: dict[str, Any]) -> tuple[Sample | None, str]:
    if "_error" in row:
        return None, row["_error"]
    try:
        return Sample.model_validate(row), ""
    except ValidationError as exc:
        err = exc.errors()[0]
        return None, f"sample field {'.'.join(map(str, err['loc']))}: {err['msg']}"


def _problem_mismatch(sample: Sample, problem: Problem | None, world_size: int) -> str:
    if problem is None:
        return formats.of(sample.metadata).unknown_problem(sample) or f"unknown problem id {sample.problem_id!r}"
    if not problem.meta.world_sizes.supports(world_size):
        return f"problem {problem.id} does not support world size {world_size} ({problem.meta.world_sizes})"
    if sample.backend not in BACKENDS:
        return f"unknown backend {sample.backend!r}; known: {', '.join(BACKENDS)}"
    if sample.backend == Backend.PARALLELKITTENS and pk_world_size(sample.source) != world_size:
        return f"a ParallelKittens kernel built for {pk_world_size(sample.source)} devices (NUM_DEVICES) cannot " \
               f"run at world size {world_size}"
    return ""


def _source_problem(sample: Sample, problem: Problem) -> str:
    if sample.metadata.get("generation_error"):  # the model's reply held no usable solution
        return sample.metadata["generation_error"]
    if not sample.source.strip():
        return "empty source"
    if len(sample.source.encode()) > MAX_SOURCE_BYTES:
        return f"source is {len(sample.source.encode())} bytes; the limit is {MAX_SOURCE_BYTES}"
    try:
        tree = ast.parse(sample.source)
    except (SyntaxError, ValueError):
        return ""  # the compile stage reports it with the compiler's message
    fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.name == "solution"), None)
    if fn is None:
        if any(_assigns(n, "solution") for n in tree.body):
            return ""  # solution = something: can only be checked once imported
        return "no top-level function solution(...)"
    if isinstance(fn, ast.AsyncFunctionDef):
        return "solution must be a plain function, not async"
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    if formats.of(sample.metadata).positional:  # called as solution(*inputs): names are free
        if fn.args.vararg is None and len(params) != len(problem.signature):
            return f"solution takes {len(params)} arguments; the reference takes {len(problem.signature)}"
        return ""
    if fn.args.vararg is None and params != problem.signature:
        return f"solution({', '.join(params)}) must keep the reference's parameters ({', '.join(problem.signature)})"
    return ""


def _assigns(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, (ast.ImportFrom, ast.Import)):
        return any((a.asname or a.name) == name for a in node.names)
    return False


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0
