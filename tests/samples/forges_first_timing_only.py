# Forges its times like forges_reports.py, but only in the sample's first timing run (warmup,
# calibration and 100 rounds: its first 102 regions): a look that does not repeat, as a burst of
# load on a busy machine would give. The second run is honest, and is the one judged.
import torch
import torch.distributed as dist

from pkb_ray.runner import protocol


def _forged(step, report):
    if step.startswith("region.") and "us" in report and _forge_state.get("cand"):
        _forge_state["regions"] = _forge_state.get("regions", 0) + 1
        if _forge_state["regions"] <= 102:
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
