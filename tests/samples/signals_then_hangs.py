# Leaves a file named "hanging" in its job folder (the rank's command line names it; the working
# folder is the sandbox's private scratch), then hangs: lets a test act while it hangs.
import sys
import time
from pathlib import Path

import torch


def solution(x: torch.Tensor) -> torch.Tensor:
    Path(sys.argv[sys.argv.index("--job-dir") + 1], "hanging").touch()
    while True:
        time.sleep(0.1)
