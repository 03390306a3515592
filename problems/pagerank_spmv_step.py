"""One PageRank power-iteration step with a row-partitioned sparse matrix: all-gather x, then local SpMV.

Models: distributed sparse matrix-vector products in graph analytics and iterative solvers (PageRank
and other power iterations in Gunrock/Lux/GraphX-style engines, 1D row-partitioned SpMV as in
PETSc MPIAIJ and Trilinos/Tpetra, the propagation step of GNNs over a normalised adjacency): each rank
owns a block of rows of the matrix and the matching slice of the vector, and needs the vector entries
its rows reference from the other ranks.

Contract: ``solution(crow_indices, col_indices, values, x)`` is called on every rank. The graph has
``N = W * nodes_per_rank`` nodes; rank r owns nodes ``r * nodes_per_rank`` to ``(r + 1) * nodes_per_rank - 1``.
``crow_indices`` (int64, ``(nodes_per_rank + 1,)``, starting at 0), ``col_indices`` (int64, global source
node ids, ascending within a row, repeats allowed) and ``values`` (float32) are the CSR rows of the
transition matrix ``A`` for the owned nodes: ``A[i, j] = 1 / outdegree(j)`` for each edge j -> i (a
repeated edge counts twice). ``x`` ``(nodes_per_rank,)`` is this rank's slice of the rank vector. Every
rank returns a new ``(nodes_per_rank,)`` float32 tensor: its slice of ``DAMPING * A @ x_global +
(1 - DAMPING) / N`` with DAMPING = 0.85 and ``x_global`` all slices in rank order (dangling nodes are
not redistributed). Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

DAMPING = 0.85

META = dict(
    id="pagerank_spmv_step",
    name="PageRank step: all-gather + row-partitioned SpMV",
    category="graph",
    world_sizes=dict(min=2),
    dtypes=["float32"],  # rank vectors of millions of ~1/N entries: bf16 cannot tell them apart
    tolerances={"float32": dict(atol=0, rtol=1e-5, reason="sums of ~2*degree positive terms reassociate")},
    # nodes_per_rank: rows (nodes) each rank owns; degree: mean in-edges per node (uniform in [0, 2*degree]).
    sizes={
        "small": dict(nodes_per_rank=12, degree=3),
        "default": dict(nodes_per_rank=1 << 18, degree=16),
        "large": dict(nodes_per_rank=1 << 20, degree=16),
    },
)


def make_inputs(ctx: InputContext):
    n, deg = ctx.size["nodes_per_rank"], ctx.size["degree"]
    total = ctx.world_size * n
    # The whole graph, identical on every rank (out-degrees need all of it): drawn on the device from a
    # seed the shared generator gives.
    g = torch.Generator(device=ctx.device).manual_seed(int(torch.randint(0, 2 ** 62, (1,),
                                                                         generator=ctx.shared_generator())))
    in_degree = torch.randint(0, 2 * deg + 1, (total,), generator=g, device=ctx.device)
    sources = torch.randint(0, total, (int(in_degree.sum()),), generator=g, device=ctx.device)
    out_degree = torch.bincount(sources, minlength=total)
    crow = torch.cat([in_degree.new_zeros(1), in_degree.cumsum(0)])
    start, end = int(crow[ctx.rank * n]), int(crow[(ctx.rank + 1) * n])
    rows = torch.repeat_interleave(torch.arange(n, device=ctx.device), in_degree[ctx.rank * n:(ctx.rank + 1) * n])
    cols = torch.sort(rows * total + sources[start:end]).values % total  # ascending within each row
    values = (1.0 / out_degree[cols].double()).to(ctx.dtype)
    x = torch.rand(n, generator=ctx.generator, device=ctx.device, dtype=ctx.dtype).add_(0.5).div_(total)
    return crow[ctx.rank * n:(ctx.rank + 1) * n + 1] - start, cols, values, x


def solution(crow_indices: torch.Tensor, col_indices: torch.Tensor, values: torch.Tensor,
             x: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    n = x.numel()
    x_global = x.new_empty(world * n)
    all_gather_single(x_global, x)
    a = torch.sparse_csr_tensor(crow_indices, col_indices, values, size=(n, world * n), check_invariants=False)
    return torch.mv(a, x_global).mul_(DAMPING).add_((1 - DAMPING) / (world * n))


def speed_of_light(size, world_size, dtype) -> Traffic:
    n, deg = size["nodes_per_rank"], size["degree"]
    nnz = n * deg
    # A rank needs the entries of x its columns reference: each remote node is referenced with
    # probability 1 - exp(-degree / W). 2 flops per nonzero. HBM: each nonzero's column id, value and x
    # entry, the row pointers and the output.
    needed = (world_size - 1) * n * (1 - math.exp(-deg / world_size))
    return Traffic(
        interconnect_bytes=needed * dtype.itemsize,
        flops=2.0 * nnz,
        hbm_bytes=nnz * (8 + 2 * dtype.itemsize) + n * (8 + dtype.itemsize),
    )


def oracle(inputs, size, world_size):
    x_global = torch.cat([args[3] for args in inputs]).double()
    total = x_global.numel()
    out = []
    for crow, cols, values, x in inputs:
        rows = torch.repeat_interleave(torch.arange(x.numel()), crow.diff())
        y = torch.zeros(x.numel(), dtype=torch.float64).index_add_(0, rows, values.double() * x_global[cols])
        out.append((DAMPING * y + (1 - DAMPING) / total).to(x.dtype))
    return out
