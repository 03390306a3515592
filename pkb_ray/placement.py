"""How many gangs of each world size to start, given free GPUs per node and the work queued.

Pure arithmetic, so the pool's sizing can be read and tested without Ray. A gang needs all of
its W GPUs on one node (STRICT_PACK). An 8-GPU node holds four W=2 gangs, two W=4 or one W=8;
with samples of several world sizes queued, each world size first gets one gang where one fits
(largest first, so the big ones are not squeezed out), then each remaining gang goes to the
world size with the most queued samples per gang. No world size gets more gangs than it has
samples left.
"""

from __future__ import annotations

from typing import Mapping


def plan_gangs(free_gpus: Mapping[str, int], queued: Mapping[int, int],
               running: Mapping[int, int] | None = None) -> list[tuple[int, str]]:
    """New gangs to start, as (world size, node), best-fit onto the nodes' free GPUs.

    ``free_gpus``: node -> GPUs not held by any gang; ``queued``: world size -> samples waiting;
    ``running``: world size -> gangs that already exist (they count against the per-gang share).
    """
    free = dict(free_gpus)
    have = {w: (running or {}).get(w, 0) for w in queued}
    plan: list[tuple[int, str]] = []

    def place(w: int) -> bool:
        fits = [n for n, g in free.items() if g >= w]
        if not fits:
            return False
        node = min(fits, key=lambda n: (free[n], n))  # best fit keeps big holes for big gangs
        free[node] -= w
        have[w] += 1
        plan.append((w, node))
        return True

    wanted = sorted((w for w, n in queued.items() if n > 0), reverse=True)
    for w in wanted:
        if have[w] == 0:
            place(w)
    while True:
        open_ = [w for w in wanted if have[w] < queued[w] and any(g >= w for g in free.values())]
        if not open_:
            return plan
        place(max(open_, key=lambda w: (queued[w] / max(have[w], 1e-9), w)))


def largest_gang(node_gpus: Mapping[str, int]) -> int:
    return max(node_gpus.values(), default=0)
