"""The gang pool's decisions, as a state machine with no Ray in it.

State: the gangs (by name: layout, phase, nodes, the task each evaluates), a queue of tasks per
layout, and whether the feed of samples has ended. Each event the pool sees is one method, which
updates the state and returns the :data:`Action` list the pool must carry out with Ray:

========================  ==========================================================
event                     what follows
========================  ==========================================================
:meth:`expect`            samples will come (the run's rows): gangs are planned now
:meth:`tasks_arrived`     samples queue by layout; new gangs are planned if needed
:meth:`feed_ended`        no more samples: idle gangs with nothing queued stop
:meth:`gang_reserved`     the placement group is placed: start the gang's actor
:meth:`gang_started`      the actor is up: give it a sample
:meth:`gang_failed`       the actor did not start: restart it (a few times, then fail)
:meth:`result`            the gang is idle again: next sample, or stop
:meth:`gang_died`         the actor died with a sample: restart it in the same reservation
========================  ==========================================================

The scheduling rules, each in one method: gangs are planned onto the nodes' free GPUs by
:func:`pkb_ray.spec.placement.plan_gangs` (:meth:`_grow`); an idle gang takes the next sample of its
layout (:meth:`_dispatch`); an idle gang whose layout has nothing queued gives its GPUs back once
no more samples can come, or at once if another layout waits for room (:meth:`_retire`).
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Union

from pkb_ray.spec.placement import Layout, fits, no_room, over_cap, plan_gangs

MAX_FAILED_STARTS = 3  # consecutive gang start failures before the pool gives up (an evaluator bug)


class GangPhase(str, Enum):
    """Where a gang is in its life."""

    RESERVING = "reserving"  # placement group asked for
    STARTING = "starting"  # actor starting
    IDLE = "idle"
    BUSY = "busy"  # evaluating a sample


@dataclass
class GangState:
    """The scheduler's view of one gang."""

    name: str
    layout: Layout
    phase: GangPhase = GangPhase.RESERVING
    nodes: tuple[str, ...] = ()  # where its GPUs are, once placed
    task: Any = None  # what it evaluates (BUSY)


@dataclass(frozen=True)
class Reserve:
    gang: str
    layout: Layout


@dataclass(frozen=True)
class Start:
    gang: str


@dataclass(frozen=True)
class Dispatch:
    gang: str
    task: Any


@dataclass(frozen=True)
class Stop:
    gang: str


@dataclass(frozen=True)
class Restart:
    """Stop the gang's actor and start a new one, named ``new_name``, in the same reservation."""

    gang: str
    new_name: str


Action = Union[Reserve, Start, Dispatch, Stop, Restart]


class SchedulingError(RuntimeError):
    """Work that can never run (no room for its layout, gangs that will not start)."""


@dataclass
class Scheduler:
    """Decides which gangs exist and what each does; see the module's docstring."""

    cluster: Mapping[str, int]  # node -> GPUs
    max_gpus: int | None = None  # most GPUs the gangs may hold at once (ray.max_gpus), None: all of the cluster's
    gangs: dict[str, GangState] = field(default_factory=dict)
    queues: dict[Layout, deque] = field(default_factory=dict)
    feed_done: bool = False
    expected: Counter = field(default_factory=Counter)  # layout -> tasks announced that have not arrived
    stats: Counter = field(default_factory=Counter)  # started, restarted, stopped, peak_gangs, peak_gpus
    _failed_starts: int = 0
    _ids: Any = field(default_factory=itertools.count)

    # ---- events ----

    def expect(self, counts: Mapping[Layout, int]) -> list[Action]:
        """``counts`` tasks per layout will come (the run's rows, before the stream has validated and
        compiled them): gangs are planned for them now, so they start while the stream works. Tasks
        that arrive count against these; the end of the feed drops what never came."""
        for layout, n in counts.items():
            self._check_room(layout)
            self.expected[layout] += n
        return self._schedule()

    def tasks_arrived(self, tasks: list[tuple[Any, Layout]]) -> list[Action]:
        """``tasks``: (task, its layout); a task is opaque here (the pool's EvalTask)."""
        for task, layout in tasks:
            self._check_room(layout)
            self.queues.setdefault(layout, deque()).append(task)
            self.expected[layout] = max(0, self.expected[layout] - 1)
        return self._schedule()

    def feed_ended(self) -> list[Action]:
        self.feed_done = True
        self.expected.clear()
        return self._schedule()

    def gang_reserved(self, name: str, nodes: tuple[str, ...]) -> list[Action]:
        gang = self.gangs[name]
        gang.phase, gang.nodes = GangPhase.STARTING, tuple(nodes)
        self.stats["started"] += 1
        return [Start(name), *self._schedule()]

    def gang_started(self, name: str) -> list[Action]:
        self._failed_starts = 0
        self.gangs[name].phase = GangPhase.IDLE
        return self._schedule()

    def gang_failed(self, name: str, error: str) -> list[Action]:
        self._failed_starts += 1
        if self._failed_starts >= MAX_FAILED_STARTS:
            raise SchedulingError(f"gang {name} failed to start {self._failed_starts} times: {error}")
        return [self._restart(name)]

    def result(self, name: str) -> list[Action]:
        gang = self.gangs[name]
        gang.phase, gang.task = GangPhase.IDLE, None
        return self._schedule()

    def gang_died(self, name: str) -> list[Action]:
        """The gang's actor died while evaluating (its sample gets a crash result from the pool)."""
        self.gangs[name].task = None
        return [self._restart(name), *self._schedule()]

    # ---- queries ----

    @property
    def finished(self) -> bool:
        """No more samples can come, none is queued, none is being evaluated."""
        return self.feed_done and not any(self.queues.values()) and not self.in_phase(GangPhase.BUSY)

    def in_phase(self, phase: GangPhase) -> list[GangState]:
        return [g for g in self.gangs.values() if g.phase == phase]

    def queued(self) -> dict[str, int]:
        """Samples waiting per layout (a world size for one node), for the dashboard."""
        return {str(lay.world_size) if lay.nodes == 1 else str(lay): len(q) for lay, q in self.queues.items()}

    def held_gpus(self) -> int:
        """GPUs the gangs hold or are being placed on."""
        return sum(g.layout.world_size for g in self.gangs.values())

    def _under_cap(self, layout: Layout, held: int) -> bool:
        return self.max_gpus is None or held + layout.world_size <= self.max_gpus

    def free_gpus(self) -> dict[str, int]:
        """GPUs per node that no gang holds; a gang still being placed is charged to the emptiest nodes."""
        free = dict(self.cluster)
        for g in self.gangs.values():
            for node in g.nodes or sorted(free, key=free.get, reverse=True)[:g.layout.nodes]:
                free[node] = free.get(node, 0) - g.layout.per_node
        return free

    # ---- rules ----

    def _schedule(self) -> list[Action]:
        return [*self._dispatch(), *self._retire(), *self._grow()]

    def _dispatch(self) -> list[Action]:
        """Each idle gang takes the next sample of its layout."""
        out: list[Action] = []
        for g in self.in_phase(GangPhase.IDLE):
            if self.queues.get(g.layout):
                g.phase, g.task = GangPhase.BUSY, self.queues[g.layout].popleft()
                out.append(Dispatch(g.name, g.task))
        return out

    def _retire(self) -> list[Action]:
        """Idle gangs whose layout has nothing queued give their GPUs back: once no more samples can
        come, or at once if another layout has work, no gang and no room for one."""
        if not (self.feed_done or self._starving()):
            return []
        out: list[Action] = []
        for g in self.in_phase(GangPhase.IDLE):
            if not self.queues.get(g.layout):
                del self.gangs[g.name]
                self.stats["stopped"] += 1
                out.append(Stop(g.name))
        return out

    def _starving(self) -> bool:
        have = Counter(g.layout for g in self.gangs.values())
        free = self.free_gpus()
        held = self.held_gpus()
        return any(q and not have[lay] and not (fits(lay, free) and self._under_cap(lay, held))
                   for lay, q in self.queues.items())

    def _grow(self) -> list[Action]:
        """New gangs where the queues want them and the free GPUs (and ``max_gpus``) allow; none while a
        reservation is pending: until it is placed, which GPUs are free is not known."""
        if self.in_phase(GangPhase.RESERVING):
            return []
        running = Counter(g.layout for g in self.gangs.values())
        queued = {lay: len(self.queues.get(lay, ())) + self.expected[lay] for lay in {*self.queues, *self.expected}}
        out: list[Action] = []
        held = self.held_gpus()
        for layout, _ in plan_gangs(self.free_gpus(), queued, running):
            if not self._under_cap(layout, held):
                continue
            held += layout.world_size
            gang = GangState(self._name(layout), layout)
            self.gangs[gang.name] = gang
            out.append(Reserve(gang.name, layout))
        self.stats["peak_gangs"] = max(self.stats["peak_gangs"], len(self.gangs))
        self.stats["peak_gpus"] = max(self.stats["peak_gpus"], self.held_gpus())
        return out

    def _restart(self, name: str) -> Restart:
        gang = self.gangs.pop(name)
        gang.name, gang.phase = self._name(gang.layout), GangPhase.STARTING
        self.gangs[gang.name] = gang
        self.stats["restarted"] += 1
        return Restart(name, gang.name)

    def _check_room(self, layout: Layout) -> None:
        if why := over_cap(layout, self.max_gpus):
            raise SchedulingError(f"ray.max_gpus: {why}")
        if not fits(layout, self.cluster):
            key = "hardware.world_sizes" if layout.nodes == 1 else "hardware.spread"
            raise SchedulingError(f"{key}: {no_room(layout, self.cluster)}")

    def _name(self, layout: Layout) -> str:
        kind = f"w{layout.world_size}" if layout.nodes == 1 else str(layout)
        return f"gang-{kind}-{next(self._ids)}"
