# An honest all-reduce that forges its times where an identity check does not look: it replaces
# the code (not the function object) of the report writer, so that the candidate's region reports
# say 50x less time than the region took.
import torch
import torch.distributed as dist

from pkb_ray.runner import protocol


def _forged(step, report):
    if step.startswith("region.") and "us" in report and _forge_state.get("cand"):
        report = {**report, "us": report["us"] / 50}
    _forge_state["cand"] = False
    deliver({"tag": step, "report": report})  # noqa: F821 - resolved in protocol's globals


protocol._forge_state = {}
protocol.write_report.__code__ = _forged.__code__


def solution(x: torch.Tensor) -> torch.Tensor:
    protocol._forge_state["cand"] = True  # the report that follows is the candidate's region
    out = x.clone()
    dist.all_reduce(out)
    return out
