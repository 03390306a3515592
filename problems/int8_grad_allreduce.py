"""Quantized gradient all-reduce: blockwise int8 quantization, all-gather, dequantize and average.

Models: communication-compressed data-parallel gradient averaging (DeepSpeed ZeRO++ quantized gradients,
custom DDP communication hooks that quantize buckets): each rank quantizes its gradient to int8 with one
fp32 scale per block, exchanges the int8 payload and the scales, and dequantizes and averages everyone's
contribution in fp32.

Contract: ``solution(grad, block)`` is called on every rank; ``grad`` (shape (numel,), values differ per
rank) and the int ``block`` have the same size on every rank. Split each rank's gradient, converted to
fp32, into consecutive blocks of ``block`` elements (the last one may be shorter). For each block:
scale = max(|x|) / 127 in fp32; q = clamp(round(x / scale), -127, 127) with IEEE fp32 division and
round-half-to-even (torch.round), q = 0 where scale == 0. Every rank returns a new tensor of
``grad``'s shape and dtype: the mean over ranks r of q_r * scale_r, computed in fp32 and cast to the
dtype. The quantization must be reproduced exactly; only the fp32 sum may be ordered differently.
Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="int8_grad_allreduce",
    name="Blockwise int8 quantized gradient all-reduce (mean)",
    category="training",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="quantization is exact by contract; the fp32 W-term sum of "
                                                     "dequantized values may reassociate: a few ulp"),
        "bfloat16": dict(atol=1e-3, rtol=1e-2, reason="as fp32, then one rounding to bf16: at most one ulp apart"),
    },
    # numel: gradient elements per rank (not a multiple of block: the last block is short); block: elements per scale.
    sizes={
        "small": dict(numel=1000, block=64),
        "default": dict(numel=33_554_000, block=256),
        "large": dict(numel=134_217_000, block=2048),
    },
)


def make_inputs(ctx: InputContext):
    numel, block = ctx.size["numel"], ctx.size["block"]
    # Magnitudes that vary from block to block, so that every scale matters.
    magnitude = ctx.randn(-(-numel // block), dtype=torch.float32).exp().repeat_interleave(block)[:numel]
    return (ctx.randn(numel, dtype=torch.float32) * magnitude).to(ctx.dtype), block


def solution(grad: torch.Tensor, block: int) -> torch.Tensor:
    world, n = dist.get_world_size(), grad.numel()
    blocks = -(-n // block)
    x = F.pad(grad.float(), (0, blocks * block - n)).view(blocks, block)
    scale = x.abs().amax(dim=1, keepdim=True) / 127
    q = torch.where(scale > 0, x / scale, 0).round_().clamp_(-127, 127).to(torch.int8)
    all_q = q.new_empty(world * blocks * block)
    all_scale = scale.new_empty(world * blocks)
    works = [all_gather_single(all_q, q.view(-1), async_op=True),
             all_gather_single(all_scale, scale.view(-1), async_op=True)]
    for work in works:
        work.wait()
    total = (all_q.view(world, blocks, block).float() * all_scale.view(world, blocks, 1)).sum(dim=0)
    return total.div_(world).view(-1)[:n].to(grad.dtype)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, n, b = world_size, size["numel"], dtype.itemsize
    payload = math.ceil(n / size["block"]) * (size["block"] + 4)  # int8 values and fp32 scales of one rank
    # The cheaper of two exact schemes: receive every other rank's payload (all-gather), or receive the own
    # 1/W of every payload, reduce it, and all-gather the results in the output dtype (reduce-scatter style).
    # Memory: read the gradient, write the output, read the payloads received. Flops: quantize, W multiply-adds.
    return Traffic(
        interconnect_bytes=min((w - 1) * payload, (w - 1) / w * (payload + n * b)),
        flops=(3 + 2 * w) * n,
        hbm_bytes=2 * n * b + min(w * payload, payload + n * b),
    )


def oracle(inputs, size, world_size):
    block = inputs[0][1]
    dtype = inputs[0][0].dtype
    total = torch.zeros(inputs[0][0].numel(), dtype=torch.float64)
    for r in range(world_size):
        x = inputs[r][0].float()
        for start in range(0, x.numel(), block):
            seg = x[start:start + block]
            scale = seg.abs().max() / 127  # fp32, as the contract fixes it
            q = torch.zeros_like(seg) if scale == 0 else torch.clamp(torch.round(seg / scale), -127, 127)
            total[start:start + block] += q.double() * scale.double()
    mean = (total / world_size).to(dtype)
    return [mean.clone() for _ in range(world_size)]
