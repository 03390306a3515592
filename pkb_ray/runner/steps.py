"""The steps a rank process runs (see :mod:`pkb_ray.runner.rank`).

Two kinds of rank sets run them, and never the same set both kinds:

- *clean* sets, which never import a candidate: ``reference`` (expected outputs of the trial
  seeds), ``check_trials`` (compare a candidate's trial outputs with them, on the rank's device)
  and ``check_timed`` (recompute the reference for the timed calls the parent picked and compare);
- *candidate* sets: ``trials`` (import the candidate, run it on the trial seeds, save what it
  returned), ``region`` (one timed region of k calls, see :mod:`pkb_ray.timing`) and ``keep``
  (hand over the one output of the last region the parent asks for).

Everything a candidate set reports is forgeable (the candidate shares its process); the parent
treats it so. What a clean set reports is trusted.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import operator
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
import torch.distributed as dist

from pkb_ray import correctness, timing
from pkb_ray.correctness import (aliases, compare, copy_tree, fingerprint, fingerprints, output_devices, pkb_agrees,
                                 poison_like, region_aliases, structure)
from pkb_ray.names import Status
from pkb_ray.problem import DTYPES, InputContext, Problem, Tolerance, load_problem
from pkb_ray.runner import extensions, protocol, tensor_io
from pkb_ray.runner.protocol import Step, StepFailed, set_phase, tensor_file
from pkb_ray.runner.resident import BUDGET_BYTES, Resident, nbytes
from pkb_ray.runner.tensor_io import TensorFileError
from pkb_ray.runner.trace import traced_call
from pkb_ray.timing import call_seed, fresh_calls, timed_region, timed_replay


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


def _watched() -> dict[str, Any]:
    """The evaluator's functions a candidate could replace to forge a check or a time. A change is
    evidence of tampering (a candidate clever enough to restore them is caught by the parent's
    own checks instead: commitments, clean recomputation, its clock around each region)."""
    return {"pkb_ray.timing.timed_region": timing.timed_region, "pkb_ray.timing._perf_counter": timing._perf_counter,
            "pkb_ray.timing.device_sync": timing.device_sync, "pkb_ray.correctness.fingerprint": correctness.fingerprint,
            "pkb_ray.runner.tensor_io.write": tensor_io.write, "pkb_ray.runner.tensor_io._host_bytes": tensor_io._host_bytes,
            "pkb_ray.runner.steps.timed_region": sys.modules[__name__].timed_region,
            "pkb_ray.timing.timed_replay": timing.timed_replay,
            "torch.cuda.CUDAGraph.replay": torch.cuda.CUDAGraph.replay,
            "pkb_ray.runner.steps.timed_replay": sys.modules[__name__].timed_replay,
            "pkb_ray.runner.steps.fingerprint": sys.modules[__name__].fingerprint,
            "pkb_ray.runner.steps.fingerprints": sys.modules[__name__].fingerprints,
            "pkb_ray.correctness.fingerprints": correctness.fingerprints,
            "pkb_ray.runner.protocol.write_report": protocol.write_report,
            "RankSession.region": RankSession.region, "RankSession.keep": RankSession.keep,
            "RankSession.capture": RankSession.capture,
            "RankSession.run": RankSession.run}


TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


class TorchWatch:
    """The identity of torch's own functions, taken just before the candidate is imported. The
    reference is timed in the candidate's process: a candidate that replaces one of them (a
    ``dist.all_reduce`` that sleeps first, or answers wrong and fast) changes what it is compared
    against. A replacement kept past the step that made it is evidence of tampering; one restored
    in time is not seen here (docs/threat-model.md)."""

    OWNERS = ("torch", "torch.Tensor", "torch.distributed", "torch.distributed.distributed_c10d",
              "torch.nn.functional", "torch.cuda")

    def __init__(self):
        self._seen = []  # (owner's name, the owner, {attribute: callable} as imported)
        for name in self.OWNERS:
            owner = operator.attrgetter(name.partition(".")[2])(torch) if "." in name else torch
            self._seen.append((name, owner, {attr: value for attr, value in self._namespace(owner).items()
                                             if callable(value) and not isinstance(value, ModuleType)}))

    def replaced(self) -> list[str]:
        found = []
        for name, owner, seen in self._seen:
            now = self._namespace(owner)
            found += [f"{name}.{attr}" for attr, fn in seen.items()
                      if now.get(attr) is not fn and not self._torch_own(now.get(attr), fn)]
        return found

    @staticmethod
    def _torch_own(new: Any, old: Any) -> bool:
        """A wrapper torch itself puts over its function (importing torch._dynamo, as torch.compile
        does, wraps torch.manual_seed): written in torch's own files and wrapping the original."""
        code = getattr(new, "__code__", None)
        return (code is not None and code.co_filename.startswith(TORCH_DIR)
                and getattr(new, "__wrapped__", None) is old)

    @staticmethod
    def _namespace(owner: Any) -> dict[str, Any]:
        """What the owner's attributes resolve to, without running descriptors: a module's own
        dict; a class's dicts along its MRO (``Tensor.clone`` lives on ``TensorBase``: setting it
        on ``Tensor`` shadows it)."""
        if not isinstance(owner, type):
            return vars(owner)
        merged: dict[str, Any] = {}
        for klass in reversed(owner.__mro__):
            merged.update(vars(klass))
        return merged


class RankSession:
    """State of one rank across the steps of one sample (candidate set) or many (clean set)."""

    def __init__(self, rank: int, world_size: int, device: torch.device, job_dir: Path):
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.job_dir = job_dir
        self.problems: dict[str, Problem] = {}
        self.candidate: Callable[..., Any] | None = None
        self._held: list[Any] | None = None  # outputs of the last region, until the parent picks one
        self._base: tuple | None = None  # (key, base input sets of the timed calls)
        self._graphs: dict[str, Captured] = {}  # side -> its k calls captured (graph timing mode)
        self._originals = _watched()
        self._torch: TorchWatch | None = None  # torch's functions as they were before the candidate came
        # clean sets: verified reference outputs kept on the device between samples (by content hash)
        self.resident = Resident(BUDGET_BYTES.get(device.type, BUDGET_BYTES["cpu"]))

    def run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        path = cmd["problem_path"]
        self.problem = self.problems.get(path) or self.problems.setdefault(path, load_problem(path))
        self.dtype_name = cmd["dtype"]
        self.size = cmd["size"]
        step = {Step.REFERENCE: self.reference, Step.TRIALS: self.trials, Step.REGION: self.region,
                Step.KEEP: self.keep, Step.CAPTURE: self.capture, Step.CHECK_TRIALS: self.check_trials,
                Step.CHECK_TIMED: self.check_timed}[cmd["step"]]
        report = step(cmd)
        if self._torch is not None:  # a candidate was imported (or is being) in this process
            now = _watched()
            report["tampered"] = [name for name, fn in self._originals.items() if now.get(name) is not fn]
            report["tampered"] += self._torch.replaced()
        return report

    # -- clean sets ----------------------------------------------------------------------------

    def reference(self, cmd: dict[str, Any]) -> dict[str, Any]:
        out_dir = Path(cmd["out_dir"])
        shapes, shared, traffic, input_bytes = {}, {}, None, 0
        for seed in cmd["seeds"]:
            self._phase(f"reference seed={seed}")
            inputs = self._inputs(seed)
            input_bytes = max(input_bytes, nbytes(inputs))
            if traffic is None and getattr(self.problem.module, "TRACE_SOL", False):  # no bound of its own
                out, traffic = traced_call(self.problem.solution, inputs)
            else:
                out = self.problem.solution(*inputs)
            self._sync()
            shapes[str(seed)], shared[str(seed)] = structure(out), aliases(out, inputs)
            value = {"outputs": out, "inputs_after": inputs}
            digest = tensor_io.write(tensor_file(out_dir, seed, self.rank), value, digest=True)
            # the next check needs no read (the key is the content); kept as a reader of the file gets it
            self.resident.put(digest, copy_tree(tensor_io.canonical(value)))
        return {"status": "ok", "structure": shapes, "aliases": shared, "devices": output_devices(out),
                "traffic": traffic, "input_bytes": input_bytes}

    def check_trials(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Compare the candidate's trial outputs (and inputs after the call) with the reference's."""
        tol = Tolerance(**cmd["tolerance"], reason="given by the harness")
        found = []
        for seed in cmd["seeds"]:
            self._phase(f"check seed={seed}")
            expected = self._expected(Path(cmd["expected_dir"]), seed, cmd["expected_sha256"])
            try:
                actual = tensor_io.read(tensor_file(Path(cmd["actual_dir"]), seed, self.rank), self.device)
                if not isinstance(actual, dict):
                    raise TensorFileError("not the file the runner writes")
            except TensorFileError as exc:  # a missing, cut or forged output file
                found.append(_finding(seed, "output", f"outputs unreadable: {exc}"))
                continue
            bad = compare(expected["outputs"], actual.get("outputs"), tol.atol, tol.rtol, "output")
            pkb = pkb_agrees(expected["outputs"], actual.get("outputs")) if seed == cmd["seeds"][0] else None
            if bad is None:
                bad = compare(expected["inputs_after"], actual.get("inputs_after"), 0.0, 0.0, "input")
                if bad is not None:
                    bad = type(bad)(bad.where, "changed by the call (the reference leaves it as it was): " + bad.message)
            found.append({**(_finding(seed, bad.where, bad.message, bad.max_abs_error) if bad else _finding(seed)),
                          "pkb": pkb})
        return {"status": "ok", "checks": found}

    def check_timed(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Recompute the reference on the inputs of the timed calls the parent picked (every rank of
        this set the same picks, in the same order: the reference may be collective) and compare."""
        tol = Tolerance(**cmd["tolerance"], reason="given by the harness")
        found = []
        for pick in cmd["picks"]:
            self._phase(f"check timed call {pick['id']}")
            inputs = self._call_inputs(cmd["base_seeds"], pick["nonce"], [pick["index"]])[0]
            expected = self.problem.solution(*inputs)
            self._sync()
            try:
                actual = tensor_io.read(tensor_file(Path(cmd["actual_dir"]), pick["id"], self.rank), self.device)
                actual = actual["outputs"]
            except (TensorFileError, TypeError, KeyError) as exc:  # the rank did not hand it over
                found.append(_finding(pick["id"], "output", f"not handed over: {exc}", kind="missing"))
                continue
            committed = pick["commits"].get(str(self.rank))
            if committed is None:
                found.append(_finding(pick["id"], "output", "the rank did not commit to its outputs", kind="missing"))
            elif fingerprint(actual) != committed:
                found.append(_finding(pick["id"], "output", "the output handed over is not the one the rank "
                                      "committed to when the region ended (changed after the call returned)",
                                      kind="commit"))
            else:
                bad = compare(expected, actual, tol.atol, tol.rtol, "output")
                found.append(_finding(pick["id"], bad.where, bad.message, bad.max_abs_error) if bad
                             else _finding(pick["id"]))
        return {"status": "ok", "checks": found}

    # -- candidate sets ------------------------------------------------------------------------

    def trials(self, cmd: dict[str, Any]) -> dict[str, Any]:
        # torch extensions a candidate builds on the rank (load_inline) go to its own job folder;
        # those the compile stage built for this sample are imported from its cache folder
        os.environ["TORCH_EXTENSIONS_DIR"] = str(self.job_dir / "torch_extensions")
        builds = extensions.install(Path(cmd["prebuilt"]) if cmd.get("prebuilt") else None,
                                    self.job_dir / "torch_extensions", cmd.get("arch_list"))
        self._phase("import")
        try:
            self._torch = TorchWatch()
            module = load_candidate(cmd["candidate_path"])
        except BaseException:  # noqa: BLE001 - SystemExit too: whatever import does is its verdict
            raise StepFailed(Status.IMPORT_ERROR.value, candidate_traceback()) from None
        solution = getattr(module, "solution", None)
        if not callable(solution):
            raise StepFailed(Status.IMPORT_ERROR.value, "the module defines no callable solution(...)")
        self.candidate = solution
        out_dir = Path(cmd["out_dir"])
        devices, shared, earlier = {}, {}, []  # earlier outputs stay alive: their memory cannot be reused
        for seed in cmd["seeds"]:
            self._phase(f"trial seed={seed}")
            inputs = self._inputs(seed)
            poison = poison_like(cmd["structure"][str(self.rank)][str(seed)], self.device)
            del poison  # the blocks go back to the allocator, poisoned
            try:
                out = solution(*inputs)
                self._sync()
            except BaseException:  # noqa: BLE001
                raise StepFailed(Status.RUNTIME_ERROR.value, f"trial seed={seed}:\n{candidate_traceback()}") from None
            devices[str(seed)], shared[str(seed)] = output_devices(out), aliases(out, inputs, earlier)
            earlier.append(out)
            tensor_io.write(tensor_file(out_dir, seed, self.rank), {"outputs": out, "inputs_after": inputs})
        return {"status": "ok", "devices": devices, "aliases": shared, "rank_builds": builds["built"]}

    def region(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """k calls of one side on fresh inputs (from the parent's nonce), timed back to back (or, with
        ``graph``, one replay of the side's captured calls on those inputs); then a commitment
        (fingerprint) to every output, before the parent says which one to hand over."""
        self._hand_over(cmd)
        side, k = cmd["side"], cmd["k"]
        fn = self.problem.solution if side == "ref" else self.candidate
        self._phase(f"{cmd['what']} ({side})")
        captured = self._graphs.get(side) if cmd.get("graph") else None
        if cmd.get("graph") and (captured is None or len(captured.inputs) != k):
            raise StepFailed(Status.RUNTIME_ERROR.value, f"{cmd['what']} ({side}): no graph of {k} calls captured")
        calls = self._call_inputs(cmd["base_seeds"], cmd["nonce"], list(range(k)), own=captured is None)
        if captured is not None:
            captured.load(calls)
            calls = captured.inputs  # what the replay reads
        gc.collect(0)  # the young generation only: a full collection costs ~170 ms with torch loaded
        gc.disable()  # a collection inside a region would be charged to whichever side triggered it
        try:
            dist.barrier()
            if captured is not None:
                outs, us = captured.outputs, timed_replay(captured.graph, k, self.device)
            else:
                outs, us = timed_region(fn, calls, self.device)
        except BaseException:  # noqa: BLE001
            raise StepFailed(Status.RUNTIME_ERROR.value, f"timed call, {cmd['what']} ({side}):\n{candidate_traceback()}") from None
        finally:
            gc.enable()
        shared = region_aliases(outs, calls)
        self._held = outs if cmd["hold"] else None
        return {"status": "ok", "us": us, "commits": fingerprints(outs) if cmd["hold"] else [],
                "aliases": shared, "devices": output_devices(outs[0])}

    def capture(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Capture k calls of one side, on input buffers of their own, into a CUDA graph that later
        regions replay. Reports ``captured`` and, when it could not, why: the parent then times
        both sides eager."""
        self._hand_over(cmd)
        side, k = cmd["side"], cmd["k"]
        fn = self.problem.solution if side == "ref" else self.candidate
        self._phase(f"capture ({side})")
        if self.device.type != "cuda":
            return {"status": "ok", "captured": False, "error": f"CUDA graphs need a CUDA device, not {self.device.type}"}
        calls = self._call_inputs(cmd["base_seeds"], cmd["nonce"], list(range(k)))
        again = self._call_inputs(cmd["base_seeds"], cmd["nonce"] + 1, list(range(k)), own=False)
        if not all(same_layout(a, b) for a, b in zip(calls, again)):
            return {"status": "ok", "captured": False,
                    "error": "the problem's inputs change shape or non-tensor values from call to call"}
        dist.barrier()
        try:
            graph, outs = capture_calls(fn, calls, self.device)
        except BaseException:  # noqa: BLE001 - the side stays eager; the reason goes in the row
            error = candidate_traceback()
            try:
                torch.cuda.synchronize(self.device)
            except RuntimeError as exc:  # the context did not survive: eager timing cannot run either
                raise StepFailed(Status.RUNTIME_ERROR.value, f"capture ({side}) broke the device: {exc}\n{error}") from None
            return {"status": "ok", "captured": False, "error": error[-2000:]}
        self._graphs[side] = Captured(graph, calls, outs)
        return {"status": "ok", "captured": True}

    def keep(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self._hand_over(cmd)
        return {"status": "ok"}

    def _hand_over(self, cmd: dict[str, Any]) -> None:
        """Save the output of the last region that the parent picked (if it picked one)."""
        held, self._held = self._held, None
        if cmd.get("keep_index") is not None and held is not None:
            tensor_io.write(tensor_file(Path(cmd["out_dir"]), cmd["keep_id"], self.rank),
                            {"outputs": held[cmd["keep_index"]]})

    # -- helpers -------------------------------------------------------------------------------

    def _expected(self, directory: Path, seed: int, sha256: dict[str, str]) -> dict[str, Any]:
        """A reference file's value, checked against the hash the parent read from the store's
        (MAC-checked) manifest: kept from an earlier read or computation with that very hash, or
        read now and checked as it is read. No verdict against a file changed since."""
        path = tensor_file(directory, seed, self.rank)
        digest = sha256.get(path.name, "")
        value = self.resident.get(digest)
        if value is None:
            try:
                value = tensor_io.read(path, self.device, sha256=digest)
            except TensorFileError as exc:
                raise StepFailed("reference_changed", f"reference file {path.name} changed since it was "
                                 f"verified ({exc})") from None
            self.resident.put(digest, value)
        return value

    def _call_inputs(self, base_seeds: list[int], nonce: int, ns: list[int], own: bool = True) -> list[tuple]:
        """The inputs of timed calls ``ns`` of the region with ``nonce`` (see
        :func:`pkb_ray.timing.fresh_inputs`), made in one batched pass per base set. Without ``own``
        the calls may share memory: only for copying into a graph's buffers or comparing layouts."""
        sets, made = self._base_sets(base_seeds), {}
        for s, base in enumerate(sets):
            mine = [n for n in ns if n % len(sets) == s]
            fresh = fresh_calls(base, nonce, mine, own) if mine else []
            made.update(zip(mine, fresh if fresh is not None else [self._inputs(call_seed(nonce, n)) for n in mine]))
        return [made[n] for n in ns]

    def _base_sets(self, base_seeds: list[int]) -> list[tuple]:
        key = (id(self.problem), self.dtype_name, json.dumps(self.size, sort_keys=True), tuple(base_seeds))
        if self._base is None or self._base[0] != key:  # drawn once per sample (per problem in a clean set)
            self._base = (key, [self._inputs(s) for s in base_seeds])
        return self._base[1]

    def _inputs(self, seed: int) -> tuple:
        ctx = InputContext(size=self.size, rank=self.rank, world_size=self.world_size,
                           dtype=DTYPES[self.dtype_name], device=self.device, seed=seed)
        return tuple(self.problem.make_inputs(ctx))

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _phase(self, phase: str) -> None:
        set_phase(self.job_dir, self.rank, phase)


class Captured:
    """One side's k calls captured in a CUDA graph: the input buffers it reads, the outputs it writes."""

    def __init__(self, graph: Any, inputs: list[tuple], outputs: list[Any]):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs

    def load(self, calls: list[tuple]) -> None:
        """Copy a region's fresh inputs into the buffers the graph reads."""
        for buffers, fresh in zip(self.inputs, calls):
            _copy_into(buffers, fresh)


def _copy_into(dst: Any, src: Any) -> None:
    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src):
            _copy_into(d, s)


def same_layout(a: Any, b: Any) -> bool:
    """Whether ``b`` fits the buffers of ``a``: tensors of the same shape, dtype and device, other
    values equal (a graph replays the values it was captured with)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same_layout(x, y) for x, y in zip(a, b))
    return a == b


def capture_calls(fn: Callable[..., Any], calls: list[tuple], device: torch.device) -> tuple[Any, list[Any]]:
    """``fn`` on each argument tuple, captured into one CUDA graph (after one call on the capture
    stream: libraries set up their per-stream state outside the capture)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        fn(*calls[0])
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    # thread_local: the process group's watchdog thread may query events while this thread captures
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
        outs = [fn(*args) for args in calls]
    torch.cuda.synchronize(device)
    return graph, outs


def _finding(id_: int, where: str = "", message: str = "", max_abs_error: float | None = None,
             kind: str = "value") -> dict[str, Any]:
    return {"id": id_, "ok": not message, "where": where, "message": message, "max_abs_error": max_abs_error,
            "kind": kind if message else ""}

