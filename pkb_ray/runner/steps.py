"""The steps a rank process runs: reference, trials, timing (see :mod:`pkb_ray.runner.rank`)."""

from __future__ import annotations

import gc
import importlib.util
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
import torch.distributed as dist

from pkb_ray.correctness import compare, poison_like, to_cpu
from pkb_ray.problem import DTYPES, InputContext, Problem, Tolerance, load_problem
from pkb_ray.runner.protocol import StepFailed, set_phase, tensor_file
from pkb_ray.timing import calls_per_round, round_order, timed_region

MAX_REPORTED_MISMATCHES = 5


def candidate_traceback() -> str:
    """The current exception's traceback without the harness's own frames."""
    exc = sys.exc_info()[1]
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/pkb_ray/runner/" not in f.filename and not f.filename.startswith("<frozen")]
    return ("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
            + "".join(traceback.format_exception_only(type(exc), exc)))


def load_candidate(path: str | Path) -> ModuleType:
    """Import the candidate's source file as the module ``candidate``."""
    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    return module


class RankSession:
    """State of one rank across the steps of one sample."""

    def __init__(self, rank: int, world_size: int, device: torch.device, job_dir: Path):
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.job_dir = job_dir
        self.problem: Problem | None = None
        self.candidate: Callable[..., Any] | None = None

    def run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self.problem = self.problem or load_problem(cmd["problem_path"])
        self.dtype_name = cmd["dtype"]
        self.size = cmd["size"]
        step = {"reference": self.reference, "trials": self.trials, "timing": self.timing}[cmd["step"]]
        return step(cmd)

    # -- steps ---------------------------------------------------------------------------------

    def reference(self, cmd: dict[str, Any]) -> dict[str, Any]:
        out_dir = Path(cmd["out_dir"])
        for seed in cmd["seeds"]:
            self._phase(f"reference seed={seed}")
            inputs = self._inputs(seed)
            out = self.problem.solution(*inputs)
            self._sync()
            torch.save({"outputs": to_cpu(out), "inputs_after": to_cpu(inputs)}, tensor_file(out_dir, seed, self.rank))
        return {"status": "ok"}

    def trials(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self._phase("import")
        try:
            module = load_candidate(cmd["candidate_path"])
        except BaseException:  # noqa: BLE001 - SystemExit too: whatever import does is its verdict
            raise StepFailed("import_error", candidate_traceback()) from None
        solution = getattr(module, "solution", None)
        if not callable(solution):
            raise StepFailed("import_error", "the module defines no callable solution(...)")
        self.candidate = solution
        out_dir, expected_dir = Path(cmd["out_dir"]), Path(cmd["expected_dir"])
        for seed in cmd["seeds"]:
            self._phase(f"trial seed={seed}")
            inputs = self._inputs(seed)
            expected = torch.load(tensor_file(expected_dir, seed, self.rank))
            del expected["inputs_after"]
            poison = poison_like(expected["outputs"], self.device)
            del poison  # the blocks go back to the allocator, poisoned
            try:
                out = solution(*inputs)
                self._sync()
            except BaseException:  # noqa: BLE001
                raise StepFailed("runtime_error", f"trial seed={seed}:\n{candidate_traceback()}") from None
            torch.save({"outputs": to_cpu(out), "inputs_after": to_cpu(inputs)}, tensor_file(out_dir, seed, self.rank))
        return {"status": "ok"}

    def timing(self, cmd: dict[str, Any]) -> dict[str, Any]:
        seeds = cmd["seeds"]
        t_start = time.monotonic()
        tol = Tolerance(**cmd["tolerance"], reason="given by the harness") if cmd.get("tolerance") \
            else self.problem.tolerance(self.dtype_name)
        sets = [self._inputs(s) for s in seeds]
        expected = [
            _to_device(torch.load(tensor_file(Path(cmd["expected_dir"]), s, self.rank))["outputs"], self.device)
            for s in seeds
        ]
        fns = {"ref": self.problem.solution, "cand": self.candidate}
        self._phase("timing warmup")
        for side in ("ref", "cand"):
            self._region(fns[side], sets, cmd["warmup"], 0, side, "warmup")  # JIT, allocator, NCCL channels
        per_call = {side: self._region(fns[side], sets, len(sets), 0, side, "calibration")[1]
                    for side in ("ref", "cand")}
        slowest = torch.tensor([max(per_call.values())], dtype=torch.float64, device=self.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # every rank must make the same number of calls
        k = calls_per_round(float(slowest.item()), cmd["round_us"], cmd["max_round_calls"])
        times: dict[str, list[float]] = {"ref": [], "cand": []}
        mismatches: list[dict[str, Any]] = []
        counts = {"ref": 0, "cand": 0}
        self._phase("timing")
        gc.collect()
        gc.disable()  # a collection inside a round would be charged to whichever side triggered it
        try:
            self._rounds(cmd, fns, sets, expected, seeds, tol, k, times, mismatches, counts)
        finally:
            gc.enable()
        return {"status": "ok", "ref_us": times["ref"], "cand_us": times["cand"], "calls_per_round": k,
                "timed_seconds": time.monotonic() - t_start, "mismatches": mismatches, "mismatch_counts": counts}

    def _rounds(self, cmd, fns, sets, expected, seeds, tol, k, times, mismatches, counts) -> None:
        for i in range(cmd["rounds"]):
            for side in round_order(i):
                first = i * k  # each round starts one step further through the input sets
                outs, us = self._region(fns[side], sets, k, first, side, f"round {i}")
                times[side].append(us)
                for n, out in enumerate(outs):
                    j = (first + n) % len(sets)
                    found = compare(expected[j], out, tol.atol, tol.rtol)
                    if found:
                        counts[side] += 1
                        if len(mismatches) < MAX_REPORTED_MISMATCHES:
                            mismatches.append({"side": side, "iter": i, "seed": seeds[j], "message": str(found),
                                               "max_abs_error": found.max_abs_error})
                del outs

    def _region(self, fn, sets, k: int, first: int, side: str, what: str) -> tuple[list[Any], float]:
        """One timed region of k calls (see :mod:`pkb_ray.timing`), ranks aligned by a barrier first."""
        calls = [sets[(first + n) % len(sets)] for n in range(max(k, 1))]
        if self.problem.meta.mutates_inputs:  # the reference changes them: each call gets its own copy
            calls = [tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args) for args in calls]
        dist.barrier()
        try:
            return timed_region(fn, calls, self.device)
        except BaseException:  # noqa: BLE001
            raise StepFailed("runtime_error", f"timed call, {what} ({side}):\n{candidate_traceback()}") from None

    # -- helpers -------------------------------------------------------------------------------

    def _inputs(self, seed: int) -> tuple:
        ctx = InputContext(size=self.size, rank=self.rank, world_size=self.world_size,
                           dtype=DTYPES[self.dtype_name], device=self.device, seed=seed)
        return tuple(self.problem.make_inputs(ctx))

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _phase(self, phase: str) -> None:
        set_phase(self.job_dir, self.rank, phase)


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(v, device) for v in value)
    return value
