"""LayerNorm backward under sequence parallelism: local input gradients, parameter gradients summed over ranks.

Models: the backward pass of the LayerNorms of sequence-parallel transformer layers (Megatron-LM,
NeMo): each TP rank holds the activations and output gradients of its own slice of tokens, so it
computes its slice of the input gradient alone, while the LayerNorm weight and bias are replicated
and their gradients must be summed over every rank's tokens (Megatron's all-reduce of
sequence-parallel parameter gradients), accumulated in float32 as Megatron's main_grad is.

Contract: ``solution(x, grad_out, weight)`` is called on every rank. ``x`` and ``grad_out`` are
this rank's ``(tokens_per_rank, hidden)`` input and output gradient of ``y = layer_norm(x, weight,
bias, eps=1e-5)`` over the hidden dimension; ``weight`` ``(hidden,)`` is identical on every rank;
all are in the problem dtype. The statistics (mean, 1/std) are recomputed from ``x``. Every rank
returns ``(grad_x, grad_weight, grad_bias)``: ``grad_x`` ``(tokens_per_rank, hidden)`` in the
dtype, the gradient for this rank's own tokens; ``grad_weight = sum over all ranks' tokens of
grad_out * x_hat`` and ``grad_bias = sum over all ranks' tokens of grad_out``, both ``(hidden,)``
float32 and identical on every rank. Inputs must not be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic

EPS = 1e-5

META = dict(
    id="layernorm_backward_sp",
    name="LayerNorm backward (sequence parallel, all-reduced parameter gradients)",
    category="norm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-3, rtol=1e-4,
                        reason="parameter gradients sum W * tokens_per_rank terms: reassociation error grows with it"),
        "bfloat16": dict(atol=3e-2, rtol=3e-2,
                         reason="grad_x rounds to an 8-bit mantissa after a cancelling difference; sums are fp32"),
    },
    # tokens_per_rank: tokens of each rank's sequence slice; hidden: model width.
    sizes={
        "small": dict(tokens_per_rank=8, hidden=64),
        "default": dict(tokens_per_rank=2048, hidden=8192),
        "large": dict(tokens_per_rank=8192, hidden=8192),
    },
)


def make_inputs(ctx: InputContext):
    t, h = ctx.size["tokens_per_rank"], ctx.size["hidden"]
    weight = (1 + 0.1 * torch.randn(h, generator=ctx.shared_generator())).to(ctx.device, ctx.dtype)
    # activations with a per-token offset and scale, as a residual stream has
    x = ctx.randn(t, h) * (1 + ctx.randn(t, 1).abs()) + ctx.randn(t, 1)
    return x, ctx.randn(t, h), weight


def solution(x: torch.Tensor, grad_out: torch.Tensor, weight: torch.Tensor):
    xf, gf = x.float(), grad_out.float()
    xc = xf - xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + EPS)
    x_hat = xc.mul_(rstd)
    params = torch.stack((gf.mul(x_hat).sum(0), gf.sum(0)))
    work = dist.all_reduce(params, op=dist.ReduceOp.SUM, async_op=True)  # overlaps the grad_x math
    wg = gf * weight.float()
    grad_x = (wg - wg.mean(-1, keepdim=True) - x_hat * (wg * x_hat).mean(-1, keepdim=True)).mul_(rstd)
    work.wait()
    return grad_x.to(x.dtype), params[0], params[1]


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, h = size["tokens_per_rank"], size["hidden"]
    # All-reduce of the two float32 (hidden,) parameter gradients: 2 (W-1)/W of 8 h bytes each way.
    # Memory: read x and grad_out, write grad_x. Flops: ~12 per element (statistics, x_hat, sums, grad_x).
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * 2 * h * 4,
        flops=12 * t * h,
        hbm_bytes=3 * t * h * dtype.itemsize + 2 * h * 4,
    )


def oracle(inputs, size, world_size):
    dtype = inputs[0][0].dtype
    h = size["hidden"]
    x = torch.cat([args[0] for args in inputs]).double().requires_grad_()
    g = torch.cat([args[1] for args in inputs]).double()
    weight = inputs[0][2].double().requires_grad_()
    bias = torch.zeros(h, dtype=torch.float64, requires_grad=True)
    F.layer_norm(x, (h,), weight, bias, EPS).backward(g)
    grad_w, grad_b = weight.grad.float(), bias.grad.float()
    return [(gx.to(dtype), grad_w.clone(), grad_b.clone()) for gx in x.grad.chunk(world_size)]
