"""FSDP gradient reduction: flatten the unsharded gradients, pad, reduce-scatter (mean) into this rank's shard.

Models: the post-backward gradient reduction of a fully sharded data-parallel unit (PyTorch FSDP's
FlatParameter, DeepSpeed ZeRO-2/3, Megatron-LM's distributed optimizer): each rank holds full gradients
of the unit's parameters, which are flattened in order, zero-padded to a multiple of the world size and
reduce-scattered so each rank keeps the averaged gradient of the shard it owns.

Contract: ``solution(*grads)`` is called on every rank with the same number of gradient tensors, of the
same shapes on every rank (1-D or 2-D, values differ per rank), N elements in all. Let S = ceil(N / W) and
flat_r = rank r's gradients flattened in input order followed by W S - N zeros. Rank r returns a new
tensor of shape (S,) in the gradients' dtype: elements [r S, (r + 1) S) of the mean over ranks of flat.
Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import expected_param_numel, param_shapes, reduce_scatter_single

META = dict(
    id="fsdp_grad_reduce_scatter",
    name="FSDP flat-gradient reduce-scatter (mean)",
    category="training",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="W-term sums reassociate, then divide by W: a few ulp"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2, reason="8-bit mantissa; the bf16 sum rounds at every step of the ring"),
    },
    # n_params: gradients of the unit; dim: their sides are drawn in [dim/2, dim] (3 in 4 are matrices).
    sizes={
        "small": dict(n_params=5, dim=24),
        "default": dict(n_params=24, dim=2048),
        "large": dict(n_params=64, dim=4096),
    },
)


def make_inputs(ctx: InputContext):
    return tuple(ctx.randn(*s) for s in param_shapes(ctx.size, ctx.shared_generator()))


def solution(*grads: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    n = sum(g.numel() for g in grads)
    shard = -(-n // world)
    flat = torch.cat([g.reshape(-1) for g in grads] + [grads[0].new_zeros(world * shard - n)])
    out = flat.new_empty(shard)
    if dist.get_backend() == "gloo":  # gloo lacks ReduceOp.AVG in some releases: SUM, then divide
        reduce_scatter_single(out, flat, op=dist.ReduceOp.SUM)
        out.div_(world)
    else:
        reduce_scatter_single(out, flat, op=dist.ReduceOp.AVG)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    n, b = expected_param_numel(size), dtype.itemsize
    # Expected over the shapes: a ring reduce-scatter sends (and receives) (W-1)/W of the flat bytes and adds
    # W-1 partial shards; read every gradient once, write the own shard.
    return Traffic(
        interconnect_bytes=(world_size - 1) / world_size * n * b,
        flops=(world_size - 1) / world_size * n,
        hbm_bytes=n * b + n / world_size * b,
    )


def oracle(inputs, size, world_size):
    flats = [torch.cat([g.double().reshape(-1) for g in inputs[r]]) for r in range(world_size)]
    n = flats[0].numel()
    shard = -(-n // world_size)
    mean = torch.nn.functional.pad(sum(flats) / world_size, (0, world_size * shard - n))
    return [mean[r * shard:(r + 1) * shard].to(inputs[0][0].dtype) for r in range(world_size)]
