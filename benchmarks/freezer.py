"""The two freezers side by side: copies of a problem's reference evaluated alternately through a
harness whose sandboxes are stopped by the cgroup v2 freezer and one stopped by SIGSTOP with its proof.

    .venv/bin/python -m benchmarks freezer --samples 8 [--problem all_reduce]

Both harnesses take eval=cpu's settings (W=2 gloo). It prints and writes, per freezer, each sample's
status, speedup and seconds, and the median of each phase (pkb_ray.spec.schema.Result.phase_seconds).
Where no cgroup can be made here, the "cgroup" side falls back to signals and says so.
Figures: docs/benchmarks/throughput.md.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from benchmarks import common
from pkb_ray.evaluate.harness import Harness
from pkb_ray.isolation import freeze_group
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.paths import CONF_DIR
from pkb_ray.spec.schema import Sample

FREEZERS = {"cgroup": "cgroup", "signals": "signals"}  # what PKB_FREEZER says for each side


def _summary(rows: list[dict]) -> dict:
    later = rows[1:] or rows  # the first sample also starts the clean set and the template
    phases = sorted({k for r in later for k in r["phases"]})
    return {"statuses": [r["status"] for r in rows], "speedups": [r["speedup"] for r in rows],
            "sample_p50_s": round(statistics.median(r["seconds"] for r in later), 3),
            "phases_p50_s": {k: round(statistics.median(r["phases"].get(k, 0.0) for r in later), 4) for k in phases}}


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    p = run.parser(__doc__)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--problem", default="all_reduce")
    args = p.parse_args(argv)
    out = run.out(args.out)
    settings = {k: v for k, v in OmegaConf.to_container(OmegaConf.load(CONF_DIR / "eval" / "cpu.yaml")).items()
                if not k.startswith("_")}
    problems = load_problems()
    work = Path(tempfile.mkdtemp(prefix="bench-freezer-"))
    before = os.environ.get(freeze_group.FREEZER_ENV)
    harnesses = {}
    for side, env in FREEZERS.items():  # each rank set reads PKB_FREEZER when it starts
        os.environ[freeze_group.FREEZER_ENV] = env
        harnesses[side] = Harness(["cpu"] * 2, EvalConfig(**settings), HardwareConfig(world_sizes=[2], gpus_per_node=2),
                                  problems, work_dir=work / side, cache_dir=work / "cache")
    source = problems[args.problem].source()
    rows: dict[str, list[dict]] = {side: [] for side in FREEZERS}
    try:
        for i in range(args.samples):  # alternately: both sides see the same machine
            for side, harness in harnesses.items():
                os.environ[freeze_group.FREEZER_ENV] = FREEZERS[side]
                started = time.perf_counter()
                r = harness.evaluate(Sample(problem_id=args.problem, model="copy", sample_index=i, source=source))
                rows[side].append({"status": r.status.value, "speedup": r.speedup, "phases": dict(r.phase_seconds),
                                   "seconds": time.perf_counter() - started})
    finally:
        for harness in harnesses.values():
            harness.close()
        if before is None:
            os.environ.pop(freeze_group.FREEZER_ENV, None)
        else:
            os.environ[freeze_group.FREEZER_ENV] = before
    result = {"cgroup_available": freeze_group.probe()[1], "samples": args.samples, "problem": args.problem,
              **{side: {**_summary(r), "rows": r} for side, r in rows.items()}}
    for side in FREEZERS:
        print(side, json.dumps({k: v for k, v in result[side].items() if k != "rows"}))
    print("wrote", run.write(out, result))
    return 0
