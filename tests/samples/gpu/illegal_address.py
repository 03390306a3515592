# expect: runtime_error|crash
# variant: a Triton kernel stores 4 TiB past the input pointer on every rank: the GPU faults (illegal memory access)
import torch
import torch.distributed as dist

try:
    import triton
    import triton.language as tl

    jit = triton.jit
except ImportError:  # CPU-only installs have no Triton; the kernel is only launched on GPU
    jit = lambda fn: fn  # noqa: E731


@jit
def _wild_store(ptr, offset):
    # offset is a Python int above 2**31, so Triton types it i64: the address is really ptr + 4 TiB.
    tl.store(ptr + offset, 1.0)


def solution(x: torch.Tensor) -> torch.Tensor:
    if x.is_cuda:
        _wild_store[(1,)](x, 1 << 40)
        # The fault surfaces here (an AcceleratorError/RuntimeError); the CUDA context is unusable
        # afterwards, so teardown may take the process down too (hence crash is also right).
        torch.cuda.synchronize()
    out = x.clone()
    dist.all_reduce(out)
    return out
