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

POLL_S = 0.5
SNAPSHOT_S = 1.0


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in clock ticks since boot) of every process visible."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid ...
        table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(roots: set[int], table: dict[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """pid -> start time of every process under ``roots`` (roots excluded)."""
    table = _proc_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = table[child][1]
                todo.append(child)
    return found


def _running(pid: int, started: int | None = None) -> bool:
    """Alive and not a zombie (and, given ``started``, the same process, not a reused pid)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0] != "Z" and (started is None or int(fields[19]) == started)


def kill_listed(listed: dict[int, int]) -> int:
    """SIGKILL each (pid, start time) still alive, and whatever is now under them; how many."""
    table = _proc_table()
    targets = {pid: st for pid, st in listed.items() if table.get(pid, (0, -1))[1] == st}
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
    started = _proc_table().get(driver, (0, 0))[1]
    while os.getppid() == driver and _running(driver):
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
    if not Path("/proc/self/stat").exists():
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
        if _running(driver, data.get("started")):
            continue  # a run still going
        killed += kill_listed({int(p): int(s) for p, s in data.get("processes", {}).items()})
        record.unlink(missing_ok=True)
    return killed


if __name__ == "__main__":
    _watch(int(sys.argv[1]), Path(sys.argv[2]))
