# Writes as much as it can into its working folder, /tmp and its home (bounded here at 8 GiB),
# then answers correctly.
import os

import torch
import torch.distributed as dist

CHUNK = b"\0" * (16 << 20)
written = 0
for folder in (os.getcwd(), "/tmp", os.path.expanduser("~")):
    try:
        with open(os.path.join(folder, f"fill-{os.getpid()}"), "wb") as f:
            while written < (8 << 30):
                f.write(CHUNK)
                written += len(CHUNK)
    except OSError:
        pass
print(f"wrote {written >> 20} MiB", flush=True)


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
