# expect: correct
# variant: correct and faster: peers send straight to the root, which sums as the messages land (one round)
import torch
import torch.distributed as dist


def solution(x: torch.Tensor, root: int) -> torch.Tensor:
    rank, w = dist.get_rank(), dist.get_world_size()
    if rank != root:
        dist.send(x.contiguous(), dst=root)
        return x.clone()
    bufs = [torch.empty_like(x) for _ in range(w - 1)]
    reqs = [dist.irecv(b, src=s) for b, s in zip(bufs, [s for s in range(w) if s != root])]
    out = x.clone()
    for req, b in zip(reqs, bufs):
        req.wait()
        out += b
    return out
