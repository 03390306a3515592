"""Global histogram of data spread across ranks: all-reduce the range, bin locally, all-reduce the counts.

Models: distributed summary statistics in data-analytics and monitoring pipelines (Spark/Dask
histograms, approximate quantiles and feature binning for gradient-boosted trees as in XGBoost's
distributed hist method, calibration histograms of activations in quantisation tools), where every
worker bins its partition over a range all workers agree on.

Contract: ``solution(x, bins)`` is called on every rank with ``x`` of shape ``(n_per_rank,)`` (float32)
and ``bins`` an int (a power of two). Let ``lo`` and ``hi`` be the minimum and maximum over all ranks'
values (``lo < hi``). Every rank returns the same pair of new float32 tensors: ``counts`` ``(bins,)``,
the number of values of all ranks in each of ``bins`` equal-width bins over ``[lo, hi]`` with the
semantics of ``torch.histc`` (bin ``floor((v - lo) * bins / (hi - lo))``, the value ``hi`` in the last
bin), and ``edges`` ``(bins + 1,)``, ``lo + i * (hi - lo) / bins``. The data are quantised: values are
multiples of 1/4 and ``hi - lo == bins``, so every bin index and edge is exact whatever the order of
the arithmetic. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

QUANTUM = 4  # values are multiples of 1 / QUANTUM; each bin is 1 wide, QUANTUM grid steps

META = dict(
    id="distributed_histogram",
    name="Distributed histogram (global range + summed counts)",
    category="hpc",
    world_sizes=dict(min=2),
    dtypes=["float32"],  # the counts must be exact integers; bf16 holds them only up to 256
    tolerances={"float32": dict(atol=0, rtol=0, reason="integer counts and grid-aligned edges: exact")},
    # n_per_rank: values per rank; bins: number of bins (a power of two).
    sizes={
        "small": dict(n_per_rank=256, bins=16),
        "default": dict(n_per_rank=1 << 24, bins=1024),
        "large": dict(n_per_rank=1 << 27, bins=4096),
    },
)


def make_inputs(ctx: InputContext):
    n, bins = ctx.size["n_per_rank"], ctx.size["bins"]
    steps = QUANTUM * bins  # grid steps from lo to hi
    g = ctx.shared_generator()
    offset = int(torch.randint(-4 * bins, 4 * bins, (1,), generator=g))
    lo_rank, hi_rank = torch.randint(0, ctx.world_size, (2,), generator=g).tolist()
    # a bell-shaped distribution whose centre differs per rank, clipped to the grid
    shift = float(torch.randn(1, generator=ctx.generator, device=ctx.device).clamp(-2, 2))
    centre = steps / 2 + shift * steps / 16
    k = (ctx.randn(n, dtype=torch.float32) * (steps / 6) + centre).round_().clamp_(0, steps)
    # the global extremes are planted, so that hi - lo == bins exactly
    if ctx.rank == lo_rank:
        k[ctx.randint(0, n, 1)] = 0
    if ctx.rank == hi_rank:
        k[ctx.randint(0, n, 1)] = steps
    return (k / QUANTUM + offset).to(ctx.dtype), bins


def solution(x: torch.Tensor, bins: int):
    lo, hi = torch.aminmax(x)
    extremes = torch.stack([-lo, hi])  # one MAX all-reduce for both ends
    dist.all_reduce(extremes, op=dist.ReduceOp.MAX)
    neg_lo, hi = extremes.tolist()
    lo = -neg_lo
    counts = torch.histc(x, bins=bins, min=lo, max=hi)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    edges = torch.linspace(lo, hi, bins + 1, device=x.device, dtype=x.dtype)
    return counts, edges


def speed_of_light(size, world_size, dtype) -> Traffic:
    n, bins = size["n_per_rank"], size["bins"]
    # Ring all-reduce of the counts (2 (W-1)/W of them each way) and of the two extremes; the values
    # are read twice (range first, then binning); a few flops per value for the bin index.
    return Traffic(
        steps=2,  # dependent exchanges: the global range, then the counts binned over it
        interconnect_bytes=2 * (world_size - 1) / world_size * (bins + 2) * 4,
        flops=4.0 * n,
        hbm_bytes=2 * n * dtype.itemsize + bins * 4,
    )


def oracle(inputs, size, world_size):
    every = torch.cat([args[0] for args in inputs]).double()
    bins = inputs[0][1]
    lo, hi = every.min(), every.max()
    index = torch.floor((every - lo) * bins / (hi - lo)).long().clamp(max=bins - 1)
    counts = torch.bincount(index, minlength=bins).to(torch.float32)
    edges = (lo + torch.arange(bins + 1, dtype=torch.float64) * (hi - lo) / bins).to(torch.float32)
    return [(counts.clone(), edges.clone()) for _ in range(world_size)]
