"""Distributed 2D FFT with slab decomposition: row FFTs, an all-to-all transpose, column FFTs.

Models: slab-decomposed parallel FFTs in spectral PDE solvers, turbulence (DNS) and molecular-dynamics
long-range electrostatics (PME), as in FFTW-MPI, P3DFFT, heFFTe and cuFFTMp: each rank transforms the
axis it holds whole, the data are transposed across ranks with one all-to-all, and the other axis is
transformed; the result is left transposed (FFTW_MPI_TRANSPOSED_OUT) to save a second all-to-all.

Contract: ``solution(x)`` is called on every rank. ``x`` is real, of shape ``(n_per_rank, n)`` with
``n = W * n_per_rank``: rank r holds rows ``r * n_per_rank`` to ``(r + 1) * n_per_rank - 1`` of a global
real field ``X`` of shape ``(n, n)``. Let ``S = torch.fft.fft2(X, norm="ortho")`` (complex, ``(n, n)``).
Every rank returns a new real tensor of shape ``(n_per_rank, n, 2)`` and x's dtype holding its slab of the
transposed spectrum: ``out[c, k, 0]`` and ``out[c, k, 1]`` are the real and imaginary parts of
``S[k, r * n_per_rank + c]`` (the layout of ``torch.view_as_real(S.T[r * n_per_rank:(r + 1) * n_per_rank])``).
Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="fft2d_transpose",
    name="2D FFT, slab decomposition (transposed output)",
    category="hpc",
    world_sizes=dict(min=2),
    # torch.fft has no bfloat16; fp32 and fp64 are what spectral codes run
    dtypes=["float32", "float64"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4,
                        reason="FFT algorithms differ in butterfly order: errors ~ eps * log n on an O(1) spectrum"),
        "float64": dict(atol=1e-10, rtol=1e-10,
                        reason="FFT algorithms differ in butterfly order: errors ~ eps * log n on an O(1) spectrum"),
    },
    # n_per_rank: rows each rank holds; the field is (W * n_per_rank) x (W * n_per_rank).
    sizes={
        "small": dict(n_per_rank=4),
        "default": dict(n_per_rank=1024),
        "large": dict(n_per_rank=4096),
    },
)


def make_inputs(ctx: InputContext):
    m = ctx.size["n_per_rank"]
    return (ctx.randn(m, ctx.world_size * m),)


def solution(x: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    m, n = x.shape
    rows = torch.fft.fft(x, dim=1, norm="ortho")  # (m, n) complex
    # block j (my m rows x columns j*m ... j*m+m-1) goes to rank j; complex is sent as (re, im) pairs
    send = torch.view_as_real(rows.view(m, world, m).transpose(0, 1).contiguous())  # (W, m rows, m cols, 2)
    recv = torch.empty_like(send)  # recv[i, a, c] = rank i's row a, my column c
    dist.all_to_all_single(recv, send)
    cols = torch.view_as_complex(recv).permute(2, 0, 1).reshape(m, n)  # cols[c, i*m + a]: column c, global row
    return torch.view_as_real(torch.fft.fft(cols, dim=1, norm="ortho"))


def speed_of_light(size, world_size, dtype) -> Traffic:
    m = size["n_per_rank"]
    n = world_size * m
    # The transpose: a rank's m spectrum columns depend on the other ranks' rows through their row
    # transforms in those columns, (W - 1) * m * m complex values (the Hermitian mirror columns live on
    # other ranks, so the real input does not halve this). FFTs: 5 n log2 n flops per complex length-n
    # transform, 2m transforms. HBM: read the real slab, write the complex one.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) * m * m * dtype.itemsize,
        flops=2 * m * 5.0 * n * math.log2(n),
        hbm_bytes=3 * m * n * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    field = torch.cat([args[0] for args in inputs]).double()
    spectrum = torch.fft.fft2(field, norm="ortho")
    m = size["n_per_rank"]
    dtype = inputs[0][0].dtype
    return [torch.view_as_real(spectrum.T[r * m:(r + 1) * m].contiguous()).to(dtype) for r in range(world_size)]
