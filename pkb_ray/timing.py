"""The benchmarking convention, written once.

Reference (A) and candidate (B) are timed in the same rank processes, interleaved:

1. Warmup: ``warmup`` calls of each, alternating, over the rotated input sets.
2. ``iters`` rounds; round i uses input set ``i % len(sets)`` (rotation, so neither side is
   flattered by inputs left in cache) and runs A then B on even rounds, B then A on odd ones
   (A B B A ...: each side goes first equally often, so neither inherits the other's warm caches
   more). Before every timed call all ranks meet at a barrier, so a call starts together on every
   rank.
3. One timed call: on GPU, a device event is recorded on the current stream, the function runs,
   then the whole device is synchronised (work a candidate puts on side streams is not hidden)
   and the end event is recorded; on CPU, ``perf_counter`` around the call.
4. Per rank: the median over rounds, with the inter-quartile range as the spread.
5. A sample's time is its slowest rank's median; speedup = reference time / candidate time.

The timer functions are bound at import, before any candidate is imported: a candidate that
replaces ``time.perf_counter`` or ``torch.cuda.Event`` later does not change what we measure.
"""

from __future__ import annotations

import statistics
from time import perf_counter as _perf_counter
from typing import Any, Callable, Sequence

import torch

_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize


def timed_call(fn: Callable[..., Any], args: Sequence[Any], device: torch.device) -> tuple[Any, float]:
    """Run ``fn(*args)`` once; return (its output, microseconds)."""
    if device.type == "cuda":
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _synchronize(device)
        start.record()
        out = fn(*args)
        _synchronize(device)  # every stream of the device, not only the current one
        end.record()
        end.synchronize()
        return out, start.elapsed_time(end) * 1e3
    t0 = _perf_counter()
    out = fn(*args)
    return out, (_perf_counter() - t0) * 1e6


def round_order(i: int) -> tuple[str, str]:
    """Which side goes first in round i: A B, then B A, and so on."""
    return ("ref", "cand") if i % 2 == 0 else ("cand", "ref")


def median_iqr(times_us: Sequence[float]) -> tuple[float, float]:
    """Median and inter-quartile range of one rank's timed iterations."""
    if not times_us:
        raise ValueError("no timed iterations")
    if len(times_us) < 4:
        return statistics.median(times_us), 0.0
    q1, q2, q3 = statistics.quantiles(times_us, n=4, method="inclusive")
    return q2, q3 - q1


def sample_time(per_rank_median_us: Sequence[float]) -> float:
    """A sample is as slow as its slowest rank."""
    return max(per_rank_median_us)


def speedup(ref_us: float, cand_us: float) -> float:
    return ref_us / cand_us if cand_us > 0 else float("inf")
