"""Tensors between rank processes: a flat file format that a clean rank can read from an
untrusted writer at memory speed.

Outputs travel from a candidate's ranks to the clean ranks as files in the candidate's job folder,
and reference outputs from the clean ranks to the store. ``torch.save`` costs a pickle, a zip
container and a full extra copy each way; at default sizes (hundreds of MB per trial) that was
most of a sample's time outside its timed rounds. Here a file is::

    b"PKBTNS01" | header length (8 bytes, little endian) | JSON header | padding | raw tensor bytes

The header holds the value's tree (tensors, tuples, lists, str-keyed dicts, JSON scalars, dtypes and
devices; process
groups, modules and sparse tensors by what they hold (:func:`_canonical`); anything else by its
type's name only, see :class:`Unsupported`) and, per
tensor, dtype, shape and offset (64-byte aligned). A reader never unpickles anything: it reads the
whole file into one buffer (pinned when the target is a GPU), checks the header against the file's
size, optionally checks the buffer's SHA-256, and makes each tensor a view of the buffer (CPU) or a
copy of it on the device. Anything malformed is a :class:`TensorFileError`, never a crash.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

MAGIC = b"PKBTNS01"
ALIGN = 64
MAX_HEADER_BYTES = 16 << 20
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    *(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64") if hasattr(torch, n)))}

_pinned: dict[str, torch.Tensor] = {}  # one reusable pinned staging buffer per direction ("in", "out")


class Unsupported:
    """Stands for a value the format does not carry (an arbitrary object): it equals only another
    stand-in of the same type (a change inside it cannot be seen), so a comparison with anything else
    reports what it was instead of the writer failing."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unsupported) and other.type_name == self.type_name

    def __hash__(self) -> int:
        return hash(self.type_name)

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


class TensorFileError(ValueError):
    """A tensor file that is missing, not a plain file, cut short or malformed."""


class DigestMismatch(TensorFileError):
    """The file's bytes are not the ones whose SHA-256 the caller expected."""


def write(path: Path, value: Any, digest: bool = False) -> str | None:
    """Write ``value`` to ``path`` (replaced atomically); its SHA-256 when ``digest``."""
    tensors: list[torch.Tensor] = []
    tree = _encode(value, tensors)
    flat = [t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1) for t in tensors]
    specs, offset = [], 0
    for t, f in zip(tensors, flat):
        specs.append({"dtype": _dtype_name(t.dtype), "shape": list(t.shape), "offset": offset,
                      "nbytes": f.numel() * f.element_size()})
        offset = _aligned(offset + specs[-1]["nbytes"])
    header = json.dumps({"tree": tree, "tensors": specs}).encode()
    lead = MAGIC + len(header).to_bytes(8, "little") + header
    lead += bytes(_aligned(len(lead)) - len(lead))
    data = _host_bytes(flat, specs, offset)
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(lead)
        for chunk in data:
            f.write(chunk)
    os.replace(tmp, path)
    if not digest:
        return None
    h = hashlib.sha256(lead)
    for chunk in data:
        h.update(chunk)
    return h.hexdigest()


def read(path: Path, device: torch.device | str = "cpu", sha256: str | None = None) -> Any:
    """The value in ``path``, its tensors on ``device``; with ``sha256``, only if the bytes match it."""
    device = torch.device(device)
    buf = _read_all(Path(path), pinned=device.type == "cuda")
    if sha256 is not None and hashlib.sha256(_view(buf)).hexdigest() != sha256:
        raise DigestMismatch(f"{Path(path).name}: sha256 differs from the one verified")
    tree, specs, start = _parse_header(buf, Path(path).name)
    tensors = [_tensor(buf, start, spec, device, Path(path).name) for spec in specs]
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the pinned buffer is reused by the next read
    return _decode(tree, tensors, Path(path).name)


# -- writing -------------------------------------------------------------------------------------

def _encode(value: Any, tensors: list[torch.Tensor]) -> Any:
    value = _canonical(value)
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or _dtype_name(value.dtype) not in DTYPES:
            return {"other": f"{value.layout} tensor of {value.dtype}".replace("torch.", "")}
        tensors.append(value)
        return {"t": len(tensors) - 1}
    if isinstance(value, (tuple, list)):
        return {type(value).__name__: [_encode(v, tensors) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": [[k, _encode(v, tensors)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, str)) or type(value) in (int, float):
        return {"v": value}
    if isinstance(value, torch.dtype):
        return {"dtype": _dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    return {"other": type(value).__name__}


def canonical(value: Any) -> Any:
    """``value`` with every process group, module and sparse tensor in it replaced by what stands
    for it in a file (what a reader of the file would get back, before copying)."""
    value = _canonical(value)
    if isinstance(value, (tuple, list)):
        return type(value)(canonical(v) for v in value)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    return value


def _canonical(value: Any) -> Any:
    """What stands for values that are not data but carry some (imported problems' inputs and outputs
    hold them): a process group is its ranks, a module its state, a sparse tensor its indices, values and shape."""
    if isinstance(value, torch.Tensor) and value.layout == torch.sparse_coo:
        value = value.detach().coalesce()
        return ("sparse_coo", value.indices(), value.values(), list(value.shape))
    if isinstance(value, torch.nn.Module):
        return {"module": type(value).__name__, **{f"state.{k}": t for k, t in value.state_dict().items()}}
    if dist.is_available() and isinstance(value, dist.ProcessGroup):
        try:
            return ("process_group", *dist.get_process_group_ranks(value))
        except (RuntimeError, ValueError):  # not a member, or torn down
            return ("process_group",)
    return value


def _host_bytes(flat: list[torch.Tensor], specs: list[dict], total: int) -> list[memoryview]:
    """The tensors' bytes in file order (padding included), without copying CPU tensors."""
    if not any(f.device.type == "cuda" for f in flat):
        chunks = []
        for f, spec in zip(flat, specs):
            if spec["nbytes"]:
                chunks.append(_view(f.view(torch.uint8)))
            pad = _aligned(spec["offset"] + spec["nbytes"]) - spec["offset"] - spec["nbytes"]
            if pad and spec is not specs[-1]:
                chunks.append(memoryview(bytes(pad)))
        return chunks
    staging = _staging("out", total)  # one device-to-host pass into pinned memory, then one write
    for f, spec in zip(flat, specs):
        end = spec["offset"] + spec["nbytes"]
        if spec["nbytes"]:
            staging[spec["offset"]:end].copy_(f.view(torch.uint8), non_blocking=True)
        staging[end:_aligned(end)].zero_()  # the same value, the same bytes (and digest)
    for device in {f.device for f in flat if f.is_cuda}:  # each copy runs on its source's device
        torch.cuda.synchronize(device)
    last = specs[-1]["offset"] + specs[-1]["nbytes"] if specs else 0
    return [_view(staging[:last])]


# -- reading -------------------------------------------------------------------------------------

def _read_all(path: Path, pinned: bool) -> torch.Tensor:
    try:  # no symlinks to follow, no FIFO to block on: the writer may be hostile
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise TensorFileError(f"{path.name}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb", buffering=0) as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TensorFileError(f"{path.name}: not a plain file")
        size = info.st_size
        buf = _staging("in", size) if pinned else torch.empty(size, dtype=torch.uint8)
        view, got = _view(buf), 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                raise TensorFileError(f"{path.name}: cut short ({got} of {size} bytes)")
            got += n
    return buf[:size]


def _parse_header(buf: torch.Tensor, name: str) -> tuple[Any, list[dict], int]:
    raw = _view(buf)
    if len(raw) < 16 or bytes(raw[:8]) != MAGIC:
        raise TensorFileError(f"{name}: not a tensor file")
    length = int.from_bytes(raw[8:16], "little")
    if length > min(MAX_HEADER_BYTES, len(raw) - 16):
        raise TensorFileError(f"{name}: header of {length} bytes does not fit")
    try:
        header = json.loads(bytes(raw[16:16 + length]))
        tree, specs = header["tree"], header["tensors"]
        if not isinstance(specs, list):
            raise TypeError("tensors is not a list")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise TensorFileError(f"{name}: bad header: {exc}") from None
    return tree, specs, _aligned(16 + length)


def _tensor(buf: torch.Tensor, start: int, spec: Any, device: torch.device, name: str) -> torch.Tensor:
    try:
        dtype, shape = DTYPES[spec["dtype"]], [int(s) for s in spec["shape"]]
        offset, nbytes = int(spec["offset"]), int(spec["nbytes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TensorFileError(f"{name}: bad tensor entry {str(spec)[:200]}: {exc!r}") from None
    itemsize = torch.empty((), dtype=dtype).element_size()
    if any(s < 0 for s in shape) or nbytes != math.prod(shape) * itemsize or offset < 0 or offset % ALIGN:
        raise TensorFileError(f"{name}: inconsistent tensor entry {str(spec)[:200]}")
    if start + offset + nbytes > buf.numel():
        raise TensorFileError(f"{name}: a tensor lies past the end of the file")
    raw = buf[start + offset:start + offset + nbytes]
    t = (raw.view(dtype) if nbytes else torch.empty(0, dtype=dtype)).reshape(shape)
    return t.to(device, non_blocking=True) if device.type != "cpu" else t


def _decode(node: Any, tensors: list[torch.Tensor], name: str, depth: int = 0) -> Any:
    if depth > 64 or not isinstance(node, dict) or len(node) != 1:
        raise TensorFileError(f"{name}: bad value tree")
    (kind, body), = node.items()
    if kind == "t" and isinstance(body, int) and 0 <= body < len(tensors):
        return tensors[body]
    if kind in ("tuple", "list") and isinstance(body, list):
        items = [_decode(v, tensors, name, depth + 1) for v in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        return {str(k): _decode(v, tensors, name, depth + 1) for k, v in body}
    if kind == "v" and (body is None or isinstance(body, (bool, int, float, str))):
        return body
    if kind == "dtype" and isinstance(body, str) and isinstance(getattr(torch, body, None), torch.dtype):
        return getattr(torch, body)
    if kind == "device" and isinstance(body, str):
        try:
            return torch.device(body)
        except RuntimeError:
            raise TensorFileError(f"{name}: bad device {body[:50]!r}") from None
    if kind == "other" and isinstance(body, str):
        return Unsupported(body[:200])
    raise TensorFileError(f"{name}: bad value tree node {kind!r}")


# -- helpers -------------------------------------------------------------------------------------

def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _view(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU uint8 tensor, without a copy."""
    return memoryview(t.numpy()).cast("B") if t.numel() else memoryview(b"")


def _staging(direction: str, nbytes: int) -> torch.Tensor:
    """A pinned buffer of at least ``nbytes``, kept for the next transfer (pinning costs ms per MB)."""
    buf = _pinned.get(direction)
    if buf is None or buf.numel() < nbytes:
        _pinned.pop(direction, None)
        buf = _pinned[direction] = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, pin_memory=True)
    return buf[:nbytes]
