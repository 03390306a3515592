"""The Linux calls that give a forked sample namespaces of its own (:mod:`pkb_ray.runner.zygote`).

Thin ctypes wrappers, each raising OSError with the call's name: ``unshare``, ``mount``,
``umount2``, ``sethostname``, uid/gid maps, bringing loopback up, and dropping every capability.
Python 3.11 has none of them (``os.unshare`` comes in 3.12). Linux only; nothing here runs
candidate code, and nothing is imported by the evaluator's own processes.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import socket
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags in a 24-byte union

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _b(s: str | None) -> bytes | None:
    return None if s is None else os.fsencode(s)


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount {fstype or source} on {target}")


def umount(target: str) -> None:
    _check(_libc.umount2(_b(target), MNT_DETACH), f"umount {target}")


def bind(source: str, target: str, *, read_only: bool, flags: int = 0) -> None:
    """A recursive bind mount, made read-only (with ``flags``) by a remount where asked. A bind
    keeps its source's flags; a remount must repeat those the kernel locked (nosuid, nodev, ...)."""
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        kept = os.statvfs(target).f_flag & (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)  # ST_* == MS_*
        if ~kept & (MS_RDONLY | flags):
            mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept | flags)


def tmpfs(target: str, size: int, *, mode: str = "0755") -> None:
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode}")


def sethostname(name: str) -> None:
    raw = name.encode()
    _check(_libc.sethostname(raw, len(raw)), "sethostname")


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")


def write(path: str, text: str) -> None:
    """Write with the error raised here (a file object closed by the garbage collector would
    swallow it)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def map_ids(uid: int, gid: int) -> None:
    """Map ``uid``/``gid`` of the parent user namespace to themselves in the one just unshared: a
    single mapping of our own ids, which needs no privilege in the parent (a mapping of root
    would: the kernel asks that whoever unshared held CAP_SETFCAP)."""
    write("/proc/self/setgroups", "deny")
    write("/proc/self/uid_map", f"{uid} {uid} 1")
    write("/proc/self/gid_map", f"{gid} {gid} 1")


def loopback_up() -> None:
    """Bring ``lo`` of this (new) network namespace up: its only interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        name = b"lo"
        flags = struct.unpack(_IFREQ, fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack(_IFREQ, name, 0)))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack(_IFREQ, name, flags | _IFF_UP))


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def drop_capabilities() -> None:
    """No capability left, none to regain: the bounding and ambient sets emptied, then the
    effective, permitted and inheritable ones (so an exec, even of a set-uid file, gets none),
    and no_new_privs."""
    for cap in range(_last_cap() + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap} from the bounding set")
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two cap_user_data_t of (effective, permitted, inheritable), all zero
    _check(_libc.capset(header, data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def capabilities_effective() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return -1


def mounts() -> list[tuple[int, int, str, bool]]:
    """This mount namespace's mounts, in the order they were made: (id, parent id, mount point, read-only)."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
            found.append((int(fields[0]), int(fields[1]), point, "ro" in fields[5].split(",")))
    return found
