"""Inline CUDA C++ for candidates: nvcc builds it into a shared library, ctypes loads it.

A candidate keeps its kernels and an ``extern "C"`` launcher in a string constant and calls, at
import::

    lib = load_cuda(SOURCE, functions={"launch": ["ptr", "ptr", "i64", "stream"]})
    lib.launch(x.data_ptr(), out.data_ptr(), x.numel(), torch.cuda.current_stream().cuda_stream)

The library includes no torch header and links the CUDA runtime statically, so it builds on any
machine with nvcc (the compile workers have no GPU and may have another torch) and loads in any
torch process. Pointers, sizes and the stream are passed as plain values; for communication the
candidate gets peer addresses from torch symmetric memory (``rendezvous(buf).buffer_ptrs``).

Builds are cached on disk by a hash of everything they depend on (:meth:`BuildSpec.key`). The
compile stage finds the sources statically (:func:`find_sources`) and builds them before any GPU
is involved; in a rank, ``load_cuda`` then only loads. A source it cannot find statically (built
at run time from pieces) is built by the rank itself, within the same time limit.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pkb_ray.isolation import sandbox

BUILD_VERSION = 2  # bump when the build command changes: old cache entries are then ignored
DEFAULT_ARCH = "sm_90a"
ENV_ARCH, ENV_CACHE, ENV_TIMEOUT = "PKB_CUDA_ARCH", "PKB_CUDA_CACHE", "PKB_CUDA_BUILD_TIMEOUT"
LOADER_NAMES = ("load_cuda",)
# Headers candidates may include (``#include <pkb_ray/peer.cuh>``); part of every build's key.
INCLUDE_DIR = Path(__file__).resolve().parent / "include"

ARG_TYPES = {"ptr": ctypes.c_void_p, "stream": ctypes.c_void_p, "i64": ctypes.c_int64, "i32": ctypes.c_int32,
             "u64": ctypes.c_uint64, "f32": ctypes.c_float, "f64": ctypes.c_double}


class CudaBuildError(RuntimeError):
    """nvcc failed or ran out of time; the message is the compiler's."""


@functools.lru_cache(maxsize=1)
def nvcc_path() -> str:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    found = Path(home) / "bin" / "nvcc"
    return str(found) if found.exists() else (shutil.which("nvcc") or "nvcc")


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str:
    try:
        out = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


@functools.lru_cache(maxsize=1)
def headers_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(INCLUDE_DIR)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class BuildSpec:
    source: str
    arch: str = DEFAULT_ARCH
    flags: tuple[str, ...] = ()

    def key(self) -> str:
        """Content hash: source, flags, architecture, compiler, our headers and build recipe."""
        blob = json.dumps([BUILD_VERSION, self.source, self.arch, list(self.flags), nvcc_version(), headers_digest()])
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def command(self, src: Path, out: Path) -> list[str]:
        return [nvcc_path(), "-shared", "-Xcompiler", "-fPIC", "-O3", f"-arch={self.arch}", "-std=c++17",
                f"-I{INCLUDE_DIR}", *self.flags, "-o", str(out), str(src)]


def build(spec: BuildSpec, cache_dir: Path, timeout_s: float = 300.0,
          isolation: sandbox.Isolation = sandbox.Isolation.NONE, hide: Sequence[Path] = ()) -> Path:
    """The library for ``spec``: from the cache, else built now (atomically, race-safe).

    ``isolation``: nvcc runs in a sandbox (the source is a candidate's: an ``#include`` of a secret
    would put it in the error message) that hides ``hide`` and the secrets under HOME. In a rank,
    whose sandbox makes the shared cache read-only, a source the compile stage did not build is
    built into the rank's own scratch instead.
    """
    final = Path(cache_dir) / spec.key()
    lib = final / "lib.so"
    if lib.exists():
        return lib
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=final.parent))
    except OSError:
        private = Path(tempfile.gettempdir()) / "pkb_ray_cuda"
        if Path(cache_dir) == private:
            raise
        return build(spec, private, timeout_s, isolation, hide)
    try:
        src = work / "kernel.cu"
        src.write_text(spec.source)
        probe = sandbox.probe(isolation)
        policy = sandbox.Policy(writable=[work], hide=[*sandbox.default_hidden(), *hide])
        nvcc = sandbox.Spec(spec.command(src, work / "lib.so"), policy, probe,
                            sandbox.child_env(os.environ, {}, probe.level), cwd_in_sandbox=str(work), host_cwd=work)
        try:
            done = sandbox.run(nvcc, timeout_s)
        except subprocess.TimeoutExpired:
            raise CudaBuildError(f"nvcc did not finish within {timeout_s:.0f} s") from None
        except OSError as exc:
            raise CudaBuildError(f"cannot run nvcc ({nvcc_path()}): {exc}") from None
        if done.returncode != 0:
            text = (done.stderr + done.stdout).replace(str(work) + "/", "")
            raise CudaBuildError(f"nvcc exited with {done.returncode}:\n{text.strip()}")
        (work / "command.txt").write_text(" ".join(spec.command(Path("kernel.cu"), Path("lib.so"))))
        try:
            work.rename(final)  # another worker may have won the race: its build is as good
        except OSError:
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return lib


def _rank_settings() -> tuple[str, Path, float]:
    cache = Path(os.environ.get(ENV_CACHE) or Path("~/.cache/pkb_ray/cuda").expanduser())
    return os.environ.get(ENV_ARCH, DEFAULT_ARCH), cache, float(os.environ.get(ENV_TIMEOUT, "300"))


def load_cuda(source: str, functions: dict[str, Sequence[str]] | None = None, *,
              flags: Sequence[str] = ()) -> ctypes.CDLL:
    """Load (building first if the compile stage did not) the library of ``source``.

    ``functions`` declares argument types of the ``extern "C"`` functions to call, each one of
    ``ptr, stream, i64, i32, u64, f32, f64``; they return an ``int`` (a cudaError_t, 0 = success).
    """
    arch, cache, timeout = _rank_settings()
    lib = ctypes.CDLL(str(build(BuildSpec(source, arch, tuple(flags)), cache, timeout)))
    for name, types in (functions or {}).items():
        fn = getattr(lib, name)
        fn.argtypes = [ARG_TYPES[t] for t in types]
        fn.restype = ctypes.c_int
    return lib


def find_sources(module_source: str) -> list[tuple[str, tuple[str, ...]]]:
    """(source, flags) of every ``load_cuda(...)`` call whose arguments are string constants.

    Constants may be literals, concatenations of them, or module-level names bound to them.
    Calls built from run-time values are skipped: the rank builds those itself.
    """
    tree = ast.parse(module_source)
    consts: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _constant(node.value, consts)
            if value is not None:
                consts[node.targets[0].id] = value
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _called_name(node.func) in LOADER_NAMES):
            continue
        arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "source"), None)
        flags_node = next((k.value for k in node.keywords if k.arg == "flags"), None)
        source = _constant(arg, consts) if arg is not None else None
        flags = _constant(flags_node, consts) if flags_node is not None else ()
        if isinstance(source, str) and isinstance(flags, tuple) and all(isinstance(f, str) for f in flags):
            found.append((source, flags))
    return found


def _called_name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _constant(node: ast.expr, consts: dict[str, object]):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant(node.left, consts), _constant(node.right, consts)
        return left + right if isinstance(left, str) and isinstance(right, str) else None
    if isinstance(node, (ast.Tuple, ast.List)):
        items = tuple(_constant(e, consts) for e in node.elts)
        return items if all(isinstance(i, str) for i in items) else None
    return None


_symmetric: dict = {}


def symmetric_buffer(numel: int, dtype, device, tag: str = ""):
    """A symmetric-memory buffer of this shape, made once per process: (buffer, handle, peer pointers).

    ``peer pointers`` is an int64 tensor on ``device`` holding every rank's buffer address
    (``handle.buffer_ptrs``), ready to pass to a kernel as ``const T* const*``. Making one is a
    collective (every rank must ask for the same shapes in the same order); later calls reuse it.
    """
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    key = (tag, numel, dtype, str(device))
    if key not in _symmetric:
        buf = symm_mem.empty(numel, dtype=dtype, device=device)
        handle = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
        ptrs = torch.tensor(handle.buffer_ptrs, dtype=torch.int64, device=device)
        _symmetric[key] = (buf, handle, ptrs)
    return _symmetric[key]


_pads: dict = {}


def signal_pads(handle, device):
    """(int64 tensor of every rank's signal-pad address on ``device``, slots per pad) of ``handle``.

    For the barriers of ``pkb_ray/peer.cuh``: a kernel of ``blocks`` blocks using
    ``block_barrier`` needs ``world * blocks`` slots, so launch at most ``slots // world`` blocks.
    """
    import torch

    key = id(handle)
    if key not in _pads:
        ptrs = torch.tensor(handle.signal_pad_ptrs, dtype=torch.int64, device=device)
        size = getattr(handle, "signal_pad_size", 2048)  # older torch: fixed 2048-byte pads
        _pads[key] = (ptrs, int(size) // 4, handle)  # keep handle alive: its id stays unique
    ptrs, slots, _ = _pads[key]
    return ptrs, slots
