# expect: correct
# variant: two-shot all-reduce over torch symmetric memory (P2P loads/stores over NVLink, no multicast): copy into a cached symmetric buffer, reduce in place, return a clone
"""All-reduce (sum) built on torch symmetric memory.

Each rank copies its input into a symmetric buffer (one allocation per rank, mapped into every
peer's address space). ``torch.ops.symm_mem.two_shot_all_reduce_`` then runs one kernel per rank:
a barrier on the signal pads, each rank sums its 1/W slice across every peer's buffer and writes
the sum back into every peer's buffer (reduce-scatter + all-gather as direct loads and stores),
and a closing barrier. It needs P2P access between the GPUs, not NVLink multicast (which is
disabled on our machines: no ``multimem_*`` op here).

Anything the op does not take (CPU tensors, other dtypes, a byte size that is not a multiple of
4, empty tensors) falls back to the reference's NCCL all-reduce on a clone.
"""

import warnings

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

# The op only dispatches on these (AT_DISPATCH_FLOAT_AND_BFLOAT16 in CUDASymmetricMemoryOps.cu).
_DTYPES = (torch.float32, torch.bfloat16)

# (numel, dtype, device) -> symmetric buffer. Kept for the life of the process: rendezvous is a
# collective, so it must happen once per shape, and in the same order on every rank (every rank
# sees the same sequence of shapes, so the first call with a new shape allocates everywhere).
_buffers: dict = {}


_group: list[str] = []  # the WORLD group's name, looked up once: this path is host-bound at small sizes


def _group_name() -> str:
    if _group:
        return _group[0]
    group = dist.group.WORLD
    # torch < 2.11 resolves the group's store only through enable_symm_mem_for_group (it must be
    # called before rendezvous); 2.11 looks the store up itself and deprecates the call
    # (FutureWarning), so only older versions make it.
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 11):
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                enable(group.group_name)  # idempotent
    _group.append(group.group_name)
    return group.group_name


def _buffer(numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    key = (numel, dtype, device)
    buf = _buffers.get(key)
    if buf is None:
        # device must be explicit: symm_mem.empty defaults to the default device (CPU).
        buf = symm_mem.empty(numel, dtype=dtype, device=device)
        # Group given by name: accepted by every version since 2.6 (newer ones take the
        # ProcessGroup too). Collective: blocks until every rank has allocated its buffer.
        symm_mem.rendezvous(buf, _group_name())
        _buffers[key] = buf
    return buf


_two_shot = torch.ops.symm_mem.two_shot_all_reduce_


def _fallback(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def solution(x: torch.Tensor) -> torch.Tensor:
    # The op checks that input ptr offset and byte size are multiples of max(4, itemsize): an
    # odd-length bfloat16 tensor is refused, so it goes the NCCL way (so would one_shot: same check).
    if (not x.is_cuda or x.dtype not in _DTYPES or x.numel() == 0
            or (x.numel() * x.element_size()) % 4 != 0):
        return _fallback(x)
    buf = _buffer(x.numel(), x.dtype, x.device)
    # The previous call's kernel ends with a barrier after every peer's last store into our
    # buffer, and this copy is stream-ordered after the previous call's clone: overwriting is safe.
    buf.copy_(x.view(-1) if x.is_contiguous() else x.reshape(-1))
    _two_shot(buf, "sum", _group_name())
    # A fresh tensor each call: the buffer is rewritten by the next call, outputs must not alias it.
    return buf.clone().view(x.shape)
