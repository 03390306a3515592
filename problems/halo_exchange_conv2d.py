"""Halo exchange of one row with each neighbour, then a 3x3 convolution of a field split into row slabs.

Models: spatially parallel convolution layers and 9-point stencils on a domain-decomposed 2D grid:
high-resolution image, climate and weather models that split each sample's rows across GPUs
(spatial parallelism as in LBANN/DistConv, DeepCAM, domain-parallel FourCastNet-style layers), and
finite-difference codes that exchange ghost rows before every sweep.

Contract: ``solution(x, weight)`` is called on every rank. ``x`` has shape ``(channels, rows_per_rank,
cols)``: rank r holds rows ``r * rows_per_rank`` to ``(r + 1) * rows_per_rank - 1`` of a global field
``X`` of shape ``(channels, W * rows_per_rank, cols)``. ``weight`` has shape ``(channels, channels, 3, 3)``
and is the same on every rank. Every rank returns a new ``(channels, rows_per_rank, cols)`` tensor of
x's dtype: its own rows of ``conv2d(X, weight, padding=1)`` (cross-correlation, no bias, zeros outside
the global field, so rank 0's top and rank W-1's bottom halo are zero and there is no wrap-around).
Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="halo_exchange_conv2d",
    name="Halo exchange + 3x3 convolution (row slabs)",
    category="hpc",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=5e-3, rtol=5e-3,
                        reason="cuDNN runs fp32 convolutions in TF32 (10-bit mantissa) by default; outputs are O(1)"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2, reason="8-bit mantissa: the output is rounded once, sums reassociate"),
    },
    # channels: input = output channels; rows_per_rank: rows of the field each rank owns; cols: row length.
    sizes={
        "small": dict(channels=3, rows_per_rank=4, cols=8),
        "default": dict(channels=64, rows_per_rank=256, cols=2048),
        "large": dict(channels=128, rows_per_rank=512, cols=4096),
    },
)


def make_inputs(ctx: InputContext):
    c = ctx.size["channels"]
    x = ctx.randn(c, ctx.size["rows_per_rank"], ctx.size["cols"])
    # replicated layer weights, scaled so that outputs stay O(1)
    weight = torch.randn(c, c, 3, 3, generator=ctx.shared_generator()) / math.sqrt(9 * c)
    return x, weight.to(ctx.device, ctx.dtype)


def solution(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    c, rows, cols = x.shape
    padded = x.new_zeros(c, rows + 2, cols)  # [top halo, own rows, bottom halo]
    padded[:, 1:-1] = x
    ops, halos = [], []
    if rank > 0:
        top = x.new_empty(c, cols)
        ops += [dist.P2POp(dist.isend, x[:, 0].contiguous(), rank - 1), dist.P2POp(dist.irecv, top, rank - 1)]
        halos.append((0, top))
    if rank < world - 1:
        bottom = x.new_empty(c, cols)
        ops += [dist.P2POp(dist.isend, x[:, -1].contiguous(), rank + 1), dist.P2POp(dist.irecv, bottom, rank + 1)]
        halos.append((rows + 1, bottom))
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    for row, halo in halos:
        padded[:, row] = halo
    # rows already carry their halos; columns get the global zero padding
    return F.conv2d(padded.unsqueeze(0), weight, padding=(0, 1)).squeeze(0)


def speed_of_light(size, world_size, dtype) -> Traffic:
    c, rows, cols = size["channels"], size["rows_per_rank"], size["cols"]
    row = c * cols * dtype.itemsize
    # An interior rank receives one row from each of its two neighbours (and sends as many); it reads its
    # slab, the halos and the weights once and writes its output slab; 2 flops per multiply-add.
    return Traffic(
        interconnect_bytes=min(2, world_size - 1) * row,
        flops=2.0 * c * c * 9 * rows * cols,
        hbm_bytes=(2 * rows + 2) * row + 9 * c * c * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    field = torch.cat([args[0] for args in inputs], dim=1).double()
    weight = inputs[0][1].double()
    out = F.conv2d(field.unsqueeze(0), weight, padding=1).squeeze(0).to(inputs[0][0].dtype)
    return [chunk.clone() for chunk in out.chunk(world_size, dim=1)]
