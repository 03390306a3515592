# Starts children that leave its process session (new session, and a double fork) and sleep
# long, carrying a marker the test looks for among the machine's processes afterwards.
import os
import subprocess
import sys

import torch
import torch.distributed as dist

MARKER = os.environ.get("PKB_TEST_MARKER", "pkb-escape-marker")
for _ in range(3):
    subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(600)  # {MARKER}"], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:  # double fork: the grandchild is nobody's child
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", f"import time; time.sleep(600)  # {MARKER}"])
    os._exit(0)


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
