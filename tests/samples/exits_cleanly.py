# Calls sys.exit(0) inside solution on every rank: an exception, not a crash.
import sys

import torch


def solution(x: torch.Tensor) -> torch.Tensor:
    sys.exit(0)
