"""The evaluate stage: tasks (a sample and its gang layout) to gangs, results back, every gang kept busy.

:class:`TaskFeed` takes tasks from the stream through a bounded queue (the backpressure).
:class:`GangPool` carries out with Ray what :class:`pkb_ray.scheduler.Scheduler` decides: which
gangs exist (a world size on one node, or NxG over nodes, fitted to the nodes' GPUs and the tasks
queued per layout), which gang takes which task, when a gang with no work left gives its GPUs back,
and when a dead gang is restarted. A gang starts in three asynchronous steps (placement group
ready, bundle GPUs known, actor up) while others already work. A gang whose actor dies gives its
sample a ``crash`` result and is restarted in the same placement group; no other sample's result
is lost.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Iterator

import ray
from ray.exceptions import RayActorError

from pkb_ray.cluster import node_gpus
from pkb_ray.config import SweepConfig
from pkb_ray.gang import GangHandle, bundle_devices, reserve, start_gang, stop_gang
from pkb_ray.scheduler import Action, Dispatch, GangPhase, Reserve, Restart, Scheduler, SchedulingError, Start, Stop
from pkb_ray.schema import EvalTask, Result, Status
from pkb_ray.telemetry import RunMetrics

log = logging.getLogger(__name__)

WAIT_LOG_S = 60.0  # with no more tasks to come, how long a wait lasts before the pool says what it waits on


class TaskFeed:
    """Tasks from a producer (a list, or a Ray Data stream) through a bounded queue, read without blocking.

    A thread pulls from ``items`` and blocks while ``maxsize`` tasks wait: that is the backpressure
    that keeps a fast upstream (compilation) from running unboundedly ahead of the gangs.
    """

    def __init__(self, items: Iterable[EvalTask], maxsize: int = 64):
        self._queue: queue.Queue = queue.Queue(maxsize=maxsize)
        self._finished = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._pull, args=(items,), name="task-feed", daemon=True)
        self._thread.start()

    def _pull(self, items: Iterable[EvalTask]) -> None:
        try:
            for item in items:
                self._queue.put(item)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            self.error = exc
        finally:
            self._finished.set()

    def take(self) -> list[EvalTask]:
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if self.error is not None and not out:
            raise RuntimeError(f"the task producer failed: {self.error!r}") from self.error
        return out

    def wait(self, timeout: float) -> None:
        """Until a task arrives or the producer ends (at most ``timeout``)."""
        deadline = time.monotonic() + timeout
        while self._queue.empty() and not self._finished.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)

    @property
    def exhausted(self) -> bool:
        return self._finished.is_set() and self._queue.empty()


class Wait(str, Enum):
    """What a Ray reference the pool waits on stands for."""

    RESERVE = "reserve"  # a placement group's ready()
    START = "start"  # a gang actor's info(): it is up
    EVAL = "eval"  # a gang's evaluate(): a result


@dataclass
class Waiting:
    what: Wait
    gang: str
    task: EvalTask | None = None
    since: float = 0.0


class GangPool:
    """Evaluates tasks on gangs: carries out what the :class:`~pkb_ray.scheduler.Scheduler` decides
    with Ray (placement groups, actors, calls) and tells it what Ray reports back."""

    def __init__(self, cfg: SweepConfig, metrics: RunMetrics | None = None):
        self.cfg = cfg
        self.metrics = metrics
        self.handles: dict[str, GangHandle] = {}
        self.scheduler = Scheduler({})
        self.evaluated = 0
        self.busy_s = 0.0  # gang-seconds inside samples (dispatch to result)
        self.alive_s = 0.0  # gang-seconds of ready gangs
        self._waiting: dict[ray.ObjectRef, Waiting] = {}
        self._last_tick = self._last_push = time.monotonic()
        self._do = {Reserve: self._reserve, Start: self._start, Dispatch: self._dispatch, Stop: self._stop,
                    Restart: self._restart}

    @property
    def busy_fraction(self) -> float:
        return self.busy_s / self.alive_s if self.alive_s else 0.0

    @property
    def stats(self) -> Counter:
        """Gangs started, restarted and stopped, most gangs (and GPUs) held at once, samples evaluated."""
        return self.scheduler.stats + Counter(evaluated=self.evaluated)

    def evaluate(self, tasks: "Iterable[EvalTask] | TaskFeed") -> Iterator[tuple[EvalTask, Result]]:
        """Each task with its result, as they finish; tasks may keep arriving while gangs work (a TaskFeed)."""
        feed = tasks if isinstance(tasks, TaskFeed) else TaskFeed(tasks)
        self.scheduler = Scheduler(node_gpus())
        while True:
            self._tick()
            self._carry_out(self._intake(feed))
            if self.scheduler.finished:
                return
            if not self._waiting:
                if any(self.scheduler.queues.values()):
                    raise SchedulingError("work is queued but no gang is running or starting")
                feed.wait(1.0)  # nothing to do until more tasks arrive
                continue
            ref = self._next_reply(feed)
            if ref is not None:
                yield from self._on_reply(ref)

    def _intake(self, feed: TaskFeed) -> list[Action]:
        """Tasks that arrived, and the end of the feed, as scheduler events."""
        tasks = feed.take()
        actions = self.scheduler.tasks_arrived([(t, t.layout) for t in tasks]) if tasks else []
        if feed.exhausted and not self.scheduler.feed_done:
            actions += self.scheduler.feed_ended()
        return actions

    def _next_reply(self, feed: TaskFeed) -> ray.ObjectRef | None:
        """The next reference Ray has an answer for: briefly while tasks may still arrive, else long."""
        done, _ = ray.wait(list(self._waiting), num_returns=1, timeout=WAIT_LOG_S if feed.exhausted else 0.2)
        self._tick()  # the wait may have been long: account for it before a result adds its busy time
        if not done and feed.exhausted:
            log.info("gang pool: waiting on %s; queued %s", dict(Counter(w.what.value for w in self._waiting.values())),
                     self.scheduler.queued())
        return done[0] if done else None

    def _on_reply(self, ref: ray.ObjectRef) -> Iterator[tuple[EvalTask, Result]]:
        """One answer from Ray, as the scheduler event it is (a result is yielded with its task)."""
        waiting = self._waiting.pop(ref)
        if waiting.what is Wait.RESERVE:
            handle = self.handles[waiting.gang]
            bundle_devices(handle)
            self._carry_out(self.scheduler.gang_reserved(waiting.gang, tuple(p.node for p in handle.parts)))
        elif waiting.what is Wait.START:
            try:
                ray.get(ref)
                self._carry_out(self.scheduler.gang_started(waiting.gang))
            except RayActorError as exc:
                self._carry_out(self.scheduler.gang_failed(waiting.gang, str(exc)))
        else:
            yield waiting.task, self._finish(ref, waiting)

    def _finish(self, ref: ray.ObjectRef, waiting: Waiting) -> Result:
        """The result of an evaluation (a crash if the gang died), after the gang's next step is set going."""
        self.evaluated += 1
        self.busy_s += time.monotonic() - waiting.since
        try:
            result = ray.get(ref)
            self._carry_out(self.scheduler.result(waiting.gang))
        except RayActorError as exc:
            result = Result.for_sample(waiting.task.sample, Status.CRASH, f"the gang evaluating this sample died: {exc}",
                                       gang=waiting.gang, **waiting.task.where.fields)
            self._carry_out(self.scheduler.gang_died(waiting.gang))
        return result

    # ---- actions, carried out with Ray ----

    def _carry_out(self, actions: list[Action]) -> None:
        for action in actions:
            self._do[type(action)](action)

    def _reserve(self, action: Reserve) -> None:
        handle = self.handles[action.gang] = reserve(action.layout, action.gang)
        self._waiting[handle.pg.ready()] = Waiting(Wait.RESERVE, action.gang)

    def _start(self, action: Start) -> None:
        handle = self.handles[action.gang]
        start_gang(self.cfg, handle)
        self._waiting[handle.actor.info.remote()] = Waiting(Wait.START, action.gang)

    def _dispatch(self, action: Dispatch) -> None:
        ref = self.handles[action.gang].actor.evaluate.remote(action.task.sample, action.task.where)
        self._waiting[ref] = Waiting(Wait.EVAL, action.gang, action.task, time.monotonic())

    def _stop(self, action: Stop) -> None:
        stop_gang(self.handles.pop(action.gang))

    def _restart(self, action: Restart) -> None:
        handle = self.handles.pop(action.gang)
        stop_gang(handle, release=False)
        start_gang(self.cfg, handle, action.new_name)
        self.handles[action.new_name] = handle
        self._waiting[handle.actor.info.remote()] = Waiting(Wait.START, action.new_name)

    def _tick(self) -> None:
        """Gang-seconds alive since the last tick; the dashboard's gauges at most once a second."""
        now = time.monotonic()
        ready = len(self.scheduler.in_phase(GangPhase.IDLE)) + len(self.scheduler.in_phase(GangPhase.BUSY))
        self.alive_s += ready * (now - self._last_tick)
        self._last_tick = now
        if self.metrics and now - self._last_push >= 1.0:
            self._last_push = now
            busy = len(self.scheduler.in_phase(GangPhase.BUSY))
            self.metrics.pool(self.scheduler.queued(), ready, busy, self.busy_fraction)

    def shutdown(self) -> None:
        for handle in self.handles.values():
            stop_gang(handle)
        self.handles.clear()
