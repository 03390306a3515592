"""What a sandbox shows of the host's file system: an allowlist, and nothing else.

The sandbox's root starts empty (a tmpfs of bubblewrap's). Bound read-only into it, each at its
own path (:func:`visible` lists them):

- the system: ``/usr``, and ``/bin``, ``/lib``, ... as the host has them (links into /usr, or
  folders of their own);
- a minimal ``/etc``: the loader's cache and configuration, Debian's alternatives (``cc``,
  ``c++`` for builds), the time zone and NCCL's configuration, where they exist; ``passwd``,
  ``group``, ``hosts``, ``hostname`` and ``nsswitch.conf`` are small files of our own
  (:func:`etc_files`), so the host's users and names stay outside;
- the interpreter: its prefix, base prefix and executable;
- each ``sys.path`` entry the ranks import from (a child with the ranks' ``PYTHONPATH`` prints
  them, once per process), except that a checkout of pkb_ray shows only its package: not its
  ``.env``, ``.git`` or outputs;
- the library folders the loader is told of (``LD_LIBRARY_PATH``, ``/etc/ld.so.conf.d``) and the
  CUDA toolkit (``CUDA_HOME``, ``CUDA_PATH``, nvcc's);
- of ``/sys``: the CPUs' and NUMA nodes' topology; on GPU the device tree, buses, classes and
  modules that NVML, CUDA and NCCL's topology search read;
- what the caller adds (problem folders, an imported benchmark's checkout, build caches, the job's folder).

A folder too broad to bind (``/``, an ancestor of HOME or of the checkout, /tmp, /etc, ...) is
never bound, whichever list names it (:func:`too_broad`). The scratch (``/tmp``, ``/dev/shm``), ``/dev`` and a
private ``/proc`` are made by :mod:`pkb_ray.isolation.sandbox` itself.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pkb_ray.spec.paths import CODE_ROOT, DATA_ROOT, PACKAGE

MERGED = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # links into /usr where /usr is merged
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "alternatives", "localtime", "timezone",
       "nccl.conf")
SYS_CPU = ("/sys/devices/system/cpu", "/sys/devices/system/node")
SYS_GPU = ("/sys/devices", "/sys/bus", "/sys/class", "/sys/dev", "/sys/module", "/sys/kernel/mm")
OWN_FOLDERS = ("/tmp", "/dev", "/proc", "/etc", "/sys")  # made by the sandbox, or bound in part only
HOSTNAME = "pkb-sandbox"  # the sandbox's own name where it has a network of its own
SCRATCH_HOME = "/tmp/home"  # HOME inside (the scratch): see sandbox.child_env


def too_broad(path: Path) -> bool:
    """Binding ``path`` would show what the allowlist exists to keep out: the root, a folder holding
    HOME or the checkout, or one the sandbox makes itself (/tmp, /dev, /proc) or keeps minimal (/etc, /sys)."""
    path = Path(path)
    guarded = [Path.home().resolve(), CODE_ROOT if in_checkout() else None, *map(Path, OWN_FOLDERS)]
    if path.parts[:2] in (("/", "proc"), ("/", "dev")):
        return True
    return any(g is not None and (g == path or g.is_relative_to(path)) for g in guarded)


def in_checkout() -> bool:
    """pkb_ray runs from a checkout (conf/ beside the package), not from an installed wheel."""
    return DATA_ROOT == CODE_ROOT


def _existing(paths) -> list[Path]:
    return [Path(os.path.abspath(p)) for p in paths if p and os.path.exists(p)]


def system_links() -> list[tuple[str, str]]:
    """(target, link) for ``/bin``, ``/lib``, ... where the host has them as links (merged /usr)."""
    return [(os.readlink(p), p) for p in MERGED if os.path.islink(p)]


def system_paths(gpu: bool) -> list[Path]:
    """/usr, the top-level system folders that are not links, the minimal /etc, and /sys's share."""
    own = [p for p in MERGED if os.path.isdir(p) and not os.path.islink(p)]
    etc = [f"/etc/{name}" for name in ETC]
    return _existing(["/usr", *own, *etc, *SYS_CPU, *(SYS_GPU if gpu else ())])


def interpreter_paths() -> list[Path]:
    """The interpreter's prefixes and its executable (a venv's python links to the base's)."""
    exe = os.path.realpath(sys.executable)
    return _existing(dict.fromkeys([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, exe]))


def ranks_pythonpath() -> str:
    """The PYTHONPATH every sandboxed Python of ours gets: the package's folder first."""
    return os.pathsep.join(p for p in (str(CODE_ROOT), os.environ.get("PYTHONPATH", "")) if p)


@functools.lru_cache(maxsize=8)
def import_paths(pythonpath: str) -> tuple[Path, ...]:
    """The ``sys.path`` entries a Python of ours started with ``pythonpath`` imports from, as a child
    prints them (with the sandbox's HOME: no user site), the checkout's root replaced by the package."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "PYTHONPATH": pythonpath, "HOME": SCRATCH_HOME}
    out = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"],
                         capture_output=True, text=True, timeout=60, env=env, cwd="/")
    if out.returncode != 0:
        raise RuntimeError(f"sandbox: could not list the interpreter's import paths: {out.stderr.strip()[-400:]}")
    found = []
    for entry in json.loads(out.stdout.strip().splitlines()[-1]):
        if not entry or not os.path.exists(entry):
            continue
        path = Path(os.path.abspath(entry))
        if in_checkout() and (path == CODE_ROOT or CODE_ROOT.is_relative_to(path)):
            path = PACKAGE  # the package, not the checkout's other files
        found.append(path)
    return tuple(dict.fromkeys([PACKAGE, *found]))


def library_paths() -> list[Path]:
    """Library folders the loader is told of, and the CUDA toolkit (nvcc's, CUDA_HOME, CUDA_PATH)."""
    dirs = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    for conf in sorted(Path("/etc/ld.so.conf.d").glob("*.conf")) if Path("/etc/ld.so.conf.d").is_dir() else []:
        try:
            dirs += [ln.strip() for ln in conf.read_text().splitlines() if ln.strip().startswith("/")]
        except OSError:
            continue
    nvcc = shutil.which("nvcc")
    toolkits = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None]
    return _existing([*dirs, *toolkits])


def _wanted(readable, gpu: bool, pythonpath: str | None) -> list[Path]:
    return list(dict.fromkeys([*system_paths(gpu), *interpreter_paths(),
                               *import_paths(pythonpath or ranks_pythonpath()), *library_paths(),
                               *(Path(os.path.abspath(p)) for p in readable)]))


def visible(readable: list[Path] = (), gpu: bool = False, pythonpath: str | None = None) -> list[Path]:
    """Every host path the sandbox binds read-only (besides its writable folders), links resolved,
    outermost first, none too broad: the allowlist a test walks the sandbox against."""
    return list(_visible(tuple(map(str, readable)), gpu, pythonpath))


@functools.lru_cache(maxsize=64)  # the same few policies, a sandbox per sample
def _visible(readable: tuple[str, ...], gpu: bool, pythonpath: str | None) -> tuple[Path, ...]:
    out = []
    for p in _wanted(readable, gpu, pythonpath):
        real = Path(os.path.realpath(p))
        if not too_broad(real) and not any(real == o or real.is_relative_to(o) for o in out):
            out = [o for o in out if not o.is_relative_to(real)] + [real]
    return tuple(sorted(out, key=lambda p: (len(p.parts), str(p))))


def aliases(readable: list[Path] = (), gpu: bool = False, pythonpath: str | None = None) -> list[tuple[str, str]]:
    """(real path, path) for each allowlisted path reached through a link (``/etc/localtime``; a
    venv under a HOME that links to another disk) and outside the bound folders: the sandbox shows
    it at its own path too, so the interpreter and PYTHONPATH find what they name."""
    roots = visible(readable, gpu, pythonpath)
    return [(os.path.realpath(p), str(p)) for p in _wanted(readable, gpu, pythonpath)
            if os.path.realpath(p) != str(p) and not too_broad(p) and not any(p.is_relative_to(r) for r in roots)]


def etc_files(own_network: bool) -> dict[str, Path]:
    """Our own small /etc files (their place inside -> a host file holding them), written once a
    content. With a network of its own the sandbox is ``pkb-sandbox`` on loopback; on the host's
    network (ranks across nodes) it keeps the host's name and ``hosts``, which gloo and NCCL need
    to find the other nodes."""
    uid, gid = os.getuid(), os.getgid()
    users = {0: "root", uid: "sandbox", 65534: "nobody"}
    groups = {0: "root", gid: "sandbox", 65534: "nogroup"}
    content = {
        "passwd": "".join(f"{name}:x:{u}:{gid if u == uid else u}::{SCRATCH_HOME}:/bin/sh\n" for u, name in users.items()),
        "group": "".join(f"{name}:x:{g}:\n" for g, name in groups.items()),
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    }
    if own_network:
        content["hostname"] = HOSTNAME + "\n"
        content["hosts"] = f"127.0.0.1 localhost {HOSTNAME}\n::1 localhost ip6-localhost\n"
    folder = _etc_folder(content)
    out = {f"/etc/{name}": folder / name for name in content}
    if not own_network:
        out.update({p: Path(p) for p in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf") if os.path.isfile(p)})
    return out


def _etc_folder(content: dict[str, str]) -> Path:
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"pkb_ray-etc-{os.getuid()}-{digest}"
    if not folder.is_dir():
        work = Path(tempfile.mkdtemp(prefix="pkb_ray-etc-"))
        for name, text in content.items():
            (work / name).write_text(text)
            (work / name).chmod(0o644)
        work.chmod(0o755)
        try:
            work.rename(folder)
        except OSError:  # another process made it first: the same content
            shutil.rmtree(work, ignore_errors=True)
    return folder
