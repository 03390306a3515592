"""The benchmarking convention, written once.

Reference (A) and candidate (B) are timed interleaved on the same devices: the reference by the
gang's clean rank set, the candidate by its own set, each while every process of the other is
stopped. The parent (which never imports a candidate) drives every region itself, one command per
region (:mod:`pkb_ray.evaluate.rounds`), and times it with its own clock:

1. Warmup: one untimed region of ``warmup`` calls per side. Then one calibration region of the
   reference, ``timing_sets`` calls: from its time per call (the slowest clean rank's) the parent
   sets ``k``, the calls per region, enough to fill ``round_us`` microseconds, at least 1, at most
   ``max_round_calls``. The candidate's own speed never sets ``k`` (it could slow a calibration).
2. ``rounds`` regions per side, in the order A B B A A B ... (each side goes first equally often,
   so neither inherits the other's warm caches more).
3. Every call of every round gets inputs no call of the side has seen before, and no candidate's
   process makes or can predict them: each side stages the buffers of its ``k`` timed calls once a
   mode (:mod:`pkb_ray.evaluate.staging`), and before every round, the candidate stopped, the clean rank
   makes the round's inputs from its key and a fresh random nonce and the trusted side writes them
   into both sides' buffers. Call n's are a copy of base input set n mod ``timing_sets`` (drawn
   once per sample by ``make_inputs`` from the rank's own key, :mod:`pkb_ray.measure.keys`) with every
   floating-point element moved by a pseudo-random factor in [1 - 1/16, 1 + 1/16] keyed on
   (nonce, n) and on the element's own value (:func:`fresh_inputs`). Keyed on the value, equal
   elements stay equal (ties, and tensors that are the same on every rank), zeros stay zeros and
   signs stay signs. A base set with no floating-point tensor is drawn anew by ``make_inputs`` from
   :func:`call_seed` (nonce, n) instead. Memoising by address, by sampled values or by a hash of
   the inputs gains nothing.
4. A region is fired, not commanded. Once a mode, after staging, each side's ranks are armed with
   it (a ``region`` command with ``fire``: decoded, its calls laid out, the young generation
   collected, all untimed). For each region the parent writes a fire line (``go TAG``, a fresh
   unpredictable tag) into every rank's pipe while the set is stopped, then resumes the set: each
   rank wakes with the line waiting, calls its side ``k`` times back to back on its staged inputs
   (or replays its graph), synchronises every stream of the device, and sends ``{"done": TAG}``
   first; the layouts and the report follow, and the parent stops the set once every report
   came. The region's bracket is the parent's clock from the resume to the last rank's done line:
   no barrier, no decoding, no report and no stop inside it. What remains inside besides the
   calls (the wake-up after the resume, the fire line read, the device's first work and its
   synchronisation, the done line's delivery) is the side's *fixed work*: in two rounds of every ``BLANK_EVERY``
   rounds each side is also fired blank (``blank TAG``: the same with no calls, after the same
   switch of device context, in the places its regions are: right after its own last region and
   after the other set's), and the median of a side's blanks is subtracted from each of its
   regions (:func:`fixed_times`: the candidate's at most ``FIXED_CAP`` times the
   reference's, so a sample that slows its blanks gains little). Work a rank does after its done
   line is charged where it exceeds the reference's there (:func:`deferral_charge`), so saying
   "done" early gains nothing. A region's time: :func:`region_time`; its figure per call that
   over ``k``. What a rank reports of its own time is kept as a diagnostic only. (Warmup and
   calibration regions, untimed, are commanded and make their inputs themselves.)
   Graph mode (``eval.timing_mode``): after calibration each side's ``k`` calls, on ``k`` input
   buffers of their own, are captured once into a CUDA graph; those buffers are the side's staged
   ones, and a region times one replay the same way. Only the device's work is timed, as
   production runs it (decode steps and training steps are replayed graphs). A side that cannot be
   captured (it synchronises the host, allocates in a way capture refuses, uses a process group
   that is not NCCL) leaves both sides eager, with the reason.
5. After each of the candidate's regions, its processes stopped, the parent decides for every call
   independently whether to check it (probability ``checked_calls`` / all the mode's calls), and
   reads those calls' outputs and inputs from the ranks' memory itself, and compares them with the
   reference's same calls (both sides' regions of a round share its nonce); in device memory the
   clean rank reads them and recomputes the reference (:mod:`pkb_ray.evaluate.rounds`). A candidate that caches
   an answer, or returns garbage when it thinks no one looks, fails checks it cannot predict.
6. Per side: the median over regions of time / ``k`` is its time (the whole set's, so its slowest
   rank's: the bracket ends at the last done line); per rank the median of the time to its own
   done line, with the inter-quartile range as the spread. speedup = reference time / candidate
   time. With ``min_rounds`` (sequential stopping) the rounds end once the speedup's 95 %
   interval (:func:`speedup_interval`) lies within ``target_halfwidth`` of it, looked at every
   10 rounds, at most ``rounds``.
7. Each gang keeps a quiet baseline of each reference it times (the same regions with no
   candidate alive); a reference that ran materially slower beside a sample is evidence of
   interference (:mod:`pkb_ray.evaluate.interference`).

The rank's timer and synchronisation functions are bound at import, before any candidate is
imported; they make the rank's own figures (diagnostics) and the calibration's (the clean set's).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from time import perf_counter as _perf_counter
from typing import Any, Callable, Sequence

import torch

from pkb_ray.spec.names import Side

_cuda_synchronize = torch._C._cuda_synchronize if hasattr(torch._C, "_cuda_synchronize") else None


def device_sync(device: torch.device) -> None:
    """Wait for every stream of the current device (the rank's own; set at start)."""
    if device.type == "cuda":
        _cuda_synchronize()


def timed_region(fn: Callable[..., Any], calls: Sequence[Sequence[Any]],
                 device: torch.device) -> tuple[list[Any], float]:
    """Call ``fn`` on each argument tuple back to back; return the outputs and microseconds per call."""
    device_sync(device)
    outputs = []
    t0 = _perf_counter()
    for args in calls:
        outputs.append(fn(*args))
    device_sync(device)
    elapsed = _perf_counter() - t0
    return outputs, elapsed * 1e6 / len(calls)


def timed_replay(graph: Any, k: int, device: torch.device) -> float:
    """Replay a CUDA graph of ``k`` captured calls; microseconds per call, from a device-wide
    synchronisation to the next (the same convention as :func:`timed_region`)."""
    device_sync(device)
    t0 = _perf_counter()
    graph.replay()
    device_sync(device)
    return (_perf_counter() - t0) * 1e6 / k


def call_seed(nonce: int, n: int) -> int:
    """The input seed of call ``n`` of the region with ``nonce``: distinct for every call."""
    digest = hashlib.blake2b(f"{nonce}:{n}".encode(), digest_size=7).digest()
    return int.from_bytes(digest, "little")


FRESH_SPREAD = 1.0 / 16  # the largest relative change fresh_inputs makes to an element


# Elements moved in one batched pass, per device type: bounds its int64 temporaries. Smaller on CPU,
# where a large temporary is a fresh allocation that page-faults (~3x slower at 64K elements a call).
FRESH_BATCH_ELEMENTS = {"cuda": 1 << 22, "cpu": 1 << 18}


def fresh_inputs(base: tuple, nonce: int, n: int) -> tuple | None:
    """Inputs of call ``n`` of the region with ``nonce``, made from ``base``: every floating-point
    tensor (in tuples and lists too) copied with each element x -> x * (1 + FRESH_SPREAD * h),
    h in [-1, 1) a hash of (x's bits, nonce, n). None when ``base`` holds no floating-point tensor
    (the caller then draws a new set instead)."""
    calls = fresh_calls(base, nonce, [n])
    return None if calls is None else calls[0]


def fresh_calls(base: tuple, nonce: int, ns: list[int], own: bool = True) -> list[tuple] | None:
    """``fresh_inputs(base, nonce, n)`` for every n in ``ns``, equal element for element, made in
    batched passes: a handful of kernel launches per tensor for all the calls together, not per
    call (at small sizes a region's inputs cost launches, not bandwidth). With ``own`` every call
    gets buffers of its own; without, the calls may share memory (only to copy from)."""
    if not ns:
        return []
    keys = torch.tensor([call_seed(nonce, n) & 0xFFFFFFFF for n in ns], dtype=torch.int64)
    found = []

    def fresh(value) -> list:  # the value of each call
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            found.append(True)
            return _moved_rows(value, keys, own)
        if isinstance(value, (tuple, list)):
            items = [fresh(v) for v in value]
            return [type(value)(item[i] for item in items) for i in range(len(ns))]
        if isinstance(value, torch.Tensor):  # a buffer of its own: memoising by address gains nothing
            return [value.clone() for _ in ns] if own else [value] * len(ns)
        return [value] * len(ns)

    args = [fresh(v) for v in base]
    return [tuple(arg[i] for arg in args) for i in range(len(ns))] if found else None


def _moved_rows(x: torch.Tensor, keys: torch.Tensor, own: bool) -> list[torch.Tensor]:
    """x moved once per key (see :func:`fresh_inputs`), in batches of at most FRESH_BATCH_ELEMENTS
    elements; with ``own`` a row that shares its batch is copied out of it."""
    if x.numel() == 0:  # nothing to move (an empty split of an uneven exchange): a buffer of its own each
        return [x.detach().clone() for _ in range(len(keys))]
    word = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[x.element_size()]
    bits = x.detach().contiguous().view(word).reshape(1, -1).to(torch.int64) & 0xFFFFFFFF
    mixed = bits * 0x9E3779B1  # a 32-bit mix (murmur3's finaliser): products stay below 2**63
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    value = x.detach().reshape(1, -1).to(wide)
    per_pass = max(1, FRESH_BATCH_ELEMENTS.get(x.device.type, 1 << 18) // max(1, x.numel()))
    rows = []
    for i in range(0, len(keys), per_pass):
        v = (mixed + keys[i:i + per_pass].to(x.device).reshape(-1, 1)) & 0xFFFFFFFF
        v = v ^ (v >> 16)
        v = (v * 0x85EBCA6B) & 0xFFFFFFFF
        v = v ^ (v >> 13)
        h = v.to(torch.float32) * (2.0 / 2**32) - 1.0
        moved = (value * (1.0 + FRESH_SPREAD * h.to(wide))).to(x.dtype).reshape(-1, *x.shape).unbind(0)
        if own and len(moved) > 1:
            moved = [r.clone() for r in moved]
        rows.extend(moved)
    return rows


def calls_per_round(slowest_us_per_call: float, round_us: float, max_calls: int) -> int:
    """How many back-to-back calls fill one round of ``round_us`` (at least 1)."""
    if not math.isfinite(slowest_us_per_call) or slowest_us_per_call <= 0:
        return max_calls
    return max(1, min(max_calls, math.ceil(round_us / slowest_us_per_call)))


# A fired region's time (pkb_ray.evaluate.rounds): the parent's clock from resuming the side's set
# to the last rank's done line, less the side's fixed work, plus what the candidate did after its
# done lines beyond what the reference does there.
NET_FLOOR = 0.02  # a region's calls are never read as less than this share of its time
# the work after a candidate's done lines is charged beyond this quantile of the reference's: the
# reference's own spread there, not a margin of its size (a margin would be time a cheat keeps)
DEFER_QUANTILE = 0.9


FIXED_QUANTILE = 0.5  # of a side's blank regions: their median, as the regions' time is theirs
# A candidate's set wakes 50-100 us slower than the clean set on an H100 (a fresh sandbox's process;
# docs/benchmarks/trust.md): its own fixed work is subtracted, up to this multiple of the
# reference's. A candidate that slows its blanks on purpose gains at most the excess (FIXED_CAP - 1)
# x the reference's fixed work (~100-150 us a region on an H100: 1-3 % of a region; docs/judging.md).
FIXED_CAP = 1.35


def low_quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (the lower of the two nearest, none interpolated)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def fixed_times(ref_blanks_us: Sequence[float], cand_blanks_us: Sequence[float]) -> tuple[float, float]:
    """The fixed work subtracted from each side's regions: (reference's, candidate's), from the
    times of their blank regions (fired like the rest, no calls, in the same places among the
    rounds). Each side's is the FIXED_QUANTILE of its own (the median: a region's time is the
    median region's, odd late wake-ups included as often); the candidate's at most FIXED_CAP times the
    reference's, so a candidate that makes its blanks slow to have more subtracted gains at most
    that excess. No blanks: nothing subtracted."""
    if not ref_blanks_us:
        return 0.0, 0.0
    ref = low_quantile(ref_blanks_us, FIXED_QUANTILE)
    return ref, min(FIXED_CAP * ref, low_quantile(cand_blanks_us, FIXED_QUANTILE)) if cand_blanks_us else 0.0


def deferral_allowance(ref_after_us: Sequence[float]) -> float:
    """How long a region's work after its done lines (to its last report) may take uncharged: the
    DEFER_QUANTILE of the reference's own (the same describing of the same outputs)."""
    return low_quantile(ref_after_us, DEFER_QUANTILE) if ref_after_us else math.inf


def deferral_charge(after_us: float, allowance_us: float) -> float:
    """What a candidate's region is charged for the work it did after its done lines beyond the
    allowance (:func:`deferral_allowance`): a rank that says it is done before its calls end has
    the rest counted."""
    return max(0.0, after_us - allowance_us)


def region_time(bracket_us: float, fixed_us: float, charge_us: float = 0.0) -> float:
    """A fired region's calls' time: its bracket less the fixed work, plus the charge; never below
    NET_FLOOR of the bracket (a fixed part measured high must not make a region free)."""
    return max(bracket_us - fixed_us + charge_us, NET_FLOOR * bracket_us)


def round_order(i: int) -> tuple[Side, Side]:
    """Which side goes first in round pair i: A B, then B A, and so on."""
    return (Side.REF, Side.CAND) if i % 2 == 0 else (Side.CAND, Side.REF)


def median_iqr(times_us: Sequence[float]) -> tuple[float, float]:
    """Median and inter-quartile range of one rank's rounds."""
    if not times_us:
        raise ValueError("no timed rounds")
    if len(times_us) < 4:
        return statistics.median(times_us), 0.0
    q1, q2, q3 = statistics.quantiles(times_us, n=4, method="inclusive")
    return q2, q3 - q1


def sample_time(per_rank_median_us: Sequence[float]) -> float:
    """A sample is as slow as its slowest rank."""
    return max(per_rank_median_us)


def speedup(ref_us: float, cand_us: float) -> float:
    return ref_us / cand_us if cand_us > 0 else float("inf")


SPEEDUP_RESAMPLES = 1000


def speedup_interval(ref_us: Sequence[float], cand_us: Sequence[float], level: float = 0.95,
                     seed: int = 0) -> tuple[float, float] | None:
    """A 95 % interval of one sample's speedup from the spread of its rounds: the rounds are resampled
    in pairs (reference round i with candidate round i, timed one beside the other, so drift of the
    machine moves both), and the ratio of the sides' medians is taken on each draw (percentile
    bootstrap, seeded: the same rounds give the same interval). None under 2 pairs: one round says
    nothing of its spread."""
    import numpy as np

    n = min(len(ref_us), len(cand_us))
    if n < 2:
        return None
    ref, cand = np.asarray(ref_us[:n], dtype=float), np.asarray(cand_us[:n], dtype=float)
    picks = np.random.default_rng(seed).integers(0, n, size=(SPEEDUP_RESAMPLES, n))
    ratios = np.median(ref[picks], axis=1) / np.maximum(np.median(cand[picks], axis=1), 1e-12)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)
