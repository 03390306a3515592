"""Throughput of the whole pipeline against a naive harness, on the same samples, in one run.

    .venv/bin/python -m benchmarks throughput --samples 500 --naive 20 --out docs/benchmarks/data/bench_throughput_cpu.json
    python3 -m benchmarks throughput --device cuda --samples 500 --naive 20 --out ...   # GPU machine

pkb_ray: ``--samples`` synthetic samples (scripts/make_samples.py, hangs and crashes included)
through ``run_pipeline`` on a local Ray: samples/hour, per-sample latency percentiles (handed to a
gang until its result) and the GPU-busy fraction: time gangs spent inside samples over wall time
x gangs (from Ray start-up to the last result), and over the time the gangs were up.

naive: the first ``--naive`` of the same samples (hangs left out: a naive harness has no answer
to them but its own timeout) evaluated the way PyTorch-only harnesses do: for each of 5 trials,
a fresh ``torchrun`` job for the reference and another for the candidate (benchmarks/helpers/naive_trial.py),
outputs compared afterwards, no caching. Its samples/hour is extrapolated from that subset.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ray
import torch

from benchmarks import common
from pkb_ray.measure.correctness import compare
from pkb_ray.pipeline.cluster import NOSET_CUDA
from pkb_ray.pipeline.selection import hardware_profile
from pkb_ray.pipeline.wiring import run_pipeline
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import SweepConfig

REPO = common.REPO
NAIVE_TRIAL = Path(__file__).resolve().parent / "helpers" / "naive_trial.py"

TRIALS = 5


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def ours(rows: list[dict], args, tmp: Path) -> dict:
    profile, hardware = ("gpu", "h200_2") if args.device == "cuda" else ("cpu", "cpu_gloo")
    from omegaconf import OmegaConf

    raw = {"eval": OmegaConf.to_container(OmegaConf.load(REPO / f"conf/eval/{profile}.yaml")),
           "hardware": hardware_profile(hardware).model_dump(),
           "cache_dir": str(tmp / "cache")}
    raw["eval"].update(timeout_s=args.timeout, size="small", zygote=args.zygote)
    cfg = SweepConfig.model_validate(raw)
    report: dict = {}
    t0 = time.monotonic()
    results = run_pipeline(rows, cfg, load_problems(), tmp / "results", report=report)
    wall = time.monotonic() - t0
    gangs = int(ray.cluster_resources().get("GPU", 0)) // args.world_size  # all GPUs in W-gangs
    latency = [r.eval_seconds for r in results if r.eval_seconds and not r.duplicate_of]
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
    expected = {(row["problem_id"], row["sample_index"]): row.get("metadata", {}).get("expect", "") for row in rows}
    # a status the sample was not made to get (scripts/make_samples.py), with why: a verdict to look at
    unexpected = [{"problem_id": r.problem_id, "sample_index": r.sample_index, "status": r.status.value,
                   "expect": expected.get((r.problem_id, r.sample_index), ""), "message": (r.message or "")[:400]}
                  for r in results if expected.get((r.problem_id, r.sample_index))
                  and r.status.value not in expected[(r.problem_id, r.sample_index)].split("|")]
    phases: dict[str, list[float]] = {}
    for r in results:
        for name, seconds in (r.phase_seconds or {}).items() if not r.duplicate_of else ():
            phases.setdefault(name, []).append(seconds)
    return {"phases_p50_s": {k: round(percentile(v, 0.5), 4) for k, v in phases.items()},
            "samples": len(results), "evaluated": report.get("evaluated"), "wall_s": wall,
            "samples_per_hour": len(results) / wall * 3600, "latency_s_p50": percentile(latency, 0.5),
            "latency_s_p90": percentile(latency, 0.9), "latency_s_p99": percentile(latency, 0.99),
            "gang_busy_fraction": report.get("busy_fraction"),  # of the time gangs were up
            "gpu_busy_fraction_of_wall": report.get("busy_s", 0.0) / (wall * gangs), "gangs": gangs,
            "statuses": statuses, "unexpected": unexpected}


def naive(rows: list[dict], args, tmp: Path) -> dict:
    problems = load_problems()
    per_sample = []
    verdicts = []
    for n, row in enumerate(rows):
        problem = problems[row["problem_id"]]
        cand = tmp / f"naive{n}.py"
        cand.write_text(row["source"])
        t0 = time.monotonic()
        ok = True
        for trial in range(TRIALS):
            outs = {}
            for side, module in (("ref", problem.path), ("cand", cand)):
                out = tmp / f"naive{n}-{trial}-{side}"
                out.mkdir()
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       f"--nproc_per_node={args.world_size}", str(NAIVE_TRIAL), "--problem", str(problem.path), "--module", str(module),
                       "--seed", str(trial), "--out", str(out)]
                try:
                    done = subprocess.run(cmd, capture_output=True, timeout=args.timeout * 4, env=dict(os.environ))
                    outs[side] = [torch.load(out / f"rank{r}.pt") for r in range(args.world_size)] \
                        if done.returncode == 0 else None
                except subprocess.TimeoutExpired:
                    outs[side] = None
            if outs["cand"] is None or outs["ref"] is None:
                ok = False
                break
            tol = problem.tolerance(problem.meta.dtypes[0])
            if any(compare(e["outputs"], a["outputs"], tol.atol, tol.rtol) for e, a in zip(outs["ref"], outs["cand"])):
                ok = False
                break
        per_sample.append(time.monotonic() - t0)
        verdicts.append(ok)
        print(f"naive {n + 1}/{len(rows)}: {per_sample[-1]:.1f} s ({'ok' if ok else 'failed'})", flush=True)
    mean = statistics.mean(per_sample)
    return {"samples": len(rows), "trials": TRIALS, "seconds_per_sample_mean": mean,
            "seconds_per_sample_p50": percentile(per_sample, 0.5), "samples_per_hour": 3600 / mean,
            "passed": sum(verdicts)}


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--naive", type=int, default=10, help="samples for the naive harness (a subset)")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--zygote", action=argparse.BooleanOptionalAction, default=True,
                    help="eval.zygote: rank sets forked from a template (--no-zygote: a fresh sandbox each)")
    args = ap.parse_args(argv)
    out_path = run.out(args.out)
    per_problem = -(-args.samples // 8)
    rows = common.script("make_samples").generate(per_problem, ["bench"], seed=7)[: args.samples]
    os.environ[NOSET_CUDA] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        ray.init(num_gpus=None if args.device == "cuda" else args.world_size, include_dashboard=False,
                 configure_logging=False, log_to_driver=False)
        try:
            mine = ours(rows, args, Path(tmp))
        finally:
            ray.shutdown()
        subset = [r for r in rows if r["metadata"]["variant"] != "hang"][: args.naive]
        theirs = naive(subset, args, Path(tmp)) if subset else {}
    out = {"device": args.device, "world_size": args.world_size, "pkb_ray": mine, "naive": theirs,
           "speedup_samples_per_hour": mine["samples_per_hour"] / theirs["samples_per_hour"] if theirs else None}
    print(json.dumps(out, indent=2))
    print("wrote", run.write(out_path, out))
    return 0
