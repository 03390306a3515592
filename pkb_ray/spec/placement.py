"""Where gangs go: gang layouts, and how many gangs of each to start given free GPUs and queued work.

Pure arithmetic, so the pool's sizing can be read and tested without Ray. A gang has a
:class:`Layout`: W GPUs of one node (``1x8``, the usual case) or the same number of GPUs on each
of several nodes (``2x4``: two nodes of four, for inter-node baselines). An 8-GPU node holds four
W=2 gangs, two W=4 or one W=8; with work of several layouts queued, each layout first gets one
gang where one fits (largest first, so the big ones are not squeezed out), then each remaining
gang goes to the layout with the most queued samples per gang. No layout gets more gangs than it
has samples left.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Union


@dataclass(frozen=True, order=True)
class Layout:
    """``nodes`` nodes with ``per_node`` GPUs of the gang on each; ranks go node by node."""

    nodes: int
    per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.per_node

    def __str__(self) -> str:
        return f"{self.nodes}x{self.per_node}"

    @classmethod
    def of(cls, value: "LayoutLike") -> "Layout":
        """A Layout from itself, a world size on one node (int), or ``"NxG"``."""
        if isinstance(value, Layout):
            return value
        if isinstance(value, int):
            return cls(1, value)
        found = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", str(value))
        if not found or int(found[1]) < 1 or int(found[2]) < 1:
            raise ValueError(f"{value!r} is not a layout: write NODESxGPUS_PER_NODE, e.g. 2x4")
        return cls(int(found[1]), int(found[2]))


LayoutLike = Union[Layout, int, str]


def plan_gangs(free_gpus: Mapping[str, int], queued: Mapping[LayoutLike, int],
               running: Mapping[LayoutLike, int] | None = None) -> list[tuple[LayoutLike, tuple[str, ...]]]:
    """New gangs to start, as (the key of ``queued``, its nodes), best-fit onto the nodes' free GPUs.

    ``free_gpus``: node -> GPUs not held by any gang; ``queued``: layout (or world size, for one
    node) -> samples waiting; ``running``: the same keys -> gangs that already exist (they count
    against the per-gang share). A gang of layout NxG takes G GPUs on each of N distinct nodes.
    """
    free = dict(free_gpus)
    have = {k: (running or {}).get(k, 0) for k in queued}
    plan: list[tuple[LayoutLike, tuple[str, ...]]] = []
    wanted = sorted((k for k, n in queued.items() if n > 0), key=lambda k: (Layout.of(k).world_size, Layout.of(k)),
                    reverse=True)
    for k in wanted:  # first, one gang for each layout that has none, largest first
        if have[k] == 0 and _fitting(k, free):
            _place(k, free, have, plan)
    while True:  # then each gang where the queue per gang is longest
        open_ = [k for k in wanted if have[k] < queued[k] and _fitting(k, free)]
        if not open_:
            return plan
        _place(max(open_, key=lambda k: (queued[k] / max(have[k], 1e-9), Layout.of(k).world_size)), free, have, plan)


def _fitting(key: LayoutLike, free: Mapping[str, int]) -> list[str]:
    """The nodes a gang of ``key`` would take (best fit keeps big holes for big gangs); [] if it does not fit."""
    lay = Layout.of(key)
    nodes = sorted((n for n, g in free.items() if g >= lay.per_node), key=lambda n: (free[n], n))
    return nodes[:lay.nodes] if len(nodes) >= lay.nodes else []


def _place(key: LayoutLike, free: dict[str, int], have: dict, plan: list) -> None:
    """Add a gang of ``key`` to ``plan``, taking its GPUs from ``free``."""
    nodes = _fitting(key, free)
    for n in nodes:
        free[n] -= Layout.of(key).per_node
    have[key] += 1
    plan.append((key, tuple(nodes)))


def fits(layout: LayoutLike, node_gpus: Mapping[str, int]) -> bool:
    """Whether the cluster has enough nodes with enough GPUs for one gang of ``layout``."""
    lay = Layout.of(layout)
    return sum(g >= lay.per_node for g in node_gpus.values()) >= lay.nodes


def over_cap(layout: LayoutLike, max_gpus: int | None) -> str | None:
    """Why a gang of ``layout`` can never start under a cap of ``max_gpus`` held at once (None: it can)."""
    lay = Layout.of(layout)
    if max_gpus is None or lay.world_size <= max_gpus:
        return None
    return f"a gang of {lay} needs {lay.world_size} GPUs; the run may hold {max_gpus}"


def no_room(layout: LayoutLike, node_gpus: Mapping[str, int], cpu: bool = False) -> str:
    """Why a cluster cannot hold a gang of ``layout`` (for error messages); ``cpu``: the ranks run
    on CPUs (gloo), where a node's GPUs are logical ones that its ``ray start`` must declare."""
    lay = Layout.of(layout)
    why = (f"{lay} needs {lay.nodes} node(s) with {lay.per_node} GPUs each; the Ray cluster has "
           f"{sorted(node_gpus.values(), reverse=True)} GPUs per node")
    if cpu:  # Ray counts no GPU on a CPU-only node unless told: the gangs are placed on logical ones
        why += (f" (CPU-only nodes: start their Ray with `ray start ... --num-gpus {lay.per_node}` or more, "
                "logical GPUs that gloo gangs are placed on)")
    return why
