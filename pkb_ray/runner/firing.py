"""A fired region on the rank: armed by a ``region`` command with ``fire`` (untimed: the command
decoded, the calls laid out, the generation collected), then run at once on each fire line
(:func:`pkb_ray.runner.protocol.parse_go`), with nothing before the calls. After the calls and the
device's synchronisation the first thing the rank sends is its done line, which stops the parent's
clock (:mod:`pkb_ray.measure.timing`); the layouts and the report follow. A blank line runs the
same with no calls: the fixed work the parent subtracts.
"""

from __future__ import annotations

import gc
import time
from typing import TYPE_CHECKING, Any, Callable

import torch

from pkb_ray.measure.correctness import output_devices
from pkb_ray.measure.timing import device_sync, timed_region, timed_replay
from pkb_ray.runner.loading import candidate_traceback
from pkb_ray.runner.protocol import StepFailed, mark_done
from pkb_ray.spec.names import Status
from pkb_ray.spec.wire import RegionReport, TimeRegion

if TYPE_CHECKING:
    from pkb_ray.runner.graphs import Captured
    from pkb_ray.runner.session import RankSession


class Armed:
    """A region armed to be fired (:func:`fire`): its command, calls and function."""

    def __init__(self, cmd: TimeRegion, calls: list, fn: Callable[..., Any], captured: Captured | None, what: str,
                 described: bool):
        self.cmd, self.calls, self.fn, self.captured, self.what = cmd, calls, fn, captured, what
        self.described = described  # the parent holds the graph's layouts: later fires say as_before


def fire(session: RankSession, tag: str, blank: bool) -> RegionReport:
    """The armed region's calls, run at once on a fire line (``blank``: none of them): no
    barrier, no collection, no message before them; after them (and the device's
    synchronisation) the ``done`` line first, then where the outputs lie, as
    :meth:`~pkb_ray.runner.session.RankSession.region` says it. The parent's clock runs from resuming the set to the done line
    (:mod:`pkb_ray.measure.timing`); the set stays armed for the next fire."""
    received = time.perf_counter()  # a diagnostic: RegionReport.stamps
    armed = session._armed
    if armed is None:
        raise StepFailed(Status.RUNTIME_ERROR.value, "a region was fired with none armed")
    gc.disable()  # a collection inside a region would be charged to whichever side triggered it
    try:
        if blank:  # the same fixed work around no calls: resumed, one device operation, synchronised
            if session.device.type == "cuda":
                if session.tick is None:
                    session.tick = torch.zeros(1, device=session.device)
                session.tick.add_(1)  # the region's first device work (a switch of context, where one is due)
            device_sync(session.device)
            mark_done(tag)
            return RegionReport(us=0.0, calls=[], devices=[], stamps=[received, 0.0, time.perf_counter(), 0.0])
        started = time.perf_counter()
        try:
            if armed.captured is not None:
                outs, us = armed.captured.outputs, timed_replay(armed.captured.graph, armed.cmd.k, session.device)
            else:
                outs, us = timed_region(armed.fn, armed.calls, session.device)
        except BaseException:  # noqa: BLE001
            session._armed = None
            raise StepFailed(Status.RUNTIME_ERROR.value,
                             f"timed call, {armed.what}:\n{candidate_traceback()}") from None
        done = time.perf_counter()
        mark_done(tag)
    finally:
        gc.enable()
    cmd, captured = armed.cmd, armed.captured
    session._held = (outs, armed.calls) if cmd.hold else None
    as_before = bool(armed.described and cmd.hold and cmd.staged and captured is not None
                     and captured.output_layouts is not None)
    placed = session._placed_region(outs, armed.calls, cmd.staged, captured) if cmd.hold and not as_before else []
    armed.described = armed.described or (captured is not None and bool(placed))
    gc.collect(0)  # this region's garbage, before the next is fired (both sides alike, after their done)
    return RegionReport(us=us, calls=placed, devices=output_devices(outs[0]), handles=session.exported(),
                        stamps=[received, started, done, time.perf_counter()], as_before=as_before)

