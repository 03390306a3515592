"""What one reference call moves and computes on this rank, traced: a speed-of-light *estimate*
for problems that state no bound of their own (imported ones: none is published).

Inside the call, ``torch.distributed``'s collectives and point-to-point calls count the bytes this
rank must send (what its peers must receive from it: the bandwidth-optimal algorithms' volume, e.g.
2 (W-1)/W of the buffer for an all-reduce), ``FlopCounterMode`` counts matmul and convolution
FLOPs, and the bytes of the call's inputs and outputs stand for its memory traffic. It bounds the
reference's algorithm, not the problem: a candidate that compresses or fuses can beat it.
Only clean ranks trace, and only when a problem asks (``TRACE_SOL = True``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.utils.flop_counter import FlopCounterMode


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size() if value.layout == torch.strided else 0
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return 0


def _group_size(kwargs: dict, args: tuple, index: int) -> int:
    group = kwargs.get("group", args[index] if len(args) > index else None)
    return dist.get_world_size(group) if group is not None else dist.get_world_size()


# name -> (bytes this rank sends, as a function of (args, kwargs, group size W))
_VOLUME: dict[str, Callable[[tuple, dict, int], float]] = {
    "all_reduce": lambda a, k, w: 2 * (w - 1) / w * _nbytes(a[0]),
    "reduce_scatter": lambda a, k, w: (w - 1) / w * _nbytes(a[1]),
    "reduce_scatter_tensor": lambda a, k, w: (w - 1) / w * _nbytes(a[1]),
    "all_gather": lambda a, k, w: (w - 1) * _nbytes(a[1]),
    "all_gather_into_tensor": lambda a, k, w: (w - 1) * _nbytes(a[1]),
    "all_to_all": lambda a, k, w: (w - 1) / w * _nbytes(a[1]),
    "all_to_all_single": lambda a, k, w: (w - 1) / w * _nbytes(a[1]),
    "broadcast": lambda a, k, w: _nbytes(a[0]),
    "reduce": lambda a, k, w: _nbytes(a[0]),
    "gather": lambda a, k, w: _nbytes(a[0]),
    "scatter": lambda a, k, w: _nbytes(a[0]),
    "send": lambda a, k, w: _nbytes(a[0]),
    "isend": lambda a, k, w: _nbytes(a[0]),
    "recv": lambda a, k, w: _nbytes(a[0]),
    "irecv": lambda a, k, w: _nbytes(a[0]),
}
_GROUP_ARG = {"all_reduce": 2, "reduce_scatter": 3, "reduce_scatter_tensor": 3, "all_gather": 2,
              "all_gather_into_tensor": 2, "all_to_all": 2, "all_to_all_single": 4, "broadcast": 2, "reduce": 3,
              "gather": 3, "scatter": 3, "send": 2, "isend": 2, "recv": 2, "irecv": 2}


@contextlib.contextmanager
def _counting(total: list[float]):
    originals = {name: getattr(dist, name) for name in _VOLUME if hasattr(dist, name)}

    def wrap(name: str, fn: Callable) -> Callable:
        def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                total[0] += _VOLUME[name](args, kwargs, _group_size(kwargs, args, _GROUP_ARG[name]))
            except (IndexError, TypeError, ValueError, RuntimeError):
                pass  # an unusual call: not counted, never broken
            return fn(*args, **kwargs)
        return counted

    for name, fn in originals.items():
        setattr(dist, name, wrap(name, fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


def traced_call(fn: Callable[..., Any], inputs: tuple) -> tuple[Any, dict[str, float]]:
    """``fn(*inputs)`` and what it moved, computed and touched on this rank."""
    sent = [0.0]
    flops = FlopCounterMode(display=False)
    with _counting(sent), flops:
        out = fn(*inputs)
    return out, {"interconnect_bytes": sent[0], "flops": float(flops.get_total_flops()),
                 "hbm_bytes": float(_nbytes(inputs) + _nbytes(out))}
