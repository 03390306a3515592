"""What every rank session does, clean or candidate: load the problem, make a region's fresh
inputs, time a region of calls (eager or a graph replay) and say where its outputs and inputs lie
(:func:`pkb_ray.measure.correctness.layout`), holding them until the next step: the trusted side reads them
there while the set is stopped.

A clean set (:mod:`pkb_ray.runner.clean`) times the reference this way, a candidate's set
(:mod:`pkb_ray.runner.candidate`) the candidate: the same code in processes that never share a
side, so nothing a candidate does in its own process reaches the reference's calls.
"""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from pkb_ray.measure.correctness import copy_tree, cuda_pointers, layout, output_devices, tensors
from pkb_ray.measure.keys import SHARED, TIMED, derived
from pkb_ray.measure.timing import call_seed, fresh_calls, timed_region, timed_replay
from pkb_ray.problem import DTYPES, InputContext, Problem, load_problem
from pkb_ray.runner.firing import Armed, fire
from pkb_ray.runner.graphs import Captured, capture_calls, same_layout
from pkb_ray.runner.loading import candidate_traceback
from pkb_ray.runner.protocol import Side, StepFailed, set_phase
from pkb_ray.runner.tensor_io import canonical
from pkb_ray.spec.names import Status
from pkb_ray.spec.wire import Capture, CaptureReport, Command, RegionReport, Report, Stage, StageReport, TimeRegion


class RankSession:
    """State of one rank across steps: the problem of the current command, the base input sets of
    the timed calls, the last region's outputs, the captured graph of the side it times."""

    side: Side  # the one side this kind of set times

    def __init__(self, rank: int, world_size: int, device: torch.device, job_dir: Path):
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.job_dir = job_dir
        self.problems: dict[str, Problem] = {}
        self.keys: dict[str, int] = {}
        self._held: Any = None  # outputs and inputs of the last step's calls, until the next step
        self._base: dict[bool, tuple] = {}  # timed keys? -> (key, base input sets of the timed calls)
        self._graph: Captured | None = None  # the side's k calls captured (graph timing mode)
        self._exporter = None  # the IPC handles of the device allocations its tensors lie in (CUDA only)
        self._staged: list[tuple] | None = None  # the timed calls' inputs, as the trusted side fills them (stage)
        self._staged_layouts: list[list] = []  # where they lie, as the stage reported
        self._armed: Armed | None = None  # the region a fire line runs (TimeRegion.fire), until disarmed
        self.tick: torch.Tensor | None = None  # a blank region's one device operation (runner.firing)

    def steps(self) -> dict[type[Command], Callable[[Any], Report]]:
        """The commands this kind of set obeys, and the method that runs each."""
        raise NotImplementedError

    def run(self, cmd: Command) -> Report:
        step = self.steps().get(type(cmd))
        if step is None:
            raise StepFailed(Status.RUNTIME_ERROR.value, f"a {type(self).__name__} does not run {cmd.step!r}")
        path = cmd.case.problem_path
        self._received = time.perf_counter()  # a diagnostic: RegionReport.stamps
        self.problem = self.problems.get(path) or self.problems.setdefault(path, load_problem(path))
        self.keys = cmd.keys  # this rank's own key and the shared one (pkb_ray.measure.keys), or none
        self.dtype_name = cmd.case.dtype
        self.size = cmd.case.size
        return step(cmd)

    def timed_fn(self) -> Callable[..., Any]:
        """The function this set times."""
        raise NotImplementedError

    def region(self, cmd: TimeRegion) -> RegionReport:
        """k calls on fresh inputs (from the parent's nonce), timed back to back (or, with ``graph``,
        one replay of the captured calls on those inputs); then where each call's outputs and
        inputs lie, held until the next step."""
        self._check_side(cmd)
        self._held = None
        self._armed = None
        k, what = cmd.k, f"{cmd.what} ({self.side.value})"
        self._phase(what)
        captured = self._graph if cmd.graph else None
        if cmd.graph and (captured is None or captured.key != self._graph_key(k)):
            raise StepFailed(Status.RUNTIME_ERROR.value, f"{what}: no graph of {k} calls captured")
        if cmd.staged:  # filled by the trusted side while the set was stopped (a graph reads them too)
            if self._staged is None or len(self._staged) != k:
                raise StepFailed(Status.RUNTIME_ERROR.value, f"{what}: no inputs of {k} calls staged")
            calls = self._staged
        else:
            calls = self._call_inputs(cmd.base_seeds, cmd.nonce, list(range(k)), own=captured is None)
            if captured is not None:
                captured.load(calls)
                calls = captured.inputs  # what the replay reads
        fn = self.timed_fn()
        if cmd.fire:  # fired later by a line: nothing of this step's work is timed
            self._armed = Armed(cmd, calls, fn, captured, what, described=cmd.described)
            gc.collect(0)
            return RegionReport(us=0.0, calls=[], devices=[], handles=self.exported())
        gc.collect(0)  # the young generation only: a full collection costs ~170 ms with torch loaded
        gc.disable()  # a collection inside a region would be charged to whichever side triggered it
        # a barrier first: the first device work after the set resumes costs more in a candidate's
        # process than in the clean one, and without it that cost lands in the timed calls (a graph
        # replay of 48 calls on an H100: 470 us against 270 us; with it, alike: docs/benchmarks/trust.md)
        try:
            dist.barrier()
            passed = time.perf_counter()
            if captured is not None:
                outs, us = captured.outputs, timed_replay(captured.graph, k, self.device)
            else:
                outs, us = timed_region(fn, calls, self.device)
            done = time.perf_counter()
        except BaseException:  # noqa: BLE001
            raise StepFailed(Status.RUNTIME_ERROR.value, f"timed call, {what}:\n{candidate_traceback()}") from None
        finally:
            gc.enable()
        self._held = (outs, calls) if cmd.hold else None
        # both sides say where (the same work inside the parent's bracket), though only a candidate's are read
        # a graph's outputs, once described, lie where they were: the parent keeps the last description
        as_before = bool(cmd.described and cmd.hold and cmd.staged and captured is not None
                         and captured.output_layouts is not None)
        placed = self._placed_region(outs, calls, cmd.staged, captured) if cmd.hold and not as_before else []
        return RegionReport(us=us, calls=placed, devices=output_devices(outs[0]), handles=self.exported(),
                            stamps=[self._received, passed, done, time.perf_counter()], as_before=as_before)

    def fire(self, tag: str, blank: bool) -> RegionReport:
        """The armed region, fired by a line (:func:`pkb_ray.runner.firing.fire`)."""
        return fire(self, tag, blank)

    def _placed_region(self, outs: list[Any], calls: list[Any], staged: bool, captured: Any) -> list[list]:
        """:meth:`placed` for a timed region, without describing again what has not moved: staged
        inputs lie where the stage said (and were exported then), so a call is ``[outputs]`` and the
        parent takes its inputs from the stage report (:func:`pkb_ray.evaluate.rounds.with_staged_inputs`); a
        graph's outputs lie where its capture put them. This work is inside the parent's bracket,
        once a call, on both sides."""
        if not staged:
            return self.placed(outs, calls)
        if captured is None:
            out_layouts = [layout(canonical(out)) for out in outs]
            self._export(outs)
        else:
            if captured.output_layouts is None:
                captured.output_layouts = [layout(canonical(out)) for out in outs]
                self._export(outs)
            out_layouts = captured.output_layouts
        return [[o] for o in out_layouts[:len(self._staged_layouts)]]

    def placed(self, outs: list[Any], calls: list[Any]) -> list[list]:
        """Where each call's outputs and inputs lie (layouts); on a GPU their allocations exported
        too, so that the clean rank can read them while this process is stopped."""
        # what a tensor file of the value would hold (a module's state, a process group's ranks): the
        # reference's values are compared in that form
        placed = [[layout(canonical(out)), layout(canonical(args))] for out, args in zip(outs, calls)]
        self._export([*outs, *calls])
        return placed

    def _export(self, values: list[Any]) -> None:
        """On a GPU, the allocations the tensors of ``values`` lie in exported (their handles go in
        the next report: :meth:`exported`)."""
        if self.device.type != "cuda":
            return
        if self._exporter is None:
            from pkb_ray.runner.cuda_ipc import Exporter  # loads the CUDA driver: GPU ranks only
            self._exporter = Exporter()
        for value in values:
            for ptr in cuda_pointers(canonical(value)):
                self._exporter.note(ptr)

    def stage(self, cmd: Stage) -> StageReport:
        """Keep the input buffers of the mode's k timed calls (eager: copies of the base sets; graph:
        the ones the captured graph reads) and say where they lie. The trusted side writes each
        round's inputs into them while this set is stopped (:meth:`CleanSession.fill`): timed calls
        never run on inputs made in this process."""
        self._check_side(cmd)
        self._held = None
        self._armed = None
        self._phase(f"stage ({self.side.value})")
        if cmd.graph:
            if self._graph is None or self._graph.key != self._graph_key(cmd.k):
                raise StepFailed(Status.RUNTIME_ERROR.value, f"no graph of {cmd.k} calls captured to stage")
            self._staged = self._graph.inputs
        else:
            sets = self._base_sets(cmd.base_seeds)
            self._staged = [copy_tree(sets[n % len(sets)]) for n in range(cmd.k)]
        self._export(self._staged)
        self._staged_layouts = [layout(canonical(args)) for args in self._staged]
        return StageReport(inputs=self._staged_layouts, handles=self.exported(),
                           on_device=[[t.is_cuda for t in tensors(canonical(args))] for args in self._staged])

    def exported(self) -> dict[str, list]:
        return self._exporter.take_new() if self._exporter is not None else {}

    def capture(self, cmd: Capture) -> CaptureReport:
        """Capture k calls, on input buffers of their own, into a CUDA graph that later regions
        replay. Reports ``captured`` and, when it could not, why: the parent then times both sides
        eager."""
        self._check_side(cmd)
        self._held = None
        self._armed = None
        k = cmd.k
        self._phase(f"capture ({self.side.value})")
        if self.device.type != "cuda":
            return CaptureReport(captured=False, error=f"CUDA graphs need a CUDA device, not {self.device.type}")
        self._graph = None  # its memory goes back before the next is captured
        calls = self._call_inputs(cmd.base_seeds, cmd.nonce, list(range(k)))
        again = self._call_inputs(cmd.base_seeds, cmd.nonce + 1, list(range(k)), own=False)
        if not all(same_layout(a, b) for a, b in zip(calls, again)):
            return CaptureReport(captured=False,
                                 error="the problem's inputs change shape or non-tensor values from call to call")
        dist.barrier()
        try:
            graph, outs = capture_calls(self.timed_fn(), calls, self.device)
        except BaseException:  # noqa: BLE001 - the side stays eager; the reason goes in the row
            error = candidate_traceback()
            try:
                torch.cuda.synchronize(self.device)
            except RuntimeError as exc:  # the context did not survive: eager timing cannot run either
                raise StepFailed(Status.RUNTIME_ERROR.value, f"capture ({self.side.value}) broke the device: "
                                 f"{exc}\n{error}") from None
            return CaptureReport(captured=False, error=error[-2000:])
        self._graph = Captured(graph, calls, outs, key=self._graph_key(k))
        return CaptureReport(captured=True)

    def _check_side(self, cmd: TimeRegion | Capture) -> None:
        if cmd.side is not self.side:
            raise StepFailed(Status.RUNTIME_ERROR.value, f"a {type(self).__name__} times the {self.side.value} "
                             f"side only, not {cmd.side.value!r}")

    def _graph_key(self, k: int) -> tuple:
        return (id(self.problem), self.dtype_name, json.dumps(self.size, sort_keys=True), k)

    def _call_inputs(self, base_seeds: list[int], nonce: int, ns: list[int], own: bool = True,
                     timed: bool = False) -> list[tuple]:
        """The inputs of timed calls ``ns`` of the region with ``nonce`` (see
        :func:`pkb_ray.measure.timing.fresh_inputs`), made in one batched pass per base set. Without ``own``
        the calls may share memory: only for copying into a graph's buffers or comparing layouts.
        With ``timed``: from the timed calls' keys (a clean rank's, :mod:`pkb_ray.measure.keys`)."""
        sets, made = self._base_sets(base_seeds, timed), {}
        for s, base in enumerate(sets):
            mine = [n for n in ns if n % len(sets) == s]
            fresh = fresh_calls(base, nonce, mine, own) if mine else []
            made.update(zip(mine, fresh if fresh is not None else [self._inputs(call_seed(nonce, n), timed)
                                                                    for n in mine]))
        return [made[n] for n in ns]

    def _base_sets(self, base_seeds: list[int], timed: bool = False) -> list[tuple]:
        key = (id(self.problem), self.dtype_name, json.dumps(self.size, sort_keys=True), tuple(base_seeds),
               tuple(sorted(self.keys.items())))
        if self._base.get(timed, (None,))[0] != key:  # drawn once per sample (per problem in a clean set)
            self._base[timed] = (key, [self._inputs(s, timed) for s in base_seeds])
        return self._base[timed][1]

    def _inputs(self, seed: int, timed: bool = False) -> tuple:
        """The inputs labelled ``seed``: drawn from this rank's secret and the shared one where the
        command carried them (pkb_ray.measure.keys; with ``timed``, the timed calls' pair), else from
        ``seed`` itself."""
        prefix = TIMED if timed else ""
        own, shared = self.keys.get(f"{prefix}{self.rank}"), self.keys.get(f"{prefix}{SHARED}")
        ctx = InputContext(size=self.size, rank=self.rank, world_size=self.world_size,
                           dtype=DTYPES[self.dtype_name], device=self.device,
                           seed=seed if own is None else derived(own, seed),
                           shared_seed=None if shared is None else derived(shared, seed))
        return tuple(self.problem.make_inputs(ctx))

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _phase(self, phase: str) -> None:
        set_phase(phase)
