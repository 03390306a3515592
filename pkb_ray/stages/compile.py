"""Compiling a sample's source before any GPU time is spent on it.

For Python-module backends this is Python's own compiler: a ``SyntaxError`` becomes a
``compile_error`` with the line and the compiler's message. (CUDA extension builds join this
stage with the CUDA backend.)
"""

from __future__ import annotations

from pkb_ray.schema import Result, Sample, Status


def compile_sample(sample: Sample, world_size: int, category: str = "") -> Sample | Result:
    try:
        compile(sample.source, "candidate.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        where = f"candidate.py, line {exc.lineno}: " if isinstance(exc, SyntaxError) and exc.lineno else ""
        text = f"\n    {exc.text.rstrip()}" if isinstance(exc, SyntaxError) and exc.text else ""
        return Result.for_sample(sample, Status.COMPILE_ERROR, f"{where}{type(exc).__name__}: {exc.msg if isinstance(exc, SyntaxError) else exc}{text}",
                                 world_size=world_size, category=category)
    return sample
