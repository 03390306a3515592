"""Exact k-nearest-neighbour search over a database sharded across ranks: local top-k, gather, merge.

Models: brute-force (flat) vector search over an index sharded across GPUs (FAISS IndexShards /
GpuIndexFlatL2 on several GPUs, sharded retrieval in RAG and recommendation serving, kNN-LM): the same
query batch goes to every shard, each shard returns its k best candidates, and the candidates are
merged into the global top-k.

Contract: ``solution(db, queries, k)`` is called on every rank. ``db`` ``(n_per_rank, dim)`` is this
rank's shard: global database rows ``rank * n_per_rank`` to ``(rank + 1) * n_per_rank - 1``.
``queries`` ``(q, dim)`` is the same on every rank; ``k <= n_per_rank`` is an int. Both hold integer
values (quantised embeddings) with ``4 * dim * max|value|^2 < 2^24``, so every squared distance, and every
partial sum of ``|q|^2 - 2 q.x + |x|^2``, is exact in float32. Every rank returns the same pair of new
tensors: ``distances`` ``(q, k)`` float32, the k smallest squared L2 distances from each query to all
database rows in ascending order, and ``indices`` ``(q, k)`` int64, the global row of each; equal
distances are ordered by lower global index. Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="distributed_knn",
    name="Sharded exact kNN (L2): local top-k + global merge",
    category="retrieval",
    world_sizes=dict(min=2),
    # integer-valued coordinates keep every distance exact in fp32, which bf16 cannot hold
    dtypes=["float32"],
    tolerances={"float32": dict(atol=0, rtol=0, reason="integer-valued data: distances are exact, ties ordered")},
    # n_per_rank: database rows per shard; dim: vector width; q: queries; k: neighbours returned.
    sizes={
        "small": dict(n_per_rank=40, dim=8, q=6, k=5),
        "default": dict(n_per_rank=1 << 19, dim=128, q=512, k=32),
        "large": dict(n_per_rank=1 << 20, dim=256, q=1024, k=100),
    },
)


def _bound(dim: int) -> int:
    """Largest |value| with 4 * dim * value^2 < 2^24: all distance arithmetic stays exact in fp32."""
    return int(2 ** 11 / math.sqrt(dim)) - 1


def make_inputs(ctx: InputContext):
    n, dim, q = ctx.size["n_per_rank"], ctx.size["dim"], ctx.size["q"]
    bound = _bound(dim)
    g = ctx.shared_generator()
    # a pool of vectors planted on every shard and perturbed into the queries: exact ties across ranks
    pool = torch.randint(-bound, bound + 1, (max(1, q // 2), dim), generator=g)
    noise = torch.randint(-2, 3, (q, dim), generator=g)
    queries = (pool[torch.arange(q) % pool.shape[0]] + noise).clamp_(-bound, bound)
    db = ctx.randint(-bound, bound + 1, n, dim)
    # distinct rows: a CUDA write through repeated indices keeps an arbitrary one of the values
    rows = ctx.randint(0, n, max(1, n // 8)).unique()
    db[rows] = pool.to(ctx.device)[ctx.randint(0, pool.shape[0], rows.numel())]
    return db.to(ctx.dtype), queries.to(ctx.device, ctx.dtype), ctx.size["k"]


def solution(db: torch.Tensor, queries: torch.Tensor, k: int):
    rank, world = dist.get_rank(), dist.get_world_size()
    n = db.shape[0]
    total = world * n
    dist2 = queries.square().sum(1, keepdim=True) - 2 * (queries @ db.T) + db.square().sum(1)
    # (distance, global index) packed into one int64 key: unique, so top-k order is fully defined
    key = dist2.long() * total + torch.arange(rank * n, (rank + 1) * n, device=db.device)
    best = key.topk(k, dim=1, largest=False).values
    gathered = best.new_empty(world * best.shape[0], k)
    all_gather_single(gathered, best)
    merged = gathered.view(world, -1, k).permute(1, 0, 2).reshape(-1, world * k)
    top = merged.topk(k, dim=1, largest=False).values
    return (top // total).to(db.dtype), top % total


def speed_of_light(size, world_size, dtype) -> Traffic:
    n, dim, q, k = size["n_per_rank"], size["dim"], size["q"], size["k"]
    # Every rank gets the other shards' k candidates per query (a distance and an 8-byte index each);
    # one GEMM-shaped distance computation over its shard; it reads its shard and the queries once.
    return Traffic(
        interconnect_bytes=(world_size - 1) * q * k * (dtype.itemsize + 8),
        flops=2.0 * q * n * dim,
        hbm_bytes=(n + q) * dim * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    every = torch.cat([args[0] for args in inputs]).double()
    queries, k = inputs[0][1].double(), inputs[0][2]
    dist2 = (queries[:, None, :] - every[None, :, :]).square().sum(-1)
    ordered = torch.sort(dist2, dim=1, stable=True)  # stable: equal distances keep index order
    distances = ordered.values[:, :k].to(inputs[0][0].dtype)
    indices = ordered.indices[:, :k]
    return [(distances.clone(), indices.clone()) for _ in range(world_size)]
