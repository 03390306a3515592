"""Nothing outlives a killed driver: the processes of its local Ray go with it.

A driver that starts a local Ray (``ray.init()`` without an address) is the ancestor of Ray's
head processes, the gang actors and their rank processes. Killed with SIGKILL, it runs no clean-up,
and all of those would keep running, gangs evaluating samples for nobody.

So the driver starts a reaper (:func:`start`): a small process that polls the driver. While the
driver lives, the reaper notes its process tree every second, each process as (pid, start time),
and writes the list to ``<runs_dir>/<driver pid>.json``. When the driver is gone, it kills that tree
(and anything started under it since), deletes the file and exits. A run that finds a file whose
driver is dead (its reaper was killed too) kills what the file lists (:func:`clean_up`); the
start time keeps a reused pid safe.

Linux only (``/proc``); elsewhere :func:`start` does nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pkb_ray.isolation import procfs

POLL_S = 0.5
SNAPSHOT_S = 1.0


def descendants(roots: set[int], table: dict[int, procfs.Stat] | None = None) -> dict[int, int]:
    """pid -> start time of every process under ``roots`` (roots excluded)."""
    table = procfs.table() if table is None else table
    return {pid: table[pid].start_ticks for pid in procfs.below(roots, table)}


def running(pid: int, started: int | None = None) -> bool:
    """Alive and not a zombie (and, given ``started``, the same process, not a reused pid)."""
    st = procfs.stat(pid)
    return st is not None and st.state != "Z" and (started is None or st.start_ticks == started)


def kill_listed(listed: dict[int, int]) -> int:
    """SIGKILL each (pid, start time) still alive, and whatever is now under them; how many."""
    table = procfs.table()
    targets = {pid: st for pid, st in listed.items() if pid in table and table[pid].start_ticks == st}
    targets.update(descendants(set(targets), table))
    for pid in targets:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(targets)


def _watch(driver: int, record: Path) -> None:
    tree: dict[int, int] = {}
    last = 0.0
    me = os.getpid()
    st = procfs.stat(driver)
    started = st.start_ticks if st else 0
    while os.getppid() == driver and running(driver):
        if time.monotonic() - last >= SNAPSHOT_S:
            tree = {p: s for p, s in descendants({driver}).items() if p != me}
            tmp = record.with_suffix(".tmp")
            tmp.write_text(json.dumps({"driver": driver, "started": started, "processes": tree}))
            tmp.replace(record)
            last = time.monotonic()
        time.sleep(POLL_S)
    tree.update({p: s for p, s in descendants(set(tree)).items() if p != me})
    kill_listed(tree)
    record.unlink(missing_ok=True)


_started: dict[int, subprocess.Popen] = {}  # driver pid -> its reaper (one per driver, however many jobs)


def start(runs_dir: Path) -> subprocess.Popen | None:
    """Start the reaper of this process (call after ``ray.init`` started a local Ray)."""
    if procfs.stat(os.getpid()) is None:  # no /proc here
        return None
    running = _started.get(os.getpid())
    if running is not None and running.poll() is None:
        return running  # a later job of a Hydra multirun: the same process, the same reaper
    runs_dir.mkdir(parents=True, exist_ok=True)
    record = runs_dir / f"{os.getpid()}.json"
    _started[os.getpid()] = subprocess.Popen(
        [sys.executable, "-m", "pkb_ray.isolation.reaper", str(os.getpid()), str(record)],
        stdin=subprocess.DEVNULL, start_new_session=True)  # a terminal's ^C is the driver's, not the reaper's
    return _started[os.getpid()]


def clean_up(runs_dir: Path) -> int:
    """Kill what killed drivers (and their reapers) left, by their records; how many processes."""
    killed = 0
    for record in Path(runs_dir).glob("*.json"):
        try:
            data = json.loads(record.read_text())
            driver = int(data["driver"])
        except (OSError, ValueError, KeyError):
            continue
        if running(driver, data.get("started")):
            continue  # a run still going
        killed += kill_listed({int(p): int(s) for p, s in data.get("processes", {}).items()})
        record.unlink(missing_ok=True)
    return killed


if __name__ == "__main__":
    _watch(int(sys.argv[1]), Path(sys.argv[2]))
