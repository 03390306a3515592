"""The benchmarking convention, written once.

Reference (A) and candidate (B) are timed in the same rank processes, interleaved:

1. Warmup: ``warmup`` calls of each side, over the rotated input sets. The warmup calls are
   themselves timed as one region per side; from the slower side's time per call every rank
   agrees (a max all-reduce) on ``k``, the calls per round: enough back-to-back calls to fill
   ``round_us`` microseconds, at least 1, at most ``max_round_calls``.
2. ``rounds`` rounds per side, in the order A B B A A B ... (each side goes first equally often,
   so neither inherits the other's warm caches more). A round is one timed region: all ranks meet
   at a barrier, then the side is called ``k`` times back to back over the input sets (rotated,
   starting one set further each round, so neither side is flattered by inputs left in cache).
3. The region is timed by the host clock from a device-wide synchronisation to the next one: on
   GPU the end waits for every stream of the device, so work a candidate hides on side streams is
   counted; the fixed cost of the synchronisation and of a late rank's arrival is shared by ``k``
   calls instead of inflating each one (with one call per region, NCCL's ~40 us all-reduce read as
   100-270 us on 2 x H200). A round's figure is region time / ``k``.
4. Every output of every timed call is compared with the reference's expected output after the
   region ends (outside the timed part): a candidate that caches its first answer fails.
5. Per rank: the median over rounds, with the inter-quartile range as the spread.
6. A sample's time is its slowest rank's median; speedup = reference time / candidate time.

Problems whose reference mutates its inputs get a fresh copy of the inputs for every call of a
region, made before the region starts.

The timer and synchronisation functions are bound at import, before any candidate is imported:
a candidate that replaces ``time.perf_counter`` or ``torch.cuda.synchronize`` later does not
change what we measure.
"""

from __future__ import annotations

import math
import statistics
from time import perf_counter as _perf_counter
from typing import Any, Callable, Sequence

import torch

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


def calls_per_round(slowest_us_per_call: float, round_us: float, max_calls: int) -> int:
    """How many back-to-back calls fill one round of ``round_us`` (at least 1)."""
    if not math.isfinite(slowest_us_per_call) or slowest_us_per_call <= 0:
        return max_calls
    return max(1, min(max_calls, math.ceil(round_us / slowest_us_per_call)))


def round_order(i: int) -> tuple[str, str]:
    """Which side goes first in round pair i: A B, then B A, and so on."""
    return ("ref", "cand") if i % 2 == 0 else ("cand", "ref")


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
