"""Distributed sample sort: regular sampling picks splitters, one all-to-all moves every key to its rank.

Models: parallel sorting by regular sampling (PSRS) as used in distributed sort and shuffle stages of
data-analytics engines (Spark/Dask sort-by-key, GPU dataframe libraries such as dask-cudf), in
Terasort-style benchmarks, and in particle codes that re-sort particles by key (HOOMD, Cabana).

Contract: ``solution(keys)`` is called on every rank with ``keys`` of shape ``(n_per_rank,)`` (float32,
same length on every rank, may hold repeated values). The partition is defined exactly: each rank
sorts its keys ascending into ``s`` and takes the W samples ``s[(2i + 1) * n_per_rank // (2W)]`` for
``i = 0 .. W-1``; the W*W samples of all ranks, sorted ascending into ``t``, give the W-1 splitters
``t[W], t[2W], ..., t[(W-1)W]``. A key belongs to rank b = the number of splitters <= key (a key equal
to a splitter goes to the higher rank). Rank b returns a new 1-D float32 tensor: all keys of all ranks
that belong to it, sorted ascending (its length varies). Concatenated in rank order, the outputs are
the sorted union of all keys. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="sample_sort",
    name="Distributed sample sort (regular sampling)",
    category="hpc",
    world_sizes=dict(min=2),
    dtypes=["float32"],  # sort keys; a bf16 key sort is not a workload
    tolerances={"float32": dict(atol=0, rtol=0, reason="sorting moves keys without arithmetic: bit-exact")},
    # n_per_rank: keys each rank holds before the sort.
    sizes={
        "small": dict(n_per_rank=48),
        "default": dict(n_per_rank=1 << 24),
        "large": dict(n_per_rank=1 << 27),
    },
)


def make_inputs(ctx: InputContext):
    n = ctx.size["n_per_rank"]
    # each rank's keys have their own centre and spread, so the buckets come out uneven
    loc_scale = torch.randn(2, generator=ctx.generator, device=ctx.device)
    keys = ctx.randn(n) * loc_scale[1].abs().add(0.5) + loc_scale[0]
    # repeated values: ties inside a rank and, through the samples, keys equal to splitters
    # (distinct targets: a CUDA write through repeated indices keeps an arbitrary one of the values,
    # which would make the inputs differ from run to run)
    targets = ctx.randint(0, n, max(1, n // 8)).unique()
    keys[targets] = keys[ctx.randint(0, n, targets.numel())]
    return (keys,)


def solution(keys: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    n = keys.numel()
    local = torch.sort(keys).values
    positions = (2 * torch.arange(world, device=keys.device) + 1) * n // (2 * world)
    samples = keys.new_empty(world * world)
    all_gather_single(samples, local[positions].contiguous())
    splitters = torch.sort(samples).values[world::world].contiguous()  # W-1 values
    # bucket b starts at the first key >= splitter b-1
    bounds = torch.searchsorted(local, splitters)
    zero, end = bounds.new_zeros(1), bounds.new_full((1,), n)
    send_counts = torch.cat([zero, bounds, end]).diff()
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
    received = keys.new_empty(sum(recv_splits))
    dist.all_to_all_single(received, local, recv_splits, send_splits)
    return torch.sort(received).values


def speed_of_light(size, world_size, dtype) -> Traffic:
    n = size["n_per_rank"]
    # With balanced buckets a rank keeps 1/W of its keys and sends (and receives) the rest; the samples
    # and counts are negligible. A sort does comparisons, not flops. HBM: the local sort, the exchange
    # and the final sort each read and write the keys at least once: taken as 4 passes over n keys.
    return Traffic(
        steps=2,  # dependent exchanges: the samples (for the splitters), then the keys they route
        interconnect_bytes=(world_size - 1) / world_size * n * dtype.itemsize,
        flops=0.0,
        hbm_bytes=4 * n * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    n = size["n_per_rank"]
    idx = [(2 * i + 1) * n // (2 * world_size) for i in range(world_size)]
    samples = torch.cat([torch.sort(args[0]).values[idx] for args in inputs])
    ordered = torch.sort(samples).values
    splitters = ordered[[k * world_size for k in range(1, world_size)]]
    everything = torch.cat([args[0] for args in inputs])
    owner = torch.searchsorted(splitters, everything, right=True)  # number of splitters <= key
    return [torch.sort(everything[owner == b]).values for b in range(world_size)]
