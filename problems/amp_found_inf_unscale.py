"""Mixed-precision step check: agree across ranks whether any gradient overflowed, and unscale only if none did.

Models: the loss-scaling check of mixed-precision training (torch.amp.GradScaler and FSDP's
ShardedGradScaler, NVIDIA Apex amp, DeepSpeed / Megatron-LM dynamic loss scaling): each rank looks for
inf/NaN in its (sharded or model-parallel) gradients, the found-inf flag is all-reduced with MAX so every
rank skips or takes the optimizer step together, and the gradients are divided by the loss scale.

Contract: ``solution(scale, *grads)`` is called on every rank; ``scale`` (float32, shape (1,), a power of
two, identical on every rank) is the loss scale, and the gradients have the same shapes on every rank
(values differ per rank; some ranks' gradients may hold inf, -inf or NaN). found_inf is 1.0 if any
element of any rank's gradients is inf or NaN, else 0.0. Every rank returns (a list of new tensors, one
per gradient in input order with its shape and dtype: the gradient times 1/scale if found_inf is 0, else
the gradient unchanged; found_inf as a float32 tensor of shape (1,)). Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import expected_param_numel, param_shapes

META = dict(
    id="amp_found_inf_unscale",
    name="AMP found-inf all-reduce and conditional unscale",
    category="training",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="multiplying by a power of two is exact; the flag is exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="multiplying by a power of two is exact; the flag is exact"),
    },
    # n_params: gradients; dim: their sides are drawn in [dim/2, dim] (3 in 4 are matrices).
    sizes={
        "small": dict(n_params=5, dim=24),
        "default": dict(n_params=24, dim=2048),
        "large": dict(n_params=64, dim=4096),
    },
)


def make_inputs(ctx: InputContext):
    g = ctx.shared_generator()
    # Half the seeds overflow: then one rank for sure, and each other rank with probability 1/2, holds infs.
    overflow = bool(torch.randint(0, 2, (1,), generator=g))
    bad_ranks = torch.rand(ctx.world_size, generator=g) < 0.5
    bad_ranks[int(torch.randint(0, ctx.world_size, (1,), generator=g))] = True
    shapes = param_shapes(ctx.size, g)
    scale_value = 2.0 ** int(torch.randint(8, 25, (1,), generator=g))
    grads = [ctx.randn(*s) * scale_value for s in shapes]
    if overflow and bool(bad_ranks[ctx.rank]):
        for _ in range(int(torch.randint(1, 4, (1,), generator=ctx.generator, device=ctx.device))):
            t = grads[int(torch.randint(0, len(grads), (1,), generator=ctx.generator, device=ctx.device))].view(-1)
            # +-inf only: NaN counts the same, but inputs must compare equal to themselves (seed reproducibility).
            sign = torch.randint(0, 2, (1,), generator=ctx.generator, device=ctx.device)
            bad = float("inf") if bool(sign) else float("-inf")
            t[int(torch.randint(0, t.numel(), (1,), generator=ctx.generator, device=ctx.device))] = bad
    return torch.tensor([scale_value], device=ctx.device), *grads


def solution(scale: torch.Tensor, *grads: torch.Tensor):
    inv_scale = scale.double().reciprocal().float().reshape(())  # as torch.amp.GradScaler computes it
    # One fp32 L2 norm per gradient: inf or NaN exactly when the gradient holds one (finite inputs cannot
    # overflow a float32 sum of squares here). All-reduced with MAX; any non-finite entry means overflow.
    norms = torch.stack(torch._foreach_norm(list(grads), 2, dtype=torch.float32))
    found_inf = (~torch.isfinite(norms)).float().amax().reshape(1)
    dist.all_reduce(found_inf, op=dist.ReduceOp.MAX)
    factor = torch.where(found_inf[0] > 0, torch.ones_like(inv_scale), inv_scale)
    return torch._foreach_mul(list(grads), factor), found_inf


def speed_of_light(size, world_size, dtype) -> Traffic:
    n, b = expected_param_numel(size), dtype.itemsize
    # Expected over the shapes. Interconnect: the all-reduce of one fp32 flag (latency-bound). Memory: read every
    # gradient for the check, read it again and write the result. Flops: a square-add per element for the check,
    # a multiply per element.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * 4,
        flops=3 * n,
        hbm_bytes=3 * n * b,
    )


def oracle(inputs, size, world_size):
    found = any(not bool(torch.isfinite(g).all()) for args in inputs for g in args[1:])
    scale = float(inputs[0][0][0])
    out = []
    for args in inputs:
        grads = [g.clone() if found else (g.double() / scale).to(g.dtype) for g in args[1:]]
        out.append((grads, torch.tensor([1.0 if found else 0.0])))
    return out
