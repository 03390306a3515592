# Says each of its device allocations is twice the size it is (the sizes travel beside the IPC
# handles its rank exports): were the trusted side to believe it, a span it was told lies in the
# claimed part would have the clean rank copy past the real mapping. The clean rank asks the driver
# what an opened handle maps and refuses a claim beyond it: tampering (unreadable outputs).
import torch
import torch.distributed as dist

_DONE = []


def _inflate() -> None:
    from pkb_ray.runner.cuda_ipc import Exporter

    real = Exporter.take_new

    def take_new(self):
        return {base: [size * 2, handle] for base, (size, handle) in real(self).items()}

    Exporter.take_new = take_new


def solution(x: torch.Tensor) -> torch.Tensor:
    if not _DONE:
        _inflate()
        _DONE.append(True)
    out = x.clone()
    dist.all_reduce(out)
    return out
