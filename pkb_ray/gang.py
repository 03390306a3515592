"""A gang: the Ray actor that owns W devices and evaluates samples on them, one at a time.

It reserves W GPUs from Ray (logical GPUs on a machine without any), never imports candidate
code itself, and hands each sample to a :class:`~pkb_ray.harness.Harness`, which runs it in
fresh rank processes. Ranks see every GPU of the node and select their own (with one visible
GPU per rank, torch symmetric memory fails), hence RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

import ray

from pkb_ray.config import SweepConfig
from pkb_ray.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.schema import Result, Sample, Status

NOSET_CUDA = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


class Gang:
    def __init__(self, cfg: dict[str, Any], name: str):
        self.cfg = SweepConfig.model_validate(cfg)
        self.name = name
        hw = self.cfg.hardware
        if hw.device == "cuda":
            gpu_ids = ray.get_runtime_context().get_accelerator_ids()["GPU"]
            devices = [f"cuda:{int(g)}" for g in gpu_ids]
        else:
            devices = ["cpu"] * hw.world_size
        self.harness = Harness(devices, self.cfg.eval, hw, load_problems(self.cfg.problems_dir),
                               work_dir=self.cfg.cache_path / "work" / name, cache_dir=self.cfg.cache_path)

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "pid": os.getpid(), "devices": self.harness.devices}

    def evaluate(self, sample: dict[str, Any]) -> dict[str, Any]:
        s = Sample.model_validate(sample)
        try:
            result = self.harness.evaluate(s)
        except Exception:  # noqa: BLE001 - an evaluator fault still yields this sample's row
            result = Result.for_sample(s, Status.RUNTIME_ERROR, "evaluator error (not the sample's fault):\n"
                                       + traceback.format_exc(), world_size=self.cfg.hardware.world_size,
                                       hardware=self.cfg.hardware.name)
        return result.model_dump(mode="json")

    def shutdown(self) -> None:
        self.harness.close()


def start_gang(cfg: SweepConfig, index: int):
    """Create the actor for gang ``index``, holding ``world_size`` (logical) GPUs."""
    w = cfg.hardware.world_size
    name = f"gang-w{w}-{index}"
    actor = ray.remote(Gang).options(
        name=name, num_gpus=w, num_cpus=0, max_concurrency=1,
        runtime_env={"env_vars": {NOSET_CUDA: "1"}},
    )
    return actor.remote(cfg.model_dump(mode="json"), name)
