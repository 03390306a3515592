# An honest all-reduce with a background thread that keeps launching GPU work on a side stream
# whenever its own calls are not running: were the reference timed while this process runs, it
# would be timed on a busy GPU. Stopped, it still leaves what it queued last on the device.
import threading
import time

import torch
import torch.distributed as dist

_busy = threading.Event()  # set while its own call runs


def _load():
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    stream = torch.cuda.Stream(device)
    a = torch.randn(4096, 4096, device=device)
    with torch.cuda.stream(stream):
        while True:
            if _busy.is_set():
                time.sleep(0.0001)  # out of its own call's way
                continue
            a = torch.mm(a, a).clamp_(-1, 1)
            stream.synchronize()


_started = []


def solution(x: torch.Tensor) -> torch.Tensor:
    if not _started:  # the thread starts on the rank's own device, from the first call
        _started.append(threading.Thread(target=_load, daemon=True))
        _started[0].start()
    _busy.set()
    try:
        out = x.clone()
        dist.all_reduce(out)
        return out
    finally:
        _busy.clear()
