# Forks until the system says no (bounded by $PKB_TEST_FORKS, so that a machine without a process
# cap survives the test), children sleeping; then answers correctly if the forks were stopped, and
# raises if it got them all (no cap held).
import os
import time

import torch
import torch.distributed as dist

wanted = int(os.environ.get("PKB_TEST_FORKS", "300"))
children = 0
for _ in range(wanted):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    children += 1
if children == wanted:
    raise RuntimeError(f"forked all {wanted} children: no process cap")


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
