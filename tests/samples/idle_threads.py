# Honest calls, and 48 threads that only wait. Stopping a set and proving it stopped takes work
# for every thread; an evaluator whose clock holds the stop reads such a sample slower than its
# calls. Its time must be its calls': an honest speed.
import threading

import torch
import torch.distributed as dist

_wake = threading.Event()
_threads = [threading.Thread(target=_wake.wait, daemon=True) for _ in range(48)]
for _t in _threads:
    _t.start()


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
