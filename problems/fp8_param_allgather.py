"""FP8 parameter all-gather: gather float8_e4m3fn weight shards and their scales, dequantize the full weight.

Models: FP8 weight all-gather in FSDP2 float8 training (torchao Float8 with fp8 all-gather) and NVIDIA
Transformer Engine / Megatron-LM FP8 parameters: each data-parallel rank keeps its row shard of a weight
in float8 with one fp32 scale, the 1-byte payload is all-gathered instead of bf16/fp32 values, and the
full weight is dequantized to the compute dtype.

Contract: ``solution(shard, scale, dtype)`` is called on every rank. ``shard`` (torch.uint8, shape
(rows, cols), the same shape on every rank) holds the raw bytes of this rank's float8_e4m3fn values
(``shard.view(torch.float8_e4m3fn)``), ``scale`` (float32, shape (1,)) its dequantization scale, both
different per rank; ``dtype`` is the compute dtype (float32 or bfloat16, the same on every rank). Every
rank returns a new tensor of shape (W * rows, cols) in ``dtype``: rows [r rows, (r + 1) rows) are rank r's
values converted to fp32, multiplied by rank r's scale in fp32, then cast to ``dtype``. Inputs must not
be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

FP8_MAX = 448.0  # largest finite float8_e4m3fn

META = dict(
    id="fp8_param_allgather",
    name="FP8 (e4m3) weight all-gather with per-shard scales",
    category="training",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="a 4-bit fp8 significand times an fp32 scale rounds once: bit-exact"),
        "bfloat16": dict(atol=0, rtol=8e-3, reason="one bf16 ulp: the product may be rounded to bf16 directly"),
    },
    # rows: rows of one rank's shard (the weight has W * rows rows); cols: the weight's columns.
    sizes={
        "small": dict(rows=8, cols=48),
        "default": dict(rows=1024, cols=8192),
        "large": dict(rows=4096, cols=16384),
    },
)


def make_inputs(ctx: InputContext):
    rows, cols = ctx.size["rows"], ctx.size["cols"]
    # Per-rank magnitude, so that the scales differ; quantize with the scale that maps |x|max onto FP8_MAX.
    x = ctx.randn(rows, cols, dtype=torch.float32) * ctx.randn(1, dtype=torch.float32).exp()
    scale = (x.abs().amax() / FP8_MAX).reshape(1)
    shard = (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return shard, scale, ctx.dtype


def solution(shard: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    world = dist.get_world_size()
    rows, cols = shard.shape
    # The fp8 payload travels as uint8 (gloo refuses float8; NCCL moves bytes either way).
    full = shard.new_empty(world * rows, cols)
    scales = scale.new_empty(world)
    works = [all_gather_single(full, shard, async_op=True), all_gather_single(scales, scale, async_op=True)]
    for work in works:
        work.wait()
    values = full.view(torch.float8_e4m3fn).view(world, rows, cols).float()
    return (values * scales.view(world, 1, 1)).to(dtype).view(world * rows, cols)


def speed_of_light(size, world_size, dtype) -> Traffic:
    shard = size["rows"] * size["cols"]
    # Receive the W-1 other fp8 shards and scales; read the gathered fp8 weight and write it dequantized;
    # one multiply per element.
    return Traffic(
        interconnect_bytes=(world_size - 1) * (shard + 4),
        flops=world_size * shard,
        hbm_bytes=world_size * shard * (1 + dtype.itemsize),
    )


def oracle(inputs, size, world_size):
    dtype = inputs[0][2]
    # The fp8 x fp32 product is exact in float64; rounding it to fp32 gives the fp32 product.
    blocks = [(shard.view(torch.float8_e4m3fn).double() * scale.double()).float()
              for shard, scale, _ in inputs]
    weight = torch.cat(blocks).to(dtype)
    return [weight.clone() for _ in range(world_size)]
