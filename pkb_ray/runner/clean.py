"""The clean rank set's steps: it never imports a candidate, and what it reports is trusted.

``reference`` computes expected outputs of the trial seeds; ``check_trials`` and ``check_timed``
compare with them what the trusted side read from a candidate's memory (on the rank's device: a
capture, :func:`read_capture`); ``region`` and ``capture``
time the reference itself, interleaved by the parent with the candidate's regions while every
process of the candidate's sandbox is stopped (:mod:`pkb_ray.evaluate.rounds`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from pkb_ray.spec import formats
from pkb_ray.measure.correctness import (aliases, compare_call, copy_tree, entry_span, in_allocations, layout, output_devices,
                                 rebuild, structure, tensors)
from pkb_ray.measure.keys import TIMED
from pkb_ray.runner import tensor_io
from pkb_ray.runner.graphs import copy_into, same_layout
from pkb_ray.runner.protocol import Side, StepFailed, tensor_file
from pkb_ray.runner.resident import BUDGET_BYTES, Resident, nbytes
from pkb_ray.runner.session import RankSession
from pkb_ray.runner.tensor_io import TensorFileError, canonical
from pkb_ray.runner.trace import traced_call
from pkb_ray.spec.names import Status
from pkb_ray.spec.wire import (Capture, CheckTimed, CheckTrials, ChecksReport, Command, ComputeReference, Fill, Finding,
                          FillReport, ReferenceReport, Report, Stage, StageReport, TimeRegion)


class CleanSession(RankSession):
    """A clean rank: the reference, and every comparison a verdict rests on."""

    side = Side.REF

    def __init__(self, rank: int, world_size: int, device: torch.device, job_dir: Path):
        super().__init__(rank, world_size, device, job_dir)
        # verified reference outputs kept on the device between samples (by content hash)
        self.resident = Resident(BUDGET_BYTES.get(device.type, BUDGET_BYTES["cpu"]))
        self._importer = None  # opens a candidate's device allocations (CUDA IPC), on a GPU
        self._peer: dict | None = None  # where the candidate's rank of this number staged its inputs
        self._kept: list = []  # rounds' inputs made ahead (Fill with keep), until the next fill
        self._secret = False  # whether timed inputs come from the timed calls' keys (stage)
        self._toucher = None  # a process of its own that uses the device before each region (Fill.touch)

    def steps(self) -> dict[type[Command], Callable[[Any], Report]]:
        return {ComputeReference: self.reference, CheckTrials: self.check_trials, CheckTimed: self.check_timed,
                TimeRegion: self.region, Capture: self.capture, Stage: self.stage, Fill: self.fill}

    def timed_fn(self) -> Callable[..., Any]:
        return self.problem.solution

    def _fetch(self, allocations: dict, spans: list) -> list[torch.Tensor]:
        """Copies of a candidate's device memory at ``spans``, through its allocations' IPC handles
        (opened once a sample: :meth:`reference`, each sample's first step, closes the last one's)."""
        if self._importer is None:
            from pkb_ray.runner.cuda_ipc import Importer  # loads the CUDA driver: GPU ranks only
            self._importer = Importer(self.device)
        return self._importer.read(allocations, spans)

    def stage(self, cmd: Stage) -> StageReport:
        """Its own staged buffers (:meth:`RankSession.stage`), and where the candidate's rank of the
        same number staged its own (``peer``: checked by the parent against these)."""
        self._peer = cmd.peer.get(str(self.rank)) or None
        self._kept = []
        report = super().stage(cmd)
        self._start_toucher(cmd.touch)  # its start (a context, ~0.3 s) before the rounds, not in the first fill
        # timed inputs from the keys no candidate's rank holds, where their base sets fit the staged
        # buffers (shapes and plain values that do not depend on the seed); else from the rank's
        self._secret = f"{TIMED}{self.rank}" in self.keys and all(
            same_layout(a, b) for a, b in zip(self._base_sets(cmd.base_seeds), self._base_sets(cmd.base_seeds, True)))
        return report

    def fill(self, cmd: Fill) -> FillReport:
        """A round's fresh inputs (its own key, the round's nonce: what :meth:`check_timed`
        recomputes from), for the side about to run, the candidate stopped: into its own staged
        buffers; or, with ``candidate``, made in buffers of their own and written into the
        candidate's staged tensors in the candidate's device memory through their IPC handles (the
        parent copies the rest from where this reports them). With ``keep``: the inputs of every
        round of ``nonces`` made at once and kept, for the parent to copy (host memory only). With
        no nonce and ``touch``: the toucher's kernel alone (before a blank region)."""
        if not cmd.nonces and cmd.touch:
            self._touch(cmd)
            return FillReport(written=0)
        if self._staged is None or len(self._staged) != cmd.k:
            raise StepFailed(Status.RUNTIME_ERROR.value, f"fill: no inputs of {cmd.k} calls staged")
        self._phase("fill")
        ns = list(range(cmd.k))
        if cmd.keep:
            self._kept = [self._call_inputs(cmd.base_seeds, nonce, ns, timed=self._secret) for nonce in cmd.nonces]
            return FillReport(written=0, kept=[[layout(canonical(args)) for args in calls] for calls in self._kept])
        if len(cmd.nonces) != 1:
            raise StepFailed(Status.RUNTIME_ERROR.value, f"fill: one round's nonce, not {len(cmd.nonces)}")
        if not cmd.candidate:
            copy_into(self._staged, self._call_inputs(cmd.base_seeds, cmd.nonces[0], ns, own=False, timed=self._secret))
            self._sync()
            self._touch(cmd)
            return FillReport(written=0)
        # not into its own buffers: they hold its last region's inputs until the round is checked
        self._kept = [self._call_inputs(cmd.base_seeds, cmd.nonces[0], ns, timed=self._secret)]
        written = self._write_peer(self._kept[0]) if self._peer and self.device.type == "cuda" else 0
        self._sync()
        self._touch(cmd)
        return FillReport(written=written, kept=[[layout(canonical(args)) for args in self._kept[0]]])

    def _touch(self, cmd: Fill) -> None:
        """The device's last work before the region, in the toucher's process: the candidate's
        region starts with a switch from another process's context (this one wrote its inputs), and
        now the reference's does too (:mod:`pkb_ray.runner.toucher`)."""
        if self._start_toucher(cmd.touch):
            self._toucher.touch()

    def _start_toucher(self, wanted: bool) -> bool:
        """Whether this rank has a toucher (started now where wanted and there is none yet)."""
        if not (wanted and self.device.type == "cuda"):
            return False
        if self._toucher is None:
            from pkb_ray.runner.toucher import Toucher
            self._toucher = Toucher(self.device.index if self.device.index is not None else torch.cuda.current_device())
        return True

    def _write_peer(self, calls: list[tuple]) -> int:
        """The tensors of ``calls`` copied into the candidate's staged ones that lie in its exported
        device allocations (the parent checked at staging that each fits the reference's)."""
        allocations = self._peer.get("allocations") or {}
        entries = [e for call in self._peer.get("inputs") or [] for e in call]
        mine = [t for args in calls for t in tensors(canonical(args))]
        if len(entries) != len(mine):
            raise StepFailed(Status.RUNTIME_ERROR.value,
                             f"the candidate staged {len(entries)} input tensors, the reference {len(mine)}")
        pairs = [(entry_span(entries[i]), mine[i]) for i in in_allocations(entries, allocations)]
        if any(not t.is_cuda or span[1] != t.numel() * t.element_size() for span, t in pairs):
            raise StepFailed(Status.RUNTIME_ERROR.value, "the candidate's staged inputs do not fit the reference's")
        if pairs:
            if self._importer is None:
                from pkb_ray.runner.cuda_ipc import Importer  # loads the CUDA driver: GPU ranks only
                self._importer = Importer(self.device)
            self._importer.write(allocations, [span for span, _ in pairs], [t.contiguous() for _, t in pairs])
        return len(pairs)

    def reference(self, cmd: ComputeReference) -> ReferenceReport:
        if self._importer is not None:  # a new sample: the last one's allocations are gone
            self._importer.close()
        out_dir = Path(cmd.out_dir)
        shapes, shared, traffic, input_bytes, digests = {}, {}, None, 0, {}
        for seed in cmd.seeds:
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
            path = tensor_file(out_dir, seed, self.rank)
            digest = digests[path.name] = tensor_io.write(path, value, digest=True)
            # the next check needs no read (the key is the content); kept as a reader of the file gets it
            self.resident.put(digest, copy_tree(tensor_io.canonical(value)))
        return ReferenceReport(structure=shapes, digests=digests, aliases=shared, devices=output_devices(out),
                               traffic=traffic, input_bytes=input_bytes)

    def check_trials(self, cmd: CheckTrials) -> ChecksReport:
        """Compare the candidate's trial outputs (and inputs after the call), as the trusted side
        read them, with the reference's."""
        tol = cmd.tolerance
        found = []
        for seed in cmd.seeds:
            self._phase(f"check seed={seed}")
            expected = self._expected(Path(cmd.expected_dir), seed, cmd.expected_sha256)
            path = tensor_file(Path(cmd.actual_dir), seed, self.rank)
            outputs, inputs, why, kind = read_capture(path, expected["outputs"], expected["inputs_after"], self.device,
                                                      self._fetch)
            if why:
                found.append(Finding.of(seed, "output", why, kind=kind))
                continue
            rule = formats.second_verdict() if seed == cmd.seeds[0] else None
            second = rule.agrees(expected["outputs"], outputs) if rule else None
            bad = compare_call(expected["outputs"], outputs, expected["inputs_after"], inputs, tol.atol, tol.rtol)
            found.append(Finding.of(seed, bad.where, bad.message, bad.max_abs_error, second=second) if bad
                         else Finding.of(seed, second=second))
        return ChecksReport(checks=found)

    def check_timed(self, cmd: CheckTimed) -> ChecksReport:
        """Recompute the reference on the inputs of the timed calls the parent picked (every rank of
        this set the same picks, in the same order: the reference may be collective) and compare
        the outputs and inputs the trusted side read after the candidate's call."""
        tol = cmd.tolerance
        found = []
        for pick in cmd.picks:
            self._phase(f"check timed call {pick.id}")
            inputs = self._call_inputs(cmd.base_seeds, pick.nonce, [pick.index], timed=self._secret)[0]
            expected = self.problem.solution(*inputs)  # the inputs as the reference leaves them, too
            self._sync()
            path = tensor_file(Path(cmd.actual_dir), pick.id, self.rank)
            expected, inputs = canonical(expected), canonical(inputs)  # as the candidate's layouts have them
            outputs, inputs_after, why, kind = read_capture(path, expected, inputs, self.device, self._fetch)
            if why:
                found.append(Finding.of(pick.id, "output", why, kind=kind))
                continue
            bad = compare_call(expected, outputs, inputs, inputs_after, tol.atol, tol.rtol)
            found.append(Finding.of(pick.id, bad.where, bad.message, bad.max_abs_error) if bad else Finding.of(pick.id))
        return ChecksReport(checks=found)

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



def read_capture(path: Path, outputs: Any, inputs: Any, device: torch.device,
                 fetch: Callable[[dict, list], list] | None = None) -> tuple[Any, Any, str, str]:
    """What the trusted side read of a call (:func:`pkb_ray.isolation.memory.write_capture`), as the values
    ``outputs`` and ``inputs`` (the reference's) would be: (outputs, inputs, "", "") or (None, None,
    why they cannot be had, the finding's kind). The tensors it left in the candidate's device
    memory are read now by ``fetch(allocations, spans)`` (:class:`pkb_ray.runner.cuda_ipc.Importer`),
    the candidate still stopped."""
    try:
        cap = tensor_io.read(path, device)
        if not isinstance(cap, dict):
            raise TensorFileError("not a capture")
    except TensorFileError as exc:
        return None, None, f"outputs not read: {exc}", "unreadable"
    if cap.get("error"):
        return None, None, f"outputs unreadable where the rank said they lie: {cap['error']}", "unreadable"
    (out_entries, in_entries), blobs = cap["layout"], [*cap["outputs"], *cap["inputs"]]
    remote = cap.get("remote") or []
    if remote:
        allocations = cap.get("allocations") or {}
        if any(not handle for _, handle in allocations.values()):
            return None, None, ("outputs in device memory that CUDA IPC cannot share (cuMem/VMM allocations, e.g. "
                                "symmetric memory): return tensors of torch's allocator"), "unshareable"
        entries = [*out_entries, *in_entries]
        try:
            for i, blob in zip(remote, fetch(allocations, [entry_span(entries[i]) for i in remote])):
                blobs[i] = blob
        except OSError as exc:  # not where the rank said, or no handle to open
            return None, None, f"outputs unreadable where the rank said they lie: {exc}", "unreadable"
    got_out, why = rebuild(outputs, blobs[:len(out_entries)], out_entries)
    if why:
        return None, None, f"outputs: {why}", "value"
    got_in, why = rebuild(inputs, blobs[len(out_entries):], in_entries)
    if why:
        return None, None, f"inputs: {why}", "value"
    return got_out, got_in, "", ""
