"""What several problem files share, defined once.

Problem files import it as they import :mod:`pkb_ray.problem`: wherever a problem file runs (the
parent, rank processes in a sandbox, the rank hosts of a spread gang, which receive only the
problem file itself) pkb_ray is importable. Stored references are keyed by a problem file's text,
not by this module's: a change to what these functions compute must bump
``pkb_ray.problems.references.ENTRY_FORMAT``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# torch 2.13 renamed all_gather_into_tensor and reduce_scatter_tensor to *_single (the old names
# warn); older releases have only the old names. The same collectives either way: NCCL's
# ncclAllGather and ncclReduceScatter; gloo's allgather, and a reduce-scatter that gloo emulates
# with an all-reduce (correct, but it moves twice the data).
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def param_shapes(size: dict, g: torch.Generator) -> list[tuple[int, ...]]:
    """The shapes of a model's parameters: ``size["n_params"]`` of them, each a matrix with
    probability 3/4 (else a vector), each side drawn from ``g`` in [dim/2, dim]."""
    lo, hi = size["dim"] // 2, size["dim"]
    shapes = []
    for _ in range(size["n_params"]):
        rows, cols = torch.randint(lo, hi + 1, (2,), generator=g).tolist()
        matrix = int(torch.randint(0, 4, (1,), generator=g)) > 0
        shapes.append((rows, cols) if matrix else (rows,))
    return shapes


def expected_param_numel(size: dict) -> float:
    """The elements of :func:`param_shapes`' parameters in all, in expectation (for speed of light)."""
    side = (size["dim"] // 2 + size["dim"]) / 2
    return size["n_params"] * (0.75 * side * side + 0.25 * side)
