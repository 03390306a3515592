"""Problems: the file format, the context inputs are built in, and the loader.

A problem is one Python file in ``problems/`` that owns everything about itself:

``META``
    a plain dict validated into :class:`ProblemMeta` (id, name, category, world sizes,
    dtypes, tolerance per dtype, size presets).
``make_inputs(ctx: InputContext) -> tuple``
    the positional arguments of one call on one rank, random and different for every seed.
``solution(*args)``
    the PyTorch + torch.distributed reference. Candidates keep its signature. It runs on
    every rank with the default process group initialised and the device set.
``speed_of_light(size: dict, world_size: int, dtype: torch.dtype) -> Traffic``
    what the busiest rank must at least move and compute, for the lower bound on time.
``oracle(inputs: list[tuple], size: dict, world_size: int) -> list`` (expected of every problem)
    the outputs of every rank computed in one process from all ranks' inputs, without any
    collective: an independent statement of what the reference must compute
    (:mod:`pkb_ray.problems.check` holds the references to it).

This module is pure: no Ray, no processes. Loading a problem file imports it (problem files
are ours, not untrusted); a bad file fails with :class:`ProblemError` naming the file and field.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pkb_ray.measure.keys import derived
from pkb_ray.spec.config import HardwareConfig
from pkb_ray.spec.paths import PROBLEMS_DIR

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
}

REQUIRED_SIZES = ("small", "default")
LADDER = "ladder"  # in eval.sizes: the problem's own size ladder


class ProblemError(ValueError):
    """A problem file is malformed; the message names the file and the field."""


class Tolerance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    reason: str = Field(min_length=1, description="one line: why this tolerance for this dtype")


class WorldSizes(BaseModel):
    """Which world sizes a problem supports: min <= W <= max and W % multiple_of == 0."""

    model_config = ConfigDict(extra="forbid")
    min: int = Field(2, ge=1)
    max: int | None = None
    multiple_of: int = Field(1, ge=1)

    def supports(self, world_size: int) -> bool:
        return (
            world_size >= self.min
            and (self.max is None or world_size <= self.max)
            and world_size % self.multiple_of == 0
        )


class ProblemMeta(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z0-9_]+$", description="stable id; never reuse one")
    name: str = Field(min_length=1)
    category: str = Field(pattern=r"^[a-z0-9_]+$")
    world_sizes: WorldSizes = WorldSizes()
    dtypes: list[str] = Field(min_length=1)
    tolerances: dict[str, Tolerance]
    sizes: dict[str, dict[str, int]]
    ladder: list[dict[str, int]] = Field(default_factory=list, description="the sizes of a size sweep "
                                         "(eval.sizes=[ladder]), smallest first: knob values over 'default'")
    mutates_inputs: bool = False

    @field_validator("dtypes")
    @classmethod
    def _known_dtypes(cls, value: list[str]) -> list[str]:
        unknown = [d for d in value if d not in DTYPES]
        if unknown:
            raise ValueError(f"unknown dtype(s) {unknown}; known: {sorted(DTYPES)}")
        return value

    @field_validator("sizes")
    @classmethod
    def _size_presets(cls, value: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        missing = [s for s in REQUIRED_SIZES if s not in value]
        if missing:
            raise ValueError(f"missing size preset(s) {missing}")
        keys = {name: set(params) for name, params in value.items()}
        first = keys[REQUIRED_SIZES[0]]
        for name, params in keys.items():
            if params != first:
                raise ValueError(f"preset {name!r} has knobs {sorted(params)}, 'small' has {sorted(first)}")
        return value

    @model_validator(mode="after")
    def _ladder_knobs(self) -> "ProblemMeta":
        known = set(self.sizes[REQUIRED_SIZES[0]])
        for i, rung in enumerate(self.ladder):
            unknown = sorted(set(rung) - known)
            if unknown or not rung:
                raise ValueError(f"ladder.{i}: knobs {unknown or '(none)'} are not the size knobs {sorted(known)}")
            if any(v < 1 for v in rung.values()):
                raise ValueError(f"ladder.{i}: knob values must be positive, got {rung}")
        return self

    @model_validator(mode="after")
    def _tolerance_per_dtype(self) -> "ProblemMeta":
        missing = [d for d in self.dtypes if d not in self.tolerances]
        if missing:
            raise ValueError(f"tolerances: no entry for dtype(s) {missing}")
        return self


@dataclass(frozen=True)
class Traffic:
    """Per-rank work of the busiest rank: the inputs of the speed-of-light bound."""

    interconnect_bytes: float = 0.0  # bytes it must send or receive over the GPU interconnect
    flops: float = 0.0
    hbm_bytes: float = 0.0  # bytes it must read or write in its own memory
    # rounds of communication that cannot overlap (each waits for the one before), the fewest any
    # algorithm needs: 1 for a single exchange, 2 when a second needs the first's result
    steps: int | None = None  # None: 1 if it moves interconnect bytes, else 0

    @property
    def dependent_steps(self) -> int:
        return self.steps if self.steps is not None else int(self.interconnect_bytes > 0)


@dataclass
class InputContext:
    """Everything ``make_inputs`` may depend on. Its random draws are per (seed, rank); in an
    evaluation ``seed`` derives from a secret of the rank's own and ``shared_seed`` from one that
    every rank has (:mod:`pkb_ray.measure.keys`): draw what must be equal on every rank from
    :meth:`shared_generator` only."""

    size: dict[str, int]
    rank: int
    world_size: int
    dtype: torch.dtype
    device: torch.device
    seed: int
    shared_seed: int | None = None  # the seed of data identical on every rank (None: ``seed``)
    _gen: torch.Generator | None = field(default=None, repr=False)

    @property
    def generator(self) -> torch.Generator:
        """Generator private to this rank (differs across ranks and seeds)."""
        if self._gen is None:
            self._gen = torch.Generator(device=self.device).manual_seed(_mix(self.seed, self.rank))
        return self._gen

    def shared_generator(self) -> torch.Generator:
        """A generator that gives the same draws on every rank (e.g. split sizes, a root)."""
        return torch.Generator(device="cpu").manual_seed(_mix(self.seed if self.shared_seed is None else self.shared_seed, -1))

    def randn(self, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator, device=self.device, dtype=dtype or self.dtype)

    def randint(self, low: int, high: int, *shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.generator, device=self.device, dtype=dtype)


_mix = derived  # a seed of (seed, rank): the same keyed hash as an input key's labels

@dataclass(frozen=True)
class Problem:
    meta: ProblemMeta
    path: Path
    module: ModuleType

    @property
    def id(self) -> str:
        return self.meta.id

    @property
    def make_inputs(self) -> Callable[[InputContext], tuple]:
        return self.module.make_inputs

    @property
    def solution(self) -> Callable[..., Any]:
        return self.module.solution

    @property
    def speed_of_light(self) -> Callable[[dict, int, torch.dtype], Traffic]:
        return self.module.speed_of_light

    @property
    def oracle(self) -> Callable[[list[tuple], dict, int], list] | None:
        return getattr(self.module, "oracle", None)

    @property
    def signature(self) -> list[str]:
        """Parameter names of the reference ``solution``: candidates must keep them."""
        return list(inspect.signature(self.solution).parameters)

    def size(self, preset_or_params: str | dict[str, int]) -> tuple[str, dict[str, int]]:
        """Resolve a size preset name (or explicit knob values) to (label, knobs)."""
        if isinstance(preset_or_params, str):
            if preset_or_params not in self.meta.sizes:
                raise KeyError(f"{self.id}: no size preset {preset_or_params!r}; have {sorted(self.meta.sizes)}")
            return preset_or_params, dict(self.meta.sizes[preset_or_params])
        knobs = dict(self.meta.sizes["default"], **preset_or_params)
        return ",".join(f"{k}={v}" for k, v in sorted(knobs.items())), knobs

    def sizes_of(self, specs: list[str | dict[str, int]]) -> list[tuple[str, dict[str, int]]]:
        """Each size of a sweep as (label, knobs), in order and once each. ``ladder`` stands for the
        problem's ladder, or its presets where it declares none."""
        out: dict[str, dict[str, int]] = {}
        for spec in specs:
            rungs = (self.meta.ladder or list(self.meta.sizes)) if spec == LADDER else [spec]
            for rung in rungs:
                label, knobs = self.size(rung)
                out.setdefault(label, knobs)
        return list(out.items())

    def knobs_of(self, label: str) -> dict[str, int]:
        """The knobs behind a label that :meth:`size` gave (a preset name, or ``k=v,k=v``)."""
        if label in self.meta.sizes:
            return dict(self.meta.sizes[label])
        return self.size({k: int(v) for k, v in (kv.split("=") for kv in label.split(","))})[1]

    def tolerance(self, dtype: str) -> Tolerance:
        return self.meta.tolerances[dtype]

    def source(self) -> str:
        return self.path.read_text()


def _fail(path: Path, where: str, why: str) -> ProblemError:
    return ProblemError(f"{path}: {where}: {why}")


def load_problem(path: str | Path) -> Problem:
    path = Path(path).resolve()
    module_name = f"pkb_problems.{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise _fail(path, "file", "not a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a problem file that does not import is a bad problem file
        raise _fail(path, "import", f"{type(exc).__name__}: {exc}") from exc
    raw = getattr(module, "META", None)
    if not isinstance(raw, dict):
        raise _fail(path, "META", "missing, or not a dict")
    try:
        meta = ProblemMeta.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise _fail(path, f"META.{loc}" if loc else "META", err["msg"]) from None
    if meta.id != path.stem:
        raise _fail(path, "META.id", f"{meta.id!r} must equal the file name {path.stem!r}")
    for fn in ("make_inputs", "solution", "speed_of_light"):
        if not callable(getattr(module, fn, None)):
            raise _fail(path, fn, "missing, or not a function")
    if list(inspect.signature(module.make_inputs).parameters) != ["ctx"]:
        raise _fail(path, "make_inputs", "signature must be make_inputs(ctx)")
    oracle = getattr(module, "oracle", None)
    if oracle is not None and (not callable(oracle) or len(inspect.signature(oracle).parameters) != 3):
        raise _fail(path, "oracle", "must be a function oracle(inputs, size, world_size)")
    sys.modules[module_name] = module
    return Problem(meta=meta, path=path, module=module)


def default_problems_dir() -> Path:
    return PROBLEMS_DIR


def load_problems(directory: str | Path | None = None) -> dict[str, Problem]:
    """Discover every ``*.py`` problem in ``directory`` (files starting with '_' are skipped)."""
    directory = Path(directory) if directory else default_problems_dir()
    if not directory.is_dir():
        raise ProblemError(f"{directory}: problems directory does not exist")
    problems = {}
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        problem = load_problem(path)
        problems[problem.id] = problem
    if not problems:
        raise ProblemError(f"{directory}: no problem files found")
    return problems


def solution_time_lower_bound(traffic: Traffic, *, link_gbps: float, hbm_gbps: float, tflops: float) -> float:
    """Speed-of-light time in seconds: the slowest of moving, reading and computing."""
    return max(
        traffic.interconnect_bytes / (link_gbps * 1e9) if link_gbps > 0 else 0.0,
        traffic.hbm_bytes / (hbm_gbps * 1e9) if hbm_gbps > 0 else 0.0,
        traffic.flops / (tflops * 1e12) if tflops > 0 else 0.0,
    )


def sol_time_us(problem: Problem, knobs: dict[str, int], world_size: int, dtype: str, hardware: HardwareConfig,
                nodes: int = 1, traffic: Traffic | None = None) -> float:
    """The speed-of-light time of ``problem`` at ``knobs`` in microseconds, with the bandwidths and
    the compute peak for ``dtype`` of a hardware profile: the slowest of moving, reading and
    computing, plus the problem's dependent steps of communication x the link latency (a step
    cannot start before the one it waits for has landed, however few its bytes).

    Over ``nodes`` > 1 (W/nodes ranks per node), the share of a rank's traffic that goes to peers on
    other nodes, (W - W/nodes) / (W - 1) if it spreads evenly over its peers, also has to cross the
    network at ``hardware.network_gbps`` per GPU: the time is the slower of the two links.
    ``traffic``: a traced estimate to use instead of the problem's own bound (see runner/trace.py).
    """
    traffic = traffic or problem.speed_of_light(knobs, world_size, DTYPES[dtype])
    seconds = solution_time_lower_bound(traffic, link_gbps=hardware.link_gbps, hbm_gbps=hardware.hbm_gbps,
                                        tflops=hardware.peak_tflops(dtype))
    latency_us = hardware.link_latency_us
    if nodes > 1 and world_size > 1:
        leaving = (world_size - world_size // nodes) / (world_size - 1)
        seconds = max(seconds, traffic.interconnect_bytes * leaving / (hardware.network_gbps * 1e9))
        latency_us = max(latency_us, hardware.network_latency_us)  # a step waits for its slowest peer
    steps = traffic.dependent_steps if world_size > 1 else 0
    return 1e6 * seconds + steps * latency_us
