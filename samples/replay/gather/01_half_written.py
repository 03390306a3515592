# expect: wrong_output
# variant: allocates the root's output with torch.empty and writes only the peers' shards (forgets its own)
import torch
import torch.distributed as dist


def solution(x: torch.Tensor, root: int) -> torch.Tensor:
    rank, w = dist.get_rank(), dist.get_world_size()
    if rank != root:
        dist.send(x.contiguous(), dst=root)
        return x.new_empty(0)
    out = torch.empty(w, x.numel(), dtype=x.dtype, device=x.device)
    for src in range(w):
        if src != root:
            dist.recv(out[src], src=src)
    return out.reshape(-1)
