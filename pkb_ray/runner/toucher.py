"""A process of the clean rank's own that runs one tiny kernel on its device when asked: the last
device work before each side's timed region, so that both sides' regions start the same way.

A GPU runs one process's context at a time; the first work of another process after it pays the
switch. The candidate's inputs are written through CUDA IPC by the clean rank, so the candidate's
region always began with a switch from the clean rank's context, while the reference's, filled by
its own process, never did (docs/benchmarks/trust.md; measured with a retired probe, in git history
at caf1188: scripts/bench_contexts.py).
With this kernel after every fill, each region starts with a switch from the toucher's context.

The child needs nothing but the driver (``libcuda.so.1`` through ctypes): it starts in a fraction
of a second and never imports torch or pkb_ray. One byte down its stdin asks for a kernel; one byte
up its stdout says it finished.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

# one thread stores a word: device work in the toucher's context, nothing else
PTX = b"""
.version 7.0
.target sm_75
.address_size 64
.visible .entry touch(.param .u64 p)
{
    .reg .u64 %rd<2>;
    .reg .u32 %r<1>;
    ld.param.u64 %rd0, [p];
    cvta.to.global.u64 %rd1, %rd0;
    mov.u32 %r0, 1;
    st.global.u32 [%rd1], %r0;
    ret;
}
"""


class Toucher:
    """The clean rank's side: starts the child on ``ordinal`` (the device's index as this process
    sees it, inherited environment and all) and waits for it to say it is ready."""

    def __init__(self, ordinal: int):
        self.proc = subprocess.Popen([sys.executable, "-I", __file__, str(ordinal)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, close_fds=True)
        ready = self.proc.stdout.read(1)
        if ready != b"R":
            self.proc.kill()
            raise RuntimeError(f"the device toucher did not start (exit {self.proc.wait()}; its error is in the "
                               "clean rank's log); eval.touch_devices=false times without it")

    def touch(self) -> None:
        """One kernel in the toucher's context, finished before this returns."""
        os.write(self.proc.stdin.fileno(), b"T")
        if os.read(self.proc.stdout.fileno(), 1) != b"D":
            raise RuntimeError(f"the device toucher died (exit {self.proc.wait()})")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _check(result: int, call: str) -> None:
    if result != 0:
        raise SystemExit(f"toucher: {call} failed: CUresult {result}")


def main(ordinal: int) -> None:
    cuda = ctypes.CDLL("libcuda.so.1")
    device, context, module, function, word = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), \
        ctypes.c_void_p(), ctypes.c_uint64()
    _check(cuda.cuInit(0), "cuInit")
    _check(cuda.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
    _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    _check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    _check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX)), "cuModuleLoadData")
    _check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"touch"), "cuModuleGetFunction")
    _check(cuda.cuMemAlloc_v2(ctypes.byref(word), ctypes.c_size_t(4)), "cuMemAlloc")
    params = (ctypes.c_void_p * 1)(ctypes.addressof(word))
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    os.write(stdout, b"R")
    while os.read(stdin, 1) == b"T":
        _check(cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, params, None), "cuLaunchKernel")
        _check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        os.write(stdout, b"D")


if __name__ == "__main__":
    main(int(sys.argv[1]))
