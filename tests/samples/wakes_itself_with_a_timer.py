# An honest all-reduce with a helper process that has the kernel resume it: a POSIX timer sends it
# SIGCONT every millisecond, so it runs while its set is stopped with no task of the set sending a
# signal. Its work is a chain of threads, each spinning 10 ms, starting the next and ending, so no
# task the freezer recorded is there, or gained CPU time, when it looks again (issue 64: seconds of
# CPU while the set was proven stopped, unreported, and the reference slowed 1.2-1.6x). The proof
# covers what was born or ran and ended since.
# Each thread re-arms the timer: the kernel re-arms a periodic timer only when its signal is
# delivered, and a SIGSTOP discards a pending SIGCONT, so an unattended timer dies after a few
# freezes (1 run in 7 then read `correct`, rightly: nothing ran while stopped).
import ctypes
import os
import signal
import threading
import time

import torch
import torch.distributed as dist


class _Sigevent(ctypes.Structure):  # struct sigevent on Linux (64 bytes)
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("pad", ctypes.c_int * 12)]


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("interval", _Timespec), ("value", _Timespec)]


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


_LIBC = ctypes.CDLL(None, use_errno=True)
_TIMER = ctypes.c_void_p()
_EVERY = _Timespec(0, 1_000_000)


def _arm() -> None:
    _LIBC.timer_settime(_TIMER, 0, ctypes.byref(_Itimerspec(_EVERY, _EVERY)), None)


def _helper() -> None:
    # a handler of its own: the kernel parks a timer whose signal is ignored (SIGCONT's default)
    signal.signal(signal.SIGCONT, lambda *_: None)
    event = _Sigevent(None, signal.SIGCONT, 0)  # SIGEV_SIGNAL
    if _LIBC.timer_create(1, ctypes.byref(event), ctypes.byref(_TIMER)) != 0:  # CLOCK_MONOTONIC
        os._exit(1)
    _arm()
    threading.Thread(target=_link).start()
    while True:  # the first thread sleeps: its CPU time barely moves
        time.sleep(3600)


def _link() -> None:
    """Spin 10 ms, hand over to a new thread, end: each task lives a moment and is gone."""
    _arm()
    _spin(0.01)
    threading.Thread(target=_link).start()


if os.fork() == 0:
    try:
        _helper()
    finally:
        os._exit(0)


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
