# expect: correct
# variant: torch's own one-shot all-reduce over symmetric memory (torch.ops.symm_mem.one_shot_all_reduce[_copy]): the comparison point for the hand-written one-shot kernels
"""All-reduce (sum) with torch's symmetric-memory one-shot op, for comparison.

``one_shot_all_reduce_copy`` (torch >= 2.8) copies the input into the symmetric buffer inside
its kernel, barriers, and sums every peer's buffer into a new tensor; older releases get a copy
then ``one_shot_all_reduce``. Inputs the op does not take go the reference's way.
"""

import torch
import torch.distributed as dist

from pkb_ray.cuda import symmetric_buffer

_ops = torch.ops.symm_mem if torch.cuda.is_available() else None
_COPY = _ops is not None and hasattr(_ops, "one_shot_all_reduce_copy")


def solution(x: torch.Tensor) -> torch.Tensor:
    if (not x.is_cuda or x.dtype not in (torch.float32, torch.bfloat16) or x.numel() == 0
            or (x.numel() * x.element_size()) % 4):
        out = x.clone()
        dist.all_reduce(out)
        return out
    buf, _, _ = symmetric_buffer(x.numel(), x.dtype, x.device)
    group = dist.group.WORLD.group_name
    flat = x.reshape(-1)
    if _COPY:
        out = _ops.one_shot_all_reduce_copy(buf, flat, "sum", group)
    else:
        buf.copy_(flat)
        out = _ops.one_shot_all_reduce(buf, "sum", group)
    return out.view(x.shape)
