"""Latency and throughput of ``pkb-ray serve``: a real service, real HTTP on loopback.

    .venv/bin/python -m benchmarks serve --distinct 60 --concurrency 1,16 --out docs/benchmarks/data/serve_cpu.json
    python3 -m benchmarks serve --problems-dir /tmp/w1 --distinct 60 --concurrency 1,16 -- \\
        hardware=h200_2 'hardware.world_sizes=[1]' hardware.gpus_per_node=1 eval=gpu   # one GPU, W=1

Starts the service (``python -m pkb_ray.cli serve`` with the overrides after ``--``), waits for its
gangs, then for each concurrency C sends ``--distinct`` torch samples never seen before (honest
copies of the problem's reference, each made distinct by a comment line: every one is evaluated),
C at a time, and records each request's latency (sent to answered) and the verdicts per hour (samples
over the wall time of the phase). Then ``--hits`` requests for a sample already judged (cache hits),
C at a time. Prints one JSON document (and writes it to ``--out``), then stops the service with SIGINT.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks import common


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))], 4)

    return {"p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "mean": round(statistics.fmean(ordered), 4)}


def start(overrides: list[str], folder: Path, ready_timeout_s: float) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "pkb_ray.cli", "serve", f"serve.port={port}", f"serve.dir={folder / 'service'}",
           f"cache_dir={folder / 'cache'}", *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=dict(os.environ, RAY_DISABLE_USAGE_STATS="1"))
    ready, lines = threading.Event(), []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            print(f"[service] {line}", end="", file=sys.stderr, flush=True)  # a start that hangs says where
            if line.startswith("pkb_ray serve: http://"):
                ready.set()
        ready.set()  # it exited

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(ready_timeout_s) or proc.poll() is not None:
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit("the service did not start:\n" + "".join(lines[-40:]))
    return proc, f"http://127.0.0.1:{port}"


async def phase(url: str, bodies: list[dict], concurrency: int) -> dict:
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    unexpected: list[dict] = []  # every verdict that is not correct, with its message: what to look into
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=900, limits=httpx.Limits(max_connections=concurrency + 4)) as client:
        async def one(body: dict) -> None:
            async with gate:
                t = time.monotonic()
                reply = await client.post(url + "/v1/verify", json=body)
                latencies.append(time.monotonic() - t)
                answer = reply.json() if reply.headers.get("content-type", "").startswith("application/json") else {}
                status = answer.get("status", str(reply.status_code))
                statuses[status] = statuses.get(status, 0) + 1
                if status != "correct":
                    unexpected.append({"status": status, "source_head": body.get("source", "")[:40],
                                       "message": str(answer.get("message") or answer.get("detail") or reply.text)[:2000]})

        t0 = time.monotonic()
        await asyncio.gather(*(one(b) for b in bodies))
        wall = time.monotonic() - t0
    return {"requests": len(bodies), "concurrency": concurrency, "wall_s": round(wall, 2),
            "per_hour": round(3600 * len(bodies) / wall), "latency_s": percentiles(latencies), "statuses": statuses,
            "not_correct": unexpected}


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--problem", default="all_reduce")
    ap.add_argument("--problems-dir", default=None)
    ap.add_argument("--distinct", type=int, default=40, help="samples evaluated at each concurrency")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--hits", type=int, default=400)
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("overrides", nargs="*", help="pkb-ray serve overrides (after --)")
    args = ap.parse_args(argv)
    out_path = run.out(args.out)
    from pkb_ray.problem import load_problems

    source = load_problems(args.problems_dir)[args.problem].source()
    overrides = [*([f"problems_dir={args.problems_dir}"] if args.problems_dir else []), *args.overrides]
    out: dict = {"overrides": overrides, "problem": args.problem, "phases": []}
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start(overrides, Path(tmp), args.ready_timeout)
        try:
            out["health_at_start"] = httpx.get(url + "/healthz").json()
            for n, c in enumerate(int(x) for x in args.concurrency.split(",")):
                bodies = [{"problem_id": args.problem, "source": f"# bench {n}.{i}\n{source}"}
                          for i in range(args.distinct)]
                out["phases"].append({"kind": "evaluated", **asyncio.run(phase(url, bodies, c))})
                hit = bodies[0]
                out["phases"].append({"kind": "cache_hit", **asyncio.run(phase(url, [hit] * args.hits, c))})
            out["health_at_end"] = httpx.get(url + "/healthz").json()
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            out["stop_rc"] = proc.wait(120)
    print(json.dumps(out, indent=1))
    print("wrote", run.write(out_path, out))
    return 0
