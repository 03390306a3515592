"""GNN neighbour aggregation on a partitioned graph: fetch remote source features by all-to-all, then mean.

Models: full-graph and mini-batch GNN training on graphs partitioned across GPUs (DistDGL, PyG with
distributed feature stores, GraphLearn, P3/SALIENT-style systems): before a message-passing layer each
rank requests the features of the remote source nodes of its edges from their owners, receives them, and
aggregates the messages per destination node (GraphSAGE mean aggregator).

Contract: ``solution(feats, edge_dst, edge_src)`` is called on every rank. Nodes are partitioned by id
range: rank r owns global nodes ``r * nodes_per_rank`` to ``(r + 1) * nodes_per_rank - 1``, and ``feats``
``(nodes_per_rank, dim)`` holds their features in that order. ``edge_dst`` and ``edge_src`` (int64, same
length) list this rank's edges: ``edge_dst`` a local node index in ``[0, nodes_per_rank)``, ``edge_src``
a global node id in ``[0, W * nodes_per_rank)`` owned by any rank (repeats allowed). Every rank returns
a new ``(nodes_per_rank, dim)`` tensor of feats' dtype: row v is the mean of the features of the sources
of all edges with ``edge_dst == v`` (a repeated edge counts each time), or zeros if v has no edge.
Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="gnn_feature_alltoall",
    name="GNN remote feature fetch (all-to-all) + mean aggregation",
    category="graph",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="per-node sums of ~degree terms reassociate"),
        "bfloat16": dict(atol=1e-2, rtol=1e-2, reason="8-bit mantissa: the mean is rounded once (fp32 sums)"),
    },
    # nodes_per_rank: nodes each rank owns; dim: feature width; degree: edges per owned node on average.
    sizes={
        "small": dict(nodes_per_rank=16, dim=8, degree=3),
        "default": dict(nodes_per_rank=32768, dim=256, degree=16),
        "large": dict(nodes_per_rank=131072, dim=512, degree=16),
    },
)


def make_inputs(ctx: InputContext):
    n, dim, edges = ctx.size["nodes_per_rank"], ctx.size["dim"], ctx.size["nodes_per_rank"] * ctx.size["degree"]
    feats = ctx.randn(n, dim)
    # the last n/8 nodes of a random order get no edges: the zero-degree case is always there
    order = torch.randperm(n, generator=ctx.generator, device=ctx.device)
    edge_dst = order[ctx.randint(0, n - max(1, n // 8), edges)]
    edge_src = ctx.randint(0, ctx.world_size * n, edges)
    return feats, edge_dst, edge_src


def solution(feats: torch.Tensor, edge_dst: torch.Tensor, edge_src: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    n, dim = feats.shape
    needed, slot = torch.unique(edge_src, return_inverse=True)  # sorted, hence grouped by owner
    send_counts = torch.bincount(needed // n, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    ask, serve = send_counts.tolist(), recv_counts.tolist()
    requested = needed.new_empty(sum(serve))
    dist.all_to_all_single(requested, needed, serve, ask)
    served = feats[requested - rank * n]
    fetched = feats.new_empty(needed.numel(), dim)
    dist.all_to_all_single(fetched, served, ask, serve)
    # fp32 sums, index_put_ with accumulate (deterministic, unlike index_add_ on CUDA)
    sums = torch.zeros(n, dim, dtype=torch.float32, device=feats.device)
    sums.index_put_((edge_dst,), fetched[slot].float(), accumulate=True)
    degree = torch.bincount(edge_dst, minlength=n).clamp_(min=1)
    return (sums / degree.unsqueeze(1)).to(feats.dtype)


def speed_of_light(size, world_size, dtype) -> Traffic:
    n, dim, deg = size["nodes_per_rank"], size["dim"], size["degree"]
    edges = n * deg
    # Expected distinct remote sources of a rank's edges (uniform over W * n nodes): each is fetched once,
    # as an 8-byte id sent to its owner and a feature row back; by symmetry a rank serves as many rows as
    # it fetches, so each direction carries rows * (row + 8) bytes. HBM: gather a row per edge, read the
    # served rows, write the output. flops: one add per edge and feature, one divide per output.
    rows = (world_size - 1) * n * (1 - math.exp(-deg / world_size))
    row = dim * dtype.itemsize
    return Traffic(
        steps=2,  # dependent exchanges: the requested node ids, then their features
        interconnect_bytes=rows * (row + 8),
        flops=float(edges * dim + n * dim),
        hbm_bytes=(edges + 2 * rows + n) * row,
    )


def oracle(inputs, size, world_size):
    every = torch.cat([args[0] for args in inputs]).double()
    out = []
    for feats, edge_dst, edge_src in inputs:
        n = feats.shape[0]
        sums = torch.zeros(n, feats.shape[1], dtype=torch.float64).index_add_(0, edge_dst, every[edge_src])
        count = torch.bincount(edge_dst, minlength=n).clamp(min=1).unsqueeze(1)
        out.append((sums / count).to(feats.dtype))
    return out
