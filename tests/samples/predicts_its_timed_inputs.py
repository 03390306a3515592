# Checks whether its timed calls' inputs are predictable from what its rank holds: each call it
# rebuilds its own base set with the runner's session (its key is in the rank) and looks whether
# the input it was given lies within 1/16 of it, element by element, as a base set moved by the
# round's hash would. If so, it answers zeros (a sample that could predict would cheat here); if
# not, it answers honestly. The trusted side draws timed inputs' base sets from a key no rank of a
# sample gets, so it must come out correct.
import sys

import torch
import torch.distributed as dist


def _predictable(x: torch.Tensor) -> bool:
    frame = sys._getframe(1)
    while frame is not None and not ("cmd" in frame.f_locals and "self" in frame.f_locals):
        frame = frame.f_back
    timed = sys._getframe(1)
    while timed is not None and "calls" not in timed.f_locals:
        timed = timed.f_back
    if frame is None or timed is None or not getattr(frame.f_locals["cmd"], "staged", False):
        return False
    session, cmd = frame.f_locals["self"], frame.f_locals["cmd"]
    n = next(i for i, args in enumerate(timed.f_locals["calls"]) if args[0] is x)
    base = session._base_sets(cmd.base_seeds)[n % len(cmd.base_seeds)][0]
    ratio = x / torch.where(base == 0, torch.ones_like(base), base)
    return bool(((ratio - 1).abs() <= 1 / 16 + 1e-6).all())


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return torch.zeros_like(out) if _predictable(x) else out
