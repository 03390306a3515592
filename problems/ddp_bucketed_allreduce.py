"""DDP gradient averaging: all-reduce many gradients, packed into flat buckets, and divide by W.

Models: data-parallel gradient synchronisation in PyTorch DistributedDataParallel (and the data-parallel
gradient reduction of Megatron-LM and DeepSpeed), which copies consecutive gradients into flat buckets
of bounded size (bucket_cap_mb) and all-reduces each bucket as soon as it is full.

Contract: ``solution(bucket_numel, *grads)`` is called on every rank with the same number of gradient
tensors, of the same shapes on every rank (1-D or 2-D, values differ per rank). Every rank returns a
list of new tensors, one per gradient in input order, with its shape and dtype: element-wise the mean
over all ranks of that gradient. The reference packs consecutive gradients into flat buckets of at most
``bucket_numel`` elements (a larger gradient gets a bucket of its own) and all-reduces bucket by bucket;
bucketing is only a schedule, the expected result does not depend on it. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import expected_param_numel, param_shapes

META = dict(
    id="ddp_bucketed_allreduce",
    name="DDP bucketed gradient all-reduce (mean)",
    category="training",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="W-term sums reassociate, then divide by W: a few ulp"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2, reason="8-bit mantissa; the bf16 sum rounds at every step of the ring"),
    },
    # n_params: gradient tensors; dim: their sides are drawn in [dim/2, dim] (3 in 4 are matrices);
    # bucket_numel: bucket capacity in elements (default: DDP's 25 MiB of fp32).
    sizes={
        "small": dict(n_params=6, dim=24, bucket_numel=640),
        "default": dict(n_params=24, dim=2048, bucket_numel=6_553_600),
        "large": dict(n_params=64, dim=4096, bucket_numel=26_214_400),
    },
)


def make_inputs(ctx: InputContext):
    shapes = param_shapes(ctx.size, ctx.shared_generator())
    return (ctx.size["bucket_numel"], *[ctx.randn(*s) for s in shapes])


def solution(bucket_numel: int, *grads: torch.Tensor) -> list[torch.Tensor]:
    world = dist.get_world_size()
    gloo = dist.get_backend() == "gloo"  # gloo lacks ReduceOp.AVG in some releases: SUM, then divide
    buckets, current, filled = [], [], 0
    for g in grads:
        if current and filled + g.numel() > bucket_numel:
            buckets.append(current)
            current, filled = [], 0
        current.append(g)
        filled += g.numel()
    if current:
        buckets.append(current)
    pending = []
    for bucket in buckets:  # launch every bucket's all-reduce, then wait in order (DDP overlaps them likewise)
        flat = torch.cat([g.reshape(-1) for g in bucket])
        work = dist.all_reduce(flat, op=dist.ReduceOp.SUM if gloo else dist.ReduceOp.AVG, async_op=True)
        pending.append((work, flat, bucket))
    out = []
    for work, flat, bucket in pending:
        work.wait()
        if gloo:
            flat.div_(world)
        out += [v.view(g.shape) for v, g in zip(flat.split([g.numel() for g in bucket]), bucket)]
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    nbytes = expected_param_numel(size) * dtype.itemsize
    # Expected over the shapes: a ring all-reduce of every gradient element (2 (W-1)/W of the bytes each way);
    # about one add or divide per element; read every gradient once and write every output once.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * nbytes,
        flops=expected_param_numel(size),
        hbm_bytes=2 * nbytes,
    )


def oracle(inputs, size, world_size):
    n = len(inputs[0]) - 1
    dtype = inputs[0][1].dtype
    means = [(sum(inputs[r][1 + i].double() for r in range(world_size)) / world_size).to(dtype) for i in range(n)]
    return [[m.clone() for m in means] for _ in range(world_size)]
