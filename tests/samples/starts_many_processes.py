# Honest, but each rank starts a few hundred processes that sleep (a process pool gone wrong, or a
# sample probing for a gang-wide limit): the trusted side holds a descriptor on each while it
# stops and kills them. The sample must be judged, its processes must go with it, and the gang must
# judge the samples after it as before (issue 64: after two such samples every later sample was an
# evaluator error, descriptors past 1024 in select()).
import os
import time

import torch
import torch.distributed as dist

for _ in range(int(os.environ.get("PKB_TEST_PROCESSES", "400"))):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(300)
        os._exit(0)


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
