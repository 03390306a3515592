# expect: timeout
# variant: rank 0 calls dist.barrier() once more than the other ranks (a mismatched collective), then all-reduces
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    if x.is_cuda and dist.get_rank() == 0:
        # NCCL matches collectives by their order on each rank, not by kind: rank 0's barrier pairs
        # with its peers' all-reduce, and from then on rank 0 is one collective ahead: they wait.
        dist.barrier()
    out = x.clone()
    dist.all_reduce(out)
    return out
