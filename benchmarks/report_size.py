"""The report's size for a large run: a synthetic results folder (no sweep), its report, the bytes.

    .venv/bin/python -m benchmarks report_size --samples 5000 --work /tmp/report_5000

Writes ``--samples`` result rows (4 models, 25 samples per model and problem, sources of 3-8 KB,
a fifth failing with messages of up to 1.5 KB, per-rank times at W=2) as Parquet, reads them back
as ``pkb-ray report`` does, writes the report (both under ``--work``, default a temporary folder)
and prints and writes the size of report.html, of the largest page under sources/, their count and
the seconds it took. docs/benchmarks/report.md has the figures.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from benchmarks import common
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, Sample

MODELS = ("model-a", "model-b", "model-c", "model-d")
PER_PROBLEM = 25  # samples of each model on each problem
CATEGORIES = ("collective", "gemm", "moe", "attention")
FAILURES = (Status.WRONG_OUTPUT, Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT, Status.INVALID_SAMPLE)
KERNEL = '''
@triton.jit
def _kernel_{n}(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * {n} + 1, mask=mask)  # step {n} of the fused pipeline

'''


def source(rng: random.Random, pid: str) -> str:
    """A module of 3-8 KB that reads like a generated solution."""
    want = rng.randint(3000, 8000)
    parts = [f'"""A solution of {pid}."""\nimport torch\nimport torch.distributed as dist\nimport triton\n'
             "import triton.language as tl\n"]
    n = 0
    while sum(map(len, parts)) < want - 400:
        parts.append(KERNEL.format(n=n))
        n += 1
    parts.append("def solution(x):\n    out = torch.empty_like(x)\n    dist.all_reduce(out)\n    return out\n")
    return "".join(parts)


def synthetic_results(samples: int, seed: int = 0) -> list[Result]:
    """``samples`` result rows over as many problems as it takes (4 models x 25 samples each)."""
    rng = random.Random(seed)
    out: list[Result] = []
    p = 0
    while len(out) < samples:
        pid, category = f"problem_{p:03d}", CATEGORIES[p % len(CATEGORIES)]
        for model in MODELS:
            for i in range(PER_PROBLEM):
                if len(out) == samples:
                    return out
                s = Sample(problem_id=pid, model=model, sample_index=i, source=source(rng, pid))
                if rng.random() < 0.2:
                    status = rng.choice(FAILURES)
                    message = f"{status.value}: " + "line 42: error: no matching function " * rng.randint(2, 40)
                    out.append(Result.for_sample(s, status, message, world_size=2, hardware="h200_2",
                                                 category=category))
                    continue
                ref = rng.uniform(20, 2000)
                speedup = rng.lognormvariate(0, 0.8)
                out.append(Result.for_sample(
                    s, Status.CORRECT, world_size=2, hardware="h200_2", category=category, speedup=speedup,
                    sol_fraction=min(1.0, speedup / 10), ref_time_us=ref, cand_time_us=ref / speedup,
                    ref_median_us=[ref, ref * 1.01], ref_iqr_us=[ref * 0.02] * 2,
                    cand_median_us=[ref / speedup] * 2, cand_iqr_us=[ref / speedup * 0.03] * 2))
        p += 1
    return out


def main(argv: list[str]) -> int:
    from pkb_ray.results.parquet import write_results
    from pkb_ray.summary import RunSummary
    from pkb_ray.summary.cli import read_runs
    from pkb_ray.summary.pages import write

    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--work", type=Path, help="folder for the results and the report (default: a temporary one)")
    args = ap.parse_args(argv)
    out = run.out(args.out)
    work = args.work or Path(tempfile.mkdtemp(prefix="pkb-report-size-"))
    write_results(synthetic_results(args.samples), work / "results")
    t0 = time.monotonic()
    page, md = write(RunSummary.of(read_runs([work])), work / "report")
    took = time.monotonic() - t0
    sources = sorted((work / "report" / "sources").glob("*.html"))
    sizes = {"samples": args.samples, "report_html_bytes": page.stat().st_size, "report_md_bytes": md.stat().st_size,
             "source_pages": len(sources), "largest_source_page_bytes": max((f.stat().st_size for f in sources), default=0),
             "source_pages_bytes": sum(f.stat().st_size for f in sources), "seconds": round(took, 2), "work": str(work)}
    print(f"{args.samples} results: report.html {sizes['report_html_bytes']:,} bytes, report.md "
          f"{sizes['report_md_bytes']:,}; {len(sources)} source pages, largest {sizes['largest_source_page_bytes']:,} "
          f"bytes, all {sizes['source_pages_bytes']:,}; {took:.1f} s to summarize and write")
    print("wrote", run.write(out, sizes))
    return 0
