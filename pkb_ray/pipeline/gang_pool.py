"""The gang pool, the pipeline's evaluation: tasks (a sample and its gang layout) to gangs, results back,
every gang kept busy.

:class:`TaskFeed` takes tasks from the stream through a bounded queue (the backpressure).
:class:`GangPool` carries out with Ray what :class:`pkb_ray.pipeline.scheduler.Scheduler` decides: which
gangs exist (a world size on one node, or NxG over nodes, fitted to the nodes' GPUs and the tasks
queued per layout), which gang takes which task, when a gang with no work left gives its GPUs back,
and when a dead gang is restarted. A gang starts in three asynchronous steps (placement group
ready, bundle GPUs known, actor up) while others already work. A gang whose actor dies gives its
sample a ``crash`` result and is restarted in the same placement group; no other sample's result
is lost. The pool watches its gangs: one silent past its sample's deadline plus a margin, or that
stops answering the watch's probe (a wedged process), gives its sample a ``timeout`` result, is
killed and restarted the same way, and the pool moves on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Iterator, Mapping

import ray
from ray.exceptions import RayActorError

from pkb_ray.evaluate.deadlines import WATCH_MARGIN_S
from pkb_ray.pipeline.cluster import node_gpus
from pkb_ray.pipeline.gang import GangHandle, bundle_devices, reserve, start_gang, stop_gang
from pkb_ray.pipeline.scheduler import Action, Dispatch, GangPhase, Reserve, Restart, Scheduler, SchedulingError, Start, Stop
from pkb_ray.pipeline.telemetry import RunMetrics
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import EvalTask, Result

log = logging.getLogger(__name__)

WAIT_LOG_S = 60.0  # with no more tasks to come, how long a wait lasts before the pool says what it waits on
WATCH_EVERY_S = 5.0  # how often the pool probes its busy gangs (more often with a margin under 3x this)


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
    # the watch's view of an evaluation: its gang's deadline() probe out, when it was sent, the last answer
    probe: ray.ObjectRef | None = None
    probe_sent: float = 0.0
    deadline: float | None = None


class GangPool:
    """Evaluates tasks on gangs: carries out what the :class:`~pkb_ray.pipeline.scheduler.Scheduler` decides
    with Ray (placement groups, actors, calls) and tells it what Ray reports back."""

    def __init__(self, cfg: SweepConfig, metrics: RunMetrics | None = None, watch_margin_s: float = WATCH_MARGIN_S):
        self.cfg = cfg
        self.metrics = metrics
        self.watch_margin_s = watch_margin_s
        self._watch_every_s = min(WATCH_EVERY_S, watch_margin_s / 3)
        self.handles: dict[str, GangHandle] = {}
        self.scheduler = Scheduler({})
        self.evaluated = 0
        self.busy_s = 0.0  # gang-seconds inside samples (dispatch to result)
        self.alive_s = 0.0  # gang-seconds of ready gangs
        self._waiting: dict[ray.ObjectRef, Waiting] = {}
        self._abandoned = threading.Event()
        self._last_tick = self._last_push = self._last_watch = self._quiet_since = time.monotonic()
        self._do = {Reserve: self._reserve, Start: self._start, Dispatch: self._dispatch, Stop: self._stop,
                    Restart: self._restart}

    @property
    def busy_fraction(self) -> float:
        return self.busy_s / self.alive_s if self.alive_s else 0.0

    @property
    def stats(self) -> Counter:
        """Gangs started, restarted and stopped, most gangs (and GPUs) held at once, samples evaluated."""
        return self.scheduler.stats + Counter(evaluated=self.evaluated)

    def evaluate(self, tasks: "Iterable[EvalTask] | TaskFeed",
                 expected: "Mapping[Layout, int] | None" = None) -> Iterator[tuple[EvalTask, Result]]:
        """Each task with its result, as they finish; tasks may keep arriving while gangs work (a TaskFeed).
        ``expected``: how many tasks of each layout will come, so their gangs start before the first does."""
        feed = tasks if isinstance(tasks, TaskFeed) else TaskFeed(tasks)
        self.scheduler = Scheduler(node_gpus(), max_gpus=self.cfg.ray.max_gpus)
        if expected:
            self._carry_out(self.scheduler.expect(expected))
        while not self._abandoned.is_set():
            self._tick()
            self._carry_out(self._intake(feed))
            yield from self._watch()
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
        """The next reference Ray has an answer for: briefly while tasks may still arrive, else until
        the next watch."""
        done, _ = ray.wait(list(self._waiting), num_returns=1, timeout=self._watch_every_s if feed.exhausted else 0.2)
        self._tick()  # the wait may have been long: account for it before a result adds its busy time
        now = time.monotonic()
        if done or not feed.exhausted:
            self._quiet_since = now
        elif now - self._quiet_since >= WAIT_LOG_S:
            self._quiet_since = now
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
        self._count(waiting)
        try:
            result = ray.get(ref)
            self._carry_out(self.scheduler.result(waiting.gang))
        except RayActorError as exc:
            result = Result.for_sample(waiting.task.sample, Status.CRASH, f"the gang evaluating this sample died: {exc}",
                                       gang=waiting.gang, **waiting.task.where.fields)
            self._carry_out(self.scheduler.gang_died(waiting.gang))
        return result

    def _count(self, waiting: Waiting) -> None:
        self.evaluated += 1
        self.busy_s += time.monotonic() - waiting.since

    # ---- the watch: no gang that stops answering stalls the sweep ----

    def _watch(self) -> Iterator[tuple[EvalTask, Result]]:
        """At most every few seconds: probe each busy gang, and restart those gone silent (each
        task on one gives a timeout result)."""
        now = time.monotonic()
        if now - self._last_watch < self._watch_every_s:
            return
        self._last_watch = now
        evals = {ref: w for ref, w in self._waiting.items() if w.what is Wait.EVAL}
        self._read_probes(list(evals.values()))
        for ref, waiting in evals.items():
            why = self._silent(waiting, now)
            if why is not None:
                yield waiting.task, self._timed_out(ref, waiting, why)
            elif waiting.probe is None:  # answered (or never asked): ask again
                waiting.probe, waiting.probe_sent = self.handles[waiting.gang].actor.deadline.remote(), now

    def _read_probes(self, evals: list[Waiting]) -> None:
        """The deadlines the gangs have answered since the last watch; never blocks."""
        out = {w.probe: w for w in evals if w.probe is not None}
        ready, _ = ray.wait(list(out), num_returns=len(out), timeout=0) if out else ([], [])
        for probe in ready:
            waiting = out[probe]
            waiting.probe = None
            try:
                waiting.deadline = ray.get(probe)
            except RayActorError:
                pass  # the gang died: its evaluation's reference says so, and the pool restarts it then

    def _silent(self, waiting: Waiting, now: float) -> str | None:
        """Why the gang of this evaluation counts as silent, or None while it does not."""
        margin = self.watch_margin_s
        late = time.time() - waiting.deadline if waiting.deadline is not None else 0.0
        if late > margin:
            return (f"gang {waiting.gang} gave no result within {margin:g} s of its sample's deadline "
                    f"(silent for {late:.0f} s past it)")
        # a wedged process (stuck in a driver call, stopped, its GIL held) answers nothing at all; a
        # probe goes out only during an evaluation, so that has been out for longer still
        unanswered = now - waiting.probe_sent if waiting.probe is not None else 0.0
        if unanswered > margin:
            return (f"gang {waiting.gang} did not answer the pool for {unanswered:.1f} s (more than {margin:g} s) "
                    f"while evaluating this sample for {now - waiting.since:.0f} s")
        return None

    def _timed_out(self, ref: ray.ObjectRef, waiting: Waiting, why: str) -> Result:
        """Kill a silent gang and have it restarted like one that died; a late reply is then ignored."""
        del self._waiting[ref]
        self._count(waiting)
        log.warning("gang pool: %s; killed and restarted", why)
        kill_gang(self.handles[waiting.gang])
        self._carry_out(self.scheduler.gang_died(waiting.gang))
        return Result.for_sample(waiting.task.sample, Status.TIMEOUT,
                                 f"the evaluator's gang stopped answering; restarted (not necessarily the sample's "
                                 f"fault): {why}", gang=waiting.gang, **waiting.task.where.fields)

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

    def abandon(self) -> None:
        """From another thread: :meth:`evaluate` returns within a second, leaving what is queued and
        what gangs are evaluating (a service that stops); :meth:`shutdown` then kills the busy gangs."""
        self._abandoned.set()

    def shutdown(self) -> None:
        busy = {w.gang for w in self._waiting.values() if w.what is Wait.EVAL} if self._abandoned.is_set() else set()
        for name, handle in self.handles.items():
            if name in busy:  # its actor answers nothing until its sample ends: not asked, killed
                kill_gang(handle)
            stop_gang(handle)
        self.handles.clear()


def kill_gang(handle: GangHandle) -> None:
    """Kill the gang's actor and hosts without asking them to shut down (a wedged actor would not
    answer); its rank processes die with it. Its reservation stays, for the restart."""
    for actor in [handle.actor, *handle.hosts]:
        if actor is not None:
            ray.kill(actor)
    handle.actor, handle.hosts = None, []
