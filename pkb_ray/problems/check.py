"""Checking problem files: every reference, run on W gloo ranks, against its single-process oracle.

A problem's ``oracle(inputs, size, world_size)`` computes, in one process and without any
collective, what every rank must return, from the inputs of all ranks (``inputs[r]`` is rank
r's argument tuple). :func:`check` runs the references of many problems in one process group of
W CPU ranks (one process start for all of them), then compares each rank's output with the
oracle's within the problem's tolerance, and checks that the reference left its inputs alone.
A reference that disagrees with an independent computation of the same operation is a bug in
the benchmark; a tolerance that an exact alternative cannot meet is one too. A problem imported
from elsewhere that states no oracle (``NO_ORACLE``) is probed instead: its
builder and reference run at W, a seed's inputs come out the same twice, its inputs are left alone,
and a second call on the same inputs agrees with the first within the problem's tolerance (the
reference against itself).

Used by ``tests/test_problems_on_cpu.py`` and ``scripts/check_problems.py``. Spawns processes:
not for the pipeline.
"""

from __future__ import annotations

import os
import socket
import tempfile
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pkb_ray.measure.correctness import compare, to_cpu
from pkb_ray.problem import DTYPES, InputContext, Problem, load_problems
from pkb_ray.runner import tensor_io


def inputs_for(problem: Problem, size: dict[str, int], rank: int, world_size: int, dtype: torch.dtype,
               seed: int, device: str = "cpu") -> tuple:
    ctx = InputContext(size=size, rank=rank, world_size=world_size, dtype=dtype, device=torch.device(device),
                       seed=seed)
    return tuple(problem.make_inputs(ctx))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, problems_dir: str, plan: list, out_dir: str,
               timeout_s: float, device: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
        dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s),
                                device_id=torch.device(device))
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s))
    problems = load_problems(problems_dir)
    verbose = rank == 0 and os.environ.get("PKB_CHECK_VERBOSE") == "1"
    for pid, preset, dtype_name, seed in plan:
        p = problems[pid]
        size = dict(p.meta.sizes[preset])
        key = f"{pid}|{preset}|{dtype_name}|{seed}"
        if verbose:
            print(f"checking {key}", flush=True)
        try:
            args = inputs_for(p, size, rank, world_size, DTYPES[dtype_name], seed, device)
            # what the oracle starts from (a GPU draws other numbers than the CPU); groups, modules
            # and sparse tensors as what they hold (a module's state is copied, so a change shows)
            before = to_cpu(tensor_io.canonical(args))
            # The harness makes a seed's inputs in several processes (reference, candidate): they
            # must come out bit for bit the same. A CUDA write through repeated indices does not.
            redrawn = compare(before, to_cpu(tensor_io.canonical(inputs_for(p, size, rank, world_size,
                                                                            DTYPES[dtype_name], seed, device))),
                              0, 0, "input")
            out = p.solution(*args)
            unchanged = None if p.meta.mutates_inputs else compare(before, to_cpu(tensor_io.canonical(args)), 0, 0,
                                                                   "input")
            outputs = to_cpu(tensor_io.canonical(out))
            again = None
            if p.oracle is None:  # no oracle (an imported problem): the reference against itself, on the same inputs
                tol = p.tolerance(dtype_name)
                again = compare(outputs, to_cpu(tensor_io.canonical(p.solution(*inputs_for(
                    p, size, rank, world_size, DTYPES[dtype_name], seed, device)))), tol.atol, tol.rtol, "output")
            result = {"inputs": before, "outputs": outputs, "self_differs": str(again) if again else "",
                      "input_changed": str(unchanged) if unchanged else "", "inputs_differ": str(redrawn) if redrawn else ""}
        except Exception:  # noqa: BLE001 - reported per problem, the others still run
            result = {"error": traceback.format_exc(limit=6)}
        # One file per item, written as soon as it is done: if a later problem kills or hangs the
        # ranks (NCCL aborts a rank stuck in a collective), what was checked before is kept.
        try:
            tensor_io.write(Path(out_dir) / f"{_item_name(key)}.rank{rank}.tensors", result)
        except Exception:  # noqa: BLE001 - e.g. inputs of a kind the file cannot hold
            tensor_io.write(Path(out_dir) / f"{_item_name(key)}.rank{rank}.tensors", {"error": traceback.format_exc(limit=6)})
        dist.barrier()  # keep ranks in step: a problem that raised on one rank must not shift the next
    dist.destroy_process_group()


def _item_name(key: str) -> str:
    return key.replace("|", "__")


def _run_plan(plan: list, world_size: int, problems_dir: str, out_dir: str, timeout_s: float,
              device: str) -> dict[str, list[dict]]:
    """Every item's per-rank results; an item during which the ranks died is {"error": why} on
    every rank, and the ranks are started again for the items after it."""
    done: dict[str, list[dict]] = {}
    remaining = list(plan)
    while remaining:
        died = ""
        try:
            mp.start_processes(_rank_main, args=(world_size, _free_port(), problems_dir, remaining, out_dir,
                                                 timeout_s, device),
                               nprocs=world_size, join=True, start_method="spawn")
        except Exception as exc:  # noqa: BLE001 - a rank died: blame the first unfinished item
            died = f"{type(exc).__name__}: {exc}"[-1500:]
        for i, item in enumerate(remaining):
            key = "|".join(map(str, item))
            files = [Path(out_dir) / f"{_item_name(key)}.rank{r}.tensors" for r in range(world_size)]
            if all(f.exists() for f in files):
                done[key] = [tensor_io.read(f) for f in files]
                continue
            why = died or "the rank processes exited without a result"
            done[key] = [{"error": f"ranks died or hung (timeout {timeout_s:.0f} s) on this item: {why}"}] * world_size
            remaining = remaining[i + 1:]
            break
        else:
            remaining = []
    return done


def check(problems: dict[str, Problem], ids: list[str], world_size: int, presets: tuple[str, ...] = ("small",),
          seeds: tuple[int, ...] = (0, 1), dtype: str | None = None, timeout_s: float = 120.0,
          device: str = "cpu") -> dict[str, str]:
    """Failures by ``pid|preset|dtype|seed`` (empty: every reference agrees with its oracle).

    Problems that do not support ``world_size`` (or ``dtype``) are skipped; ``dtype`` None means
    each problem's first dtype. ``device="cuda"``: ranks on GPUs 0..W-1 with NCCL (the oracle still
    runs on the CPU, from the same inputs made on the CPU).
    """
    plan, failures = [], {}
    for pid in ids:
        p = problems[pid]
        if not p.meta.world_sizes.supports(world_size) or (dtype and dtype not in p.meta.dtypes):
            continue
        if p.oracle is None and not getattr(p.module, "NO_ORACLE", False):
            failures[pid] = "no oracle(inputs, size, world_size) in the problem file"
            continue
        plan += [(pid, preset, dtype or p.meta.dtypes[0], seed) for preset in presets for seed in seeds]
    if not plan:
        return failures
    problems_dir = str(next(iter(problems.values())).path.parent)
    with tempfile.TemporaryDirectory(prefix="pkb-check-") as out_dir:
        done = _run_plan(plan, world_size, problems_dir, out_dir, timeout_s, device)
    for pid, preset, dtype_name, seed in plan:
        key = f"{pid}|{preset}|{dtype_name}|{seed}"
        got = done[key]
        errors = [f"rank {r}: {g['error']}" for r, g in enumerate(got) if "error" in g]
        if errors:
            failures[key] = "reference raised: " + errors[0]
            continue
        redrawn = [f"rank {r}: {g['inputs_differ']}" for r, g in enumerate(got) if g["inputs_differ"]]
        if redrawn:
            failures[key] = "make_inputs gave other inputs for the same seed on a second call: " + redrawn[0]
            continue
        changed = [f"rank {r}: {g['input_changed']}" for r, g in enumerate(got) if g["input_changed"]]
        if changed:
            failures[key] = "reference changed its inputs: " + changed[0]
            continue
        differs = [f"rank {r}: {g['self_differs']}" for r, g in enumerate(got) if g.get("self_differs")]
        if differs:
            failures[key] = "the reference disagrees with itself on the same inputs: " + differs[0]
            continue
        p = problems[pid]
        if p.oracle is None:  # an imported problem that states none: it ran twice, alike, at this W
            continue
        size = dict(p.meta.sizes[preset])
        inputs = [got[r]["inputs"] for r in range(world_size)]
        try:
            expected = p.oracle(inputs, size, world_size)
        except Exception:  # noqa: BLE001
            failures[key] = "oracle raised: " + traceback.format_exc(limit=6)
            continue
        tol = p.tolerance(dtype_name)
        for r in range(world_size):
            bad = compare(to_cpu(expected[r]), got[r]["outputs"], tol.atol, tol.rtol)
            if bad:
                failures[key] = f"rank {r}: reference and oracle disagree: {bad}"
                break
    return failures
