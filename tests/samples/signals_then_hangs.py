# Leaves a file named "hanging" in its job folder, then hangs: lets a test act while it hangs.
import time
from pathlib import Path

import torch


def solution(x: torch.Tensor) -> torch.Tensor:
    Path("hanging").touch()  # the rank's working folder is the sample's job folder
    while True:
        time.sleep(0.1)
