"""Gather of equal shards from every rank onto a root rank, in rank order.

Models: collecting per-rank predictions, generated tokens or evaluation outputs on the rank that
writes them out (data-parallel evaluation, ``torch.distributed.gather`` in training loops), and
assembling a sharded tensor on one rank to save it. The root is drawn per seed.

Contract: ``solution(x, root)`` is called on every rank with that rank's ``(numel,)`` ``x`` and
the same ``root``. The root returns a new ``(world_size * numel,)`` tensor, every rank's ``x``
concatenated in rank order; every other rank returns an empty tensor of shape ``(0,)`` with
``x``'s dtype and device. No rank's ``x`` may be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="gather",
    name="Gather to a root",
    category="collective",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    # numel: elements of each rank's shard; the root's output holds world_size * numel.
    sizes={"small": dict(numel=4096), "default": dict(numel=1 << 20), "large": dict(numel=1 << 26)},
    ladder=[dict(numel=1 << p) for p in range(10, 27, 2)],  # 4 KiB .. 256 MiB of float32 a rank
)


def make_inputs(ctx: InputContext):
    root = int(torch.randint(0, ctx.world_size, (1,), generator=ctx.shared_generator()).item())
    return ctx.randn(ctx.size["numel"]), root


def solution(x: torch.Tensor, root: int) -> torch.Tensor:
    world_size = dist.get_world_size()
    if dist.get_rank() == root:
        out = x.new_empty(world_size * x.numel())
        dist.gather(x, gather_list=list(out.chunk(world_size)), dst=root)
        return out
    dist.gather(x, gather_list=None, dst=root)
    return x.new_empty(0)


def speed_of_light(size, world_size, dtype) -> Traffic:
    shard = size["numel"] * dtype.itemsize
    # The root must receive W-1 shards; it writes all W and reads its own.
    return Traffic(
        interconnect_bytes=(world_size - 1) * shard,
        flops=0.0,
        hbm_bytes=(world_size + 1) * shard,
    )


def oracle(inputs, size, world_size):
    root = inputs[0][1]
    full = torch.cat([args[0] for args in inputs])
    return [full if r == root else inputs[r][0].new_empty(0) for r in range(world_size)]
