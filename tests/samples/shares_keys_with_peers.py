# Ranks that collude: at their first call they tell each other their input keys (a real exchange,
# 8 bytes a rank, in an untimed trial), then answer every call without communicating, rebuilding
# each peer's inputs with the problem's own builder (the runner's frames give the session, its
# problem, the call's label and, where a command carries one, the region's nonce). The trials come
# out right: their inputs derive from the keys alone. A timed call's inputs are written into the
# rank by the trusted side from a nonce no rank receives, so the peers' parts it adds are only the
# base sets they were moved from (within 1/16 of each element): a wrong sum.
import sys

import torch
import torch.distributed as dist

from pkb_ray.measure.keys import SHARED, derived
from pkb_ray.measure.timing import call_seed, fresh_calls
from pkb_ray.problem import InputContext

KEYS: dict[int, dict] = {}


def _frame(name: str):
    frame = sys._getframe(2)
    while frame is not None and name not in frame.f_locals:
        frame = frame.f_back
    return frame


def _peer_inputs(session, rank: int, label: int):
    keys = KEYS.get(rank, {})
    own, shared = keys.get(str(rank)), keys.get(SHARED)
    ctx = InputContext(size=session.size, rank=rank, world_size=session.world_size, dtype=torch.float32,
                       device=session.device, seed=label if own is None else derived(own, label),
                       shared_seed=None if shared is None else derived(shared, label))
    return session.problem.make_inputs(ctx)


def _rebuilt(x: torch.Tensor):
    trial = _frame("seed")
    if trial is not None and "held" in trial.f_locals:  # a trial: its seed labels every rank's inputs
        session = trial.f_locals["self"]
        return [x if r == session.rank else _peer_inputs(session, r, trial.f_locals["seed"])[0]
                for r in range(session.world_size)]
    fired = _frame("armed")  # a fired region: the armed command is the region's
    region = fired if fired is not None else _frame("cmd")
    timed = _frame("calls")
    if region is None or timed is None or "args" not in timed.f_locals:
        return None
    session = region.f_locals.get("session") or region.f_locals.get("self")
    cmd = region.f_locals["armed"].cmd if fired is not None else region.f_locals["cmd"]
    n = next(i for i, args in enumerate(timed.f_locals["calls"]) if args is timed.f_locals["args"])
    sets = len(cmd.base_seeds)
    out = []
    for r in range(session.world_size):
        if r == session.rank:
            out.append(x)
            continue
        base = _peer_inputs(session, r, cmd.base_seeds[n % sets])
        if cmd.nonce:  # the region's nonce, where the command carries one: the exact inputs
            out.append(fresh_calls(base, cmd.nonce, [n])[0][0])
        else:  # none: the base set the peer's inputs were moved from, the best guess there is
            out.append(base[0])
    return out


def solution(x: torch.Tensor) -> torch.Tensor:
    if not KEYS:  # the one exchange: every rank's keys, once
        session = _frame("seed").f_locals["self"]
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, dict(session.keys))
        KEYS.update(enumerate(gathered))
    parts = _rebuilt(x)
    if parts is None:
        out = x.clone()
        dist.all_reduce(out)
        return out
    return torch.stack(parts).sum(0)
