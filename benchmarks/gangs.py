"""Gangs under load, through Ray and the gang pool: statuses, overhead, recovery, leaks, spread.

    python -m benchmarks gangs --device cuda --out docs/benchmarks/data/bench_gangs_h200x2   # 2 x H200, NCCL
    python -m benchmarks gangs --device cpu --reps 2 --out /tmp/bench        # gloo, logical GPUs

Phases (``--phases``, comma separated; all by default), each writing ``<phase>.json`` in the folder
``--out`` (default: docs/benchmarks/data/gangs_<date-time>/):

statuses  the replay set, kernels/ and (on GPU) tests/samples/gpu: each status against the
          file's ``# expect:`` (``a|b`` accepts either).
overhead  ``--reps`` reference copies of each problem on one gang, for each ``--prewarm`` depth
          (rank sets started ahead; 0 = each sample starts its own). Per-sample overhead = gap between consecutive results at the driver
          (one gang, queue never empty: the latency the pipeline sees) minus the seconds the ranks
          spent in the timing step.
recovery  copies, then each hostile sample followed by a copy. Recovery = from the moment the
          harness saw the failure (the hostile sample's result time minus its clean-up) to the
          next copy's result, minus the median gap between two copies. Then the pool is shut
          down and rank processes and GPU memory are compared with what was there before.
spread    speedups of reference copies at each ``--sizes`` preset and ``--prewarm`` depth (``--reps`` each).
kernels   kernels/ at each ``--sizes`` preset: speedup over the reference.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import ray
from omegaconf import OmegaConf

from benchmarks import common
from pkb_ray.generate.samples import read_samples
from pkb_ray.pipeline.cluster import NOSET_CUDA
from pkb_ray.pipeline.compile import build_settings
from pkb_ray.pipeline.gang_pool import GangPool
from pkb_ray.pipeline.selection import hardware_profile
from pkb_ray.pipeline.wiring import prepare_here
from pkb_ray.problem import load_problems
from pkb_ray.runner.launch import RANK_NAME, process_name
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import EvalTask, Result, Sample, Where

REPO = common.REPO

HOSTILE_ANY = ["samples/replay/all_reduce/05_hangs_on_rank1.py", "tests/samples/segfaults.py",
               "tests/samples/exits_cleanly.py"]
HOSTILE_GPU = ["tests/samples/gpu/hangs_in_barrier.py", "tests/samples/gpu/illegal_address.py",
               "tests/samples/gpu/spins_forever.py", "tests/samples/gpu/out_of_memory.py"]


def config(args, **eval_overrides) -> SweepConfig:
    profile = "gpu" if args.device == "cuda" else "cpu"
    hardware = "h200_2" if args.device == "cuda" else "cpu_gloo"
    raw = {"eval": OmegaConf.to_container(OmegaConf.load(REPO / f"conf/eval/{profile}.yaml")),
           "hardware": hardware_profile(hardware).model_dump(),
           "cache_dir": str(args.cache)}
    raw["hardware"].update(world_sizes=[args.world_size], gpus_per_node=max(args.world_size, 2))
    raw["eval"].update(timeout_s=args.timeout, **eval_overrides)
    return SweepConfig.model_validate(raw)


def run_pool(cfg: SweepConfig, samples: list[Sample]) -> list[tuple[float, Result]]:
    """Evaluate on a fresh pool; (driver arrival time, result) in arrival order."""
    pool = GangPool(cfg)
    out = []
    try:
        where = Where(Layout(1, cfg.hardware.world_sizes[0]))
        for _, result in pool.evaluate([EvalTask(s, where) for s in samples]):
            out.append((time.monotonic(), result))
    finally:
        pool.shutdown()
    return out


def sample_of(path: Path, index: int, problem: str = "all_reduce") -> Sample:
    return Sample(problem_id=problem, model="bench", sample_index=index, source=path.read_text())


def copies() -> list[Sample]:
    rows = [r for r in read_samples(REPO / "samples/replay") if r["metadata"].get("label") == "reference_copy"]
    return [Sample.model_validate(r) for r in rows]


def phase_statuses(args) -> dict:
    problems = load_problems()
    settings = build_settings("sm_90a", config(args).cache_path, 300)
    rows = read_samples(REPO / "samples/replay") + read_samples(REPO / "kernels", model="kernels")
    if args.device == "cuda":
        rows += [{"problem_id": "all_reduce", "model": "hostile", "sample_index": 100 + i, "source": p.read_text(),
                  "metadata": {"file": str(p.relative_to(REPO)), "expect": _header(p, "expect")}}
                 for i, p in enumerate(sorted((REPO / "tests/samples/gpu").glob("*.py")))]
    expected, ready, lines = {}, [], []
    for row in rows:
        key = (row["model"], row["problem_id"], row["sample_index"])
        expected[key] = (row["metadata"]["file"], row["metadata"].get("expect", "correct"))
        out = prepare_here(row, problems, args.world_size, settings)
        if isinstance(out, Sample):
            ready.append(out)
        else:
            lines.append(out)
    results = lines + [r for _, r in run_pool(config(args, size="small"), ready)]
    report = []
    for r in results:
        file, expect = expected[(r.model, r.problem_id, r.sample_index)]
        report.append({"file": file, "expect": expect, "status": r.status.value,
                       "ok": r.status.value in expect.split("|"), "speedup": r.speedup,
                       "ref_us": r.ref_time_us, "cand_us": r.cand_time_us, "eval_seconds": r.eval_seconds,
                       "message": r.message[-400:]})
    report.sort(key=lambda x: x["file"])
    for x in report:
        print(f"{'ok ' if x['ok'] else 'BAD'} {x['file']:50s} {x['status']:14s} "
              f"speedup={x['speedup'] or 0:6.2f} ref={x['ref_us'] or 0:8.1f}us cand={x['cand_us'] or 0:8.1f}us")
    return {"ok": sum(x["ok"] for x in report), "total": len(report), "samples": report}


def _header(path: Path, key: str) -> str:
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}:"):
            return line.split(":", 1)[1].strip()
    return ""


def gaps(arrivals: list[float]) -> list[float]:
    return [b - a for a, b in zip(arrivals, arrivals[1:])]


def phase_overhead(args) -> dict:
    out = {}
    for prewarm in args.prewarm:
        samples = [s.model_copy(update={"sample_index": s.sample_index + 1000 * rep}) for rep in range(args.reps + 1)
                   for s in copies()]
        got = run_pool(config(args, prewarm=prewarm), samples)
        got = got[len(copies()):]  # the first pass fills the reference cache and starts the gang
        overhead = [gap - r.timed_seconds for gap, (_, r) in zip(gaps([t for t, _ in got]), got[1:])]
        phases = {}
        for _, r in got[1:]:
            for k, v in r.phase_seconds.items():
                phases.setdefault(k, []).append(v)
        out[f"prewarm={prewarm}"] = {
            "samples": len(overhead), "overhead_s_median": statistics.median(overhead),
            "overhead_s_p90": sorted(overhead)[int(0.9 * (len(overhead) - 1))], "overhead_s_max": max(overhead),
            "latency_s_median": statistics.median(gaps([t for t, _ in got])),
            "timed_s_median": statistics.median(r.timed_seconds for _, r in got[1:]),
            "phase_s_median": {k: round(statistics.median(v), 3) for k, v in phases.items()}}
        print(f"overhead prewarm={prewarm}: {json.dumps(out[f'prewarm={prewarm}'])}")
    return out


def gpu_state() -> dict:
    if not _has_nvidia_smi():
        return {}
    used = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True).stdout.split("\n")
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()
    return {"memory_used_mib": [line.strip() for line in used if line.strip()], "compute_apps": apps}


def _has_nvidia_smi() -> bool:
    try:
        subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=True)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


def rank_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or process_name(int(entry.name)) != RANK_NAME:
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append(f"{entry.name}: {cmd[:120]}")
    return found


def phase_recovery(args) -> dict:
    copy = REPO / "samples/replay/all_reduce/00_reference_copy.py"
    hostile = HOSTILE_ANY + (HOSTILE_GPU if args.device == "cuda" else [])
    seq = [sample_of(copy, i) for i in range(4)]
    for n, rel in enumerate(hostile):
        seq += [sample_of(REPO / rel, 100 + n), sample_of(copy, 200 + n)]
    before = gpu_state()
    got = run_pool(config(args), seq)
    time.sleep(2)  # reaping is asynchronous; give the driver and kernel a moment
    after = gpu_state()
    leftover = rank_processes()
    by_index = {r.sample_index: (t, r) for t, r in got}
    steady = statistics.median(gaps([by_index[i][0] for i in range(1, 4)]))
    rows = []
    for n, rel in enumerate(hostile):
        t_bad, bad = by_index[100 + n]
        t_next, nxt = by_index[200 + n]
        detected = t_bad - bad.phase_seconds.get("cleanup", 0.0)
        rows.append({"sample": rel, "status": bad.status.value, "message": bad.message[-300:],
                     "eval_seconds": bad.eval_seconds, "phases": bad.phase_seconds,
                     "next_status": nxt.status.value, "recovery_s": t_next - detected - steady})
        print(f"{rel:48s} {bad.status.value:14s} next={nxt.status.value:8s} "
              f"recovery={rows[-1]['recovery_s']:5.2f}s eval={bad.eval_seconds:5.1f}s")
    return {"steady_gap_s": steady, "hostile": rows, "gpu_before": before, "gpu_after": after,
            "rank_processes_left": leftover}


def phase_spread(args) -> dict:
    out = {}
    for size in args.sizes:
        for prewarm in args.prewarm:
            samples = [s.model_copy(update={"sample_index": s.sample_index + 1000 * rep}) for rep in range(args.reps)
                       for s in copies()]
            got = [r for _, r in run_pool(config(args, size=size, prewarm=prewarm), samples)]
            sp = [r.speedup for r in got if r.speedup]
            key = f"{size} prewarm={prewarm}"
            out[key] = {"n": len(sp), "min": min(sp), "median": statistics.median(sp), "max": max(sp),
                        "stdev": statistics.pstdev(sp), "within_3pct": sum(abs(s - 1) <= 0.03 for s in sp),
                        "per_problem": {r.problem_id: [round(x.speedup, 3) for x in got if x.problem_id == r.problem_id]
                                        for r in got},
                        "ref_us": {r.problem_id: round(r.ref_time_us, 2) for r in got},
                        "calls_per_round": {r.problem_id: r.calls_per_round for r in got},
                        "statuses": sorted({r.status.value for r in got})}
            print(f"spread {key}: {json.dumps({k: v for k, v in out[key].items() if k != 'per_problem'})}")
    return out


def phase_kernels(args) -> dict:
    problems = load_problems()
    settings = build_settings("sm_90a", config(args).cache_path, 300)
    rows = read_samples(REPO / "kernels", model="kernels")
    out = {}
    for size in args.sizes:
        ready = [prepare_here(r, problems, args.world_size, settings) for r in rows]
        got = [r for _, r in run_pool(config(args, size=size), [s for s in ready if isinstance(s, Sample)])]
        out[size] = [{"problem": r.problem_id, "sample": r.sample_index, "status": r.status.value,
                      "speedup": r.speedup, "ref_us": r.ref_time_us, "cand_us": r.cand_time_us,
                      "sol_fraction": r.sol_fraction, "message": r.message[-300:]} for r in got]
        for x in out[size]:
            print(f"kernels {size}: {x['problem']}/{x['sample']} {x['status']} speedup={x['speedup'] or 0:.2f} "
                  f"ref={x['ref_us'] or 0:.1f}us cand={x['cand_us'] or 0:.1f}us")
    return out


PHASES = {"statuses": phase_statuses, "kernels": phase_kernels, "recovery": phase_recovery,
          "overhead": phase_overhead, "spread": phase_spread}


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__, out_help="folder for <phase>.json (default: docs/benchmarks/data/gangs_<date-time>/)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--sizes", default="small,default")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prewarm", default="2,1,0", help="overhead phase: rank sets started ahead, each value in turn")
    ap.add_argument("--timeout", type=float, default=20.0, help="eval.timeout_s (the hang detection time)")
    ap.add_argument("--cache", type=Path, help="reference cache and work folders (default: a temporary folder)")
    args = ap.parse_args(argv)
    args.out = run.out(args.out, folder=True)
    args.cache = args.cache or Path(tempfile.mkdtemp(prefix="pkb-gangs-"))
    args.sizes = args.sizes.split(",")
    args.prewarm = [int(p) for p in args.prewarm.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ[NOSET_CUDA] = "1"
    logical = None if args.device == "cuda" else args.world_size
    ray.init(num_gpus=logical, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        for name in args.phases.split(","):
            t0 = time.monotonic()
            result = PHASES[name](args)
            result["phase_wall_s"] = time.monotonic() - t0
            run.write(args.out / f"{name}.json", result)
            print(f"== {name} done in {result['phase_wall_s']:.0f}s", flush=True)
    finally:
        ray.shutdown()
    print("wrote", args.out)
    return 0
