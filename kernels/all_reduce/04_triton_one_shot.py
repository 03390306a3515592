# expect: correct
# backend: triton
# variant: one-shot all-reduce in Triton: every rank sums every peer's symmetric buffer through peer pointers loaded in the kernel; barriers from torch symmetric memory on the host stream
"""All-reduce (sum) as a Triton kernel over peer pointers.

Per call: copy x into this rank's symmetric buffer; ``handle.barrier`` (every copy is in);
one Triton kernel in which each program sums its block of elements over every rank's buffer,
reading rank r's buffer through its address (``buffer_ptrs[r]``, cast to a pointer in the
kernel); barrier (nobody refills its buffer while a peer still reads). Triton compiles the
kernel on the GPU at the first call; the warmup absorbs that before anything is timed.
"""

import torch
import torch.distributed as dist

from pkb_ray.cuda import symmetric_buffer

try:
    import triton
    import triton.language as tl

    jit = triton.jit
except ImportError:  # CPU-only installs have no Triton; the kernel only runs on GPU
    jit = lambda fn: fn  # noqa: E731


@jit
def _sum_peers(ptrs, out, n, WORLD: "tl.constexpr", BLOCK: "tl.constexpr"):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in tl.static_range(WORLD):  # ranks in order: every rank gets the same bits
        peer = tl.load(ptrs + r).to(tl.pointer_type(out.dtype.element_ty))
        acc += tl.load(peer + offs, mask=mask).to(tl.float32)
    tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)


BLOCK = 2048


def solution(x: torch.Tensor) -> torch.Tensor:
    if not x.is_cuda or x.dtype not in (torch.float32, torch.bfloat16) or x.numel() == 0:
        out = x.clone()  # CPU runs (gloo) and other dtypes: the reference's way
        dist.all_reduce(out)
        return out
    buf, handle, ptrs = symmetric_buffer(x.numel(), x.dtype, x.device)
    buf.copy_(x.reshape(-1))
    handle.barrier(channel=0)
    out = torch.empty_like(x)
    _sum_peers[(triton.cdiv(x.numel(), BLOCK),)](ptrs, out, x.numel(), WORLD=dist.get_world_size(), BLOCK=BLOCK)
    handle.barrier(channel=0)
    return out
