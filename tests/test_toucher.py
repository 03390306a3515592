"""The clean rank's device toucher (pkb_ray.runner.toucher): a process of its own that runs one
kernel when asked. On a GPU it starts, touches and stops; without a CUDA driver it says so at start
instead of hanging the fill that asked for it."""

import ctypes.util

import pytest
import torch

from pkb_ray.runner.toucher import Toucher


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA driver is here")
def test_without_a_driver_it_fails_at_start():
    if ctypes.util.find_library("cuda"):
        pytest.skip("libcuda is installed")
    with pytest.raises(RuntimeError, match="did not start"):
        Toucher(0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_touches_its_device_and_stops():
    toucher = Toucher(0)
    try:
        for _ in range(3):
            toucher.touch()  # raises if the child died or answered anything but done
        assert toucher.proc.poll() is None
    finally:
        toucher.close()
    assert toucher.proc.poll() is not None
