"""The words of the domain, defined once: what a sample is written in (:class:`Backend`), how its
evaluation ends (:class:`Status`), how its calls are timed (:class:`TimingMode`), and where its
evaluation time goes (:class:`EvalPhase`). The steps a rank runs are the rank protocol's
(:class:`pkb_ray.spec.wire.Step`).

No imports beyond the standard library: rank processes use these too.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """The closed taxonomy of outcomes, in pipeline order."""

    INVALID_SAMPLE = "invalid_sample"  # the row cannot be evaluated as given (unknown problem, no solution(), ...)
    UNSUPPORTED_HARDWARE = "unsupported_hardware"  # needs what this hardware lacks or forbids (NVLink multicast)
    COMPILE_ERROR = "compile_error"  # Python SyntaxError, nvcc error
    IMPORT_ERROR = "import_error"  # the module raised while being imported on a rank
    RUNTIME_ERROR = "runtime_error"  # solution(...) raised on some rank
    TIMEOUT = "timeout"  # some rank did not finish within the deadline (hang, spin, deadlock)
    CRASH = "crash"  # some rank process died without reporting (segfault, os._exit, OOM kill)
    WRONG_OUTPUT = "wrong_output"  # ran, but an output (or an input it must not touch) is wrong
    TAMPERING = "tampering"  # caught changing the evaluator or forging its times (the evidence is in the message)
    CORRECT = "correct"

    def __str__(self) -> str:
        return self.value


class Side(str, Enum):
    """Which function a timed region calls: the reference (timed by the clean rank set) or the candidate."""

    REF = "ref"
    CAND = "cand"

    def __str__(self) -> str:
        return self.value


class Role(str, Enum):
    """What a rank set is for: ``clean`` sets time the reference and check outputs and never import
    a candidate; ``candidate`` sets run one sample each (pkb_ray/runner/clean.py, candidate.py)."""

    CLEAN = "clean"
    CANDIDATE = "candidate"

    def __str__(self) -> str:
        return self.value


class Backend:
    """What a sample is written in (its ``backend``); each is a Python module defining solution(...)."""

    TORCH = "torch"
    CUDA = "cuda"  # Python that builds CUDA sources (load_cuda, or torch's load_inline)
    TRITON = "triton"
    PARALLELKITTENS = "parallelkittens"  # ThunderKittens kernels of an imported benchmark (never generated)


BACKENDS = (Backend.TORCH, Backend.CUDA, Backend.TRITON, Backend.PARALLELKITTENS)
GENERATED_BACKENDS = (Backend.TORCH, Backend.CUDA, Backend.TRITON)  # what a model is asked to write


class TimingMode:
    """How timed calls are issued (``eval.timing_mode``; :mod:`pkb_ray.measure.timing`)."""

    EAGER = "eager"  # each call from Python, as the sample's own loop would
    GRAPH = "graph"  # a region's calls captured once into a CUDA graph and replayed
    BOTH = "both"  # both, one after the other


TIMING_MODES = (TimingMode.EAGER, TimingMode.GRAPH, TimingMode.BOTH)


class EvalPhase:
    """Where a sample's evaluation time goes: the keys of ``Result.phase_seconds``."""

    REFERENCE = "reference"  # reference outputs found (or computed) for the trial seeds
    READY = "ready"  # waiting for the candidate's rank processes
    TRIALS = "trials"  # the candidate on the trial seeds
    CHECK = "check"  # its trial outputs compared on clean ranks
    QUIET = "quiet"  # waiting for the next rank set to be ready before timing (quiet_timing)
    TIMING = "timing"  # the interleaved timed rounds
    TIMED_CHECK = "timed_check"  # the kept timed calls compared on clean ranks
    CLEANUP = "cleanup"  # the rank set retired
