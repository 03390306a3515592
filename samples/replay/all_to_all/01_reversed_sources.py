# expect: wrong_output
# variant: exchanges correctly but stacks the received blocks in reverse order of source rank
import torch
import torch.distributed as dist


def solution(x: torch.Tensor, input_splits: list[int], output_splits: list[int]) -> torch.Tensor:
    out = x.new_empty(sum(output_splits), x.shape[1])
    dist.all_to_all_single(out, x.contiguous(), output_split_sizes=output_splits, input_split_sizes=input_splits)
    return torch.cat(list(out.split(output_splits))[::-1])
