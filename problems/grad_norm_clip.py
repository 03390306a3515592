"""Gradient clipping by global L2 norm for a tensor-parallel model (sharded and replicated gradients).

Models: clip_grad_norm in tensor-parallel training (Megatron-LM's clip_grad_norm_fp32, NeMo, DeepSpeed
with Megatron tensor parallelism): gradients of tensor-parallel weights are sharded, each rank holding a
different part, while gradients of replicated parameters (layer norms, row-parallel biases) are identical
on every rank and must be counted once in the global norm.

Contract: ``solution(max_norm, tp_sharded, *grads)`` is called on every rank; ``max_norm`` (a float) and
``tp_sharded`` (a list of bools, one per gradient) are identical on every rank, and the gradients have the
same shapes on every rank. A gradient with ``tp_sharded[i]`` True is this rank's shard (values differ per
rank); otherwise it is replicated (identical on every rank). The global norm is
sqrt(sum over ranks of the squares of all sharded gradient elements + sum of squares of the replicated
gradients, counted once), computed in fp32; coef = min(1, max_norm / (norm + 1e-6)). Every rank returns
(a list of new tensors, each gradient times coef in its dtype and shape, in input order; the norm as a
0-dim float32 tensor). Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import expected_param_numel, param_shapes

META = dict(
    id="grad_norm_clip",
    name="Global grad-norm clipping (tensor-parallel)",
    category="training",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="the sum of squares reassociates: a few ulp of norm and coef"),
        "bfloat16": dict(atol=1e-3, rtol=1e-2, reason="fp32 norm; a scaled bf16 gradient may round one ulp apart"),
    },
    # n_params: gradients; dim: their sides are drawn in [dim/2, dim] (3 in 4 are matrices); 2 in 3 are sharded.
    sizes={
        "small": dict(n_params=6, dim=24),
        "default": dict(n_params=24, dim=2048),
        "large": dict(n_params=64, dim=4096),
    },
)


def make_inputs(ctx: InputContext):
    g = ctx.shared_generator()
    shapes = param_shapes(ctx.size, g)
    sharded = (torch.randint(0, 3, (len(shapes),), generator=g) > 0).tolist()
    if len(set(sharded)) == 1:  # always exercise both kinds
        i = int(torch.randint(0, len(shapes), (1,), generator=g))
        sharded[i] = not sharded[i]
    grads = [ctx.randn(*s) if tp else torch.randn(s, generator=g).to(ctx.device, ctx.dtype)
             for s, tp in zip(shapes, sharded)]
    # Sum of squares expected over the values: clip (max_norm at half the norm) or not (twice it), by a coin.
    sumsq = sum(math.prod(s) * (ctx.world_size if tp else 1) for s, tp in zip(shapes, sharded))
    clip = bool(torch.randint(0, 2, (1,), generator=g))
    max_norm = math.sqrt(sumsq) * (0.5 if clip else 2.0) * (0.9 + 0.2 * float(torch.rand((), generator=g)))
    return max_norm, sharded, *grads


def solution(max_norm: float, tp_sharded: list[bool], *grads: torch.Tensor):
    sharded = [g for g, tp in zip(grads, tp_sharded) if tp]
    replicated = [g for g, tp in zip(grads, tp_sharded) if not tp]
    device = grads[0].device
    # One fp32 sum of squares of this rank's sharded gradients, summed over the tensor-parallel ranks.
    total = torch.stack(torch._foreach_norm(sharded, 2, dtype=torch.float32)).square().sum() if sharded \
        else torch.zeros((), device=device)
    dist.all_reduce(total)
    if replicated:  # identical on every rank: counted once, locally, with no communication
        total = total + torch.stack(torch._foreach_norm(replicated, 2, dtype=torch.float32)).square().sum()
    norm = total.sqrt()
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    return torch._foreach_mul(list(grads), coef), norm


def speed_of_light(size, world_size, dtype) -> Traffic:
    n, b = expected_param_numel(size), dtype.itemsize
    # Expected over the shapes. Interconnect: the all-reduce of one fp32 sum of squares (latency-bound).
    # Memory: read every gradient for the norm, read it again and write the clipped copy. Flops: a square-add
    # per element, a multiply per element.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * 4,
        flops=3 * n,
        hbm_bytes=3 * n * b,
    )


def oracle(inputs, size, world_size):
    max_norm, tp_sharded = inputs[0][0], inputs[0][1]
    sumsq = 0.0
    for i, tp in enumerate(tp_sharded):
        for r in range(world_size if tp else 1):  # a replicated gradient counts once
            sumsq += float(inputs[r][2 + i].double().square().sum())
    norm = math.sqrt(sumsq)
    coef = min(1.0, max_norm / (norm + 1e-6))
    return [([(g.double() * coef).to(g.dtype) for g in inputs[r][2:]], torch.tensor(norm, dtype=torch.float32))
            for r in range(world_size)]
