"""Where each side keeps its timed calls' inputs, and whether the candidate's fit the reference's.

Before a mode's rounds each set stages the input buffers of its k timed calls
(:class:`pkb_ray.spec.wire.Stage`) and says where they lie; then, before every round, with the
candidate stopped, the trusted side writes the round's fresh inputs into both sides' buffers (the
clean rank makes them from its key and the round's nonce, and writes its own buffers and, through
CUDA IPC, the candidate's in device memory; the parent copies the rest from the clean rank's
memory into the candidate's: :class:`Copies`). The candidate's process never makes a timed call's
inputs and never learns the nonce: no rank can tell another rank's timed inputs without being sent
them, and making them is nobody's time in a region.

The candidate's report of where its buffers lie is forgeable. Writing where it points harms only
itself (its own memory, its own exported allocations), but each of its tensors must fit the
reference's at the same place (dtype, shape, strides, device or host memory): :func:`misfit`.
Pure: no processes.
"""

from __future__ import annotations

from dataclasses import dataclass

from pkb_ray.measure.correctness import in_allocations

Layouts = list[list[list[int]]]  # per call, the layout of its inputs


def misfit(reference: Layouts, reference_on_device: list[list[bool]] | None, candidate: Layouts,
           candidate_allocations: dict | None) -> str:
    """Why the candidate's staged inputs do not fit the reference's ("" when they do). Which of the
    reference's lie in device memory its clean rank says (``reference_on_device``, trusted: a
    long-lived clean rank exported its allocations in earlier samples); the candidate's are in
    device memory where they lie in the allocations it exported."""
    if len(candidate) != len(reference):
        return f"{len(candidate)} calls' inputs staged, expected {len(reference)}"
    for n, (ref, cand) in enumerate(zip(reference, candidate)):
        if not isinstance(cand, list) or len(cand) != len(ref):
            return f"call {n}: {len(cand) if isinstance(cand, list) else 0} input tensors staged, expected {len(ref)}"
        for i, (r, c) in enumerate(zip(ref, cand)):
            if not (isinstance(c, list) and c and isinstance(c[0], int) and c[1:] == r[1:]):
                return f"call {n}, input tensor {i}: staged as {c[1:] if isinstance(c, list) else c!r}, expected {r[1:]}"
        on_device = {i for i, flag in enumerate((reference_on_device or [[]] * len(reference))[n]) if flag}
        theirs = set(in_allocations(cand, candidate_allocations))
        for i in range(len(ref)):
            if (i in on_device) != (i in theirs):
                said = "outside every device allocation its rank exported" if i in on_device else "in device memory"
                return (f"call {n}, input tensor {i}: staged {said}, expected "
                        f"{'device' if i in on_device else 'host'} memory")
    return ""


@dataclass(frozen=True)
class Copies:
    """One rank's staged tensors in host memory: where they lie in the clean rank's process and in
    the candidate's (the parent copies each round's inputs from one to the other)."""

    reference: list[list[int]]
    candidate: list[list[int]]
    indexes: list[int]  # their places among all staged tensors (the calls' in order)

    @classmethod
    def of(cls, reference: Layouts, reference_on_device: list[list[bool]] | None, candidate: Layouts) -> "Copies":
        """From layouts that fit (:func:`misfit`): every tensor not in device memory."""
        ref = [e for call in reference for e in call]
        cand = [e for call in candidate for e in call]
        on_device = {i for i, flag in enumerate(f for call in (reference_on_device or []) for f in call) if flag}
        keep = [i for i in range(len(ref)) if i not in on_device]
        return cls([ref[i] for i in keep], [cand[i] for i in keep], keep)
