"""Rules of a backend that hold whatever format a sample comes in, checked before anything is built or launched.

- NVLink multicast. ParallelKittens kernels synchronise through multicast objects
  (``cuMulticastCreate``): ``barrier_t``, multicast PGLs (``pgl<..., true>`` is the default), the
  ``multimem`` instructions, and the ParallelKittens runtime helpers that allocate with ``multicast=True``. On
  hardware whose profile says ``nvlink_multicast: false`` such a sample is refused with the
  pattern that gave it away: on shared machines creating a multicast object can take GPUs out of
  service, so it must never be tried. A direct ``cuMulticastCreate`` is refused in any backend.
- World size. A ParallelKittens kernel is compiled for ``NUM_DEVICES`` ranks (8 in ParallelKittens' runtime,
  unless the source says otherwise) and runs at that world size only.
"""

from __future__ import annotations

import re

from pkb_ray.spec.names import Backend

PK_DEFAULT_DEVICES = 8
_CALLS_NEEDING_FALSE = ("get_or_create_barrier", "create_parallel_tensor", "get_or_create_parallel_tensor")
_ALWAYS = [r"\bcuMulticastCreate\b", r"\bcuMulticastBindMem\b", r"\bcuMulticastBindAddr\b"]
_PK = [r"multicast\s*=\s*True", r"\bbarrier_t\s*<", r"\bbarrier_all\s*\(", r"\bsignal_all\s*\(", r"\bmultimem\b",
       r"\bmc_ptr(_at)?\b", r"\bmulticast_create_handle\b"]
_DEVICES = re.compile(r"\bNUM_DEVICES\s*=\s*(\d+)")


def multicast_use(source: str, backend: str) -> str:
    """What in ``source`` would create or use an NVLink multicast object ("" if nothing)."""
    for pattern in _ALWAYS + (_PK if backend == Backend.PARALLELKITTENS else []):
        m = re.search(pattern, source)
        if m:
            return _quote(source, m.start())
    if backend != Backend.PARALLELKITTENS:
        return ""
    for name in _CALLS_NEEDING_FALSE:  # these helpers default to multicast=True
        for m in re.finditer(rf"\b{name}\s*\(", source):
            args = _balanced(source, m.end() - 1, "(", ")")
            if not re.search(r"multicast\s*=\s*False", args):
                return _quote(source, m.start())
    for m in re.finditer(r"\bpgl\s*<", source):  # third template argument MULTICAST defaults to true
        params = _split_top(_balanced(source, m.end() - 1, "<", ">"))
        if len(params) < 3 or params[2].strip() != "false":
            return _quote(source, m.start())
    return ""


def pk_world_size(source: str) -> int:
    """The world size a ParallelKittens sample is built for."""
    m = _DEVICES.search(source)
    return int(m.group(1)) if m else PK_DEFAULT_DEVICES


def _quote(source: str, at: int) -> str:
    line = source.count("\n", 0, at) + 1
    text = source.splitlines()[line - 1].strip() if source.splitlines() else ""
    return f"line {line}: {text[:120]}"


def _balanced(source: str, start: int, open_: str, close: str) -> str:
    """The text between the bracket at ``start`` and its match (to the end if unmatched)."""
    depth = 0
    for i in range(start, len(source)):
        if source[i] == open_:
            depth += 1
        elif source[i] == close:
            depth -= 1
            if depth == 0:
                return source[start + 1:i]
    return source[start + 1:]


def _split_top(text: str) -> list[str]:
    """``text`` split at commas outside nested <>, () and []."""
    parts, depth, last = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[last:i])
            last = i + 1
    return parts + [text[last:]]
