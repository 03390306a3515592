"""ParallelKernelBench's own correctness rule, recorded beside pkb_ray's status as ``pkb_verdict``."""

from __future__ import annotations

from typing import Any

import torch


def pkb_agrees(expected: Any, actual: Any, tol: float = 1e-2) -> bool:
    """ParallelKernelBench's own rule (utils/compare_outputs.py there): the same structure; each
    tensor of the same shape and ``allclose(a.float(), b.float(), tol, tol)`` (NaN never equal);
    dtypes never compared; anything else with ``==``."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor) or tuple(actual.shape) != tuple(expected.shape):
            return False
        e = expected.detach().float()
        return bool(torch.allclose(actual.detach().to(e.device).float(), e, atol=tol, rtol=tol))
    if isinstance(expected, (tuple, list)):
        return isinstance(actual, (tuple, list)) and len(actual) == len(expected) and \
            all(pkb_agrees(e, a, tol) for e, a in zip(expected, actual))
    if isinstance(expected, dict):
        return isinstance(actual, dict) and set(actual) == set(expected) and \
            all(pkb_agrees(expected[k], actual[k], tol) for k in expected)
    try:
        return bool(expected == actual)
    except Exception:  # noqa: BLE001 - an object whose == raises is not equal
        return False
