"""All-gather of equal shards into one tensor, in rank order.

Models: ZeRO-3 / FSDP parameter gathering before a layer's forward and backward, and the
sequence-parallel gather of activations before a tensor-parallel column-parallel linear layer
(Megatron-LM). Every rank ends with every rank's shard, concatenated in rank order.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="all_gather",
    name="All-gather",
    category="collective",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    # numel: elements of each rank's shard; the output holds world_size * numel.
    sizes={"small": dict(numel=4096), "default": dict(numel=1 << 20), "large": dict(numel=1 << 26)},
    ladder=[dict(numel=1 << p) for p in range(10, 27, 2)],  # 4 KiB .. 256 MiB of float32 a rank
)


def make_inputs(ctx: InputContext):
    return (ctx.randn(ctx.size["numel"]),)


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.new_empty(dist.get_world_size() * x.numel())
    all_gather_single(out, x)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    shard = size["numel"] * dtype.itemsize
    # Each rank receives the W-1 other shards (and a ring sends as many); writes W shards, reads 1.
    return Traffic(
        interconnect_bytes=(world_size - 1) * shard,
        flops=0.0,
        hbm_bytes=(world_size + 1) * shard,
    )


def oracle(inputs, size, world_size):
    full = torch.cat([args[0] for args in inputs])
    return [full.clone() for _ in range(world_size)]
