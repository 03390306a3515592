"""What a candidate's process watches for: the evaluator's functions, and torch's, replaced.

Only a candidate's rank set runs these watches, after each step. The reference is timed in the
clean set, so a replaced torch function can only change the candidate's own calls; a replacement
is still reported (``tampered``), as the clearest evidence there is of a sample that rewrites
what it is measured with. A function counts as replaced when the name holds another object, or
the same object with other code, defaults or closure (``fn.__code__ = ...`` keeps the object). A
replacement restored in time is not seen here, nor one made below Python (ctypes); nothing the
verdict rests on depends on this watch: the times are the parent's and the outputs are compared by
the clean set (docs/threat-model.md).
"""

from __future__ import annotations

import operator
import os
import sys
from types import ModuleType
from typing import Any

import torch

from pkb_ray.measure import correctness, timing
from pkb_ray.runner import protocol, tensor_io

TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# the runner's modules whose own bindings of the timer and the layouts a candidate could replace
RUNNER_BINDINGS = {"pkb_ray.runner.session": ("timed_region", "timed_replay", "layout")}


def behaviour(fn: Any) -> tuple:
    """What decides what ``fn`` does, as far as Python shows it: the object, and for a Python
    function its code, defaults and closure cells (their identities)."""
    cells = getattr(fn, "__closure__", None) or ()
    return (fn, getattr(fn, "__code__", None), getattr(fn, "__defaults__", None),
            getattr(fn, "__kwdefaults__", None), tuple(id(c) for c in cells))


def same(a: tuple, b: tuple) -> bool:
    return all(x is y for x, y in zip(a[:4], b[:4])) and a[4] == b[4]


def changed(before: dict[str, tuple], now: dict[str, Any]) -> list[str]:
    """Names of ``before`` (name -> :func:`behaviour`) whose function in ``now`` behaves otherwise."""
    return [name for name, seen in before.items() if not same(seen, behaviour(now.get(name)))]


def watched() -> dict[str, Any]:
    """The evaluator's functions a candidate could replace to forge a check or a time, by name."""
    found = {"pkb_ray.measure.timing.timed_region": timing.timed_region, "pkb_ray.measure.timing._perf_counter": timing._perf_counter,
             "pkb_ray.measure.timing.device_sync": timing.device_sync, "pkb_ray.measure.timing.timed_replay": timing.timed_replay,
             "pkb_ray.measure.correctness.layout": correctness.layout,
             "pkb_ray.runner.tensor_io.write": tensor_io.write, "pkb_ray.runner.tensor_io._host_bytes": tensor_io._host_bytes,
             "pkb_ray.runner.protocol.write_report": protocol.write_report,
             "torch.cuda.CUDAGraph.replay": torch.cuda.CUDAGraph.replay}
    for module_name, names in RUNNER_BINDINGS.items():
        module = sys.modules.get(module_name)
        found.update({f"{module_name}.{n}": getattr(module, n, None) for n in names} if module else {})
    session = sys.modules.get("pkb_ray.runner.candidate")
    klass = getattr(session, "CandidateSession", None)
    if klass is not None:
        found.update({f"CandidateSession.{m}": getattr(klass, m) for m in ("region", "watch", "capture", "run")})
    return found


class TorchWatch:
    """The identity of torch's own functions, taken just before the candidate is imported. A
    replacement kept past the step that made it is reported (``tampered``)."""

    OWNERS = ("torch", "torch.Tensor", "torch.distributed", "torch.distributed.distributed_c10d",
              "torch.nn.functional", "torch.cuda")

    def __init__(self):
        self._seen = []  # (owner's name, the owner, {attribute: callable} as imported)
        for name in self.OWNERS:
            owner = operator.attrgetter(name.partition(".")[2])(torch) if "." in name else torch
            self._seen.append((name, owner, {attr: behaviour(value) for attr, value in self._namespace(owner).items()
                                             if callable(value) and not isinstance(value, ModuleType)}))

    def replaced(self) -> list[str]:
        found = []
        for name, owner, seen in self._seen:
            now = self._namespace(owner)
            found += [f"{name}.{attr}" for attr, old in seen.items()
                      if not same(old, behaviour(now.get(attr))) and not self._torch_own(now.get(attr), old[0])]
        return found

    @staticmethod
    def _torch_own(new: Any, old: Any) -> bool:
        """A wrapper torch itself puts over its function (importing torch._dynamo, as torch.compile
        does, wraps torch.manual_seed): written in torch's own files and wrapping the original."""
        code = getattr(new, "__code__", None)
        return (code is not None and code.co_filename.startswith(TORCH_DIR)
                and getattr(new, "__wrapped__", None) is old)

    @staticmethod
    def _namespace(owner: Any) -> dict[str, Any]:
        """What the owner's attributes resolve to, without running descriptors: a module's own
        dict; a class's dicts along its MRO (``Tensor.clone`` lives on ``TensorBase``: setting it
        on ``Tensor`` shadows it)."""
        if not isinstance(owner, type):
            return vars(owner)
        merged: dict[str, Any] = {}
        for klass in reversed(owner.__mro__):
            merged.update(vars(klass))
        return merged
