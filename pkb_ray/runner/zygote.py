"""A template sandbox that forks each sample's rank set: ``python -m pkb_ray.runner.zygote FD --root DIR``.

Starting a rank set costs ~2.5 s of CPU, nearly all of it importing torch, and each sample needs a
fresh set in a sandbox of its own. This process (the zygote) runs in a bubblewrap sandbox built
like a rank set's (the same allowlisted, read-only files; its own network), imports torch and the
rank's modules once, and never runs candidate code. For each sample the evaluator sends a request
(the set's launch spec, environment and limits, with its command and report pipes attached) over
``FD``; the zygote forks a child and answers with its pid. The child, before anything of the
sample runs:

1. unshares user, mount, IPC, UTS, cgroup and network namespaces of its own (loopback up,
   hostname ``pkb-sandbox``), so no two samples share a network, a SysV IPC space or a mount table;
2. mounts a fresh, size-bounded /tmp (with HOME and the working folder in it) and /dev/shm, and
   covers the template's work folder ``DIR`` (where every sample's job folder lives) with an empty
   read-only tmpfs, binding its own job folder back: no other sample's folder is visible;
3. forks the set's init in a new PID namespace, which mounts a /proc of its own (it sees only its
   sample's processes: not the zygote, not the evaluator, not other samples), mounts /proc/sys,
   sysrq-trigger, irq and bus read-only, caps new user namespaces at the one it then enters (so
   nothing in the sample can make another, nor so unmount what covers a path), drops every
   capability (bounding set included) with no_new_privs, starts a new session, applies the rlimits,
   and becomes the set's launcher (:func:`pkb_ray.runner.launch.run_ranks`).

Killing the child kills the sample: the init dies with it (PR_SET_PDEATHSIG), and with the init
the kernel kills everything in its PID namespace. The evaluator's side is :mod:`pkb_ray.isolation.zygote`.
"""

from __future__ import annotations

import json
import os
import random
import resource
import select
import signal
import socket
import sys
import traceback
from pathlib import Path

from pkb_ray.runner import namespaces as ns
from pkb_ray.runner.launch import name_process, preload, run_ranks
from pkb_ray.spec.names import Role

ZYGOTE_NAME = "pkb_ray.zygote"  # process names (comm): the template, a sample's first process, its init
SAMPLE_NAME = "pkb_ray.sample"
INIT_NAME = "pkb_ray.launch"
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")  # read-only in a sample's /proc, as bubblewrap has them
OK_FILE = "zygote.ok"  # a probe request's init writes it once every check passed


def main(argv: list[str]) -> int:
    fd = int(argv[0])
    root = argv[argv.index("--root") + 1]
    name_process(ZYGOTE_NAME)
    preload(["--role", Role.CANDIDATE.value])
    sock = socket.socket(fileno=fd)
    me = os.getpid()
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 256)
        except OSError:
            return 0
        if not msg:  # the evaluator closed its end
            return 0
        _reap()
        request = json.loads(msg)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _sample(request, fds, root, me)  # never returns
        for f in fds:
            os.close(f)
        sock.send(json.dumps({"pid": pid}).encode())


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _sample(request: dict, fds: list[int], root: str, zygote: int) -> None:
    """The sample's first process (see the module docstring); exits with its init's status."""
    code = 1
    try:
        ns.prctl(ns.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != zygote:
            print(f"zygote: the template ({zygote}) died before its sample {os.getpid()} started", file=sys.stderr)
            os._exit(1)
        os.setsid()
        name_process(SAMPLE_NAME)
        job_dir = request["job_dir"]
        log = os.open(os.path.join(job_dir, "launch.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        for target, source in ((0, null), (1, log), (2, log)):
            os.dup2(source, target)
        _close_all_but({0, 1, 2, *fds})
        _own_namespaces(request, root)
        alive_r, alive_w = os.pipe()  # the init's way of telling that this process is gone
        ns.unshare(ns.CLONE_NEWPID)
        pid = os.fork()
        if pid == 0:
            os.close(alive_w)
            _init(request, fds, alive_r)  # never returns
        os.close(alive_r)
        for f in fds:
            os.close(f)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
    except BaseException:  # noqa: BLE001 - whatever failed, this child ends here
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if code >= 0 else 128 - code)


def _close_all_but(keep: set[int]) -> None:
    low = 0
    for fd in [*sorted(keep), os.sysconf("SC_OPEN_MAX")]:
        if low < fd:  # os.closerange(n, n) would close every descriptor (close_range up to n - 1 = ~0)
            os.closerange(low, fd)
        low = fd + 1


def _own_namespaces(request: dict, root: str) -> None:
    """Step 1 and 2 of the module docstring, in the sample's first process."""
    uid, gid = os.geteuid(), os.getegid()
    own_net = request["network"] == "own"
    ns.unshare(ns.CLONE_NEWUSER | ns.CLONE_NEWNS | ns.CLONE_NEWIPC | ns.CLONE_NEWUTS
               | (ns.CLONE_NEWNET if own_net else 0))
    ns.map_ids(uid, gid)
    try:
        ns.unshare(ns.CLONE_NEWCGROUP)
    except OSError:  # a kernel without cgroup namespaces: bubblewrap's --unshare-cgroup-try does the same
        pass
    ns.mount(None, "/", None, ns.MS_REC | ns.MS_PRIVATE)  # nothing we mount reaches the template
    ns.sethostname(request["hostname"])
    if own_net:
        ns.loopback_up()
    _own_scratch(int(request["scratch_bytes"]), Path(request["job_dir"]), Path(root))


def _own_scratch(scratch: int, job_dir: Path, root: Path) -> None:
    """A fresh /tmp (HOME and the working folder in it) and /dev/shm; the template's mounts under
    /tmp (problem folders, caches, masks) bound again on top; of the work folder ``root``, the job
    folder only."""
    if job_dir == root or not job_dir.is_relative_to(root):
        raise ValueError(f"zygote: job folder {job_dir} is not inside the work folder {root}")
    table = ns.mounts()
    tmp_id = [mid for mid, _, point, _ in table if point == "/tmp"][-1]
    keep = [(point, ro) for mid, parent, point, ro in table if parent == tmp_id and point.startswith("/tmp/")
            and not Path(point).is_relative_to(root)]
    held = {point: os.open(point, os.O_PATH) for point, _ in keep}  # reachable once /tmp is covered
    job = os.open(job_dir, os.O_PATH | os.O_DIRECTORY)
    ns.tmpfs("/tmp", scratch)
    ns.tmpfs("/dev/shm", scratch)
    for point, ro in keep:
        if os.path.isdir(f"/proc/self/fd/{held[point]}"):
            os.makedirs(point, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(point), exist_ok=True)
            os.close(os.open(point, os.O_CREAT | os.O_WRONLY, 0o644))
        ns.bind(f"/proc/self/fd/{held[point]}", point, read_only=ro)
        os.close(held[point])
    os.makedirs(root, exist_ok=True)  # under /tmp it is in the fresh scratch now
    ns.tmpfs(str(root), 1 << 20)  # empty but for the job folder, and read-only
    os.makedirs(job_dir)
    ns.bind(f"/proc/self/fd/{job}", str(job_dir), read_only=False)
    os.close(job)
    ns.mount(None, str(root), None, ns.MS_REMOUNT | ns.MS_RDONLY | ns.MS_NOSUID | ns.MS_NODEV)
    for folder in ("/tmp/home", "/tmp/work"):
        os.makedirs(folder, 0o755, exist_ok=True)


def _init(request: dict, fds: list[int], alive: int) -> None:
    """Step 3 of the module docstring: pid 1 of the sample's PID namespace, then its launcher."""
    code = 1
    try:
        ns.prctl(ns.PR_SET_PDEATHSIG, signal.SIGKILL)
        poller = select.poll()  # (not select(): it refuses descriptors numbered 1024 or more)
        poller.register(alive, select.POLLIN)
        if poller.poll(0):  # EOF: the first process died before the line above
            os._exit(1)
        name_process(INIT_NAME)
        ns.mount("proc", "/proc", "proc", ns.MS_NOSUID | ns.MS_NODEV | ns.MS_NOEXEC)
        # this user namespace may hold one more: the sample's, entered below; none can be made in it
        ns.write("/proc/sys/user/max_user_namespaces", "1")
        for name in PROC_COVERED:
            path = f"/proc/{name}"
            if os.path.exists(path):
                ns.bind(path, path, read_only=True, flags=ns.MS_NOSUID | ns.MS_NODEV | ns.MS_NOEXEC)
        ns.mount("devpts", "/dev/pts", "devpts", ns.MS_NOSUID | ns.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
        uid, gid = os.geteuid(), os.getegid()
        ns.unshare(ns.CLONE_NEWUSER)
        ns.map_ids(uid, gid)
        ns.drop_capabilities()
        _check_confined()
        os.setsid()
        os.chdir("/tmp/work")
        os.environ.clear()
        os.environ.update(request["env"])
        for which, value in request["rlimits"]:  # only ever lowered: raising a hard limit needs privilege
            hard = resource.getrlimit(which)[1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        random.seed()  # not the template's state, which every sample would share
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if request.get("probe"):
            Path(request["job_dir"], OK_FILE).write_text("ok")
            os._exit(0)
        spec = dict(request["launch"])
        width = len(spec["ranks"])
        spec["fds"], spec["report_fds"] = fds[:width], fds[width:2 * width]
        os.close(alive)
        code = run_ranks(spec)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _check_confined() -> None:
    """What the steps above promise, checked before the sample's code can run."""
    if ns.capabilities_effective() != 0:
        raise RuntimeError("zygote: capabilities left after dropping them")
    try:
        ns.unshare(ns.CLONE_NEWUSER)
    except OSError:
        return
    raise RuntimeError("zygote: a new user namespace could still be made")


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the evaluator ends us with SIGKILL, never by a stray ^C
    raise SystemExit(main(sys.argv[1:]))
