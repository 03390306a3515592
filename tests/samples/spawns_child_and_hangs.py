# Starts a long-lived child process (carrying $PKB_TEST_MARKER on its command line, for the test
# to look for) and then blocks forever.
import os
import subprocess
import sys
import time

import torch

_child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(300)  # {os.environ['PKB_TEST_MARKER']}"])


def solution(x: torch.Tensor) -> torch.Tensor:
    while True:
        time.sleep(0.05)
