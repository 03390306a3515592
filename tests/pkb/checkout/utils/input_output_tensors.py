"""Inputs of every problem, by number, in the shape of PKB's builder."""
import torch
import torch.distributed as dist


def _seed(problem_id, rank, trial):
    torch.manual_seed(1000 * problem_id + rank + 7919 * trial)


def create_input_tensor(rank, world_size, problem_id, base_shape, dtype, trial=0, device=None):
    dev = device if device is not None else torch.device("cuda", rank)
    m, n = base_shape
    if problem_id == 1:  # constant, as PKB builds its collectives
        return (torch.full((m, n), float(rank + 1), dtype=dtype, device=dev),)
    if problem_id == 2:
        _seed(problem_id, rank, trial)
        return (torch.randn(m, n, dtype=dtype, device=dev), 0.5)
    if problem_id == 3:
        _seed(problem_id, 0, trial)  # the same layer on every rank
        layer = torch.nn.Linear(n, 8, dtype=dtype, device=dev)
        _seed(problem_id, rank, trial)
        group = dist.new_group(list(range(world_size)))
        return (torch.randn(m, n, dtype=dtype, device=dev), layer, group)
    if problem_id == 4:
        _seed(problem_id, rank, trial)
        return (torch.randn(m, n, dtype=dtype, device=dev), torch.rand(n, dtype=dtype, device=dev) + 0.5)
    raise ValueError(f"no inputs for problem {problem_id}")
