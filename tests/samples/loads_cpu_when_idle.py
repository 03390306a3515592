# An honest all-reduce with a background thread that keeps the CPU busy (matrix products, which
# release the GIL) whenever its own calls are not running: were the reference timed while this
# process runs, it would share the cores with the load.
import threading
import time

import torch
import torch.distributed as dist

_busy = threading.Event()  # set while its own call runs


def _load():
    a = torch.randn(256, 256)
    while True:
        if _busy.is_set():
            time.sleep(0.0001)  # out of its own call's way
            continue
        a = torch.mm(a, a).clamp_(-1, 1)


threading.Thread(target=_load, daemon=True).start()


def solution(x: torch.Tensor) -> torch.Tensor:
    _busy.set()
    try:
        out = x.clone()
        dist.all_reduce(out)
        return out
    finally:
        _busy.clear()
