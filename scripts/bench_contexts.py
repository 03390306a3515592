"""What a region pays on one GPU for the process that touched the device last: a runner's k calls
timed by the parent's clock (command sent to reply seen), after its inputs were written by the
runner itself or by another process through CUDA IPC, and with the runner stopped (SIGSTOP) or
waiting on its pipe when the command comes.

    python3 scripts/bench_contexts.py --calls 48 --rounds 200 --out contexts.json

Cases, interleaved in a random order each round (medians in microseconds):
``own`` the runner fills its inputs, then runs; ``ipc`` a writer process fills them through CUDA
IPC; ``other`` the writer runs a kernel on its own memory only; ``own_stop`` and ``ipc_stop`` the
same with the runner stopped before the command and resumed after it (as the evaluator's freezer
does). Each in eager mode (k calls, then a synchronize) and graph mode (one replay of k calls).
A difference between ``own`` and ``ipc``/``other`` is the device's switch between two processes'
contexts: what a region pays when the trusted side wrote its inputs from another process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

CASES = ("own", "ipc", "other", "own_stop", "ipc_stop")


def runner(conn, to_writer, numel: int, calls: int) -> None:
    x = torch.zeros(numel, device="cuda")
    y = torch.empty_like(x)
    to_writer.send(x)  # CUDA IPC: the writer gets this memory
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            torch.add(x, 1.0, out=y)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            torch.add(x, 1.0, out=y)
    torch.cuda.synchronize()

    def act(cmd):
        if cmd[0] == "fill":
            x.fill_(cmd[1])
            torch.cuda.synchronize()
            return "filled"
        t0 = time.perf_counter()
        if cmd[0] == "graph":
            graph.replay()
        else:
            for _ in range(calls):
                torch.add(x, 1.0, out=y)
        torch.cuda.synchronize()
        return t0, time.perf_counter()

    obey(conn, act)


def writer(conn, from_runner) -> None:
    x = from_runner.recv()
    own = torch.zeros(1024, device="cuda")
    torch.cuda.synchronize()
    conn.send("ready")

    def act(cmd):
        if cmd[0] == "fill":
            x.fill_(cmd[1])
        else:
            own.add_(1.0)
        torch.cuda.synchronize()
        return "done"

    obey(conn, act)


def obey(conn, act) -> None:
    """Answer each command from ``conn`` with ``act(command)`` until "quit"."""
    for cmd in iter(conn.recv, "quit"):
        conn.send(act(cmd))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numel", type=int, default=1 << 20, help="float32 elements (4 MiB)")
    parser.add_argument("--calls", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    r_conn, r_child = ctx.Pipe()
    w_conn, w_child = ctx.Pipe()
    to_writer, from_runner = ctx.Pipe()
    r = ctx.Process(target=runner, args=(r_child, to_writer, args.numel, args.calls))
    w = ctx.Process(target=writer, args=(w_child, from_runner))
    r.start()
    w.start()
    assert w_conn.recv() == "ready"
    times: dict[str, list[float]] = {f"{m}/{c}": [] for m in ("eager", "graph") for c in CASES}
    inside: dict[str, list[float]] = {key: [] for key in times}
    for n in range(args.rounds):
        keys = list(times)
        random.shuffle(keys)
        for key in keys:
            mode, case = key.split("/")
            if case.startswith("own"):
                r_conn.send(("fill", float(n)))
                r_conn.recv()
            elif case.startswith("ipc"):
                w_conn.send(("fill", float(n)))
                w_conn.recv()
            else:
                w_conn.send(("kernel",))
                w_conn.recv()
            stop = case.endswith("_stop")
            if stop:
                os.kill(r.pid, signal.SIGSTOP)
                time.sleep(0.001)
            t0 = time.perf_counter()
            r_conn.send((mode,))
            if stop:
                os.kill(r.pid, signal.SIGCONT)
            a, b = r_conn.recv()
            t1 = time.perf_counter()
            if n >= 5:  # warm
                times[key].append((t1 - t0) * 1e6)
                inside[key].append((b - a) * 1e6)
    for conn in (r_conn, w_conn):
        conn.send("quit")
    r.join()
    w.join()
    rows = {key: {"bracket": round(statistics.median(v), 1), "runner_calls": round(statistics.median(inside[key]), 1)}
            for key, v in times.items()}
    for key, row in rows.items():
        print(f"{key:16s} bracket {row['bracket']:8.1f}  runner's calls {row['runner_calls']:8.1f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(0), "calls": args.calls,
                                        "numel": args.numel, "rounds": args.rounds, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
