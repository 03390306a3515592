# An honest all-reduce that forges its region reports where no watch looks: it swaps the JSON
# module the report pipe writes with, so its regions say 50x less time than they took. The rank's
# figures are diagnostics: its time is the parent's clock from resuming its set to seeing it
# stopped again, so this gains nothing.
import json as _json

import torch
import torch.distributed as dist

from pkb_ray.runner import protocol

_state = {}


class _ForgingJson:
    def __getattr__(self, name):
        return getattr(_json, name)

    @staticmethod
    def dumps(obj, *args, **kwargs):
        report = obj.get("report") if isinstance(obj, dict) else None
        if isinstance(report, dict) and "us" in report and _state.get("cand"):
            obj = {**obj, "report": {**report, "us": report["us"] / 50}}
        _state["cand"] = False
        return _json.dumps(obj, *args, **kwargs)


protocol.json = _ForgingJson()


def solution(x: torch.Tensor) -> torch.Tensor:
    _state["cand"] = True  # the report that follows is the candidate's region
    out = x.clone()
    dist.all_reduce(out)
    return out
