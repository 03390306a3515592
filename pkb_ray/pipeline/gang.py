"""A gang: GPUs reserved as a placement group, and the actor that evaluates on them.

:func:`reserve` asks Ray for a placement group of the gang's :class:`~pkb_ray.spec.placement.Layout`:
on one node (1xW), STRICT_PACK of W one-GPU bundles (logical GPUs on a machine without any);
over N nodes (NxG), STRICT_SPREAD of N bundles of G GPUs, one per node. Once it is ready,
:func:`bundle_devices` asks each bundle which node and GPUs Ray gave it and orders the nodes
(ranks go node by node; Ray's bundle indices say nothing about nodes), and :func:`start_gang`
starts the :class:`Gang` actor on the first node, plus a :class:`~pkb_ray.isolation.spread.RankHost` on each
other node. The actor holds no GPU itself and never imports candidate code: it hands each sample
to a :class:`~pkb_ray.evaluate.harness.Harness`, which runs it in fresh rank processes on those GPUs.
It runs two calls at once, so that :meth:`Gang.deadline` answers the pool's watch while a sample
is being evaluated (the pool gives a gang one sample at a time).

Ranks see every GPU of the node and select their own (with one visible GPU per rank, torch
symmetric memory fails and CUDA IPC is unreliable), hence RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES
for every process Ray starts here. The NVLink multicast switches of the driver's environment are
passed on too, so a cluster whose nodes were started differently still keeps them.
"""

from __future__ import annotations

import logging
import os
import traceback
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from pkb_ray.evaluate.harness import Harness
from pkb_ray.isolation.procfs import descendants
from pkb_ray.isolation.ranks import MULTICAST_OFF
from pkb_ray.isolation.spread import RankHost, SpreadLauncher
from pkb_ray.pipeline.cluster import NOSET_CUDA
from pkb_ray.pipeline.selection import private_paths
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import Result, Sample, Where

log = logging.getLogger(__name__)
# what a harness may hold beyond what it held new, between samples: prewarmed rank sets come and go
# (pipes, pidfds, a sandbox's processes each), none of it hundreds
LEAK_SLACK_FDS = 256
LEAK_SLACK_PROCESSES = 64


def actor_env() -> dict[str, str]:
    """Environment variables every gang process gets, whatever the node was started with."""
    env = {NOSET_CUDA: "1"}
    env.update({k: os.environ[k] for k in MULTICAST_OFF if k in os.environ})
    return env


class Gang:
    """The actor: evaluates one sample at a time on the W devices it was given."""

    def __init__(self, cfg: dict[str, Any], name: str, gpu_ids: list[str], remote: list | None = None):
        """``gpu_ids``: this node's GPUs (ranks 0..); ``remote``: (RankHost, GPU ids) of each other
        node of a spread gang, in rank order."""
        self.cfg = SweepConfig.model_validate(cfg)
        self.name = name
        hw = self.cfg.hardware

        def devices(ids: list[str]) -> list[str]:
            return [f"cuda:{int(g)}" for g in ids] if hw.device == "cuda" else ["cpu"] * len(ids)

        self.hosts = [host for host, _ in remote or []]
        self._parts = [(None, devices(gpu_ids))] + [(host, devices(ids)) for host, ids in remote or []]
        self.replaced = 0  # harnesses replaced after an evaluator error or a leak
        self.harness = self._new_harness()
        self._baseline = self._resources()  # what a healthy gang holds between samples

    def _new_harness(self) -> Harness:
        """A harness on the gang's devices: its own clean set, zygotes and prewarmed rank sets."""
        launcher = SpreadLauncher(self._parts, store_host=ray.util.get_node_ip_address()) if self.hosts else None
        harness = Harness([d for _, ds in self._parts for d in ds], self.cfg.eval, self.cfg.hardware,
                          load_problems(self.cfg.problems_dir), work_dir=self.cfg.cache_path / "work" / self.name,
                          cache_dir=self.cfg.cache_path, launcher=launcher, private=private_paths(self.cfg),
                          name=self.name)
        harness.prewarm()  # the first sample's rank processes start while the pool fills up
        return harness

    def _replace(self, why: str) -> None:
        """Close the harness (every rank process and descriptor it holds) and start a new one."""
        log.warning("gang %s: a new harness (%s)", self.name, why)
        try:
            self.harness.close()
        except Exception:  # noqa: BLE001 - a broken harness is dropped all the same
            log.exception("gang %s: closing the old harness failed", self.name)
        self.replaced += 1
        self.harness = self._new_harness()
        self._baseline = self._resources()  # what is still held now is not the new harness's doing

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "pid": os.getpid(), "devices": self.harness.devices,
                "node": ray.get_runtime_context().get_node_id()}

    def deadline(self) -> float | None:
        """When (``time.time()``) the sample being evaluated must be done; None when idle. Answered
        beside a running evaluation: the pool's watch asks it, and one that never answers is wedged."""
        return self.harness.deadline_epoch

    def evaluate(self, sample: Sample, where: Where | None = None) -> Result:
        """The sample's result. An evaluator error (the harness raised: a clean set that died, a
        broken zygote, ...) replaces the harness and evaluates the sample once more; a second one
        is the sample's row, marked as not its fault. After each sample the gang's descriptors and
        child processes are counted: a harness that holds more than it did when new is replaced."""
        for attempt in (1, 2):
            try:
                result = self.harness.evaluate(sample, where)
            except Exception:  # noqa: BLE001 - an evaluator fault still yields this sample's row
                failure = traceback.format_exc()
                self._replace(f"evaluator error on {sample.problem_id} #{sample.sample_index}, attempt {attempt}")
                continue
            leaked = self._leaked()
            if leaked:
                self._replace(leaked)
            return result
        fields = where.fields if where else {"world_size": len(self.harness.devices), "nodes": self.harness.nodes,
                                             "hardware": self.cfg.hardware.name,
                                             "device_backend": self.cfg.hardware.backend}
        return Result.for_sample(sample, Status.RUNTIME_ERROR, "evaluator error (not the sample's fault), twice, "
                                 "on a new harness the second time:\n" + failure, gang=self.name, **fields)

    def _resources(self) -> tuple[int, int]:
        """(open descriptors, processes below this one) of the gang's process."""
        return len(os.listdir("/proc/self/fd")), len(descendants(os.getpid()))

    def _leaked(self) -> str:
        """Why the harness holds more than a new one did (descriptors, processes), or ""."""
        fds, procs = self._resources()
        base_fds, base_procs = self._baseline
        if fds > base_fds + LEAK_SLACK_FDS:
            return f"{fds} descriptors open, {base_fds} when it was new"
        if procs > base_procs + LEAK_SLACK_PROCESSES:
            return f"{procs} processes below it, {base_procs} when it was new"
        return ""

    def shutdown(self) -> None:
        self.harness.close()
        ray.get([h.shutdown.remote() for h in self.hosts])


@dataclass
class NodePart:
    """The gang's GPUs on one node, and the bundle of its placement group that holds them."""

    bundle: int
    node: str
    ip: str
    gpu_ids: list[str]


@dataclass
class GangHandle:
    """What the pool knows of one gang: its reservation, then its actor."""

    name: str
    layout: Layout
    pg: PlacementGroup
    actor: Any = None
    parts: list[NodePart] = field(default_factory=list)  # in rank order, once placed
    hosts: list[Any] = field(default_factory=list)  # RankHost actors of parts[1:]

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def node(self) -> str:
        return self.parts[0].node if self.parts else ""

    @property
    def gpu_ids(self) -> list[str]:
        return [g for p in self.parts for g in p.gpu_ids]


def reserve(layout: Layout, name: str) -> GangHandle:
    """Ask Ray for the gang's GPUs, one bundle a node; ``handle.pg.ready()`` resolves once it has them."""
    strategy = "STRICT_PACK" if layout.nodes == 1 else "STRICT_SPREAD"
    pg = placement_group([{"GPU": layout.per_node}] * layout.nodes, strategy=strategy, name=f"{name}-pg")
    return GangHandle(name=name, layout=layout, pg=pg)


@ray.remote(num_cpus=0, num_gpus=1)
def _bundle_gpus() -> tuple[str, str, list[str]]:
    ctx = ray.get_runtime_context()
    return ctx.get_node_id(), ray.util.get_node_ip_address(), [str(g) for g in ctx.get_accelerator_ids()["GPU"]]


def bundle_devices(handle: GangHandle) -> None:
    """Fill in the node, address and GPU ids of each bundle (Ray fixes them when the group is placed),
    ordered node by node (by address, then node id) for a spread gang. One task a node: each is a
    Ray worker process of its own (~1 s of CPU to start), so a bundle a GPU would cost W of them."""
    lay = handle.layout
    probes = [_bundle_gpus.options(num_gpus=lay.per_node, scheduling_strategy=PlacementGroupSchedulingStrategy(
        handle.pg, i), runtime_env={"env_vars": actor_env()}).remote() for i in range(lay.nodes)]
    parts = [NodePart(i, node, ip, ids) for i, (node, ip, ids) in enumerate(ray.get(probes))]
    handle.parts = sorted(parts, key=lambda p: (p.ip, p.node))


def start_gang(cfg: SweepConfig, handle: GangHandle, name: str | None = None) -> None:
    """Start (or restart, under a new name) the gang's actor on its first node, and a RankHost on each other."""
    handle.name = name or handle.name
    env = {"env_vars": actor_env()}
    handle.hosts = [ray.remote(RankHost).options(
        name=f"{handle.name}-host{i}", num_cpus=0, num_gpus=0, max_concurrency=8, runtime_env=env,
        scheduling_strategy=PlacementGroupSchedulingStrategy(handle.pg, part.bundle),
    ).remote() for i, part in enumerate(handle.parts[1:], 1)]
    handle.actor = ray.remote(Gang).options(
        name=handle.name, num_cpus=0, num_gpus=0, max_concurrency=2, runtime_env=env,
        scheduling_strategy=PlacementGroupSchedulingStrategy(handle.pg, handle.parts[0].bundle),
    ).remote(cfg.model_dump(mode="json"), handle.name, handle.parts[0].gpu_ids,
             [(host, part.gpu_ids) for host, part in zip(handle.hosts, handle.parts[1:])])


def stop_gang(handle: GangHandle, release: bool = True) -> None:
    """Stop the actor and its hosts (their rank processes die with them); give the GPUs back to Ray if ``release``."""
    if handle.actor is not None:
        try:
            ray.get(handle.actor.shutdown.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - a dead or stuck actor: killed next anyway
            pass
        ray.kill(handle.actor)
        handle.actor = None
    for host in handle.hosts:
        ray.kill(host)
    handle.hosts = []
    if release:
        remove_placement_group(handle.pg)
