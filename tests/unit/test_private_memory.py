"""The trusted side writes a candidate's inputs and reads its outputs only where no other process
maps them (pkb_ray.isolation.memory.check_private), asked of the kernel about this process itself:
through the PROCMAP_QUERY ioctl and, as on kernels without it, from the text of /proc/self/maps."""

import ctypes
import mmap
import os

import pytest
import torch

from pkb_ray.isolation import procfs
from pkb_ray.isolation.memory import SharedMapping, check_private, read_entries, write_entries
from pkb_ray.measure.correctness import layout

PAGE = mmap.PAGESIZE


@pytest.fixture(params=["ioctl", "text"])
def lookup(request):
    made = procfs.SharedLookup(os.getpid(), query=request.param == "ioctl")
    yield made
    made.close()


def test_the_maps_say_which_mappings_are_shared():
    shared = mmap.mmap(-1, 1 << 16, mmap.MAP_SHARED)
    private = mmap.mmap(-1, 1 << 16, mmap.MAP_PRIVATE)
    starts = {m.start for m in procfs.shared_mappings(os.getpid())}
    assert torch.frombuffer(shared, dtype=torch.uint8).data_ptr() in starts
    assert torch.frombuffer(private, dtype=torch.uint8).data_ptr() not in starts


def test_the_ioctl_and_the_text_agree_over_the_whole_address_space():
    keep = [mmap.mmap(-1, 1 << 16, mmap.MAP_SHARED) for _ in range(3)]
    text = procfs.shared_mappings(os.getpid())
    asked = procfs.SharedLookup(os.getpid())
    try:
        assert asked.overlapping(0, 1 << 47) == text
    finally:
        asked.close()
    assert len(keep) == 3 and len(text) >= 3


def test_a_tensor_in_private_memory_is_read_and_written(lookup):
    x = torch.arange(4096, dtype=torch.float32)
    entries = layout(x)
    check_private(os.getpid(), entries)
    write_entries(os.getpid(), entries, [torch.ones(4096).numpy().tobytes()], shared=lookup)
    assert bool((x == 1).all())
    assert read_entries(os.getpid(), entries, shared=lookup)[0] == x.numpy().tobytes()


@pytest.mark.parametrize("offset", [0, 4096, (1 << 16) - 8])
def test_a_tensor_touching_a_shared_mapping_is_refused_both_ways(lookup, offset):
    buf = mmap.mmap(-1, 1 << 16, mmap.MAP_SHARED)
    whole = torch.frombuffer(buf, dtype=torch.uint8)
    x = whole[offset:offset + 8]
    entries = layout(x)
    with pytest.raises(SharedMapping, match="shared mapping"):
        read_entries(os.getpid(), entries, shared=lookup)
    with pytest.raises(SharedMapping, match="shared mapping"):
        write_entries(os.getpid(), entries, [b"\0" * 8], shared=lookup)
    assert read_entries(os.getpid(), entries) == [bytes(x.numpy())]  # the trusted side's own reads are not checked


def test_a_tensor_whose_last_page_is_shared_is_refused(lookup):
    # private pages, then one shared page mapped over the last of them: the tensor starts in private
    # memory, so only a look at every mapping it spans sees the shared one
    private = mmap.mmap(-1, 4 * PAGE, mmap.MAP_PRIVATE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(private))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    fixed_shared_anonymous = 0x10 | 0x01 | 0x20  # MAP_FIXED | MAP_SHARED | MAP_ANONYMOUS
    assert libc.mmap(base + 3 * PAGE, PAGE, mmap.PROT_READ | mmap.PROT_WRITE, fixed_shared_anonymous, -1, 0) == base + 3 * PAGE
    x = torch.frombuffer(private, dtype=torch.uint8)[PAGE:]
    with pytest.raises(SharedMapping, match="shared mapping"):
        check_private(os.getpid(), layout(x), lookup)
    check_private(os.getpid(), layout(x[:2 * PAGE]), lookup)  # the private part alone passes
