# Starts a long-lived child process (its pid goes to $PKB_TEST_PIDFILE) and then blocks forever.
import os
import subprocess
import time

import torch

_child = subprocess.Popen(["sleep", "300"])
with open(f"{os.environ['PKB_TEST_PIDFILE']}.{os.getpid()}", "w") as f:
    f.write(str(_child.pid))


def solution(x: torch.Tensor) -> torch.Tensor:
    while True:
        time.sleep(0.05)
