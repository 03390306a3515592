"""Records at the boundaries: a sample in, a result out, and the Arrow schema of results.

``Result`` and ``RESULT_SCHEMA`` describe the same row; ``tests/unit/test_schema.py`` keeps them in
step. Results are Parquet that pandas, DuckDB and W&B read.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, create_model

from pkb_ray.spec import formats
from pkb_ray.spec.names import Backend, Status
from pkb_ray.spec.placement import Layout

MAX_ERROR_CHARS = 2000


class Sample(BaseModel):
    """One candidate solution of one problem."""

    model_config = ConfigDict(extra="forbid")
    problem_id: str
    model: str
    sample_index: int = Field(ge=0)
    backend: str = Backend.TORCH
    source: str
    metadata: dict[str, str] = Field(default_factory=dict, description="generation metadata")

    @property
    def key(self) -> str:
        """Stable identity of this sample: same (problem, model, index, source) -> same key."""
        h = hashlib.sha256(self.source.encode()).hexdigest()[:16]
        return f"{self.model}/{self.problem_id}/{self.sample_index}/{h}"


@dataclass(frozen=True)
class Where:
    """Where and how a sample is evaluated, as each of its result rows says it (with the sample and
    round, :data:`pkb_ray.results.parquet.RESULT_KEY`): the gang layout, the hardware profile, size and dtype."""

    layout: Layout
    hardware: str = ""
    device_backend: str = ""
    size: str = ""
    dtype: str = ""

    @classmethod
    def of(cls, where: "Where | int") -> "Where":
        """``where`` itself, or a world size on one node with nothing else said."""
        return where if isinstance(where, Where) else cls(Layout(1, int(where)))

    @property
    def fields(self) -> dict[str, Any]:
        """The Result fields this fixes."""
        return {"world_size": self.layout.world_size, "nodes": self.layout.nodes, "hardware": self.hardware,
                "device_backend": self.device_backend, "size": self.size, "dtype": self.dtype}


@dataclass(frozen=True)
class EvalTask:
    """A sample on its way to a gang, and where it is to be evaluated. The pipeline creates it; the
    gang pool queues it by layout and dispatches it."""

    sample: Sample
    where: Where

    @property
    def layout(self) -> Layout:
        return self.where.layout


class TrialRecord(BaseModel):
    """One correctness check on one rank: a trial seed, or a timed call (kind='timed')."""

    model_config = ConfigDict(extra="forbid")
    kind: str = "trial"  # 'trial' | 'timed'
    seed: int
    rank: int
    ok: bool
    max_abs_error: float | None = None
    message: str = ""


class _ResultFields(BaseModel):
    """One sample's verdict and measurements; :data:`Result` adds the formats' verdict columns."""

    model_config = ConfigDict(extra="forbid")
    sample_key: str
    problem_id: str
    category: str = ""
    model: str
    sample_index: int
    backend: str
    status: Status
    message: str = ""  # trimmed error text: compiler message, traceback, mismatch summary
    failed_rank: int | None = None
    world_size: int
    nodes: int = 1  # nodes the gang spanned (hardware.spread layouts: > 1); world_size / nodes ranks on each
    dtype: str = ""
    size: str = ""  # preset name or knob list
    trials: list[TrialRecord] = Field(default_factory=list)
    # Per-rank median and inter-quartile range over the timed rounds, microseconds per call.
    ref_median_us: list[float] = Field(default_factory=list)
    ref_iqr_us: list[float] = Field(default_factory=list)
    cand_median_us: list[float] = Field(default_factory=list)
    cand_iqr_us: list[float] = Field(default_factory=list)
    ref_time_us: float | None = None  # slowest rank's median
    cand_time_us: float | None = None
    speedup: float | None = None  # ref_time_us / cand_time_us
    speedup_lo: float | None = None  # its 95 % interval from the spread of the rounds (timing.speedup_interval)
    speedup_hi: float | None = None
    sol_time_us: float | None = None  # speed-of-light lower bound for this problem/size/hardware
    sol_fraction: float | None = None  # sol_time_us / cand_time_us
    sol_source: str = ""  # "model": the problem's own bound; "traced": estimated from one reference call
    hardware: str = ""
    device_backend: str = ""  # gloo | nccl
    versions: dict[str, str] = Field(default_factory=dict)
    started_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    finished_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    eval_seconds: float = 0.0  # sample handed to the harness until its verdict
    compile_seconds: float | None = None  # its builds in the compile stage (CUDA sources, torch extensions)
    rank_builds: int | None = None  # torch extensions it built on its rank (the compile stage could not)
    timed_seconds: float | None = None  # of which inside the timing step (warmup and rounds), slowest rank
    calls_per_round: int | None = None  # back-to-back calls in one timed round (see pkb_ray.measure.timing)
    timed_rounds: int | None = None  # rounds a side was timed (eval.rounds, or fewer where sequential stopping ended them)
    message_bytes: int | None = None  # the inputs of one call on the rank with the most, at this size
    timing_mode: str = ""  # what ref/cand times and speedup are: eager calls, or graph replays (eval.timing_mode)
    graph_error: str = ""  # why graph replay was asked for and not used (a side could not be captured)
    eager_ref_time_us: float | None = None  # eval.timing_mode=both: each mode's times
    eager_cand_time_us: float | None = None
    graph_ref_time_us: float | None = None
    graph_cand_time_us: float | None = None
    phase_seconds: dict[str, float] = Field(default_factory=dict)  # EvalPhase -> seconds
    isolation: str = ""  # how its rank processes were isolated (pkb_ray.isolation.sandbox), e.g. "sandbox"
    gang: str = ""  # the gang actor that evaluated it
    duplicate_of: str = ""  # sample_key of the identical sample whose evaluation this row shares
    round: int = 0  # refinement round of the sample: 0 = first answer, r = after r rounds of feedback
    source: str = ""

    @property
    def layout(self) -> Layout:
        """Where it ran: world_size / nodes ranks on each of ``nodes`` nodes."""
        return Layout(self.nodes, self.world_size // self.nodes)

    def copied_for(self, sample: Sample) -> "Result":
        """This verdict under the identity of ``sample``, whose source is identical (``duplicate_of``
        names the one evaluated)."""
        return self.model_copy(update={"sample_key": sample.key, "model": sample.model,
                                       "sample_index": sample.sample_index, "duplicate_of": self.sample_key})

    @classmethod
    def for_sample(cls, sample: Sample, status: Status, message: str = "", **fields: Any) -> "Result":
        fields.setdefault("round", int(sample.metadata.get("round", 0) or 0))
        if sample.metadata.get("compile_seconds"):
            fields.setdefault("compile_seconds", float(sample.metadata["compile_seconds"]))
        return cls(
            sample_key=sample.key,
            problem_id=sample.problem_id,
            model=sample.model,
            sample_index=sample.sample_index,
            backend=sample.backend,
            status=status,
            message=trim(message),
            source=sample.source,
            **fields,
        )


# An imported benchmark's own rule on the same outputs (formats.SecondVerdict) fills a column of its
# own, named by its format; None where no trial was compared (invalid, unsupported, ...).
Result = create_model("Result", __base__=_ResultFields, __module__=__name__,
                      **{column: (bool | None, None) for column in formats.verdict_columns()})


# Rows that say nothing about the sample: a resumed run evaluates these samples again.
NOT_THE_SAMPLES_FAULT = ("evaluator error", "the gang evaluating this sample died")


def is_final(status: str, message: str) -> bool:
    """A result that a resumed sweep keeps (everything but evaluator faults and dead gangs)."""
    return not message.startswith(NOT_THE_SAMPLES_FAULT)


def trim(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Keep the head and the tail of a long message (the tail of a traceback matters most)."""
    if len(text) <= limit:
        return text
    head = limit // 4
    return text[:head] + f"\n... [{len(text) - limit} chars cut] ...\n" + text[-(limit - head) :]


_TRIAL = pa.struct(
    [
        ("kind", pa.string()),
        ("seed", pa.int64()),
        ("rank", pa.int32()),
        ("ok", pa.bool_()),
        ("max_abs_error", pa.float64()),
        ("message", pa.string()),
    ]
)

RESULT_SCHEMA = pa.schema(
    [
        ("sample_key", pa.string()),
        ("problem_id", pa.string()),
        ("category", pa.string()),
        ("model", pa.string()),
        ("sample_index", pa.int64()),
        ("backend", pa.string()),
        ("status", pa.string()),
        ("message", pa.string()),
        ("failed_rank", pa.int32()),
        ("world_size", pa.int32()),
        ("nodes", pa.int32()),
        ("dtype", pa.string()),
        ("size", pa.string()),
        ("trials", pa.list_(_TRIAL)),
        ("ref_median_us", pa.list_(pa.float64())),
        ("ref_iqr_us", pa.list_(pa.float64())),
        ("cand_median_us", pa.list_(pa.float64())),
        ("cand_iqr_us", pa.list_(pa.float64())),
        ("ref_time_us", pa.float64()),
        ("cand_time_us", pa.float64()),
        ("speedup", pa.float64()),
        ("speedup_lo", pa.float64()),
        ("speedup_hi", pa.float64()),
        ("sol_time_us", pa.float64()),
        ("sol_fraction", pa.float64()),
        ("sol_source", pa.string()),
        ("hardware", pa.string()),
        ("device_backend", pa.string()),
        ("versions", pa.map_(pa.string(), pa.string())),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("eval_seconds", pa.float64()),
        ("compile_seconds", pa.float64()),
        ("rank_builds", pa.int32()),
        ("timed_seconds", pa.float64()),
        ("calls_per_round", pa.int32()),
        ("timed_rounds", pa.int32()),
        ("message_bytes", pa.int64()),
        ("timing_mode", pa.string()),
        ("graph_error", pa.string()),
        ("eager_ref_time_us", pa.float64()),
        ("eager_cand_time_us", pa.float64()),
        ("graph_ref_time_us", pa.float64()),
        ("graph_cand_time_us", pa.float64()),
        ("phase_seconds", pa.map_(pa.string(), pa.float64())),
        ("isolation", pa.string()),
        ("gang", pa.string()),
        ("duplicate_of", pa.string()),
        ("round", pa.int32()),
        ("source", pa.string()),
        *((column, pa.bool_()) for column in formats.verdict_columns()),  # Result's last fields too
    ]
)


def results_to_table(results: list[Result]) -> pa.Table:
    rows = []
    for r in results:
        row = r.model_dump(mode="python")
        row["status"] = r.status.value
        row["versions"] = list(r.versions.items())
        row["phase_seconds"] = list(r.phase_seconds.items())
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=RESULT_SCHEMA)


def table_to_results(table: pa.Table) -> list[Result]:
    out = []
    for row in table.to_pylist():
        row["versions"] = dict(row["versions"] or [])
        row["phase_seconds"] = dict(row["phase_seconds"] or [])
        out.append(Result.model_validate(row))
    return out
