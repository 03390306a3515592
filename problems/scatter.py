"""Scatter of equal chunks of one tensor from a root rank, in rank order.

Models: a data-loading rank handing each data-parallel rank its slice of the batch, and a
coordinator distributing per-rank work (sharded checkpoint loading, expert or partition
assignments). The root is drawn per seed.

Contract: ``solution(x, root)`` is called on every rank with an ``x`` of shape
``(world_size * numel,)`` and the same ``root``. Only the root's ``x`` matters; the other ranks'
``x`` hold arbitrary values and must be ignored. Rank r returns a new ``(numel,)`` tensor equal to
chunk r of the root's ``x``. No rank's ``x`` may be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="scatter",
    name="Scatter from a root",
    category="collective",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    # numel: elements each rank receives; every rank's input holds world_size * numel.
    sizes={"small": dict(numel=4096), "default": dict(numel=1 << 20), "large": dict(numel=1 << 26)},
    ladder=[dict(numel=1 << p) for p in range(10, 27, 2)],  # 4 KiB .. 256 MiB of float32 a rank
)


def make_inputs(ctx: InputContext):
    root = int(torch.randint(0, ctx.world_size, (1,), generator=ctx.shared_generator()).item())
    return ctx.randn(ctx.world_size * ctx.size["numel"]), root


def solution(x: torch.Tensor, root: int) -> torch.Tensor:
    world_size = dist.get_world_size()
    out = x.new_empty(x.numel() // world_size)
    chunks = list(x.chunk(world_size)) if dist.get_rank() == root else None
    dist.scatter(out, scatter_list=chunks, src=root)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    chunk = size["numel"] * dtype.itemsize
    # The root must send W-1 chunks; it reads all W chunks and writes its own.
    return Traffic(
        interconnect_bytes=(world_size - 1) * chunk,
        flops=0.0,
        hbm_bytes=(world_size + 1) * chunk,
    )


def oracle(inputs, size, world_size):
    root = inputs[0][1]
    return [chunk.clone() for chunk in inputs[root][0].chunk(world_size)]
