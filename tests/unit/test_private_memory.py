"""The trusted side writes a candidate's inputs and reads its outputs only where no other process
maps them (pkb_ray.isolation.memory.check_private), from this process's own /proc/self/maps."""

import mmap
import os

import pytest
import torch

from pkb_ray.isolation import procfs
from pkb_ray.isolation.memory import SharedMapping, check_private, read_entries, write_entries
from pkb_ray.measure.correctness import layout


def test_the_maps_say_which_mappings_are_shared():
    shared = mmap.mmap(-1, 1 << 16, mmap.MAP_SHARED)
    private = mmap.mmap(-1, 1 << 16, mmap.MAP_PRIVATE)
    starts = {m.start for m in procfs.shared_mappings(os.getpid())}
    assert torch.frombuffer(shared, dtype=torch.uint8).data_ptr() in starts
    assert torch.frombuffer(private, dtype=torch.uint8).data_ptr() not in starts


def test_a_tensor_in_private_memory_is_read_and_written():
    x = torch.arange(4096, dtype=torch.float32)
    entries = layout(x)
    check_private(os.getpid(), entries)
    write_entries(os.getpid(), entries, [torch.ones(4096).numpy().tobytes()], shared=procfs.shared_mappings(os.getpid()))
    assert bool((x == 1).all())
    assert read_entries(os.getpid(), entries, shared=procfs.shared_mappings(os.getpid()))[0] == x.numpy().tobytes()


@pytest.mark.parametrize("offset", [0, 4096, (1 << 16) - 8])
def test_a_tensor_touching_a_shared_mapping_is_refused_both_ways(offset):
    buf = mmap.mmap(-1, 1 << 16, mmap.MAP_SHARED)
    whole = torch.frombuffer(buf, dtype=torch.uint8)
    x = whole[offset:offset + 8]
    entries = layout(x)
    with pytest.raises(SharedMapping, match="shared mapping"):
        read_entries(os.getpid(), entries, shared=procfs.shared_mappings(os.getpid()))
    with pytest.raises(SharedMapping, match="shared mapping"):
        write_entries(os.getpid(), entries, [b"\0" * 8], shared=procfs.shared_mappings(os.getpid()))
    assert read_entries(os.getpid(), entries) == [bytes(x.numpy())]  # the trusted side's own reads are not checked
