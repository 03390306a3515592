"""CUDA graph capture of one side's calls, for graph-mode timing (:mod:`pkb_ray.measure.timing`)."""

from __future__ import annotations

from typing import Any, Callable

import torch


class Captured:
    """One side's k calls captured in a CUDA graph: the input buffers it reads, the outputs it writes."""

    def __init__(self, graph: Any, inputs: list[tuple], outputs: list[Any], key: Any = None):
        self.graph, self.inputs, self.outputs, self.key = graph, inputs, outputs, key
        self.output_layouts: list | None = None  # where the outputs lie, once a region has said it

    def load(self, calls: list[tuple]) -> None:
        """Copy a region's fresh inputs into the buffers the graph reads."""
        for buffers, fresh in zip(self.inputs, calls):
            copy_into(buffers, fresh)


def copy_into(dst: Any, src: Any) -> None:
    """Every tensor of ``src`` copied into the tensor at the same place in ``dst``."""
    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src):
            copy_into(d, s)


def same_layout(a: Any, b: Any) -> bool:
    """Whether ``b`` fits the buffers of ``a``: tensors of the same shape, dtype and device, other
    values equal (a graph replays the values it was captured with)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same_layout(x, y) for x, y in zip(a, b))
    return a == b


def capture_calls(fn: Callable[..., Any], calls: list[tuple], device: torch.device) -> tuple[Any, list[Any]]:
    """``fn`` on each argument tuple, captured into one CUDA graph (after one call on the capture
    stream: libraries set up their per-stream state outside the capture)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        fn(*calls[0])
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    # thread_local: the process group's watchdog thread may query events while this thread captures
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
        outs = [fn(*args) for args in calls]
    torch.cuda.synchronize(device)
    return graph, outs
