"""The compile stage on this machine: one nvcc build, a cache hit, and N distinct sources on the pool.

    .venv/bin/python -m benchmarks compile --sources 8 --out docs/benchmarks/data/bench_compile_cpu.json

Builds variants of the one-shot all-reduce kernel of kernels/ (each with a distinct constant, so
each is a distinct source) into a fresh cache: once in this process (one build, then the same
source again: a hit), then N sources through the run's compile stage (pkb_ray.pipeline.wiring.sample_stream:
validation, then the CUDA builds on Ray Data's compile actors) with 1 worker and with ``--workers``.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import ray

from benchmarks import common
from pkb_ray.cuda import BuildSpec, build, find_sources, nvcc_version
from pkb_ray.pipeline.wiring import sample_stream
from pkb_ray.spec.config import SweepConfig

KERNEL = (common.REPO / "kernels/all_reduce/02_cuda_one_shot.py").read_text()


def variant(i: int, tag: str) -> str:
    """The kernel module with a distinct CUDA source (a constant nobody reads)."""
    return KERNEL.replace('SOURCE = r"""', f'SOURCE = r"""\n// variant {tag}-{i}\n', 1)


def pool_wall(workers: int, n: int, tag: str, cache: Path) -> float:
    cfg = SweepConfig.model_validate({"cache_dir": str(cache), "hardware": {"arch": "sm_90a"},
                                      "eval": {"compile_workers": workers}})

    def rows(sources: list[str]) -> list[dict]:
        return [{"problem_id": "all_reduce", "model": "bench", "sample_index": i, "backend": "cuda", "source": src}
                for i, src in enumerate(sources)]

    list(sample_stream(rows([variant(0, "warm-" + tag)]), cfg, None, set()))  # actor start-up is not compile time
    t0 = time.monotonic()
    out = list(sample_stream(rows([variant(i, tag) for i in range(n)]), cfg, None, set()))
    assert all(item.task is not None for item in out), [item.result.message for item in out if item.result]
    return time.monotonic() - t0


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--sources", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    out = run.out(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        spec = BuildSpec(find_sources(variant(0, "single"))[0][0], "sm_90a")
        t0 = time.monotonic()
        build(spec, cache / "cuda")
        first = time.monotonic() - t0
        hits = []
        for _ in range(20):
            t0 = time.monotonic()
            build(spec, cache / "cuda")
            hits.append(time.monotonic() - t0)
        ray.init(num_cpus=args.workers, include_dashboard=False, configure_logging=False, log_to_driver=False)
        serial = pool_wall(1, args.sources, "serial", cache)
        parallel = pool_wall(args.workers, args.sources, "parallel", cache)
        ray.shutdown()
    row = {"nvcc": nvcc_version(), "arch": "sm_90a", "one_build_s": first, "cache_hit_s_median": statistics.median(hits),
           "sources": args.sources, "pool_1_worker_s": serial, f"pool_{args.workers}_workers_s": parallel,
           "speedup": serial / parallel}
    print(json.dumps(row, indent=2))
    print("wrote", run.write(out, row))
    return 0
