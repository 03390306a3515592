"""The evaluate stage: samples to gangs, results back, as many gangs busy as the cluster allows.

A gang that dies (its actor process killed) gives its sample a ``crash`` result and is replaced;
no other sample's result is lost.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import ray
from ray.exceptions import RayActorError

from pkb_ray.config import SweepConfig
from pkb_ray.gang import start_gang
from pkb_ray.schema import Result, Sample, Status


def gang_count(cfg: SweepConfig) -> int:
    gpus = int(ray.cluster_resources().get("GPU", 0))
    n = gpus // cfg.hardware.world_size
    if n < 1:
        raise RuntimeError(f"the Ray cluster has {gpus} GPU(s); world size {cfg.hardware.world_size} needs more")
    return n


class GangPool:
    def __init__(self, cfg: SweepConfig):
        self.cfg = cfg
        self._next_index = 0
        self.gangs = [self._new_gang() for _ in range(gang_count(cfg))]

    def _new_gang(self):
        gang = start_gang(self.cfg, self._next_index)
        self._next_index += 1
        return gang

    def evaluate(self, samples: Iterable[Sample]) -> Iterator[Result]:
        todo = list(samples)[::-1]
        idle = list(self.gangs)
        running: dict[ray.ObjectRef, tuple[object, Sample]] = {}
        while todo or running:
            while idle and todo:
                gang, sample = idle.pop(), todo.pop()
                running[gang.evaluate.remote(sample.model_dump(mode="json"))] = (gang, sample)
            done, _ = ray.wait(list(running), num_returns=1)
            gang, sample = running.pop(done[0])
            try:
                yield Result.model_validate(ray.get(done[0]))
                idle.append(gang)
            except RayActorError as exc:
                yield Result.for_sample(sample, Status.CRASH, f"the gang evaluating this sample died: {exc}",
                                        world_size=self.cfg.hardware.world_size, hardware=self.cfg.hardware.name)
                self.gangs.remove(gang)
                replacement = self._new_gang()
                self.gangs.append(replacement)
                idle.append(replacement)

    def shutdown(self) -> None:
        for gang in self.gangs:
            try:
                ray.get(gang.shutdown.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - best effort; the actor is killed next anyway
                pass
            ray.kill(gang)
