"""The link latency of a hardware profile: one dependent step of communication between two GPUs.

    python3 -m benchmarks link_latency --out latency.json   # 2 GPUs of one node

Run so, it starts its two ranks with torchrun (``torch.distributed.run -m benchmarks link_latency``).

What a step costs at the least: a GPU writes a word into a peer's memory (NVLink, through a
symmetric-memory buffer) and the peer, spinning on that word, sees it. One thread on each GPU plays
ping-pong inside one kernel launch, so no launch, host or library path is in the figure:
rank 0 writes i into rank 1's word and waits until its own word reads i; rank 1 waits for i and
writes it back. The device's global timer around ``rounds`` round trips gives the one-way latency,
round trip / 2. Several repetitions; the median goes into ``conf/hardware/<profile>.yaml`` as
``link_latency_us`` (the speed-of-light model adds it once per dependent step of a problem).

Also measured, for the record beside it: the same ping-pong with 16 KiB of payload written before
each flag (the smallest transfers of the size ladders), so the step's cost with data is known too.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import torch
import torch.distributed as dist

from benchmarks import common
from pkb_ray.cuda import load_cuda, symmetric_buffer

SOURCE = r"""
#include <cstdint>

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ void put_flag(uint32_t* where, uint32_t value) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(where), "r"(value) : "memory");
}

__device__ __forceinline__ uint32_t get_flag(const uint32_t* where) {
    uint32_t value;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(where) : "memory");
    return value;
}

// words: every rank's buffer; word 0 is the flag, the rest payload (payload_words per round).
__global__ void ping_pong(uint32_t* const* words, int rank, int rounds, int payload_words, uint32_t base,
                          unsigned long long* elapsed_ns) {
    uint32_t* mine = words[rank];
    uint32_t* peer = words[1 - rank];
    unsigned long long t0 = now_ns();
    for (int i = 1; i <= rounds; ++i) {
        const uint32_t tag = base + (uint32_t)i;
        if (rank == 0) {
            for (int w = 0; w < payload_words; ++w) peer[1 + w] = tag;
            put_flag(peer, tag);
            while (get_flag(mine) != tag) {}
        } else {
            while (get_flag(mine) != tag) {}
            for (int w = 0; w < payload_words; ++w) peer[1 + w] = tag;
            put_flag(peer, tag);
        }
    }
    *elapsed_ns = now_ns() - t0;
}

extern "C" int launch_ping_pong(void* words, int rank, int rounds, int payload_words, unsigned int base,
                                void* elapsed, void* stream) {
    ping_pong<<<1, 1, 0, (cudaStream_t)stream>>>((uint32_t* const*)words, rank, rounds, payload_words, base,
                                                 (unsigned long long*)elapsed);
    return (int)cudaGetLastError();
}
"""


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=10000, help="round trips per repetition")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--payload", type=int, default=16 << 10, help="bytes written before each flag, second run")
    args = ap.parse_args(argv)
    if "RANK" not in os.environ:  # not under torchrun yet: start the two ranks, each running this again
        out = [] if args.out else ["--out", str(run.out(None))]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(common.REPO), os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "benchmarks", run.name, *argv, *out]
        return subprocess.run(cmd, env=env).returncode
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != 2:
        raise SystemExit("ping-pong is between two ranks: run it without torchrun, and it starts two")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    lib = load_cuda(SOURCE, functions={"launch_ping_pong": ["ptr", "i32", "i32", "i32", "i32", "ptr", "stream"]})
    words = 1 + args.payload // 4
    buf, _, ptrs = symmetric_buffer(words, torch.int32, device)
    elapsed = torch.zeros(1, dtype=torch.int64, device=device)
    stream = torch.cuda.current_stream(device).cuda_stream
    results: dict[str, list[float]] = {}
    base = 0
    for label, payload_words in (("flag only", 0), (f"{args.payload} B payload", args.payload // 4)):
        one_way = []
        for _ in range(args.reps + 1):  # the first repetition warms up
            buf.zero_()
            torch.cuda.synchronize(device)
            dist.barrier()
            err = lib.launch_ping_pong(ptrs.data_ptr(), rank, args.rounds, payload_words, base, elapsed.data_ptr(),
                                       stream)
            if err:
                raise RuntimeError(f"launch failed: cudaError {err}")
            torch.cuda.synchronize(device)
            base += args.rounds + 1
            one_way.append(int(elapsed.item()) / 1e3 / args.rounds / 2)
        results[label] = one_way[1:]
    if rank == 0:
        out = {"gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())][:2],
               "torch": torch.__version__, "rounds": args.rounds, "reps": args.reps,
               "one_way_us": {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "all": v}
                              for k, v in results.items()}}
        print(json.dumps(out, indent=2))
        print("wrote", run.write(run.out(args.out), out))
    dist.destroy_process_group()
    return 0
