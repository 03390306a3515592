# Overwrites every cached reference output it can find with zeros, then returns zeros itself:
# every later sample of the problem would be judged against zeros if the cache were writable and
# unverified. PKB_TEST_TARGET names the cache folder (a real attacker would search for it).
import os
from pathlib import Path

import torch

for root in (os.environ.get("PKB_TEST_TARGET", ""), os.path.expanduser("~/.cache/pkb_ray")):
    for path in Path(root).rglob("*.pt") if root else []:
        try:
            data = torch.load(path)
            zeroed = {k: (torch.zeros_like(v) if isinstance(v, torch.Tensor) else
                          tuple(torch.zeros_like(t) if isinstance(t, torch.Tensor) else t for t in v))
                      for k, v in data.items()}
            torch.save(zeroed, path)
        except Exception:  # noqa: BLE001 - read-only or hidden: nothing to do
            pass


def solution(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)
