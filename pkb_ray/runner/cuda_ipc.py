"""Reading another process's GPU memory through CUDA IPC handles (legacy ``cuIpc*`` driver API).

A trusted process (a clean rank) has to see the bytes of a candidate rank's tensors without
trusting the candidate to hand them over: it reads them itself while the candidate is stopped
(SIGSTOP), so nothing the candidate does at read time can change what is read. All the candidate's
process contributes is *where*: our runner, inside it, exports an IPC handle for every allocation
its tensors lie in (:class:`Exporter`) while it runs; later the trusted process opens those handles
and copies the bytes out itself (:class:`Importer`). Opening and copying go through the kernel
driver and need nothing from the owner's process but that it still exists.

ctypes on the driver API (``libcuda.so.1``), not the runtime: torch bundles cudart under a file
name that varies between builds, while libcuda is the driver's and always has this name. The driver
API acts on the calling thread's current context; torch works in each device's primary context,
which is made current here for each call (and the caller's restored after).

Legacy IPC exports only ``cudaMalloc``-style allocations; memory from ``cuMemCreate`` (VMM, e.g.
expandable segments or symmetric memory) is recorded with an empty handle and cannot be read.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import functools
from typing import Iterator

import torch

CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
HANDLE_SIZE = 64

_u64, _size, _ptr, _int = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int


class CUipcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_SIZE)]


class CudaDriverError(OSError):
    """A driver call returned an error; ``code`` is its CUresult."""

    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} failed: CUresult {code} ({name})")
        self.call, self.code = call, code


class IpcReadError(OSError):
    """A span could not be read: outside every allocation, its allocation has no handle, or
    opening the handle failed."""


# argument types of every driver function used; all return CUresult (an int, 0 is success)
_SIGNATURES: dict[str, list] = {
    "cuInit": [ctypes.c_uint],
    "cuGetErrorName": [_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuDeviceGet": [ctypes.POINTER(_int), _int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_ptr), _int],
    "cuCtxGetCurrent": [ctypes.POINTER(_ptr)],
    "cuCtxPushCurrent_v2": [_ptr],
    "cuCtxPopCurrent_v2": [ctypes.POINTER(_ptr)],
    "cuPointerGetAttribute": [_ptr, _int, _u64],
    "cuMemGetAddressRange_v2": [ctypes.POINTER(_u64), ctypes.POINTER(_size), _u64],
    "cuIpcGetMemHandle": [ctypes.POINTER(CUipcMemHandle), _u64],
    "cuIpcOpenMemHandle_v2": [ctypes.POINTER(_u64), CUipcMemHandle, ctypes.c_uint],
    "cuIpcCloseMemHandle": [_u64],
    "cuMemcpyDtoDAsync_v2": [_u64, _u64, _size, _ptr],
}
# older drivers export only the unversioned name, with the same arguments
_FALLBACKS = {"cuIpcOpenMemHandle_v2": "cuIpcOpenMemHandle"}


class _Driver:
    def __init__(self, lib: ctypes.CDLL) -> None:
        for name, argtypes in _SIGNATURES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                if name not in _FALLBACKS:
                    raise OSError(f"libcuda.so.1 has no {name}") from None
                fn = getattr(lib, _FALLBACKS[name])
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            setattr(self, name, fn)

    def check(self, call: str, result: int) -> None:
        if result != 0:
            name = ctypes.c_char_p()
            known = self.cuGetErrorName(result, ctypes.byref(name)) == 0 and name.value
            raise CudaDriverError(call, result, name.value.decode() if known else "unknown error")


@functools.lru_cache(maxsize=1)
def _load() -> _Driver:
    return _Driver(ctypes.CDLL("libcuda.so.1"))


@functools.lru_cache(maxsize=1)
def _driver() -> _Driver:
    # cuInit only on first use, never on import or in available(): a process that initialises the
    # driver and then forks leaves its children unable to use CUDA
    d = _load()
    d.check("cuInit", d.cuInit(0))
    return d


def available() -> bool:
    """Whether libcuda loads (with every function used here) and torch sees a GPU."""
    try:
        _load()
    except OSError:
        return False
    return torch.cuda.is_available()


@functools.lru_cache(maxsize=None)
def _primary_context(ordinal: int) -> int:
    # retained once per process and never released: torch (cudart) holds the same context anyway
    d, dev, ctx = _driver(), _int(), _ptr()
    d.check("cuDeviceGet", d.cuDeviceGet(ctypes.byref(dev), ordinal))
    d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    return ctx.value or 0


@contextlib.contextmanager
def _on_device(ordinal: int) -> Iterator[_Driver]:
    """The driver with device ``ordinal``'s primary context current on this thread for the block.
    cudart makes it current lazily, per thread, so a thread that has made no runtime call yet
    (or last used another device) may have none or another."""
    d, ctx, current = _driver(), _primary_context(ordinal), _ptr()
    d.check("cuCtxGetCurrent", d.cuCtxGetCurrent(ctypes.byref(current)))
    if (current.value or 0) == ctx:
        yield d
        return
    d.check("cuCtxPushCurrent_v2", d.cuCtxPushCurrent_v2(ctx))
    try:
        yield d
    finally:
        d.check("cuCtxPopCurrent_v2", d.cuCtxPopCurrent_v2(ctypes.byref(_ptr())))


class Exporter:
    """In the rank that owns the tensors: the IPC handles of the allocations they lie in."""

    def __init__(self) -> None:
        self._bases: list[int] = []  # sorted; self._ends[i] is the end of the allocation at self._bases[i]
        self._ends: list[int] = []
        self._new: dict[str, list] = {}

    def note(self, ptr: int) -> None:
        """Make sure the allocation holding device address ``ptr`` is exported (cheap when it is:
        torch's caching allocator puts many tensors in one allocation). An allocation that legacy
        IPC cannot export (VMM memory) is remembered with an empty handle, not retried."""
        if ptr == 0:  # an empty tensor's: no storage
            return
        i = bisect.bisect_right(self._bases, ptr) - 1
        if i >= 0 and ptr < self._ends[i]:
            return
        # ranges are never forgotten: the caching allocator frees a segment only on empty_cache()
        # or an out-of-memory retry, after which a new one at the same place would be missed
        with _on_device(torch.cuda.current_device()) as d:
            ordinal = _int()
            d.check("cuPointerGetAttribute",
                    d.cuPointerGetAttribute(ctypes.byref(ordinal), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr))
        with _on_device(ordinal.value) as d:
            base, size, handle = _u64(), _size(), CUipcMemHandle()
            d.check("cuMemGetAddressRange_v2", d.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr))
            exported = d.cuIpcGetMemHandle(ctypes.byref(handle), base.value) == 0
        j = bisect.bisect_left(self._bases, base.value)
        self._bases.insert(j, base.value)
        self._ends.insert(j, base.value + size.value)
        self._new[str(base.value)] = [size.value, bytes(handle).hex() if exported else ""]

    def take_new(self) -> dict[str, list]:
        """The allocations exported since the last call: ``{str(base): [size, handle_hex]}``, the
        handle as 128 hex digits ('' when the allocation could not be exported)."""
        new, self._new = self._new, {}
        return new


def _located(allocations: dict[int, tuple[int, str]], spans: list[tuple[int, int]]) -> list:
    """Per span, ((base, size, handle), address, nbytes) of the allocation it lies wholly in (None
    for an empty span); raises when one lies in none."""
    table = sorted((int(base), int(size), handle) for base, (size, handle) in allocations.items())
    bases = [base for base, _, _ in table]
    found = []
    for address, nbytes in spans:
        i = bisect.bisect_right(bases, address) - 1
        if nbytes < 0 or nbytes and (i < 0 or address + nbytes > table[i][0] + table[i][1]):
            raise IpcReadError(f"span {address:#x}+{nbytes} is not wholly inside any allocation of the owner's")
        found.append((table[i], address, nbytes) if nbytes else None)
    return found


class Importer:
    """In the trusted process: opens handles and copies bytes out of (or into) another process's allocations."""

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"an Importer needs a CUDA device, not {self.device}")
        torch.cuda.init()
        self._ordinal = self.device.index if self.device.index is not None else torch.cuda.current_device()
        self._opened: dict[str, int] = {}  # handle_hex -> where its whole allocation is mapped here
        self._sizes: dict[str, int] = {}  # handle_hex -> the bytes mapped there (the driver's, not the owner's word)

    def read(self, allocations: dict[int, tuple[int, str]], spans: list[tuple[int, int]]) -> list[torch.Tensor]:
        """A new uint8 tensor on the device per span ``(address, nbytes)`` in the owner's address
        space, holding a copy of those bytes. ``allocations``: base -> (size, handle_hex) of the
        owner's allocations (keys may be ints or decimal strings); each span must lie wholly in one."""
        sources = _located(allocations, spans)
        out = []
        with _on_device(self._ordinal) as d:
            stream = torch.cuda.current_stream(self.device).cuda_stream  # the copies are ordered with the new tensors
            for source, (_, nbytes) in zip(sources, spans):
                dst = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
                if source is not None:
                    (base, size, handle), address, _ = source
                    src = self._open(d, base, size, handle) + (address - base)
                    d.check("cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync_v2(dst.data_ptr(), src, nbytes, stream))
                out.append(dst)
        torch.cuda.synchronize(self.device)
        return out

    def write(self, allocations: dict[int, tuple[int, str]], spans: list[tuple[int, int]],
              sources: list[torch.Tensor]) -> None:
        """Each contiguous tensor of ``sources`` (on this device, of the span's size) copied into the
        owner's memory at its span: the trusted side filling a stopped rank's staged inputs."""
        targets = _located(allocations, spans)
        with _on_device(self._ordinal) as d:
            stream = torch.cuda.current_stream(self.device).cuda_stream
            for target, (_, nbytes), src in zip(targets, spans, sources, strict=True):
                if nbytes != src.numel() * src.element_size() or not src.is_contiguous():
                    raise IpcReadError(f"a source of {src.numel() * src.element_size()} bytes for a span of {nbytes}")
                if target is not None:
                    (base, size, handle), address, _ = target
                    dst = self._open(d, base, size, handle) + (address - base)
                    d.check("cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync_v2(dst, src.data_ptr(), nbytes, stream))
        torch.cuda.synchronize(self.device)

    def _open(self, d: _Driver, base: int, size: int, handle_hex: str) -> int:
        """Where the allocation of ``handle_hex`` is mapped here; refuses one whose real size is
        smaller than the ``size`` the owner claimed (every read and write is checked against the
        claim, so the claim must not reach past the mapping: issue 64)."""
        where = f"allocation {base:#x} ({size} bytes)"
        if handle_hex in self._opened:
            self._fits(handle_hex, size, where)
            return self._opened[handle_hex]
        if not handle_hex:
            raise IpcReadError(f"{where} has no IPC handle (not exportable, e.g. VMM memory)")
        try:
            handle = CUipcMemHandle.from_buffer_copy(bytes.fromhex(handle_hex))
        except ValueError as e:
            raise IpcReadError(f"{where}: malformed handle {handle_hex!r}") from e
        opened = _u64()
        try:
            d.check("cuIpcOpenMemHandle", d.cuIpcOpenMemHandle_v2(ctypes.byref(opened), handle,
                                                                  CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        except CudaDriverError as e:
            raise IpcReadError(f"cannot open the IPC handle of {where}: {e}") from e
        self._opened[handle_hex] = opened.value
        real_base, real_size = _u64(), _size()
        d.check("cuMemGetAddressRange_v2", d.cuMemGetAddressRange_v2(ctypes.byref(real_base), ctypes.byref(real_size),
                                                                     opened.value))
        self._sizes[handle_hex] = real_size.value - (opened.value - real_base.value)
        self._fits(handle_hex, size, where)
        return opened.value

    def _fits(self, handle_hex: str, size: int, where: str) -> None:
        if size > self._sizes.get(handle_hex, 0):
            raise IpcReadError(f"{where}: its IPC handle maps {self._sizes.get(handle_hex, 0)} bytes, less than the "
                               "size its rank claimed")

    def close(self) -> None:
        """Unmap every opened handle (before the owner goes away); raises the first failure after
        trying them all."""
        if not self._opened:
            return
        opened, self._opened, self._sizes = self._opened, {}, {}
        failed: CudaDriverError | None = None
        with _on_device(self._ordinal) as d:
            for ptr in opened.values():
                try:
                    d.check("cuIpcCloseMemHandle", d.cuIpcCloseMemHandle(ptr))
                except CudaDriverError as e:
                    failed = failed or e
        if failed is not None:
            raise failed
