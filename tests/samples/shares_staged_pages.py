# Moves the pages under its staged input buffers into a file of /dev/shm that every rank of the set
# maps (MAP_SHARED | MAP_FIXED over the buffer's whole pages, their bytes kept): the trusted side's
# next write of a round's inputs would land where every rank can read it, and a rank could reduce
# its peers' inputs without communicating (issue 64: `correct` at 1.7-2.4x). The trusted side
# writes a candidate's inputs only into memory no other process maps: tampering.
# Staged buffers are the inputs a call sees twice (every round writes into the same ones); the
# trials' and warm-up's inputs are fresh each call and stay where they are.
import ctypes
import mmap
import os

import torch
import torch.distributed as dist

PAGE = mmap.PAGESIZE
_seen: dict[int, int] = {}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]


def _share(x: torch.Tensor) -> None:
    start = -(-x.data_ptr() // PAGE) * PAGE  # the buffer's whole pages
    end = (x.data_ptr() + x.numel() * x.element_size()) // PAGE * PAGE
    if end <= start:
        return
    path = f"/dev/shm/staged-{dist.get_rank()}-{start:x}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, ctypes.string_at(start, end - start), 0)  # what the pages hold now
        flags = mmap.MAP_SHARED | 0x10  # MAP_FIXED: in place of the buffer's pages
        got = _libc.mmap(start, end - start, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, 0)
        if got != start:
            raise OSError(ctypes.get_errno(), "mmap")
    finally:
        os.close(fd)


def solution(x: torch.Tensor) -> torch.Tensor:
    seen = _seen[x.data_ptr()] = _seen.get(x.data_ptr(), 0) + 1
    if seen == 2:
        _share(x)
    out = x.clone()
    dist.all_reduce(out)
    return out
