"""A cgroup v2 of a sandbox's own, for the kernel's freezer alone, wherever this process may make one.

The full cgroup slot (:class:`pkb_ray.isolation.sandbox.CgroupSlot`) needs memory and pids enabled for
its children, which a host rarely delegates. Freezing needs no controller: ``cgroup.freeze`` is in
every non-root cgroup v2. So where a cgroup v2 hierarchy lets us make a child (``PKB_CGROUP_PARENT``,
else our own cgroup, on a v2 or a hybrid layout's ``unified`` mount), every sandbox gets one, and
:class:`pkb_ray.isolation.freezer.Freezer` freezes through it: a frozen task does not run, whatever
signal it or the kernel sends it (a POSIX timer's SIGCONT included), and a task forked while frozen
starts frozen. What the signals' proof must otherwise look for (tasks born, CPU time while stopped)
cannot happen.

The sandbox's processes enter it once the set is ready (:meth:`FreezeGroup.adopt`), before any
candidate code is loaded: a set forked from a zygote (the fast path) starts outside our control,
and nothing but our own runner runs until its first command. Children inherit their cgroup, and a
process inside cannot move out: it has no capability to mount a cgroup file system, and none is
mounted in the sandbox.

For now it is opt-in: ``PKB_FREEZER=cgroup``. The default stays the SIGSTOP freezer with its proof
(what a host without a writable cgroup gets anyway): in the whole CPU suite, a sample after two
that each start hundreds of processes timed out in its import under the cgroup freezer
(tests/test_hostile_on_cpu.py's floods test; it passes alone), and that is not understood yet.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import uuid
from pathlib import Path

from pkb_ray.isolation import procfs, sandbox

FREEZER_ENV = "PKB_FREEZER"  # signals (the default) | cgroup (a cgroup wherever one can be made)


def _v2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a
    hybrid layout), None without one."""
    for line in procfs.read("/proc/self/mounts", 1 << 20).splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def parent() -> tuple[Path | None, str]:
    """The cgroup v2 folder that gets one freezing child per sandbox where ``PKB_FREEZER=cgroup``
    (read each time a rank set starts), or None and why not."""
    if os.environ.get(FREEZER_ENV, "signals") != "cgroup":
        return None, f"{FREEZER_ENV} is not cgroup"
    return probe()


def probe() -> tuple[Path | None, str]:
    """Where a freezing cgroup can be made here, or None and why not (cached)."""
    return _probe(os.environ.get("PKB_CGROUP_PARENT") or None)


@functools.lru_cache(maxsize=None)
def _probe(delegated: str | None) -> tuple[Path | None, str]:
    if delegated:
        where = Path(delegated)
    else:
        mount = _v2_mount()
        own = [line[3:] for line in procfs.read("/proc/self/cgroup", 1 << 16).splitlines() if line.startswith("0::")]
        if mount is None or not own:
            return None, "no cgroup v2 mounted"
        where = mount / own[0].strip().lstrip("/")
    trial = where / f"pkb-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        trial.mkdir()
        try:
            usable = (trial / "cgroup.freeze").exists()
        finally:
            trial.rmdir()
    except OSError as e:
        return None, f"no cgroup of our own under {where} ({e.strerror or e})"
    if not usable:
        return None, f"cgroup v2 under {where} has no cgroup.freeze (kernel before 5.2)"
    remove_leftovers(where)
    return where, f"cgroup v2 freezer under {where}"


# pkb-freeze-<pid>-<hex> (a FreezeGroup), pkb-<pid>-<hex> (a sandbox.CgroupSlot), pkb-probe-<pid>-<hex>
_OURS = re.compile(r"pkb-(?:freeze-|probe-)?(\d+)-[0-9a-f]+")


def remove_leftovers(where: Path) -> list[str]:
    """Kill and remove our cgroups under ``where`` whose evaluator process is gone (one killed
    before it closed its sets leaves them, empty or holding its orphaned ranks); the names removed.
    A pid that runs again (reused) keeps its cgroups: leaving one is safe, removing a live one is not."""
    removed = []
    with contextlib.suppress(OSError):
        for child in where.iterdir():
            m = _OURS.fullmatch(child.name)
            if m and child.is_dir() and procfs.stat(int(m.group(1))) is None:
                if sandbox.remove_cgroup(child, timeout_s=2.0, poll_s=0.02):
                    removed.append(child.name)
    return removed


class FreezeGroup:
    """One sandbox's freezing cgroup: made with the set, entered by its processes once it is ready,
    killed and removed with it."""

    def __init__(self, where: Path):
        self.path = where / f"pkb-freeze-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        self.adopted = False

    def adopt(self, pids: list[int]) -> bool:
        """Move ``pids`` (every process of the set, still running only our runner) in; True when each
        is inside or gone. A pid's whole process moves, its threads with it."""
        for pid in pids:
            try:
                (self.path / "cgroup.procs").write_text(f"{pid}\n")
            except ProcessLookupError:
                continue
            except OSError:
                return False
        inside = {int(p) for p in procfs.read(self.path / "cgroup.procs", 1 << 20).split()}
        self.adopted = all(pid in inside or procfs.stat(pid) is None for pid in pids)
        return self.adopted

    def close(self, timeout_s: float = 10.0) -> bool:
        """Kill what is left in it and remove it; False if it could not be removed in time."""
        with contextlib.suppress(OSError):
            (self.path / "cgroup.freeze").write_text("0")  # a frozen task dies only once it runs
        return sandbox.remove_cgroup(self.path, timeout_s, poll_s=0.02)
