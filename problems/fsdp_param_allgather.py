"""FSDP unshard: all-gather the shards of a flat parameter and return the original parameters.

Models: the parameter all-gather before each forward and backward of a fully sharded data-parallel unit
(PyTorch FSDP's FlatParameter, DeepSpeed ZeRO-3 parameter fetch): several parameters are flattened in
order into one buffer, zero-padded to a multiple of the world size and sharded evenly; unsharding gathers
every rank's shard and views the full buffer as the original parameters.

Contract: ``solution(shard, shapes)`` is called on every rank. ``shapes`` (a list of tuples, identical on
every rank) gives the parameters' shapes in flattening order, N elements in all; ``shard`` (shape (S,),
S = ceil(N / W)) is elements [r S, (r + 1) S) of the flat parameter on rank r, the flat positions past N
holding zeros. Every rank returns a list of new tensors, one per entry of ``shapes``, in order, in
``shard``'s dtype: parameter i is the i-th run of elements of the concatenated shards of ranks 0 .. W-1,
viewed in shapes[i]. Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single, expected_param_numel, param_shapes

META = dict(
    id="fsdp_param_allgather",
    name="FSDP flat-parameter all-gather (unshard)",
    category="training",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    # n_params: parameters in the flat parameter; dim: their sides are drawn in [dim/2, dim] (3 in 4 are matrices).
    sizes={
        "small": dict(n_params=5, dim=24),
        "default": dict(n_params=24, dim=2048),
        "large": dict(n_params=64, dim=4096),
    },
)


def make_inputs(ctx: InputContext):
    shapes = param_shapes(ctx.size, ctx.shared_generator())
    n = sum(math.prod(s) for s in shapes)
    shard = -(-n // ctx.world_size)
    real = max(0, min(shard, n - ctx.rank * shard))  # elements of this shard inside the flat parameter
    padding = torch.zeros(shard - real, device=ctx.device, dtype=ctx.dtype)
    return torch.cat([ctx.randn(real), padding]), shapes


def solution(shard: torch.Tensor, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    full = shard.new_empty(dist.get_world_size() * shard.numel())
    all_gather_single(full, shard)
    numels = [math.prod(s) for s in shapes]
    return [t.view(s) for t, s in zip(full[:sum(numels)].split(numels), shapes)]


def speed_of_light(size, world_size, dtype) -> Traffic:
    shard = expected_param_numel(size) / world_size * dtype.itemsize
    # Expected over the shapes: receive the W-1 other shards; read the own shard, write the full parameter.
    return Traffic(
        interconnect_bytes=(world_size - 1) * shard,
        flops=0.0,
        hbm_bytes=(world_size + 1) * shard,
    )


def oracle(inputs, size, world_size):
    shapes = inputs[0][1]
    flat = torch.cat([inputs[r][0] for r in range(world_size)])
    params, offset = [], 0
    for s in shapes:
        params.append(flat[offset:offset + math.prod(s)].reshape(s))
        offset += math.prod(s)
    return [[p.clone() for p in params] for _ in range(world_size)]
