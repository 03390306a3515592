"""Comparing a candidate's outputs with the reference's, on one rank.

Outputs are a tensor, or a (nested) tuple/list of tensors and plain Python values. A candidate
output must have the reference's structure, shapes and dtypes, and its values must lie within
the problem's tolerance for the dtype; a NaN where the reference has a number (the poison an
unwritten element keeps) is a mismatch. Inputs are compared bit-exactly: a candidate may change
an input only where the reference changes it the same way.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import torch

POISON_FLOAT = float("nan")
POISON_BYTE = 0x5A  # integers have no NaN: every byte of an unwritten element reads 0x5A


@dataclass(frozen=True)
class Mismatch:
    where: str  # e.g. "output[1]"
    message: str
    max_abs_error: float | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def compare(expected: Any, actual: Any, atol: float, rtol: float, where: str = "output") -> Mismatch | None:
    """First difference between ``expected`` and ``actual``, or None when they agree."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return Mismatch(where, f"expected a tensor, got {_type_name(actual)}")
        return _compare_tensors(expected, actual, atol, rtol, where)
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)):
            return Mismatch(where, f"expected a {type(expected).__name__} of {len(expected)}, got {_type_name(actual)}")
        if len(actual) != len(expected):
            return Mismatch(where, f"expected {len(expected)} items, got {len(actual)}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = compare(e, a, atol, rtol, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return Mismatch(where, f"expected a dict, got {_type_name(actual)}")
        if sorted(map(str, actual)) != sorted(map(str, expected)):
            return Mismatch(where, f"expected keys {sorted(map(str, expected))}, got {sorted(map(str, actual))}")
        for key in sorted(expected, key=str):
            found = compare(expected[key], actual[key], atol, rtol, f"{where}[{key!r}]")
            if found:
                return found
        return None
    if expected != actual:
        return Mismatch(where, f"expected {expected!r}, got {actual!r}")
    return None


def _type_name(value: Any) -> str:
    """What a value is; a value the hand-over could not carry says what it was (tensor_io.Unsupported)."""
    return getattr(value, "type_name", None) or type(value).__name__


def _agrees(expected: torch.Tensor, actual: torch.Tensor, atol: float, rtol: float) -> bool:
    """Fast check with the same rule as below: |a - e| <= atol + rtol * |e|, NaN matches NaN, inf matches inf."""
    a = actual.detach()
    e = expected.detach().to(a.device)
    if not (a.is_floating_point() or a.is_complex()) or (atol == 0 and rtol == 0):
        return bool(torch.equal(a, e))
    if a.dtype in (torch.float16, torch.bfloat16) or a.element_size() < 4:
        a, e = a.float(), e.float()  # exact widening: the difference is not rounded to 8 bits
    return bool(torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True).all())


def _compare_tensors(expected: torch.Tensor, actual: torch.Tensor, atol: float, rtol: float, where: str) -> Mismatch | None:
    if actual.dtype != expected.dtype:
        return Mismatch(where, f"dtype {actual.dtype}, expected {expected.dtype}")
    if tuple(actual.shape) != tuple(expected.shape):
        return Mismatch(where, f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if expected.numel() == 0:
        return None
    if _agrees(expected, actual, atol, rtol):
        return None  # the common case, in one reduction and one sync; details only for a mismatch
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(a.device, torch.float64)
    finite_expected = torch.isfinite(e)
    nonfinite_actual = ~torch.isfinite(a) & finite_expected
    err = (a - e).abs()
    bad = (err > atol + rtol * e.abs()) & finite_expected
    bad |= nonfinite_actual
    bad |= ~finite_expected & ~((a == e) | (torch.isnan(a) & torch.isnan(e)))
    count = int(bad.sum())
    if count == 0:
        return None
    max_err = float(err[finite_expected & torch.isfinite(a)].max()) if bool((finite_expected & torch.isfinite(a)).any()) else None
    first = torch.nonzero(bad.reshape(-1))[0].item()
    index = tuple(torch.unravel_index(torch.tensor(first), expected.shape)) if expected.dim() else ()
    index = tuple(int(i) for i in index)
    detail = f"{count} of {expected.numel()} elements differ"
    if int(nonfinite_actual.sum()):
        detail += f" ({int(nonfinite_actual.sum())} NaN/inf: unwritten or overflowed)"
    detail += f"; first at {index}: got {a.reshape(-1)[first].item():.6g}, expected {e.reshape(-1)[first].item():.6g}"
    if max_err is not None:
        detail += f"; max abs error {max_err:.3g}"
    return Mismatch(where, detail, max_err)


def poison_like(structure_: list[list], device: torch.device) -> list[torch.Tensor]:
    """Tensors the size of each expected output (given as :func:`structure`), filled with poison.

    Allocated and freed just before a candidate call so that the caching allocator hands the
    poisoned blocks to the candidate's ``torch.empty``: an element it never writes then reads
    as NaN instead of the stale right answer left behind by the previous call. On CPU this is
    best effort (large allocations come back from the OS zeroed, which fails the check as well).
    """
    out = []
    for shape, dtype_name in structure_:
        dtype = getattr(torch, dtype_name)
        buf = torch.empty(shape, dtype=dtype, device=device)
        if buf.is_floating_point() or buf.is_complex():
            buf.fill_(POISON_FLOAT)
        elif dtype == torch.bool:
            buf.fill_(True)
        elif buf.numel():
            buf.view(torch.uint8).fill_(POISON_BYTE)  # 0x5A5A5A5A in an int32: unlikely in any reference output
        out.append(buf)
    return out


def tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor of ``value``, in order (tuples, lists and dicts walked)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    return []


def to_cpu(value: Any) -> Any:
    """Detached CPU copies (a candidate's later writes into its own buffers cannot change them)."""
    return copy_tree(value, "cpu")


def copy_tree(value: Any, device: str | torch.device | None = None) -> Any:
    """Detached copies of every tensor in ``value`` (on ``device``, or where each one is)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(device or value.device, copy=True)
    if isinstance(value, tuple):
        return tuple(copy_tree(v, device) for v in value)
    if isinstance(value, list):
        return [copy_tree(v, device) for v in value]
    if isinstance(value, dict):
        return {k: copy_tree(v, device) for k, v in value.items()}
    return value


def output_devices(value: Any) -> list[str]:
    """The device of each output tensor, in order (outputs must live where the inputs do)."""
    return [str(t.device) for t in tensors(value)]


def aliases(outputs: Any, inputs: Any, earlier: list[Any] = ()) -> list[str]:
    """Which output tensors share memory with an input or with an earlier call's output.

    Compared by storage address, the same way on CPU and GPU. Whether sharing with an input is
    allowed is the reference's call (an in-place reference returns its input); sharing with an
    earlier output is never right: that output then changes under the caller's feet."""
    found = []
    ins, olds = _spans(inputs), [s for e in earlier for s in _spans(e)]
    for i, span in enumerate(_spans(outputs)):
        if _overlaps(span, ins):
            found.append(f"output {i} shares memory with an input")
        elif _overlaps(span, olds):
            found.append(f"output {i} shares memory with an earlier call's output")
    return found


def _spans(value: Any) -> list[tuple[int, int]]:
    return [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in tensors(value)
            if t.untyped_storage().nbytes() > 0]


def _overlaps(span: tuple[int, int], others: list[tuple[int, int]]) -> bool:
    start, size = span
    return any(start < o_start + o_size and o_start < start + size for o_start, o_size in others)


def structure(value: Any) -> list[list]:
    """[shape, dtype] of each output tensor: what poisoning needs, without the values."""
    return [[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in tensors(value)]


# --- where a rank's tensors lie: what the trusted side reads them by ------------------------------
# A rank reports, for every call, where each output and input tensor lies in its process's memory
# (a *layout*: one entry per tensor, in order). The entry is cheap to make inside a timed region:
# [address of the first element, numel, dtype (its index in LAYOUT_DTYPES)] for a contiguous
# tensor, followed by the shape and strides (in elements) for any other. The trusted side reads the bytes there itself,
# while the rank's processes are stopped (pkb_ray.isolation.memory), and the clean set reinterprets them with
# the reference's dtype and shape (from_layout). A forged entry can only point at bytes that are
# then checked: right bytes at a forged address are right bytes that the call made.

LAYOUT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
                 torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128,
                 *(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64")
                   if hasattr(torch, n))]
_DTYPE_CODE = {d: i for i, d in enumerate(LAYOUT_DTYPES)}


def layout(value: Any) -> list[list[int]]:
    """The layout entry of each tensor of ``value``, in order: [address, elements, dtype code,
    dimensions, *shape, *strides]."""
    return [[t.data_ptr(), t.numel(), _DTYPE_CODE.get(t.dtype, -1), t.dim(), *t.shape, *t.stride()]
            for t in tensors(value)]


def cuda_pointers(value: Any) -> list[int]:
    """The address of each CUDA tensor of ``value`` (whose allocations the rank exports for the
    clean rank to read: :mod:`pkb_ray.runner.cuda_ipc`)."""
    return [t.data_ptr() for t in tensors(value) if t.is_cuda]


def entry_dtype(entry: list[int]) -> torch.dtype | None:
    return LAYOUT_DTYPES[entry[2]] if len(entry) > 2 and 0 <= entry[2] < len(LAYOUT_DTYPES) else None


def entry_span(entry: list[int]) -> tuple[int, int]:
    """(first byte, bytes) that a layout entry covers; a malformed entry covers nothing."""
    dtype = entry_dtype(entry)
    if dtype is None or entry[1] <= 0:
        return (entry[0] if entry else 0, 0)
    ptr, numel, item = entry[0], entry[1], dtype.itemsize
    if len(entry) == 3:
        return ptr, numel * item
    ndim = entry[3]
    shape, strides = entry[4:4 + ndim], entry[4 + ndim:4 + 2 * ndim]
    if len(shape) != ndim or len(strides) != ndim or any(s < 0 for s in strides):
        return ptr, 0
    return ptr, (1 + sum((n - 1) * s for n, s in zip(shape, strides))) * item


def in_allocations(entries: list[list[int]], allocations: dict[str, list] | None) -> list[int]:
    """Which layout ``entries`` lie wholly in one of a rank's exported device ``allocations`` (base
    -> [size, IPC handle]): only a process on that device can read or write those."""
    table = sorted((int(base), int(size)) for base, (size, _) in (allocations or {}).items())
    found = []
    for i, entry in enumerate(entries):
        start, size = entry_span(entry)
        if size > 0 and any(base <= start and start + size <= base + length for base, length in table):
            found.append(i)
    return found


def layout_aliases(calls: list[tuple[list[list[int]], list[list[int]]]]) -> list[list[str]]:
    """What :func:`aliases` finds, from layouts, call by call: given each call's (output entries,
    input entries), its outputs that share memory with an input of their call or with an earlier
    call's output (one sweep over the sorted spans: a region holds hundreds of calls)."""
    spans = [[entry_span(e) for e in outs] for outs, _ in calls]
    after_earlier = set()
    open_spans: list[tuple[int, int, int]] = []
    for start, end, n, i in sorted((s, s + size, n, i) for n, sp in enumerate(spans)
                                   for i, (s, size) in enumerate(sp) if size > 0):
        while open_spans and open_spans[0][0] <= start:
            heapq.heappop(open_spans)
        for _, m, j in open_spans:
            if m != n:
                after_earlier.add((n, i) if m < n else (m, j))
        heapq.heappush(open_spans, (end, n, i))
    found = []
    for n, (sp, (_, ins)) in enumerate(zip(spans, calls)):
        in_spans = [s for s in map(entry_span, ins) if s[1] > 0]
        mine = set()
        for i, span in enumerate(sp):
            if span[1] > 0 and _overlaps(span, in_spans):
                mine.add(f"output {i} shares memory with an input")
            elif (n, i) in after_earlier:
                mine.add(f"output {i} shares memory with an earlier call's output")
        found.append(sorted(mine))
    return found


def from_layout(blob: torch.Tensor, entry: list[int], like: torch.Tensor) -> torch.Tensor | str:
    """The tensor a layout entry's bytes (``blob``, uint8, as the trusted side read them) hold, of
    the entry's dtype and shaped like the reference's ``like`` (a dtype that differs is then the
    comparison's to say); a message when they cannot be."""
    dtype = entry_dtype(entry)
    if dtype is None:
        return "a tensor of a dtype the evaluator does not read"
    if entry[1] != like.numel():
        return f"{entry[1]} elements, expected {like.numel()} (shape {tuple(like.shape)})"
    if blob.numel() != entry_span(entry)[1]:
        return "the bytes read do not cover the tensor"
    flat = blob.view(dtype) if blob.numel() else blob.new_empty(0).view(dtype)
    if len(entry) == 3:
        return flat.reshape(like.shape)
    ndim = entry[3]
    shape, strides = entry[4:4 + ndim], entry[4 + ndim:4 + 2 * ndim]
    if list(shape) != list(like.shape):
        return f"shape {tuple(shape)}, expected {tuple(like.shape)}"
    return flat.as_strided(shape, strides)


def entry_tensor(blob: torch.Tensor, entry: list[int]) -> torch.Tensor | str:
    """The tensor a layout entry's bytes hold, shaped as the entry says (the reference's own
    layouts: trusted); a message when they cannot be."""
    dtype = entry_dtype(entry)
    if dtype is None:
        return "a tensor of a dtype the evaluator does not read"
    if blob.numel() != entry_span(entry)[1]:
        return "the bytes read do not cover the tensor"
    flat = blob.view(dtype) if blob.numel() else blob.new_empty(0).view(dtype)
    if len(entry) == 3:
        return flat
    ndim = entry[3]
    return flat.as_strided(entry[4:4 + ndim], entry[4 + ndim:4 + 2 * ndim])


def compare_call(expected: Any, actual: Any, inputs_after: Any, actual_inputs: Any, atol: float,
                 rtol: float) -> Mismatch | None:
    """A call judged against the reference's on the same inputs: the first mismatch of the outputs
    (within the tolerance), then of the inputs as the call left them (bit for bit), or None."""
    bad = compare(expected, actual, atol, rtol, "output")
    if bad is None:
        bad = compare(inputs_after, actual_inputs, 0.0, 0.0, "input")
        if bad is not None:
            bad = Mismatch(bad.where, "changed by the call (the reference leaves it as it was): " + bad.message,
                           bad.max_abs_error)
    return bad


def rebuild(expected: Any, blobs: list[torch.Tensor], entries: list[list[int]]) -> tuple[Any, str]:
    """``expected`` (the reference's value) with each tensor replaced, in order, by the one the
    trusted side read (``blobs`` of uint8 at ``entries``); plain values are the reference's. A
    message instead when the read tensors do not fit it."""
    want = tensors(expected)
    if len(blobs) != len(want) or len(entries) != len(want):
        return None, f"{len(entries)} tensors, expected {len(want)}"
    made = []
    for i, (blob, entry, like) in enumerate(zip(blobs, entries, want)):
        found = from_layout(blob, entry, like)
        if isinstance(found, str):
            return None, f"tensor {i}: {found}"
        made.append(found)
    it = iter(made)

    def swap(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return next(it)
        if isinstance(value, (tuple, list)):
            return type(value)(swap(v) for v in value)
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    return swap(expected), ""
