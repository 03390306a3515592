"""Reduce (sum) of one tensor from every rank onto a root rank.

Models: summing per-rank losses, metrics or gradient norms onto the rank that logs or checkpoints
them (DDP / FSDP training loops), and pipeline-stage partial sums gathered on one rank before it
acts alone. The root is drawn per seed.

Contract: ``solution(x, root)`` is called on every rank with that rank's ``x`` (same shape and
dtype on every rank) and the same ``root``. Every rank returns a new tensor of ``x``'s shape: on
the root it holds the element-wise sum of every rank's ``x``; on every other rank it holds that
rank's own ``x``, unchanged. No rank's ``x`` may be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="reduce",
    name="Reduce (sum) to a root",
    category="collective",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="W-term sums reassociate: a few ulp of the result"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2, reason="8-bit mantissa; summation order differs by algorithm"),
    },
    sizes={"small": dict(numel=4096), "default": dict(numel=1 << 20), "large": dict(numel=1 << 27)},
    ladder=[dict(numel=1 << p) for p in range(10, 27, 2)],  # 4 KiB .. 256 MiB of float32 a rank
)


def make_inputs(ctx: InputContext):
    root = int(torch.randint(0, ctx.world_size, (1,), generator=ctx.shared_generator()).item())
    return ctx.randn(ctx.size["numel"]), root


def solution(x: torch.Tensor, root: int) -> torch.Tensor:
    out = x.clone()
    dist.reduce(out, dst=root, op=dist.ReduceOp.SUM)
    # NCCL leaves a non-root buffer untouched; gloo uses it as scratch (partial sums), so restore it.
    if dist.get_backend() == "gloo" and dist.get_rank() != root:
        out.copy_(x)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    nbytes = size["numel"] * dtype.itemsize
    # Pipelined: the root receives one buffer of partial sums; W-1 buffers of adds shared over W ranks; read x, write out.
    return Traffic(
        interconnect_bytes=nbytes,
        flops=(world_size - 1) / world_size * size["numel"],
        hbm_bytes=2 * nbytes,
    )


def oracle(inputs, size, world_size):
    root = inputs[0][1]
    total = sum(args[0].double() for args in inputs).to(inputs[0][0].dtype)
    return [total if r == root else inputs[r][0].clone() for r in range(world_size)]
