# Honest calls; its blank regions (fired with no calls, to time the fixed work subtracted from
# every region) sleep 3 ms first, so that more would be subtracted from its real ones. The
# candidate's fixed work is never taken as more than the reference's: it must read its calls'
# honest speed, not faster.
import sys
import time

import torch
import torch.distributed as dist

_state = {"patched": False}


def _patch():
    frame = sys._getframe(1)
    while frame is not None:
        session = frame.f_locals.get("session")
        if session is not None and hasattr(session, "fire"):
            honest = session.fire

            def fire(tag, blank):
                if blank:
                    time.sleep(0.003)
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
