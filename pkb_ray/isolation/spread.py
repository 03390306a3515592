"""Rank sets spread over several nodes: the gang's node runs its ranks, a RankHost runs each other's.

A gang of layout NxG (:class:`pkb_ray.spec.placement.Layout`) holds one placement-group bundle of G
GPUs on each of N nodes. Its actor lives on the node of ranks 0..G-1 and starts those ranks
itself (:class:`pkb_ray.isolation.ranks.RankSet`); on every other node a :class:`RankHost` actor, placed
in that node's bundle, starts that node's ranks and relays steps, reports and files. Ranks meet
at a TCPStore held by the gang's actor on its node's address (rank 0's node), and are numbered
node by node.

Nodes share no filesystem: what a remote rank reads (the problem file, the candidate, the
expected outputs of its ranks) is copied to its host before a step, and what it writes (outputs
for the verdict) is copied back after, all through Ray. A CUDA library the compile stage built on
the gang's node is not copied: a remote rank's ``load_cuda`` builds it on its own node (nvcc must
be there), within the same time limit.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray
import torch.distributed as dist

from pkb_ray.isolation.memory import Unreadable
from pkb_ray.isolation.ranks import POLL_S, RankIsolation, RankSet, StepOutcome, wait_for
from pkb_ray.runner.protocol import tensor_file
from pkb_ray.spec.names import Role
from pkb_ray.spec.wire import Command, Exit, Ready, RegionReport, Report, RunTrials, Step, as_dict, parse_report

REMOTE_POLL_S = 0.05  # a remote look costs a Ray call: look a little less often than locally


class RankHost:
    """The actor on one node of a spread gang: that node's ranks of each rank set."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pkb-rank-host-"))
        self.sets: dict[str, RankSet] = {}
        self._lock = threading.Lock()

    def where(self) -> dict[str, Any]:
        return {"node": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "pid": os.getpid(), "root": str(self.root)}

    def start(self, set_id: str, devices: list[str], first_rank: int, world_size: int, store_addr: str,
              prefix: str, options: dict[str, Any]) -> str:
        """Start ranks ``first_rank ..`` on ``devices``; returns this set's job folder here."""
        job = self.root / set_id
        ranks = RankSet(devices, job_dir=job, first_rank=first_rank, world_size=world_size, store_addr=store_addr,
                        prefix=prefix, **options)
        with self._lock:
            self.sets[set_id] = ranks
        return str(job)

    def put(self, set_id: str, files: dict[str, bytes], dirs: list[str]) -> None:
        """Write ``files`` (paths relative to the set's folder) atomically; make ``dirs``."""
        job = self.root / set_id
        for d in dirs:
            (job / d).mkdir(parents=True, exist_ok=True)
        for rel, data in files.items():
            path = job / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".part")
            tmp.write_bytes(data)
            os.replace(tmp, path)

    def send(self, set_id: str, cmd: Command) -> None:
        self.sets[set_id].send(cmd)

    def fire(self, set_id: str, tag: str, blank: bool, timeout_s: float) -> dict[str, Any]:
        """This node's part of a fired region (:meth:`RankSet.fire`), waited for here, where the
        pipes are: its reports (raw), deaths, phases and the done and report times from its resume."""
        ranks = self.sets[set_id]
        out = ranks.fire_tagged(tag, blank, timeout_s)
        return {"reports": {r: as_dict(rep) for r, rep in out.reports.items()}, "dead": out.dead,
                "phases": ranks.phases(), "done_us": out.done_us, "report_us": out.report_us}

    def poll(self, set_id: str, tag: str) -> dict[str, Any]:
        ranks = self.sets[set_id]
        out = StepOutcome(tag)
        ranks.collect(tag, out)
        return {"reports": out.reports, "dead": out.dead, "phases": ranks.phases()}

    def fetch(self, set_id: str, rel_paths: list[str]) -> dict[str, bytes]:
        """The files of ``rel_paths`` that exist."""
        job = self.root / set_id
        return {rel: (job / rel).read_bytes() for rel in rel_paths if (job / rel).exists()}

    def log_tail(self, set_id: str, rank: int, chars: int) -> str:
        ranks = self.sets.get(set_id)
        return ranks.log_tail(rank, chars) if ranks else ""

    def freeze(self, set_id: str, timeout_s: float) -> bool:
        ranks = self.sets.get(set_id)
        return ranks.freeze(timeout_s) if ranks else True

    def thaw(self, set_id: str) -> None:
        ranks = self.sets.get(set_id)
        if ranks:
            ranks.thaw()

    def ran_while_frozen(self, set_id: str) -> str:
        ranks = self.sets.get(set_id)
        return ranks.ran_while_frozen() if ranks else ""

    def read_tensors(self, set_id: str, rank: int, entries: list[list[int]]) -> list[bytes] | str:
        """The bytes of a rank's tensors here, or why they could not be read."""
        ranks = self.sets.get(set_id)
        if ranks is None:
            return "the rank set is gone"
        try:
            return ranks.read_tensors(rank, entries)
        except Unreadable as exc:
            return str(exc)

    def write_tensors(self, set_id: str, rank: int, entries: list[list[int]], blobs: list[bytes]) -> str:
        """Bytes written into a rank's tensors here: "" or why they could not be."""
        ranks = self.sets.get(set_id)
        if ranks is None:
            return "the rank set is gone"
        try:
            ranks.write_tensors(rank, entries, blobs)
            return ""
        except Unreadable as exc:
            return str(exc)

    def signal_kill(self, set_id: str) -> None:
        ranks = self.sets.get(set_id)
        if ranks:
            ranks.signal_kill()

    def kill(self, set_id: str) -> None:
        with self._lock:
            ranks = self.sets.pop(set_id, None)
        if ranks:
            ranks.kill()
            shutil.rmtree(ranks.job_dir, ignore_errors=True)

    def shutdown(self) -> None:
        for set_id in list(self.sets):
            self.kill(set_id)
        shutil.rmtree(self.root, ignore_errors=True)


class _Remote:
    """One host's part of a spread rank set."""

    def __init__(self, host, set_id: str, ranks: list[int], job: str):
        self.host, self.set_id, self.ranks, self.job = host, set_id, ranks, job
        self.pushed: set[str] = set()  # files already copied there


def _push(remote: _Remote, files: dict[str, bytes], local: Path, rel: str) -> str:
    """Add ``local`` to the ``files`` to send to the remote host as ``rel`` (once per rank set);
    the path it has there."""
    if rel not in remote.pushed and local.exists():
        files[rel] = local.read_bytes()
        remote.pushed.add(rel)
    return f"{remote.job}/{rel}"


class SpreadRankSet:
    """W ranks over several nodes, as :class:`~pkb_ray.isolation.ranks.Ranks` (what the harness drives).

    ``parts``: (host, devices) in rank order; the first part must be this node's (host None).
    """

    def __init__(self, parts: list[tuple[Any, list[str]]], *, store_host: str, backend: str, job_dir: Path,
                 pg_timeout_s: float = 600.0, num_threads: int = 1, multicast: bool = True,
                 env: dict[str, str] | None = None, isolation: RankIsolation = RankIsolation(),
                 role: Role = Role.CANDIDATE):
        if not parts or parts[0][0] is not None:
            raise ValueError("the first part of a spread rank set must be this node's (host None)")
        self.world_size = sum(len(devices) for _, devices in parts)
        self.job_dir = Path(job_dir)
        # the rendezvous, reachable from the other nodes at this node's address
        self._store = dist.TCPStore(store_host, 0, None, True, wait_for_workers=False, use_libuv=True)
        addr, prefix = f"{store_host}:{self._store.port}", uuid.uuid4().hex
        options = {"backend": backend, "pg_timeout_s": pg_timeout_s, "num_threads": num_threads,
                   "multicast": multicast, "env": env, "isolation": isolation, "role": role}
        self.local = RankSet(parts[0][1], job_dir=job_dir, first_rank=0, world_size=self.world_size,
                             store_addr=addr, prefix=prefix, **options)
        self.remotes: list[_Remote] = []
        first = len(parts[0][1])
        starts = []
        for host, devices in parts[1:]:
            set_id = f"{self.job_dir.name}-{uuid.uuid4().hex[:8]}"
            starts.append((host, set_id, list(range(first, first + len(devices))),
                           host.start.remote(set_id, devices, first, self.world_size, addr, prefix, options)))
            first += len(devices)
        self.closed = False
        try:
            for host, set_id, ranks, ref in starts:
                self.remotes.append(_Remote(host, set_id, ranks, ray.get(ref)))
        except Exception:
            for host, set_id, _, _ in starts:  # a host that cannot start its ranks: leave nothing running
                host.kill.remote(set_id)
            self.local.kill()
            raise
        self.started_at = time.monotonic()
        self.isolation = self.local.isolation

    @property
    def ranks(self) -> list[int]:
        return list(range(self.world_size))

    @property
    def pids(self) -> list[int]:
        return self.local.pids  # this node's; the hosts kill theirs

    def wait_ready(self, timeout_s: float) -> StepOutcome:
        return self.wait(Step.READY, time.monotonic() + timeout_s, since=self.started_at, kind=Ready)

    def run(self, cmd: Command, timeout_s: float, poll_s: float = POLL_S, answered=None,
            resume=None) -> StepOutcome:
        """As :meth:`RankSet.run`; the set is resumed before the send (the other nodes' pipes are
        written by their hosts, whose commands may be long)."""
        if resume is not None:
            resume()
        started = time.monotonic()
        cmd = self.local.tag(cmd)
        sends = [r.host.send.remote(r.set_id, self._prepare(r, cmd)) for r in self.remotes]
        self.local.send(cmd)
        ray.get(sends)
        out = self.wait(cmd.tag, started + timeout_s, since=started, kind=cmd.answer, answered=answered)
        if out.ok and getattr(cmd, "out_dir", ""):
            self._bring_back(cmd)
        return out

    def fire(self, blank: bool, timeout_s: float, poll_s: float = POLL_S, answered=None) -> StepOutcome:
        """As :meth:`RankSet.fire`: every node's host fires its part and waits for it where its pipes
        are; each rank's times are from its own node's resume (the nodes resume a Ray call apart;
        the collectives of the first call wait for the last)."""
        started = time.monotonic()
        tag = self.local.fire_tag()
        refs = [r.host.fire.remote(r.set_id, tag, blank, timeout_s) for r in self.remotes]
        out = self.local.fire_tagged(tag, blank, timeout_s, poll_s)
        try:
            parts = ray.get(refs, timeout=timeout_s + 30)
        except Exception:  # noqa: BLE001 - a host that did not answer: its ranks are missing
            parts = []
        for part in parts:
            for rank, raw in part["reports"].items():
                out.reports[int(rank)] = parse_report(RegionReport, raw)
            out.dead.update({int(r): c for r, c in part["dead"].items()})
            out.phases.update({int(r): p for r, p in part["phases"].items()})
            out.done_us.update({int(r): v for r, v in part["done_us"].items()})
            out.report_us.update({int(r): v for r, v in part["report_us"].items()})
        out.missing = [r for r in self.ranks if r not in out.reports and r not in out.dead]
        out.elapsed_s = time.monotonic() - started
        if answered is not None:
            answered()
        return out

    def _prepare(self, remote: _Remote, cmd: Command) -> Command:
        """``cmd`` with its paths moved to the host's folder, after copying there what they name."""
        files: dict[str, bytes] = {}
        dirs: list[str] = []
        moved: dict[str, Any] = {}
        case = getattr(cmd, "case", None)
        if case is not None:
            path = Path(case.problem_path)
            moved["case"] = replace(case, problem_path=_push(remote, files, path, "problem/" + path.name))
        if isinstance(cmd, RunTrials):
            moved["candidate_path"] = _push(remote, files, Path(cmd.candidate_path), "candidate.py")
        for key in ("expected_dir", "actual_dir"):  # tensor files of its ranks, for the seeds (or picks) named
            if not hasattr(cmd, key):
                continue
            sub = f"{key.removesuffix('_dir')}-{cmd.tag}"
            for seed in cmd.files:
                for rank in remote.ranks:
                    name = tensor_file(Path(""), seed, rank).name
                    _push(remote, files, tensor_file(Path(getattr(cmd, key)), seed, rank), f"{sub}/{name}")
            moved[key] = f"{remote.job}/{sub}"
            dirs.append(sub)
        if getattr(cmd, "out_dir", ""):
            dirs.append(f"out-{cmd.step}")
            moved["out_dir"] = f"{remote.job}/out-{cmd.step}"
        if files or dirs:
            ray.get(remote.host.put.remote(remote.set_id, files, dirs))
        return replace(cmd, **moved)

    def _bring_back(self, cmd: Command) -> None:
        """The remote ranks' output files, into the local out_dir under the same names."""
        out_dir = Path(cmd.out_dir)
        for remote in self.remotes:
            names = [tensor_file(Path(""), seed, rank).name for seed in cmd.files for rank in remote.ranks]
            got = ray.get(remote.host.fetch.remote(remote.set_id, [f"out-{cmd.step}/{n}" for n in names]))
            for rel, data in got.items():
                path = out_dir / Path(rel).name
                tmp = path.with_name(path.name + ".part")
                tmp.write_bytes(data)
                os.replace(tmp, path)

    def _collect(self, tag: str, out: StepOutcome, remote_phases: dict[int, str]) -> None:
        self.local.collect(tag, out)
        polls = ray.get([r.host.poll.remote(r.set_id, tag) for r in self.remotes])
        for polled in polls:
            for rank, report in polled["reports"].items():
                out.reports.setdefault(int(rank), report)
            for rank, code in polled["dead"].items():
                if int(rank) not in out.reports:
                    out.dead.setdefault(int(rank), code)
            remote_phases.update({int(r): p for r, p in polled["phases"].items()})

    def wait(self, tag: str, deadline: float, since: float, kind: type[Report] = Report,
             answered=None) -> StepOutcome:
        remote_phases: dict[int, str] = {}
        return wait_for(tag, self.ranks, lambda out: self._collect(tag, out, remote_phases),
                        lambda: {**self.local.phases(), **remote_phases}, deadline, since,
                        poll_s=REMOTE_POLL_S if self.remotes else POLL_S, kind=kind, answered=answered)

    def log_tail(self, rank: int, chars: int = 1500) -> str:
        if rank in self.local.ranks:
            return self.local.log_tail(rank, chars)
        remote = next((r for r in self.remotes if rank in r.ranks), None)
        try:
            return ray.get(remote.host.log_tail.remote(remote.set_id, rank, chars), timeout=30) if remote else ""
        except Exception:  # noqa: BLE001 - a host that is gone has no log to give
            return ""

    def freeze(self, timeout_s: float) -> bool:
        """Every node's part stopped (each host its own, at once)."""
        refs = [r.host.freeze.remote(r.set_id, timeout_s) for r in self.remotes]
        ok = self.local.freeze(timeout_s)
        try:
            return ok and all(ray.get(refs, timeout=timeout_s + 5))
        except Exception:  # noqa: BLE001 - a host that does not answer has not stopped its part
            return False

    def read_tensors(self, rank: int, entries: list[list[int]]) -> list[bytes]:
        """A rank's tensors, read on its own node (by this set, or by the node's host actor)."""
        if rank in self.local.ranks:
            return self.local.read_tensors(rank, entries)
        remote = next(r for r in self.remotes if rank in r.ranks)
        try:
            found = ray.get(remote.host.read_tensors.remote(remote.set_id, rank, entries), timeout=60)
        except Exception as exc:  # noqa: BLE001 - a host that does not answer reads nothing
            raise Unreadable(f"rank {rank}'s node did not answer: {exc}") from None
        if isinstance(found, str):
            raise Unreadable(found)
        return found

    def write_tensors(self, rank: int, entries: list[list[int]], blobs: list[bytes]) -> None:
        """Bytes written into a rank's tensors, on its own node."""
        if rank in self.local.ranks:
            return self.local.write_tensors(rank, entries, blobs)
        remote = next(r for r in self.remotes if rank in r.ranks)
        try:
            why = ray.get(remote.host.write_tensors.remote(remote.set_id, rank, entries, blobs), timeout=60)
        except Exception as exc:  # noqa: BLE001 - a host that does not answer writes nothing
            raise Unreadable(f"rank {rank}'s node did not answer: {exc}") from None
        if why:
            raise Unreadable(why)

    def ran_while_frozen(self) -> str:
        """Why some process of the set ran while stopped, on any node ("" when none did)."""
        refs = [r.host.ran_while_frozen.remote(r.set_id) for r in self.remotes]
        try:
            found = [self.local.ran_while_frozen(), *ray.get(refs, timeout=30)]
        except Exception:  # noqa: BLE001 - a host that does not answer cannot vouch for its part
            return "a node's part of the set did not answer whether it ran while stopped"
        return next((f for f in found if f), "")

    def thaw(self) -> None:
        refs = [r.host.thaw.remote(r.set_id) for r in self.remotes]
        self.local.thaw()
        try:
            ray.get(refs, timeout=30)
        except Exception:  # noqa: BLE001 - a host gone took its ranks with it
            pass

    def signal_kill(self) -> None:
        self.closed = True
        self.local.signal_kill()
        for r in self.remotes:
            r.host.signal_kill.remote(r.set_id)

    def kill(self) -> None:
        self.signal_kill()
        kills = [r.host.kill.remote(r.set_id) for r in self.remotes]
        self.local.kill()
        try:
            ray.get(kills, timeout=60)
        except Exception:  # noqa: BLE001 - a host that died took its ranks with it (PDEATHSIG)
            pass
        self._store = None

    def close(self, grace_s: float = 1.0) -> None:
        if self.closed:
            return
        self.local.send(Exit())
        for r in self.remotes:
            r.host.send.remote(r.set_id, Exit())
        time.sleep(min(grace_s, 0.2))
        self.kill()


class SpreadLauncher:
    """What a spread gang gives its Harness: starts a SpreadRankSet over its parts per call."""

    def __init__(self, parts: list[tuple[Any, list[str]]], store_host: str):
        self.parts, self.store_host, self.nodes = parts, store_host, len(parts)

    def __call__(self, **options: Any) -> SpreadRankSet:
        return SpreadRankSet(self.parts, store_host=self.store_host, **options)
