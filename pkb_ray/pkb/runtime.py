"""What a generated PKB problem file calls inside a rank process (see :mod:`pkb_ray.pkb.shims`).

- :func:`reference` imports a reference file of the checkout by path and gives its ``solution``.
- :func:`make_inputs` calls PKB's own builder, ``create_input_tensor(rank, W, N, (m, n), dtype,
  trial, device)``, with pkb_ray's seed as PKB's trial, inside a forked RNG (the builder reseeds
  the process-wide generators). Unless inputs are to be PKB's exactly, a problem whose builder
  gives the same inputs for every trial (PKB builds its collectives from constants such as
  ``rank + 1``) gets its floating-point tensors drawn anew from pkb_ray's seed: a constant input
  would let a candidate pass, and memoise, without computing anything.
- ``torch.distributed.new_group`` returns one group per (ranks, backend) for the life of the
  process: PKB's builders make groups for every seed, and one reference makes them on every call.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
import torch.distributed as dist

from pkb_ray.measure.correctness import compare
from pkb_ray.pkb.checkout import BUILDER

FAST_BUILD_S = 0.5  # a builder this fast is also run with the next trial, to find constant inputs
TRIAL_MODULUS = 1_000_000_007  # PKB seeds with 42 + 1000 N + rank + 1_000_003 trial: keep it in 64 bits

_modules: dict[str, ModuleType] = {}
_constant: dict[tuple[str, int], bool] = {}
_groups: dict[tuple, Any] = {}
_new_group = dist.new_group


def _cached_new_group(ranks=None, *args: Any, **kwargs: Any):
    key = (tuple(sorted(ranks)) if ranks is not None else None, str(kwargs.get("backend")), args[:1])
    if key not in _groups:
        _groups[key] = _new_group(ranks, *args, **kwargs)
    return _groups[key]


dist.new_group = _cached_new_group


def _import(path: Path, name: str) -> ModuleType:
    key = str(path)
    if key not in _modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _modules[key] = module
    return _modules[key]


def use_checkout(root: str) -> None:
    """PKB's files import each other as ``utils.*`` from the checkout's root (so do its solutions)."""
    if root not in sys.path:
        sys.path.insert(0, root)


def reference(root: str, path: str, problem_module: str) -> Callable[..., Any]:
    """The reference's ``solution``, imported on its first call: a reference that cannot be imported
    here (e.g. one that needs Triton on a CPU machine) fails when it runs, as a reference error of
    that problem, instead of failing every problem's loading. Its parameters are read from the
    file, so validation knows them without importing it. The first call puts the real function in
    its place in the problem module (``problem_module``), so timed calls go to it directly."""
    tree = ast.parse(Path(path).read_text())
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solution"), None)
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args] if fn else []

    def solution(*args: Any, **kwargs: Any) -> Any:
        use_checkout(root)
        real = _import(Path(path), f"pkb_reference_{Path(path).stem}").solution
        if problem_module in sys.modules:
            sys.modules[problem_module].solution = real
        return real(*args, **kwargs)

    solution.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    return solution


def make_inputs(ctx: Any, root: str, number: int, faithful: bool) -> tuple:
    use_checkout(root)
    build = _import(Path(root) / BUILDER, "pkb_input_output_tensors").create_input_tensor
    # PKB's builder draws every rank's data from the trial: the shared seed, so the ranks agree
    trial = (ctx.seed if getattr(ctx, "shared_seed", None) is None else ctx.shared_seed) % TRIAL_MODULUS

    def call(t: int) -> tuple:
        with torch.random.fork_rng(devices=[ctx.device] if ctx.device.type == "cuda" else []):
            out = build(ctx.rank, ctx.world_size, number, (ctx.size["m"], ctx.size["n"]), ctx.dtype, trial=t,
                        device=ctx.device)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    t0 = time.perf_counter()
    args = call(trial)
    if faithful:
        return args
    key = (root, number)
    if key not in _constant:  # decided once per process; slow builders are taken to draw at random
        _constant[key] = time.perf_counter() - t0 < FAST_BUILD_S and compare(args, call(trial + 1), 0, 0) is None
    return tuple(_redrawn(a, ctx) for a in args) if _constant[key] else args


def _redrawn(value: Any, ctx: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.layout == torch.strided:
        return ctx.randn(*value.shape, dtype=value.dtype).to(value.device)
    if isinstance(value, (tuple, list)):
        return type(value)(_redrawn(v, ctx) for v in value)
    return value
