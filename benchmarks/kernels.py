"""Expert kernels against the NCCL reference over message sizes, through the harness (no Ray).

    python3 -m benchmarks kernels --device cuda --out docs/benchmarks/data/bench_kernels_h200x2.json   # GPU machine
    python3 -m benchmarks kernels --rescore docs/benchmarks/data/bench_kernels_h200x2_bf16.json         # SOL again, from conf/hardware
    .venv/bin/python -m benchmarks kernels --device cpu --max-bytes 65536 --out /tmp/k.json  # gloo, a check

For every kernel in kernels/<problem>/ of a problem with a ``numel`` knob (and all-to-all, sized
by rows of ``A2A_DIM`` elements), and every message size from ``--min-bytes`` to ``--max-bytes``
(x4 steps; bytes of one rank's input), one evaluation:
correctness trials, then reference and kernel timed interleaved (pkb_ray/measure/timing.py). Prints and
writes per size: status, reference and kernel time, speedup, bus bandwidth of both (the
nccl-tests convention) and the kernel's fraction of speed of light. torch's own symmetric-memory
all-reduce is in kernels/ too (all_reduce/01_symm_mem_two_shot.py), so it is measured alongside.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from benchmarks import common
from pkb_ray.evaluate.harness import Harness
from pkb_ray.generate.samples import read_samples
from pkb_ray.pipeline.compile import build_settings
from pkb_ray.pipeline.selection import hardware_profile
from pkb_ray.pipeline.wiring import prepare_here
from pkb_ray.problem import DTYPES, load_problems, sol_time_us
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample

REPO = common.REPO

A2A_DIM = 1024  # all-to-all rows: 4 KiB in float32, 2 KiB in bfloat16


def bus_factor(problem: str, world: int) -> float:
    """Bus bandwidth = factor x bytes per rank / time (nccl-tests conventions, with bytes per rank:
    all-reduce 2(W-1)/W; all-gather (W-1) of one shard; reduce-scatter and all-to-all (W-1)/W)."""
    if problem == "all_reduce":
        return 2 * (world - 1) / world
    return float(world - 1) if problem == "all_gather" else (world - 1) / world


def knobs_for(problem: str, nbytes: int, itemsize: int, world: int) -> dict:
    """Size knobs giving about ``nbytes`` of input per rank (reduce-scatter's input holds W chunks;
    all-to-all's splits are random around rows_per_peer, so its bytes are a mean)."""
    per_rank = nbytes // itemsize
    if problem == "all_to_all":
        return {"rows_per_peer": max(1, per_rank // (world * A2A_DIM)), "dim": A2A_DIM}
    return {"numel": per_rank // world if problem == "reduce_scatter" else per_rank}


def _row(row: dict, pid: str, nbytes: int, world: int, r, wall_s: float) -> dict:
    factor = bus_factor(pid, world)

    def busbw(t_us):
        return factor * nbytes / (t_us * 1e-6) / 1e9 if t_us else None

    x = {"kernel": row["metadata"]["file"], "problem": pid, "bytes_per_rank": nbytes, "status": r.status.value,
         "ref_us": r.ref_time_us, "cand_us": r.cand_time_us, "speedup": r.speedup,
         "ref_busbw_gbps": busbw(r.ref_time_us), "cand_busbw_gbps": busbw(r.cand_time_us),
         "sol_us": r.sol_time_us, "sol_fraction": r.sol_fraction, "calls_per_round": r.calls_per_round, "eval_wall_s": round(wall_s, 2),
         "timing_mode": r.timing_mode, "graph_error": r.graph_error[-300:],
         "eager_ref_us": r.eager_ref_time_us, "eager_cand_us": r.eager_cand_time_us,
         "graph_ref_us": r.graph_ref_time_us, "graph_cand_us": r.graph_cand_time_us,
         "timing_s": r.phase_seconds.get("timing"), "message": r.message[-300:]}
    print(f"{x['kernel']:42s} {nbytes:>11d} B {x['status']:13s} ref={x['ref_us'] or 0:9.1f}us "
          f"cand={x['cand_us'] or 0:9.1f}us speedup={x['speedup'] or 0:5.2f} "
          f"busbw ref={x['ref_busbw_gbps'] or 0:6.1f} cand={x['cand_busbw_gbps'] or 0:6.1f} GB/s "
          f"sol={x['sol_fraction'] or 0:.2f} {x['timing_mode'] or '-'} ({wall_s:.1f} s)", flush=True)
    return x


def knobs_of(row: dict, itemsize: int, world: int) -> dict:
    if row["problem"] == "all_to_all":
        return {"rows_per_peer": row["bytes_per_rank"] // (world * A2A_DIM * itemsize), "dim": A2A_DIM}
    return knobs_for(row["problem"], row["bytes_per_rank"], itemsize, world)


def rescore(path: Path, problems, hw: HardwareConfig) -> int:
    """Speed-of-light time and fraction of every row of a stored run, with ``hw``'s bandwidths
    (the times measured are kept as they are)."""
    data = json.loads(path.read_text())
    w, dtype = data["world_size"], data["dtype"]
    for row in data["rows"]:
        sol = sol_time_us(problems[row["problem"]], knobs_of(row, DTYPES[dtype].itemsize, w), w, dtype, hw)
        row["sol_us"] = sol
        row["sol_fraction"] = sol / row["cand_us"] if row.get("cand_us") else None
    data["hardware"] = hw.model_dump()
    path.write_text(json.dumps(data, indent=2) + "\n")
    return 0


def _bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--hardware", help="profile in conf/hardware for the speed of light (default: h200_2 on cuda, "
                                       "cpu_gloo on cpu)")
    ap.add_argument("--rescore", type=Path, help="recompute the speed-of-light columns of this JSON (written by "
                                                  "this script) with --hardware, and exit")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--min-bytes", type=int, default=4 << 10)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--sizes", help="comma-separated bytes per rank (K/M suffixes), instead of x4 steps")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--only", help="comma-separated kernel files (problem/file.py) to run")
    ap.add_argument("--prewarm", type=int, default=None, help="rank sets started ahead (default: 2 on GPU, 0 on CPU)")
    ap.add_argument("--timeout", type=float, default=60.0, help="per evaluation, seconds")
    ap.add_argument("--timing-mode", choices=("eager", "graph", "both"), default="eager",
                    help="eval.timing_mode: graph replays each side's calls from a CUDA graph")
    ap.add_argument("--copies", action="store_true", help="also time each problem's reference, copied verbatim, "
                                                          "as a candidate (it should time at 1.00)")
    args = ap.parse_args(argv)
    w = args.world_size
    args.prewarm = args.prewarm if args.prewarm is not None else (2 if args.device == "cuda" else 0)
    problems = load_problems()
    rows = [r for r in read_samples(REPO / "kernels", model="kernels")
            if "numel" in problems[r["problem_id"]].meta.sizes["default"] or r["problem_id"] == "all_to_all"]
    if args.only:
        rows = [r for r in rows if r["metadata"]["file"] in args.only.split(",")]
    if args.copies:
        rows += [{"problem_id": pid, "model": "copies", "sample_index": 0, "source": problems[pid].source(),
                  "backend": "torch", "metadata": {"file": f"{pid}/reference_copy"}}
                 for pid in sorted({r["problem_id"] for r in rows})]
    devices = [f"cuda:{i}" for i in range(w)] if args.device == "cuda" else ["cpu"] * w
    profile = args.hardware or ("h200_2" if args.device == "cuda" else "cpu_gloo")
    hw = hardware_profile(profile).model_copy(update={"world_sizes": [w], "gpus_per_node": w})
    if args.rescore:
        return rescore(args.rescore, problems, hw)
    out = run.out(args.out)
    itemsize = DTYPES[args.dtype].itemsize
    sizes = [_bytes(t) for t in args.sizes.split(",")] if args.sizes else []
    n = args.min_bytes
    while not args.sizes and n <= args.max_bytes:
        sizes.append(n)
        n *= 4
    report = []

    def save() -> None:  # after every size too: a run cut short keeps what it measured
        run.write(out, {"device": args.device, "world_size": w, "dtype": args.dtype, "timing_mode": args.timing_mode,
                        "hardware": hw.model_dump(), "rows": report})

    with tempfile.TemporaryDirectory() as tmp:
        settings = build_settings(hw.arch, Path(tmp) / "cache", 300)
        for nbytes in sizes:
            for pid in sorted({r["problem_id"] for r in rows}):
                knobs = knobs_for(pid, nbytes, itemsize, w)
                count = sum(r["problem_id"] == pid for r in rows)
                cfg = EvalConfig(trials=2, timing_sets=2, warmup=5, rounds=args.rounds, size=knobs,
                                 dtype=args.dtype, timeout_s=args.timeout, prewarm=min(args.prewarm, count),
                                 max_round_calls=1 if args.device == "cpu" else 500, timing_mode=args.timing_mode)
                harness = Harness(devices, cfg, hw, problems, work_dir=Path(tmp) / "work", cache_dir=Path(tmp) / "cache")
                try:
                    for row in (r for r in rows if r["problem_id"] == pid):
                        start = time.perf_counter()
                        sample = prepare_here(row, problems, w, settings)
                        r = harness.evaluate(sample) if isinstance(sample, Sample) else sample
                        real = (w * knobs["rows_per_peer"] * A2A_DIM * itemsize) if pid == "all_to_all" else nbytes
                        report.append(_row(row, pid, real, w, r, time.perf_counter() - start))
                finally:
                    harness.close()
            save()
    save()
    print("wrote", out)
    return 0 if all(x["status"] == "correct" for x in report) else 1
