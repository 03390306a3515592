# Correct, but starts a non-daemon thread that never ends: the rank must still exit cleanly.
import threading
import time

import torch
import torch.distributed as dist

threading.Thread(target=lambda: [time.sleep(0.1) for _ in iter(int, 1)], daemon=False).start()


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
