"""The records on the wire between the parent and its ranks: one frozen command per step, the one
report that step answers with, and the failure any step may end with instead.

Commands are the parent's, and trusted; a rank decodes each line with :func:`decode_command`
(the ``step`` field names the record). Reports come from the ranks, and a candidate's set's are
forgeable: :func:`parse_report` is the one place where the parent reads one, and anything that is
not exactly the step's report, or a failure the runner writes, becomes a :class:`Failure` with
status ``unreadable_report``, which the verdict calls tampering. A report that parses says
nothing true yet: the verdict still trusts only the clean set's findings and the parent's clock.

Pure data (frozen stdlib dataclasses, no torch, no processes): rank processes and the verdict import
it alike. Only :func:`parse_report`, in the parent, validates with pydantic, imported there: a rank
never parses a report, and pydantic would cost every rank process ~200 ms at start (issue 29).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, is_dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Union

from pkb_ray.spec.names import Side

if TYPE_CHECKING:  # imported where it is used (parse_report): ranks never load pydantic
    from pydantic import ValidationError


class Step:
    """The names of the steps a rank runs (a command's ``step``, the first part of its tag)."""

    READY = "ready"  # the report a rank writes once its process group is up (not a command)
    REFERENCE = "reference"  # compute the reference outputs (clean ranks)
    TRIALS = "trials"  # the candidate on each trial seed
    REGION = "region"  # one timed region of k back-to-back calls (see pkb_ray.evaluate.rounds)
    WATCH = "watch"  # a candidate's set says what its watches found (after the rounds)
    CAPTURE = "capture"  # capture one side's k calls into a CUDA graph (graph timing mode)
    STAGE = "stage"  # keep the input buffers of a mode's timed calls, and say where they lie
    FILL = "fill"  # write a round's fresh inputs into both sides' staged buffers (clean ranks)
    CHECK_TRIALS = "check_trials"  # compare the candidate's trial outputs with the references (clean ranks)
    CHECK_TIMED = "check_timed"  # the same for the timed calls the parent picked and read
    EXIT = "exit"


record = dataclass(frozen=True, kw_only=True)


@record
class Record:
    # read by pydantic when parse_report validates a report: a field the record lacks is refused
    __pydantic_config__: ClassVar[dict] = {"extra": "forbid"}


# --- reports ------------------------------------------------------------------------------------

@record
class Report(Record):
    """A step that ended well."""

    status: Literal["ok"] = "ok"


@record
class Watched(Report):
    """A candidate's set's report after a step outside the regions: what its watches found replaced
    (:mod:`pkb_ray.runner.watch`)."""

    tampered: list[str] = field(default_factory=list)


@record
class Ready(Report):
    pid: int
    device: str


@record
class ReferenceReport(Report):
    structure: dict[str, list]  # seed -> [[shape, dtype], ...] of the outputs
    digests: dict[str, str]  # file name -> SHA-256 of the reference file the rank wrote
    aliases: dict[str, list[str]]  # seed -> inputs the outputs share memory with
    devices: list[str]
    traffic: dict[str, float] | None  # traced volumes, for problems with no bound of their own
    input_bytes: int


Layout = list[list[int]]  # where each tensor of a value lies (pkb_ray.measure.correctness.layout)


Allocations = dict[str, list]  # base address -> [size, CUDA IPC handle as hex] (pkb_ray.runner.cuda_ipc)


@record
class TrialsReport(Watched):
    devices: dict[str, list[str]]  # seed -> the outputs' devices
    calls: dict[str, list[Layout]]  # seed -> [its outputs' layout, its inputs' layout]
    rank_builds: int  # torch extensions the candidate built on the rank
    handles: Allocations = field(default_factory=dict)  # the device allocations exported since the last report


@record
class RegionReport(Report):
    us: float  # per call, by the rank's own clock (a diagnostic): finite and >= 0
    calls: list[list[Layout]]  # per call, [its outputs' layout, its inputs' layout] held until the next step; [outputs] on staged inputs
    devices: list[str]  # of the first call's outputs
    handles: Allocations = field(default_factory=dict)  # the device allocations exported since the last report
    # the rank's monotonic clock (s) at: the command read, the calls' start, the calls done, the
    # report made. A diagnostic of where a bracket goes (benchmarks/bracket.py), never a time judged
    stamps: list[float] = field(default_factory=list)
    # the calls lie where this set's last region of the same mode said (a graph replay's outputs stay
    # where its capture put them): ``calls`` is then empty, and the parent takes the last region's
    as_before: bool = False

    def __post_init__(self) -> None:  # pydantic runs it too: a ValueError here is a ValidationError there
        if not (isinstance(self.us, (int, float)) and math.isfinite(self.us) and self.us >= 0):
            raise ValueError(f"us must be a finite time >= 0, not {self.us!r}")


@record
class StageReport(Report):
    inputs: list[Layout]  # per timed call, where its staged inputs lie
    on_device: list[list[bool]] = field(default_factory=list)  # per call, per tensor: in device memory
    handles: Allocations = field(default_factory=dict)  # the device allocations exported since the last report


@record
class FillReport(Report):
    written: int  # tensors written into the candidate's device memory
    kept: list[list[Layout]] = field(default_factory=list)  # with ``keep``: per round, per call, where its inputs lie


@record
class CaptureReport(Watched):
    captured: bool
    error: str = ""  # why not


@record
class WatchReport(Watched):
    pass


@record
class Finding(Record):
    """The clean set's comparison of one output (a trial seed's, or a picked timed call's)."""

    id: int
    ok: bool
    where: str = ""
    message: str = ""
    max_abs_error: float | None = None
    kind: Literal["", "value", "unreadable", "unshareable"] = ""
    second: bool | None = None  # the first trial, by the second rule (pkb_ray.spec.formats.second_verdict)

    @classmethod
    def of(cls, id_: int, where: str = "", message: str = "", max_abs_error: float | None = None,
           kind: str = "value", second: bool | None = None) -> "Finding":
        """A comparison's finding: ok without a ``message``; else of ``kind``."""
        return cls(id=id_, ok=not message, where=where, message=message, max_abs_error=max_abs_error,
                   kind=kind if message else "", second=second)


@record
class ChecksReport(Report):
    checks: list[Finding]


FailureStatus = Literal["import_error", "runtime_error", "reference_changed", "unreadable_report"]


@record
class Failure(Record):
    """A step that raised (its status and traceback), or a report the parent could not read."""

    status: FailureStatus
    message: str = ""


Answer = Union[Report, Failure]


def parse_report(kind: type[Report], raw: Any) -> Answer:
    """What a rank sent for a step whose report is ``kind``; never raises."""
    from pydantic import ValidationError
    try:
        if isinstance(raw, dict) and raw.get("status") != "ok":
            return _validator(Failure).validate_python(raw)
        return _validator(kind).validate_python(raw)
    except ValidationError as exc:
        shown = json.dumps(raw, default=str)[:200] if isinstance(raw, (dict, list)) else repr(raw)[:200]
        return Failure(status="unreadable_report", message=f"not a {kind.__name__}: {_first_error(exc)}; got {shown}")


@cache
def _validator(kind: type[Record]):
    from pydantic import TypeAdapter
    return TypeAdapter(kind)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(map(str, error['loc'])) or 'the report'}: {error['msg']}"


# --- commands -----------------------------------------------------------------------------------

@record
class Case(Record):
    """What a step runs on: a problem file at one dtype and size."""

    problem_path: str
    dtype: str
    size: dict[str, Any]


@record
class Tol(Record):
    atol: float
    rtol: float


@record
class Pick(Record):
    """A timed call picked for the check, chosen by the parent after its region ended (the
    candidate's processes stopped), its outputs and inputs read there by the trusted side."""

    id: int
    side: Side
    region: int  # the round
    index: int  # the call within the region
    mode: str
    nonce: int


@record
class Command(Record):
    """One step of every rank of a set. ``tag`` is the parent's, unpredictable (see ranks.RankSet.tag).
    ``keys``: the secrets the step's inputs derive from (:mod:`pkb_ray.measure.keys`); each rank's line
    holds its own and the shared one only."""

    answer: ClassVar[type[Report]]
    tag: str = ""
    keys: dict[str, int] = field(default_factory=dict)

    @property
    def files(self) -> list[int]:
        """The ids (seeds, picks) of the tensor files it reads or writes, one per rank."""
        return []


@record
class OnSeeds(Command):
    """A step over input seeds, with one tensor file per seed and rank."""

    case: Case
    seeds: list[int]

    @property
    def files(self) -> list[int]:
        return self.seeds


@record
class ComputeReference(OnSeeds):
    answer = ReferenceReport
    step: Literal["reference"] = Step.REFERENCE
    out_dir: str


@record
class RunTrials(OnSeeds):
    answer = TrialsReport
    step: Literal["trials"] = Step.TRIALS
    candidate_path: str
    structure: dict[str, dict[str, list]]  # rank -> seed -> the reference's output structure
    prebuilt: str = ""  # the compile stage's torch extensions for this sample
    arch_list: str = ""


@record
class TimeRegion(Command):
    answer = RegionReport
    step: Literal["region"] = Step.REGION
    case: Case
    side: Side
    k: int
    nonce: int
    what: str
    base_seeds: list[int]
    hold: bool  # keep the outputs and inputs until the next step (the trusted side reads them)
    graph: bool  # one replay of the captured graph instead of k eager calls
    staged: bool = False  # on the staged buffers as the trusted side filled them (no nonce: none is sent)
    described: bool = False  # the parent holds this capture's layouts: a rank may report them as_before
    # armed, not run: the rank answers at once and runs the region on each fire line later
    # (pkb_ray.runner.protocol.go_line), until another region, stage or capture
    fire: bool = False


@record
class Capture(Command):
    answer = CaptureReport
    step: Literal["capture"] = Step.CAPTURE
    case: Case
    side: Side
    k: int
    nonce: int
    base_seeds: list[int]


@record
class Stage(Command):
    """Keep the input buffers of the mode's ``k`` timed calls (eager: copies of the base sets; graph:
    those the captured graph reads) and say where they lie: the trusted side writes every round's
    inputs into them while the set is stopped (:class:`Fill`), so no timed call's inputs are made,
    or can be known, inside the candidate's process. To a clean set, ``peer`` says where the
    candidate's rank of the same number staged its own (its ``StageReport``, as
    ``{"inputs": ..., "allocations": ...}``): each rank's line carries its own peer only."""

    answer = StageReport
    step: Literal["stage"] = Step.STAGE
    case: Case
    side: Side
    k: int
    base_seeds: list[int]
    graph: bool
    peer: dict[str, Any] = field(default_factory=dict)
    touch: bool = False  # a clean set's: its toucher started now, not in a round's fill (Fill.touch)


@record
class Fill(Command):
    """A clean set's: make a round's fresh inputs (the round's nonce, the rank's own key) and write
    them into its own staged buffers and into the tensors of the candidate's staged buffers that lie
    in the candidate's device memory (CUDA IPC); the parent copies the rest (host memory) itself.
    With ``keep`` (every staged tensor in host memory) the inputs of the rounds ``nonces`` are made
    at once and kept, and where they lie reported: the parent copies each round's into both sides'
    buffers itself, with no step a round."""

    answer = FillReport
    step: Literal["fill"] = Step.FILL
    case: Case
    k: int
    nonces: list[int]
    base_seeds: list[int]
    graph: bool
    candidate: bool  # whether a candidate's buffers are to be written too (not for a quiet baseline)
    keep: bool = False
    touch: bool = False  # then one kernel from the clean rank's toucher process (pkb_ray.runner.toucher)


@record
class Watch(Command):
    """Say what the watches found (a candidate's set, after the rounds; outside every region)."""

    answer = WatchReport
    step: Literal["watch"] = Step.WATCH
    case: Case


@record
class CheckTrials(OnSeeds):
    answer = ChecksReport
    step: Literal["check_trials"] = Step.CHECK_TRIALS
    expected_dir: str
    expected_sha256: dict[str, str]  # file name -> content hash, from the store's MAC-checked manifest
    actual_dir: str
    tolerance: Tol


@record
class CheckTimed(Command):
    answer = ChecksReport
    step: Literal["check_timed"] = Step.CHECK_TIMED
    case: Case
    picks: list[Pick]
    base_seeds: list[int]
    actual_dir: str
    tolerance: Tol

    @property
    def files(self) -> list[int]:
        return [p.id for p in self.picks]


@record
class Exit(Command):
    answer = Report
    step: Literal["exit"] = Step.EXIT


_COMMANDS: dict[str, type[Command]] = {c.step: c for c in (ComputeReference, RunTrials, TimeRegion, Capture, Watch,
                                                             CheckTrials, CheckTimed, Stage, Fill, Exit)}


def as_dict(record: Record) -> dict[str, Any]:
    """The record as data ``json.dumps`` takes: nested records become dicts; a Side stays a ``str``
    enum, which json writes as its value. No deep copy (``dataclasses.asdict`` makes one): every
    region sends a command and gets a report, and their layouts are long lists."""
    return _plain(record)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def encode_command(cmd: Command) -> bytes:
    return (json.dumps(as_dict(cmd)) + "\n").encode()


def decode_command(line: str | bytes) -> Command:
    """The command a line holds. The parent wrote it (trusted): the rank rebuilds the records by
    ``step`` and refuses a step or a field it does not know, without validating every type."""
    raw = json.loads(line)
    kind = _COMMANDS.get(raw.get("step")) if isinstance(raw, dict) else None
    if kind is None:
        raise ValueError(f"not a command: no step {raw.get('step') if isinstance(raw, dict) else raw!r}")
    unknown = set(raw) - {f.name for f in fields(kind)}
    if unknown:
        raise ValueError(f"a {kind.__name__} has no field {sorted(unknown)}")
    if "case" in raw:
        raw["case"] = Case(**raw["case"])
    if "side" in raw:
        raw["side"] = Side(raw["side"])
    if "tolerance" in raw:
        raw["tolerance"] = Tol(**raw["tolerance"])
    if "picks" in raw:
        raw["picks"] = [Pick(**{**p, "side": Side(p["side"])}) for p in raw["picks"]]
    return kind(**raw)
