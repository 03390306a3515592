"""Explicit 1D heat equation on a periodic domain split across ranks: one halo point per side per step.

Models: explicit time stepping of domain-decomposed PDE solvers (finite-difference diffusion,
stencil benchmarks, the halo exchanges of MPI codes such as those built on PETSc DMDA or
hand-written ghost-cell updates), where every step needs the neighbours' boundary values and the run
is bound by the latency of many small exchanges.

Contract: ``solution(u, steps)`` is called on every rank. ``u`` has shape ``(n_per_rank,)``: rank r
holds points ``r * n_per_rank`` to ``(r + 1) * n_per_rank - 1`` of a periodic global field ``U`` of
``W * n_per_rank`` points (the left neighbour of point 0 is the last point of rank W-1). ``steps`` is
an int. Every rank returns a new ``(n_per_rank,)`` tensor of u's dtype: its points of ``U`` after
``steps`` explicit Euler steps ``U[i] <- U[i] + ALPHA * (U[i-1] - 2 U[i] + U[i+1])`` (indices modulo the
global length, every point updated from the previous step's values, ALPHA = 0.25). Inputs must not
be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

ALPHA = 0.25  # diffusion number nu * dt / dx^2; explicit Euler is stable up to 0.5

META = dict(
    id="heat_equation_halo_1d",
    name="1D heat equation with halo exchange (periodic)",
    category="hpc",
    world_sizes=dict(min=2),
    dtypes=["float32", "float64"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5,
                        reason="a few ulp of rounding per step; diffusion damps, so errors do not grow"),
        "float64": dict(atol=1e-12, rtol=1e-12,
                        reason="a few ulp of rounding per step; diffusion damps, so errors do not grow"),
    },
    # n_per_rank: grid points each rank owns; steps: time steps (each needs one exchange).
    sizes={
        "small": dict(n_per_rank=16, steps=5),
        "default": dict(n_per_rank=1 << 20, steps=100),
        "large": dict(n_per_rank=1 << 24, steps=500),
    },
)


def make_inputs(ctx: InputContext):
    return ctx.randn(ctx.size["n_per_rank"]), ctx.size["steps"]


def solution(u: torch.Tensor, steps: int) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    left, right = (rank - 1) % world, (rank + 1) % world
    n = u.numel()
    cur = u.new_empty(n + 2)  # [left halo, own points, right halo]
    cur[1:-1] = u
    nxt = torch.empty_like(cur)
    for _ in range(steps):
        # At W = 2 both neighbours are the same rank: tags (gloo) and issue order (NCCL) keep the
        # two messages apart. Tag 0: my first point going left; tag 1: my last point going right.
        ops = [
            dist.P2POp(dist.isend, cur[1:2], left, tag=0),
            dist.P2POp(dist.isend, cur[n:n + 1], right, tag=1),
            dist.P2POp(dist.irecv, cur[n + 1:n + 2], right, tag=0),
            dist.P2POp(dist.irecv, cur[0:1], left, tag=1),
        ]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        inner = cur[1:-1]
        torch.add(inner, cur[:-2] - 2 * inner + cur[2:], alpha=ALPHA, out=nxt[1:-1])
        cur, nxt = nxt, cur
    return cur[1:-1].clone()


def speed_of_light(size, world_size, dtype) -> Traffic:
    n, steps = size["n_per_rank"], size["steps"]
    # Each step needs one more value from each side: 2 * steps values received in all (a halo k points
    # deep, exchanged every k steps, moves as many). 5 flops per point per step; the field itself need
    # only be read and written once (temporal blocking keeps it on chip across steps).
    return Traffic(
        steps=1,  # a halo as wide as the time steps, exchanged once, suffices (the reference exchanges every step)
        interconnect_bytes=2 * steps * dtype.itemsize,
        flops=5.0 * n * steps,
        hbm_bytes=2 * n * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    field = torch.cat([args[0] for args in inputs]).double()
    for _ in range(inputs[0][1]):
        field = field + ALPHA * (torch.roll(field, 1) - 2 * field + torch.roll(field, -1))
    out = field.to(inputs[0][0].dtype)
    return [chunk.clone() for chunk in out.chunk(world_size)]
