"""The evaluate stage: (sample, gang layout) tasks to gangs, results back, every gang kept busy.

How many gangs of each layout (a world size on one node, or NxG over nodes) run is decided by
:func:`pkb_ray.placement.plan_gangs` from the nodes' GPUs and the tasks queued per layout. A gang starts in three asynchronous steps
(placement group ready, bundle GPUs known, actor up) while others already work. A gang whose
world size has no work left is stopped and its GPUs given back, so gangs of another world size
can take them. A gang whose actor dies gives its sample a ``crash`` result and is restarted in
the same placement group; no other sample's result is lost.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import Counter, deque
from typing import Iterable, Iterator

import ray
from ray.exceptions import RayActorError

from pkb_ray.config import SweepConfig
from pkb_ray.cluster import node_gpus
from pkb_ray.gang import GangHandle, bundle_devices, reserve, start_gang, stop_gang
from pkb_ray.placement import Layout, LayoutLike, fits, no_room, plan_gangs
from pkb_ray.schema import Result, Sample, Status
from pkb_ray.telemetry import RunMetrics

log = logging.getLogger(__name__)

Task = tuple[Sample, LayoutLike]  # a sample and where to evaluate it: a world size on one node, or a Layout
MAX_FAILED_STARTS = 3  # consecutive gang start failures before the stage gives up (an evaluator bug)
WAIT_LOG_S = 60.0


class TaskFeed:
    """Tasks from a producer (a list, or a Ray Data stream) through a bounded queue, read without blocking.

    A thread pulls from ``items`` and blocks while ``maxsize`` tasks wait: that is the backpressure
    that keeps a fast upstream (compilation) from running unboundedly ahead of the gangs.
    """

    def __init__(self, items: Iterable[Task], maxsize: int = 64):
        self._queue: queue.Queue = queue.Queue(maxsize=maxsize)
        self._finished = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._pull, args=(items,), name="task-feed", daemon=True)
        self._thread.start()

    def _pull(self, items: Iterable[Task]) -> None:
        try:
            for item in items:
                self._queue.put(item)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            self.error = exc
        finally:
            self._finished.set()

    def take(self) -> list[Task]:
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


class GangPool:
    def __init__(self, cfg: SweepConfig, metrics: RunMetrics | None = None):
        self.cfg = cfg
        self.metrics = metrics
        self.gangs: list[GangHandle] = []
        self._ids = itertools.count()
        # gangs started, restarted, stopped; samples evaluated; most gangs (and GPUs) held at once
        self.stats = Counter()
        self.busy_s = 0.0  # gang-seconds inside samples (dispatch to result)
        self.alive_s = 0.0  # gang-seconds of ready gangs

    @property
    def busy_fraction(self) -> float:
        return self.busy_s / self.alive_s if self.alive_s else 0.0

    def _name(self, layout: Layout) -> str:
        kind = f"w{layout.world_size}" if layout.nodes == 1 else str(layout)
        return f"gang-{kind}-{next(self._ids)}"

    def _free_gpus(self) -> dict[str, int]:
        free = node_gpus()
        for g in self.gangs:  # a group still being placed is charged to the emptiest nodes
            nodes = [p.node for p in g.parts] or sorted(free, key=free.get, reverse=True)[:g.layout.nodes]
            for node in nodes:
                free[node] = free.get(node, 0) - g.layout.per_node
        return free

    def evaluate(self, tasks: "Iterable[Task] | TaskFeed") -> Iterator[Result]:
        """Results of ``tasks`` as they finish; tasks may keep arriving while gangs work (a TaskFeed)."""
        feed = tasks if isinstance(tasks, TaskFeed) else TaskFeed(tasks)
        queues: dict[Layout, deque[Sample]] = {}
        cluster = node_gpus()
        pending: dict[ray.ObjectRef, tuple[str, GangHandle, Sample | None]] = {}
        idle: list[GangHandle] = []
        ready: set[str] = set()  # gangs whose actor is up
        dispatched: dict[ray.ObjectRef, float] = {}
        failed_starts = 0
        clock = [time.monotonic(), 0.0]  # last tick, last metrics push

        def tick() -> None:
            now = time.monotonic()
            self.alive_s += len(ready) * (now - clock[0])
            clock[0] = now
            if self.metrics and now - clock[1] >= 1.0:
                clock[1] = now
                busy = sum(kind == "eval" for kind, _, _ in pending.values())
                queued = {str(lay.world_size) if lay.nodes == 1 else str(lay): len(q) for lay, q in queues.items()}
                self.metrics.pool(queued, len(ready), busy, self.busy_fraction)

        def intake() -> bool:
            """Move arrived tasks into the queues; True if a layout without a queue appeared."""
            new = False
            for sample, where in feed.take():
                lay = Layout.of(where)
                if not fits(lay, cluster):
                    key = "hardware.world_sizes" if lay.nodes == 1 else "hardware.spread"
                    raise RuntimeError(f"{key}: {no_room(lay, cluster)}")
                new |= lay not in queues
                queues.setdefault(lay, deque()).append(sample)
            return new

        def grow() -> None:
            if any(kind == "reserve" for kind, _, _ in pending.values()):
                return  # wait until the groups asked for are placed: then the free GPUs are known
            running = Counter(g.layout for g in self.gangs)
            for lay, _ in plan_gangs(self._free_gpus(), {lay: len(q) for lay, q in queues.items()}, running):
                handle = reserve(lay, self._name(lay))
                self.gangs.append(handle)
                pending[handle.pg.ready()] = ("reserve", handle, None)
            self.stats["peak_gangs"] = max(self.stats["peak_gangs"], len(self.gangs))
            self.stats["peak_gpus"] = max(self.stats["peak_gpus"], sum(g.layout.world_size for g in self.gangs))

        def starving() -> bool:
            """Some layout has work, no gang, and no room for one."""
            have = Counter(g.layout for g in self.gangs)
            free = self._free_gpus()
            return any(q and not have[lay] and not fits(lay, free) for lay, q in queues.items())

        def restart(handle: GangHandle) -> None:
            stop_gang(handle, release=False)
            start_gang(self.cfg, handle, self._name(handle.layout))
            pending[handle.actor.info.remote()] = ("start", handle, None)
            self.stats["restarted"] += 1

        while True:
            tick()
            if intake() or not self.gangs:
                grow()
            for g in list(idle):
                if queues.get(g.layout):
                    sample = queues[g.layout].popleft()
                    ref = g.actor.evaluate.remote(sample.model_dump(mode="json"))
                    pending[ref], dispatched[ref] = ("eval", g, sample), time.monotonic()
                    idle.remove(g)
            # a gang whose world size has no work left gives its GPUs back: once no more tasks can come,
            # or at once if another world size is waiting for room
            done_with = [g for g in idle if not queues.get(g.layout) and (feed.exhausted or starving())]
            for g in done_with:
                idle.remove(g)
                ready.discard(g.name)
                self.gangs.remove(g)
                stop_gang(g)
                self.stats["stopped"] += 1
            if done_with:
                grow()
            evaluating = any(kind == "eval" for kind, _, _ in pending.values())
            if feed.exhausted and not any(queues.values()) and not evaluating:
                return
            if not pending:
                if any(queues.values()):
                    raise RuntimeError("work is queued but no gang is running or starting")
                feed.wait(1.0)  # nothing to do until more tasks arrive
                continue
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.2 if not feed.exhausted else WAIT_LOG_S)
            tick()  # the wait may have been long: account for it before a result adds its busy time
            if not done:
                if feed.exhausted:
                    waiting = Counter(kind for kind, _, _ in pending.values())
                    log.info("gang pool: waiting on %s; queued %s", dict(waiting),
                             {str(lay): len(q) for lay, q in queues.items()})
                continue
            kind, handle, sample = pending.pop(done[0])
            if kind == "reserve":
                bundle_devices(handle)
                start_gang(self.cfg, handle)
                pending[handle.actor.info.remote()] = ("start", handle, None)
                self.stats["started"] += 1
            elif kind == "start":
                try:
                    ray.get(done[0])
                    failed_starts = 0
                    idle.append(handle)
                    ready.add(handle.name)
                except RayActorError as exc:
                    failed_starts += 1
                    if failed_starts >= MAX_FAILED_STARTS:
                        raise RuntimeError(f"gang {handle.name} failed to start {failed_starts} times: {exc}") from exc
                    restart(handle)
            else:
                self.stats["evaluated"] += 1
                self.busy_s += time.monotonic() - dispatched.pop(done[0])
                try:
                    yield Result.model_validate(ray.get(done[0]))
                    idle.append(handle)
                except RayActorError as exc:
                    yield Result.for_sample(sample, Status.CRASH, f"the gang evaluating this sample died: {exc}",
                                            world_size=handle.world_size, nodes=handle.layout.nodes,
                                            hardware=self.cfg.hardware.name,
                                            device_backend=self.cfg.hardware.backend, gang=handle.name)
                    ready.discard(handle.name)
                    restart(handle)

    def shutdown(self) -> None:
        for g in self.gangs:
            stop_gang(g)
        self.gangs.clear()
