# Honest calls, an early done line: its fire step writes the line that stops the parent's clock
# before the calls run, then runs them and reports. The work between its done line and its report
# beyond the reference's is charged to its region: it must read its calls' honest speed, not ~50x.
import sys

import torch
import torch.distributed as dist

from pkb_ray.runner import protocol

_state = {"patched": False}


def _patch():
    frame = sys._getframe(1)
    while frame is not None:
        session = frame.f_locals.get("session")
        if session is not None and hasattr(session, "fire"):
            honest = session.fire

            def fire(tag, blank):
                protocol.mark_done(tag)  # the parent keeps the first done line of a tag
                return honest(tag, blank)

            session.fire = fire
            _state["patched"] = True
            return
        frame = frame.f_back


def solution(x: torch.Tensor) -> torch.Tensor:
    if not _state["patched"]:
        _patch()
    out = x.clone()
    dist.all_reduce(out)
    return out
