"""ZeRO-1 optimizer step: average gradients, AdamW on this rank's shard of the flat parameters, all-gather them.

Models: ZeRO stage 1 optimizer-state sharding (DeepSpeed ZeRO-1, Megatron-LM's distributed optimizer,
PyTorch ZeroRedundancyOptimizer): parameters and gradients are replicated, each data-parallel rank
keeps the Adam state of one contiguous shard of the flattened parameters, updates only that shard,
and the updated shards are all-gathered so every rank again holds the full parameters.

Contract: ``solution(params, grads, exp_avg, exp_avg_sq, step)`` is called on every rank. ``params`` is a
list of 1-D or 2-D tensors, identical on every rank; ``grads`` has the same shapes, values differ per
rank. Flatten the parameters in list order into N elements and pad with zeros to W * S, where
S = ``exp_avg.numel()`` = ceil(N / W); rank r owns elements [r S, (r + 1) S). ``exp_avg`` and
``exp_avg_sq`` (shape (S,), per rank) are the AdamW moments of that shard; ``step`` (an int >= 1) is the
step number after this update. With g = the mean over ranks of the (likewise flattened, zero-padded)
gradients, every element of the shard is updated, in fp32 math, as AdamW (lr=1e-3, betas=(0.9, 0.999),
eps=1e-8, weight_decay=0.1): m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
p = p (1 - lr wd) - lr / (1 - b1^step) * m / (sqrt(v / (1 - b2^step)) + eps). Every rank returns
(list of the updated full parameters, new tensors in the shapes of ``params``; its new ``exp_avg``; its new
``exp_avg_sq``), all in the input dtype. Inputs must not be modified.
"""

import torch
import torch.distributed as dist
from torch.optim.adamw import adamw

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single, expected_param_numel, param_shapes

LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.999, 1e-8, 0.1

META = dict(
    id="zero1_adam_step",
    name="ZeRO-1 AdamW step (all-reduce, sharded update, all-gather)",
    category="training",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=2e-6, rtol=2e-6, reason="the gradient mean reassociates; AdamW in fp32: a few ulp"),
        "bfloat16": dict(atol=5e-3, rtol=1e-2, reason="8-bit mantissa: the bf16 gradient mean rounds per step"),
    },
    # n_params: parameter tensors; dim: their sides are drawn in [dim/2, dim] (3 in 4 are matrices).
    sizes={
        "small": dict(n_params=5, dim=24),
        "default": dict(n_params=24, dim=2048),
        "large": dict(n_params=64, dim=4096),
    },
)


def make_inputs(ctx: InputContext):
    g = ctx.shared_generator()
    shapes = param_shapes(ctx.size, g)
    step = int(torch.randint(1, 51, (1,), generator=g))  # early steps: bias corrections matter
    params = [torch.randn(s, generator=g).to(ctx.device, ctx.dtype) for s in shapes]
    grads = [ctx.randn(*s) for s in shapes]
    shard = -(-sum(p.numel() for p in params) // ctx.world_size)
    exp_avg = 0.1 * ctx.randn(shard)
    exp_avg_sq = (0.01 * (0.5 + torch.rand(shard, generator=ctx.generator, device=ctx.device))).to(ctx.dtype)
    return params, grads, exp_avg, exp_avg_sq, step


def _flat_slice(tensors: list[torch.Tensor], start: int, stop: int) -> torch.Tensor:
    """A new tensor: elements [start, stop) of the flattened tensors, concatenated and zero-padded at the end."""
    pieces, offset = [], 0
    for t in tensors:
        a, b = max(start, offset), min(stop, offset + t.numel())
        if a < b:
            pieces.append(t.reshape(-1)[a - offset:b - offset])
        offset += t.numel()
    pieces.append(tensors[0].new_zeros(stop - start - sum(p.numel() for p in pieces)))
    return torch.cat(pieces)


def solution(params, grads, exp_avg, exp_avg_sq, step):
    world, rank = dist.get_world_size(), dist.get_rank()
    shard = exp_avg.numel()
    n = sum(p.numel() for p in params)
    flat_grad = torch.cat([g.reshape(-1) for g in grads] + [grads[0].new_zeros(world * shard - n)])
    if dist.get_backend() == "gloo":  # gloo lacks ReduceOp.AVG in some releases: SUM, then divide
        dist.all_reduce(flat_grad)
        flat_grad.div_(world)
    else:
        dist.all_reduce(flat_grad, op=dist.ReduceOp.AVG)
    lo = rank * shard
    p, m, v = _flat_slice(params, lo, lo + shard), exp_avg.clone(), exp_avg_sq.clone()
    steps = [torch.tensor(float(step - 1), device=p.device)]  # adamw increments it to `step`
    adamw([p], [flat_grad[lo:lo + shard]], [m], [v], [], steps, fused=True, amsgrad=False, beta1=BETA1,
          beta2=BETA2, lr=LR, weight_decay=WEIGHT_DECAY, eps=EPS, maximize=False)
    full = p.new_empty(world * shard)
    all_gather_single(full, p)
    return [f.view(t.shape) for f, t in zip(full[:n].split([t.numel() for t in params]), params)], m, v


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, n, b = world_size, expected_param_numel(size), dtype.itemsize
    # Expected over the shapes. Only the own shard of the mean gradient is needed: a reduce-scatter plus the
    # parameter all-gather, (W-1)/W of the flat bytes each. About 15 flops per shard element for AdamW, W-1 adds
    # per shard element for the mean. Memory: read all gradients, write all parameters, read param/grad/m/v and
    # write m/v of the shard.
    return Traffic(
        steps=2,  # dependent exchanges: the gradients to their owners, then the updated parameters back
        interconnect_bytes=2 * (w - 1) / w * n * b,
        flops=(15 + w - 1) * n / w,
        hbm_bytes=2 * n * b + 6 * n / w * b,
    )


def oracle(inputs, size, world_size):
    params = inputs[0][0]
    dtype = params[0].dtype
    shard = inputs[0][2].numel()
    n = sum(p.numel() for p in params)
    pad = torch.zeros(world_size * shard - n, dtype=torch.float64)
    flat_p = torch.cat([p.double().reshape(-1) for p in params] + [pad])
    flat_g = sum(torch.cat([g.double().reshape(-1) for g in inputs[r][1]] + [pad]) for r in range(world_size))
    flat_g = flat_g / world_size
    step = inputs[0][4]
    new_p, moments = [], []
    for r in range(world_size):
        sl = slice(r * shard, (r + 1) * shard)
        g, p = flat_g[sl], flat_p[sl]
        m = BETA1 * inputs[r][2].double() + (1 - BETA1) * g
        v = BETA2 * inputs[r][3].double() + (1 - BETA2) * g * g
        denom = (v / (1 - BETA2 ** step)).sqrt() + EPS
        new_p.append(p * (1 - LR * WEIGHT_DECAY) - LR / (1 - BETA1 ** step) * m / denom)
        moments.append((m.to(dtype), v.to(dtype)))
    full = torch.cat(new_p)[:n].to(dtype)
    out_params = [f.view(p.shape) for f, p in zip(full.split([p.numel() for p in params]), params)]
    return [([t.clone() for t in out_params], *moments[r]) for r in range(world_size)]
