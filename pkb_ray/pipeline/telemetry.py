"""Live numbers of a run for the Ray dashboard (Prometheus metrics) and a progress line for the log.

Metrics are recorded in the driver with ``ray.util.metrics``; Ray exports them on each node's
metrics port with a ``ray_`` prefix (``ray_pkb_results_total``, ...), which the dashboard's Grafana
panels and any Prometheus can read.
"""

from __future__ import annotations

import time
from collections import Counter as Tally

from ray.util.metrics import Counter, Gauge, Histogram

from pkb_ray.spec.names import Status

SECONDS = [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600]


class RunMetrics:
    def __init__(self) -> None:
        self.results = Counter("pkb_results", "results written, by status and world size",
                               tag_keys=("status", "world_size"))
        self.eval_seconds = Histogram("pkb_eval_seconds", "seconds a gang spent on one sample", SECONDS,
                                      tag_keys=("world_size",))
        self.compile_seconds = Histogram("pkb_compile_seconds", "seconds of nvcc for one sample's sources", SECONDS)
        self.queued = Gauge("pkb_queue_depth", "tasks waiting for a gang", tag_keys=("world_size",))
        self.gangs = Gauge("pkb_gangs", "gangs alive and busy", tag_keys=("state",))
        self.busy_fraction = Gauge("pkb_gang_busy_fraction", "time gangs spent inside samples / gang time alive")
        self.statuses: Tally = Tally()
        self.started = time.monotonic()
        self._last_line = 0.0
        self.total = 0  # results the run will have (rows x layouts x sizes), skipped ones included
        self.skipped = 0  # already in the results folder (resume)
        self.evaluated = 0  # results a gang evaluated (not settled before any rank ran, nor copied)
        self._evaluating_since: float | None = None  # when the gangs' first evaluation began

    def result(self, status: str, world_size: int, eval_seconds: float, evaluated: bool = False) -> None:
        """One result written; ``evaluated``: a gang's verdict, ``eval_seconds`` of its time (the rate
        the ETA is measured by starts when the first one began)."""
        self.statuses[status] += 1
        self.results.inc(tags={"status": status, "world_size": str(world_size)})
        if eval_seconds:
            self.eval_seconds.observe(eval_seconds, tags={"world_size": str(world_size)})
        if evaluated:
            if self._evaluating_since is None:
                self._evaluating_since = time.monotonic() - eval_seconds
            self.evaluated += 1

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds to the last result at the rate measured so far: the gangs' results per second
        since their first evaluation began. None before a gang's first result (Ray's start, the
        stream and the gangs' start say nothing of the rate) and when nothing is left."""
        left = self.expected - self.done
        if self._evaluating_since is None or left <= 0:
            return None
        now = time.monotonic() if now is None else now
        return left * max(now - self._evaluating_since, 1e-9) / self.evaluated

    def compiled(self, seconds: float) -> None:
        self.compile_seconds.observe(seconds)

    def pool(self, queued: dict[str, int], alive: int, busy: int, busy_fraction: float) -> None:
        for w, n in queued.items():
            self.queued.set(n, tags={"world_size": str(w)})
        self.gangs.set(alive, tags={"state": "alive"})
        self.gangs.set(busy, tags={"state": "busy"})
        self.busy_fraction.set(busy_fraction)

    def progress_line(self, every_s: float = 30.0) -> str | None:
        """A one-line summary, at most every ``every_s`` seconds (None in between)."""
        now = time.monotonic()
        if now - self._last_line < every_s:
            return None
        self._last_line = now
        return f"progress: {self.describe(now)}"

    @property
    def correct(self) -> int:
        """Results this run has written so far that are correct."""
        return self.statuses[Status.CORRECT.value]

    @property
    def done(self) -> int:
        """Results this run has written so far."""
        return sum(self.statuses.values())

    @property
    def expected(self) -> int:
        """Results this run will write: the total less what the results folder already had."""
        return max(self.total - self.skipped, self.done)

    def describe(self, now: float | None = None) -> str:
        """``<done>/<total> (<pct>%) in <s> s, <rate>/h, ETA <s> s: <status counts>`` (no ETA before
        :meth:`eta_s` has a measured rate)."""
        now = time.monotonic() if now is None else now
        done, total = self.done, self.expected
        elapsed = max(now - self.started, 1e-9)
        rate = done / elapsed * 3600
        eta_s = self.eta_s(now)
        eta = f", ETA {eta_s:.0f} s" if eta_s is not None else ""
        pct = f" ({100 * done / total:.0f}%)" if total else ""
        parts = " ".join(f"{k}={v}" for k, v in self.statuses.most_common())
        return f"{done}/{total} results{pct} in {elapsed:.0f} s ({rate:.0f}/h{eta}): {parts}"
