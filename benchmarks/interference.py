"""Verdicts and times of reference-slowing samples beside an honest reference copy, one harness.

    python -m benchmarks interference --device cuda --out /tmp/interference.json   # 1 x H200, W=1
    python -m benchmarks interference --device cpu --world-size 2 --out /tmp/interference.json

The samples are tests/samples' all_reduce attacks on the reference (a patched C++ method, a
torch.library kernel, patch-and-restore, CPU or GPU load while idle) and a sample that stalls
every call; each is evaluated ``--reps`` times after the honest copy, at the eval profile's
settings (``--timeout`` for eval.timeout_s). With one GPU the problem is a copy of all_reduce
allowed at W=1. Rows are written after every sample, so a run cut short keeps what it measured.
It runs against an older checkout too, for before/after: ``cd <checkout> && PYTHONPATH=<checkout>:<this
checkout> python -m benchmarks interference ...`` (the samples stay this checkout's).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

import pkb_ray
from benchmarks import common
from pkb_ray.evaluate.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample

HERE = common.REPO  # this checkout's samples, whichever pkb_ray runs them
# the GPU loader last: before issue 28 it held its gang past every deadline
SAMPLES = ["slows_reference.py", "slows_reference_in_cpp.py", "overrides_dispatcher.py", "patches_and_restores.py",
           "loads_cpu_when_idle.py", "stalls_every_call.py", "gpu/loads_gpu_when_idle.py"]


def problems_dir(world_size: int) -> Path:
    """A folder with all_reduce allowed at ``world_size`` (the shipped file says W >= 2)."""
    folder = Path(tempfile.mkdtemp(prefix="pkb-interference-"))
    source = (HERE / "problems/all_reduce.py").read_text()
    (folder / "all_reduce.py").write_text(source.replace("world_sizes=dict(min=2)", f"world_sizes=dict(min={world_size})"))
    return folder


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    p = run.parser(__doc__)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--timeout", type=float, default=15.0, help="eval.timeout_s")
    p.add_argument("--timing-mode", default="eager")
    p.add_argument("--samples", default=",".join(SAMPLES))
    p.add_argument("--numel", type=int, default=0, help="eval.size as {numel: N} (default: the profile's size)")
    p.add_argument("--rounds", type=int, default=0, help="eval.rounds (default: the profile's)")
    args = p.parse_args(argv)
    out = run.out(args.out)
    gpu = args.device == "cuda"
    cfg = OmegaConf.to_container(OmegaConf.load(HERE / f"conf/eval/{'gpu' if gpu else 'cpu'}.yaml"))
    cfg.update(timeout_s=args.timeout, timing_mode=args.timing_mode, **({"size": {"numel": args.numel}} if args.numel else {}),
               **({"rounds": args.rounds} if args.rounds else {}))
    problems = load_problems(problems_dir(args.world_size))
    devices = [f"cuda:{i}" for i in range(args.world_size)] if gpu else ["cpu"] * args.world_size
    hardware = HardwareConfig(name="bench", device=args.device, world_sizes=[args.world_size],
                              gpus_per_node=args.world_size, nvlink_multicast=False)
    work = Path(tempfile.mkdtemp(prefix="pkb-interference-work-"))
    harness = Harness(devices, EvalConfig(**cfg), hardware, problems, work_dir=work / "work", cache_dir=work / "cache")
    rows = []
    copy = problems["all_reduce"].source()
    todo = [("copy", copy)] + [(n, (HERE / "tests/samples" / n).read_text()) for n in args.samples.split(",") if n]
    try:
        for name, source in todo:
            if name.startswith("gpu/") and not gpu:
                continue
            for rep in range(args.reps):
                t0 = time.monotonic()
                r = harness.evaluate(Sample(problem_id="all_reduce", model=name, sample_index=rep, source=source))
                rows.append({"sample": name, "rep": rep, "status": r.status.value, "speedup": r.speedup,
                             "seconds": round(time.monotonic() - t0, 2), "timing_s": r.phase_seconds.get("timing"),
                             "message": r.message[:400]})
                print(json.dumps(rows[-1]), flush=True)
                run.write(out, {"pkb_ray": str(Path(pkb_ray.__file__).parent), "device": args.device,
                                "world_size": args.world_size, "eval": cfg, "rows": rows})
    finally:
        harness.close()
    copies = [r["seconds"] for r in rows if r["sample"] == "copy"]
    print("copy: median seconds a sample", statistics.median(copies) if copies else None)
    print("wrote", out)
    return 0
