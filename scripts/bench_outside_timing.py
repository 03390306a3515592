"""Time outside timing per sample: an honest all_reduce copy at W=1 through the harness, with the GPU
eval profile (conf/eval/gpu.yaml: size default); the first sample (a fresh harness) is left out.

    python3 scripts/bench_outside_timing.py <tree whose conf/ to use> <samples>

Run it from two trees (PYTHONPATH=<tree>) one after the other for a before/after pair; it prints
one JSON line: medians of eval_seconds, timed_seconds and their difference (the time outside timing).
"""

import json
import statistics
import sys
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from pkb_ray.evaluate.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample


def main(tree: Path, samples: int) -> dict:
    raw = OmegaConf.to_container(OmegaConf.load(tree / "conf/eval/gpu.yaml"))
    cfg = EvalConfig(**{k: v for k, v in raw.items() if k in EvalConfig.model_fields})
    hw = HardwareConfig(name="gpu_1", device="cuda", world_sizes=[1], gpus_per_node=1)
    problems, tmp = load_problems(), Path(tempfile.mkdtemp())
    harness = Harness(["cuda:0"], cfg, hw, problems, work_dir=tmp / "work", cache_dir=tmp / "cache")
    try:
        results = [harness.evaluate(Sample(problem_id="all_reduce", model="copy", sample_index=i,
                                           source=problems["all_reduce"].source())) for i in range(samples)]
    finally:
        harness.close()
    later = results[1:]
    return {"tree": str(tree), "size": cfg.size, "timing_mode": cfg.timing_mode, "n": len(later),
            "eval_p50": round(statistics.median(r.eval_seconds for r in later), 3),
            "timed_p50": round(statistics.median(r.timed_seconds or 0 for r in later), 3),
            "outside_p50": round(statistics.median(r.eval_seconds - (r.timed_seconds or 0) for r in later), 3),
            "statuses": [r.status.value for r in results], "speedups": [round(r.speedup or 0, 3) for r in results],
            "phases_last": results[-1].phase_seconds}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]))))
