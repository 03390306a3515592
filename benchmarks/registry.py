"""The benchmarks by name: each is the module ``benchmarks.<name>``, whose ``main(argv) -> int``
runs it. ``python -m benchmarks`` and ``pkb-ray bench`` both go through :func:`run`."""

from __future__ import annotations

import difflib
import importlib
import sys

# name -> one line on what it measures (the page of docs/benchmarks that quotes its figures)
BENCHMARKS = {
    "bracket": "where a timed region's bracket goes, per side, for an all-reduce copy at W=1 (trust.md)",
    "compare_power": "what pkb-ray compare flags on runs shaped like the replay set, and its false-flag rate (statistics.md)",
    "compile": "the compile stage: one nvcc build, a cache hit, N sources on 1 and on several workers (throughput.md)",
    "cpu_eval": "seconds a sample and the speedup spread of reference copies on CPU, with and without prewarm (timing.md)",
    "freezer": "copies evaluated with the cgroup v2 freezer and with the SIGSTOP freezer, alternately (throughput.md)",
    "gangs": "gangs under load through Ray: statuses, overhead, recovery, leaks, speedup spread (recovery.md, throughput.md)",
    "graph_copies": "a reference copy against the reference over message sizes, eager and CUDA-graph (timing.md, kernels.md)",
    "interference": "verdicts and times of samples that slow the reference or the machine (interference.md)",
    "isolation": "what the sandbox costs per sample and to kernels, and hostile samples' statuses (sandbox.md)",
    "kernels": "expert kernels against the NCCL reference over message sizes: time, bus bandwidth, SOL (kernels.md)",
    "ladder": "speedups whose truth is known by construction, read back through the harness (timing.md)",
    "link_latency": "one dependent GPU-to-GPU step (ping-pong), for conf/hardware's link_latency_us (baselines.md)",
    "nodes": "reference baselines inside one node against gangs spread over fake Ray nodes (nodes.md)",
    "pkb_prebuild": "the compile stage's torch-extension builds over ParallelKernelBench solutions (pkb.md)",
    "pkb_side_by_side": "ParallelKernelBench's own harness and pkb_ray on the same samples: verdicts, samples/hour (pkb.md)",
    "process_cpu": "where a command's CPU goes (the test suite, a sweep): its processes' CPU by kind (test-suite.md)",
    "rank_start": "seconds for unsandboxed W=2 gloo rank sets to get ready, and their CPU (throughput.md)",
    "report_size": "report.html's size and build time for a large synthetic run (report.md)",
    "resume": "a long sweep SIGKILLed and resumed: one result a sample, no orphans (recovery.md)",
    "sandbox_start": "seconds for a rank set to get ready, sandboxed and not (sandbox.md)",
    "serve": "pkb-ray serve's latency, verdicts per hour and cache hits over HTTP (serve.md)",
    "short_protocol": "one evaluation's speedup spread on CPU at the tests' short protocol (timing.md)",
    "throughput": "samples per hour of the whole pipeline against a naive torchrun harness (throughput.md)",
    "timing_noise": "the spread of a reference copy's speedup on CPU, the timing tests' noise model (timing.md)",
    "verdict_path": "seconds a sample spends outside its timed rounds, per phase, for large outputs (verdict-path.md)",
    "zygote": "samples with rank sets forked from the zygote against sets started fresh (throughput.md)",
}


def names() -> dict[str, str]:
    """Every benchmark's name and its one-line description, by name."""
    return dict(sorted(BENCHMARKS.items()))


def run(name: str, argv: list[str]) -> int:
    """Run benchmark ``name`` with its arguments; its exit status (2: no such benchmark, or bad
    arguments; 0 after ``--help``)."""
    if name not in BENCHMARKS:
        close = difflib.get_close_matches(name, BENCHMARKS, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        print(f"unknown benchmark {name!r}{hint} (python -m benchmarks --list lists them)", file=sys.stderr)
        return 2
    module = importlib.import_module(f"benchmarks.{name}")
    try:
        code = module.main(list(argv))
    except SystemExit as exc:  # argparse (--help, bad arguments) and benchmarks that stop early
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    return int(code or 0)
