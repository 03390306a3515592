"""A round's picked timed calls checked against the reference's same calls, read by the parent
from both sides' memory.

In each round both sides' regions get the same nonce (:mod:`pkb_ray.evaluate.rounds`), so call n of the
candidate's region and call n of the reference's ran on the same inputs: each rank's, from its
own key (:mod:`pkb_ray.measure.keys`). Each set holds its last region's outputs and inputs until its next
step, and when a round ends neither set has run since its region, both stopped: the parent reads
the picked calls' bytes from both (:mod:`pkb_ray.isolation.memory`) and compares them itself, with the
trials' rules (the outputs within the problem's tolerance, the inputs as the reference leaves
them, bit for bit). The reference's layouts come from the clean set (trusted); the candidate's
from its report (forgeable: read where it said, and fitted to the reference's shapes).

CPU tensors only: a call with a tensor in device memory is read and compared by the clean rank
on that device (:class:`pkb_ray.spec.wire.CheckTimed`).
"""

from __future__ import annotations

from typing import Callable

import torch

from pkb_ray.isolation.memory import Unreadable
from pkb_ray.measure.correctness import compare_call, entry_tensor, rebuild
from pkb_ray.spec.wire import Finding, Tol

Read = Callable[[list[list[int]]], list[bytes]]  # entries -> their bytes, from one rank's memory


def check_call(pick_id: int, reference: tuple[list, list], read_reference: Read, candidate: tuple[list, list],
               read_candidate: Read, tol: Tol) -> Finding:
    """One rank's part of a picked call: ``reference`` and ``candidate`` are (output layout, input
    layout) of that call on each side, ``read_*`` read a side's bytes. Raises :class:`Unreadable`
    when the reference's bytes cannot be read (the evaluator's fault)."""
    ref_out, ref_in = reference
    expected = [_tensor(b, e) for b, e in zip(read_reference([*ref_out, *ref_in]), [*ref_out, *ref_in])]
    cand_out, cand_in = candidate
    try:
        blobs = [_blob(b) for b in read_candidate([*cand_out, *cand_in])] if cand_out or cand_in else []
    except Unreadable as exc:
        return Finding.of(pick_id, "output", f"outputs unreadable where the rank said they lie: {exc}", kind="unreadable")
    outputs, why = rebuild(expected[:len(ref_out)], blobs[:len(cand_out)], cand_out)
    if why:
        return Finding.of(pick_id, "output", f"outputs: {why}")
    inputs, why = rebuild(expected[len(ref_out):], blobs[len(cand_out):], cand_in)
    if why:
        return Finding.of(pick_id, "output", f"inputs: {why}")
    bad = compare_call(expected[:len(ref_out)], outputs, expected[len(ref_out):], inputs, tol.atol, tol.rtol)
    return Finding.of(pick_id, bad.where, bad.message, bad.max_abs_error) if bad else Finding.of(pick_id)


def _blob(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def _tensor(data: bytes, entry: list[int]) -> torch.Tensor:
    made = entry_tensor(_blob(data), entry)
    if isinstance(made, str):  # the clean rank's own layout: never the candidate's doing
        raise Unreadable(f"the reference's tensor at {entry[:3]}: {made}")
    return made
