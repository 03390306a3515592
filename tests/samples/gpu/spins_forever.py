# expect: timeout
# variant: a Triton kernel on every rank spins on a device flag nobody sets, then the host synchronizes: never returns
import torch
import torch.distributed as dist

try:
    import triton
    import triton.language as tl

    jit = triton.jit
except ImportError:  # CPU-only installs have no Triton; the kernel is only launched on GPU
    jit = lambda fn: fn  # noqa: E731


@jit
def _spin(flag_ptr):
    # volatile: every iteration re-reads memory, so the compiler cannot hoist the load out of the
    # loop and turn it into a test of one value (which it could fold to "exit at once").
    seen = tl.load(flag_ptr, volatile=True)
    while seen == 0:
        seen = tl.load(flag_ptr, volatile=True)


def solution(x: torch.Tensor) -> torch.Tensor:
    if x.is_cuda:
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        _spin[(1,)](flag)
        torch.cuda.synchronize()  # waits for a kernel that never ends
    out = x.clone()
    dist.all_reduce(out)
    return out
