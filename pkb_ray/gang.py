"""A gang: W GPUs of one node reserved as a placement group, and the actor that evaluates on them.

:func:`reserve` asks Ray for a STRICT_PACK placement group of W one-GPU bundles (logical GPUs on
a machine without any). Once it is ready, :func:`bundle_devices` asks each bundle which GPU Ray
gave it, and :func:`start_gang` starts the :class:`Gang` actor on the group's node. The actor
holds no GPU itself and never imports candidate code: it hands each sample to a
:class:`~pkb_ray.harness.Harness`, which runs it in fresh rank processes on those GPUs.

Ranks see every GPU of the node and select their own (with one visible GPU per rank, torch
symmetric memory fails and CUDA IPC is unreliable), hence RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES
for every process Ray starts here. The NVLink multicast switches of the driver's environment are
passed on too, so a cluster whose nodes were started differently still keeps them.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from pkb_ray.config import SweepConfig
from pkb_ray.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.ranks import MULTICAST_OFF
from pkb_ray.schema import Result, Sample, Status

NOSET_CUDA = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


def actor_env() -> dict[str, str]:
    """Environment variables every gang process gets, whatever the node was started with."""
    env = {NOSET_CUDA: "1"}
    env.update({k: os.environ[k] for k in MULTICAST_OFF if k in os.environ})
    return env


class Gang:
    """The actor: evaluates one sample at a time on the W devices it was given."""

    def __init__(self, cfg: dict[str, Any], name: str, gpu_ids: list[str]):
        self.cfg = SweepConfig.model_validate(cfg)
        self.name = name
        hw = self.cfg.hardware
        devices = [f"cuda:{int(g)}" for g in gpu_ids] if hw.device == "cuda" else ["cpu"] * len(gpu_ids)
        self.harness = Harness(devices, self.cfg.eval, hw, load_problems(self.cfg.problems_dir),
                               work_dir=self.cfg.cache_path / "work" / name, cache_dir=self.cfg.cache_path)
        self.harness.prewarm()  # the first sample's rank processes start while the pool fills up

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "pid": os.getpid(), "devices": self.harness.devices,
                "node": ray.get_runtime_context().get_node_id()}

    def evaluate(self, sample: dict[str, Any]) -> dict[str, Any]:
        s = Sample.model_validate(sample)
        try:
            result = self.harness.evaluate(s)
        except Exception:  # noqa: BLE001 - an evaluator fault still yields this sample's row
            result = Result.for_sample(s, Status.RUNTIME_ERROR, "evaluator error (not the sample's fault):\n"
                                       + traceback.format_exc(), world_size=len(self.harness.devices),
                                       hardware=self.cfg.hardware.name, device_backend=self.cfg.hardware.backend)
        return result.model_copy(update={"gang": self.name}).model_dump(mode="json")

    def shutdown(self) -> None:
        self.harness.close()


@dataclass
class GangHandle:
    """What the pool knows of one gang: its reservation, then its actor."""

    name: str
    world_size: int
    pg: PlacementGroup
    actor: Any = None
    node: str = ""
    gpu_ids: list[str] = field(default_factory=list)


def reserve(world_size: int, name: str) -> GangHandle:
    """Ask for W one-GPU bundles on one node; ``handle.pg.ready()`` resolves once Ray has them."""
    pg = placement_group([{"GPU": 1}] * world_size, strategy="STRICT_PACK", name=f"{name}-pg")
    return GangHandle(name=name, world_size=world_size, pg=pg)


@ray.remote(num_cpus=0, num_gpus=1)
def _bundle_gpu() -> tuple[str, str]:
    ctx = ray.get_runtime_context()
    return ctx.get_node_id(), ctx.get_accelerator_ids()["GPU"][0]


def bundle_devices(handle: GangHandle) -> None:
    """Fill in the node and the GPU id of each bundle (Ray fixes them when the group is placed)."""
    probes = [_bundle_gpu.options(scheduling_strategy=PlacementGroupSchedulingStrategy(handle.pg, i),
                                  runtime_env={"env_vars": actor_env()}).remote()
              for i in range(handle.world_size)]
    found = ray.get(probes)
    handle.node = found[0][0]
    handle.gpu_ids = [gpu for _, gpu in found]


def start_gang(cfg: SweepConfig, handle: GangHandle, name: str | None = None) -> None:
    """Start (or restart, under a new name) the gang's actor in its placement group."""
    handle.name = name or handle.name
    handle.actor = ray.remote(Gang).options(
        name=handle.name, num_cpus=0, num_gpus=0, max_concurrency=1,
        scheduling_strategy=PlacementGroupSchedulingStrategy(handle.pg, 0),
        runtime_env={"env_vars": actor_env()},
    ).remote(cfg.model_dump(mode="json"), handle.name, handle.gpu_ids)


def stop_gang(handle: GangHandle, release: bool = True) -> None:
    """Stop the actor (its rank processes die with it); give the GPUs back to Ray if ``release``."""
    if handle.actor is not None:
        try:
            ray.get(handle.actor.shutdown.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - a dead or stuck actor: killed next anyway
            pass
        ray.kill(handle.actor)
        handle.actor = None
    if release:
        remove_placement_group(handle.pg)
