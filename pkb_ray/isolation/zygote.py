"""The evaluator's side of the zygote (:mod:`pkb_ray.runner.zygote`): a template sandbox that holds
torch imported and forks each sample's rank set into namespaces of its own.

A candidate's rank set started from a fresh sandbox and interpreter costs ~2.5 s of CPU (torch's
import) on every sample; forked from the zygote it is ready in milliseconds, with the same
isolation (see the runner module's docstring for what each sample gets). :class:`Zygotes` keeps
one template per kind of rank set (environment and sandbox policy), started on first use and
checked once: if the checks fail here (an old kernel, a security module that forbids nested user
namespaces), it says so and rank sets start the usual way, never with less isolation.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from pkb_ray.isolation import allowlist, sandbox
from pkb_ray.isolation.procfs import descendants
from pkb_ray.runner.zygote import OK_FILE

log = logging.getLogger(__name__)
DESCRIBED = "ranks forked from a template sandbox that imported torch once, in namespaces of their own"


class ZygoteFailed(RuntimeError):
    """The template is gone or did not answer."""


class Forked:
    """A sample's first process, forked by the zygote (not our child): what RankSet needs of a Popen."""

    def __init__(self, pid: int):
        self.pid = pid
        self._fds = {pid: os.pidfd_open(pid)}
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and _exited(self._fds[self.pid], 0):
            self.returncode = -signal.SIGKILL  # its status goes to the zygote, which reaps it
        return self.returncode

    def send_kill(self) -> None:
        """SIGKILL the sample's first process and everything below it (its init takes the sample's
        PID namespace with it), keeping a handle on each so that :meth:`wait` sees them gone."""
        for pid in [self.pid, *descendants(self.pid)]:
            if pid not in self._fds:
                try:
                    self._fds[pid] = os.pidfd_open(pid)
                except OSError:  # gone already
                    continue
            try:
                signal.pidfd_send_signal(self._fds[pid], signal.SIGKILL)
            except OSError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        for fd in list(self._fds.values()):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not _exited(fd, left):
                raise subprocess.TimeoutExpired("zygote sample", timeout)
        self.poll()
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        return self.returncode

    def __del__(self):
        for fd in getattr(self, "_fds", {}).values():
            try:
                os.close(fd)
            except OSError:
                pass


def _exited(pidfd: int, timeout: float | None) -> bool:
    """Whether the process of ``pidfd`` exited within ``timeout`` seconds (None: wait). poll, not
    select: select() refuses descriptors numbered 1024 or more, which a busy gang reaches."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0.0, timeout * 1000)))


class Zygote:
    """One template sandbox (``policy``'s files, ``env``), its work folder ``root`` holding the job
    folders of the sets it forks."""

    def __init__(self, env: dict[str, str], policy: sandbox.Policy, probe: sandbox.Probe, root: Path):
        self.root = Path(root)
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-m", "pkb_ray.runner.zygote", str(theirs.fileno()), "--root", str(self.root)]
        self.log_path = Path(tempfile.mkdtemp(prefix="zygote-", dir=self.root)) / "zygote.log"
        spec = sandbox.Spec(argv, policy, probe, env, pass_fds=(theirs.fileno(),), template=True)
        with open(self.log_path, "wb") as out:
            self.proc = sandbox.start(spec, out)
        theirs.close()
        self._sock = ours

    def fork(self, request: dict, fds: list[int], timeout_s: float) -> Forked:
        """Have the template fork a sample for ``request`` with ``fds`` attached; its first process."""
        with self._lock:
            try:
                self._sock.settimeout(timeout_s)
                socket.send_fds(self._sock, [json.dumps(request).encode()], fds)
                reply = self._sock.recv(1 << 16)
            except OSError as exc:
                raise ZygoteFailed(f"the template did not answer ({exc}): {self.log_tail()}") from None
            if not reply:
                raise ZygoteFailed(f"the template is gone: {self.log_tail()}")
            return Forked(json.loads(reply)["pid"])

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:].strip()
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self._sock.close()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.log_path.parent, ignore_errors=True)


def request(launch: dict, env: dict[str, str], policy: sandbox.Policy, job_dir: Path, *, probe: bool = False) -> dict:
    """What the template needs to fork one rank set: its launch spec, environment, limits and scratch."""
    limits = policy.limits
    rlimits = [(resource.RLIMIT_NOFILE, limits.max_open_files), (resource.RLIMIT_FSIZE, limits.max_file_bytes),
               (resource.RLIMIT_NPROC, limits.max_processes)]
    if limits.memory_bytes is not None and not policy.gpu:
        rlimits.append((resource.RLIMIT_AS, limits.memory_bytes))
    return {"launch": launch, "env": env, "job_dir": str(job_dir), "network": policy.network.value,
            "hostname": allowlist.HOSTNAME, "scratch_bytes": limits.scratch_bytes, "rlimits": rlimits, "probe": probe}


def template_policy(policy: sandbox.Policy, root: Path) -> sandbox.Policy:
    """A rank set's policy as its template has it: the work folder ``root`` writable (each sample
    then sees its own job folder only) instead of the job folder."""
    root = Path(root).resolve()
    writable = [p for p in policy.writable if not Path(p).resolve().is_relative_to(root)]
    hide = [p for p in policy.hide if Path(p).resolve() != root]
    return replace(policy, writable=[root, *writable], hide=hide)


class Zygotes:
    """The template of one harness's candidate rank sets: one per (environment, policy), restarted
    when it dies, and given up (rank sets then start the usual way) if its first check fails."""

    def __init__(self, root: Path, startup_timeout_s: float):
        self.root = Path(root)
        self.startup_timeout_s = startup_timeout_s
        self._current: tuple[tuple, Zygote] | None = None
        self.failed: str | None = None  # why no template is used, once a check failed

    def get(self, env: dict[str, str], policy: sandbox.Policy, probe: sandbox.Probe) -> Zygote | None:
        if self.failed is not None:
            return None
        tpl = template_policy(policy, self.root)
        key = (tuple(sorted(env.items())), repr(tpl), probe)
        if self._current is not None and (self._current[0] != key or not self._current[1].alive()):
            self._current[1].close()
            self._current = None
        if self._current is None:
            zygote = Zygote(env, tpl, probe, self.root)
            why = self._check(zygote, env, policy)
            if why is not None:
                zygote.close()
                self.failed = why
                log.warning("rank sets start without a template (each imports torch itself, ~2.5 s of CPU "
                            "a sample): %s", why)
                return None
            self._current = (key, zygote)
        return self._current[1]

    def lost(self, zygote: Zygote, why: str) -> None:
        """``zygote`` failed a fork: close it (what it forked dies with it); the next set gets a new one."""
        log.warning("the rank sets' template failed (%s); starting a new one", why)
        if self._current is not None and self._current[1] is zygote:
            self._current = None
        zygote.close()

    def _check(self, zygote: Zygote, env: dict[str, str], policy: sandbox.Policy) -> str | None:
        """Fork one probe sample, whose init writes its ok file once every check passed."""
        job_dir = Path(tempfile.mkdtemp(prefix="probe-", dir=self.root))
        try:
            first = zygote.fork(request({}, env, policy, job_dir, probe=True), [], self.startup_timeout_s)
            first.wait(self.startup_timeout_s)
            if (job_dir / OK_FILE).exists():
                return None
            said = (job_dir / "launch.log").read_text(errors="replace")[-600:].strip() if (
                job_dir / "launch.log").exists() else ""
            return f"the template's probe sample failed its checks: {said or zygote.log_tail(600) or 'no output'}"
        except (ZygoteFailed, subprocess.TimeoutExpired, OSError) as exc:
            return f"the template did not start: {exc}"
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)

    def close(self) -> None:
        if self._current is not None:
            self._current[1].close()
            self._current = None
