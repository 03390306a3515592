# expect: correct
# backend: cuda
# variant: all-reduce as one CUDA kernel per call with its own barriers on the symmetric-memory signal pads: one-shot (every rank sums every peer's buffer) up to 256 KiB, two-shot (reduce-scatter then all-gather over peer pointers) above; 16-byte loads
"""All-reduce (sum), one kernel per call, one-shot for small messages and two-shot for large.

Both algorithms run inside a single kernel launch that synchronises with the peers itself
(``pkb::block_barrier`` from ``pkb_ray/peer.cuh``: block b of each rank waits for block b of
every peer), so a call costs one launch instead of a copy plus two barrier kernels plus a kernel.
The per-block barrier is enough because every phase gives block b the same pack indices on
every rank: block b only ever reads, after a barrier, what block b of a peer wrote before it.

- one-shot: copy x into my symmetric buffer; barrier; out = sum over ranks of their buffers;
  barrier (nobody refills its buffer while a peer still reads it). (W-1) x N bytes come in.
- two-shot: copy x in; barrier; rank r sums chunk r of every buffer into its own buffer and out;
  barrier; copy every other chunk c from rank c's buffer into out; barrier. 2 (W-1)/W x N bytes
  come in: at W > 2 far fewer than one-shot, at the price of one more barrier.
Sums run in float over ranks 0..W-1 in that order on every rank, so all ranks agree bit for bit.
"""

import torch
import torch.distributed as dist

from pkb_ray.cuda import load_cuda, signal_pads, symmetric_buffer

SOURCE = r"""
#include <cuda_bf16.h>
#include <pkb_ray/peer.cuh>

template <typename T>
__global__ void all_reduce(const T* x, T* const* bufs, uint32_t* const* pads, T* out, long n, int rank,
                           int world, int two_shot) {
    using V = uint4;
    constexpr int E = pkb::Pack<T>::n;
    const long stride = (long)gridDim.x * blockDim.x, first = blockIdx.x * (long)blockDim.x + threadIdx.x;
    const V* xv = reinterpret_cast<const V*>(x);
    V* mine = reinterpret_cast<V*>(bufs[rank]);
    V* outv = reinterpret_cast<V*>(out);
    if (!two_shot) {
        const long packs = n / E, tail = n - packs * E;  // the tail (< one pack) belongs to block 0
        for (long i = first; i < packs; i += stride) mine[i] = xv[i];
        if (blockIdx.x == 0 && threadIdx.x < tail) bufs[rank][packs * E + threadIdx.x] = x[packs * E + threadIdx.x];
        pkb::block_barrier(pads, rank, world);
        for (long i = first; i < packs; i += stride) outv[i] = pkb::sum_packs<T>(bufs, world, i);
        if (blockIdx.x == 0 && threadIdx.x < tail) {
            float acc = 0.f;
            for (int r = 0; r < world; ++r) acc += static_cast<float>(bufs[r][packs * E + threadIdx.x]);
            out[packs * E + threadIdx.x] = static_cast<T>(acc);
        }
        pkb::block_barrier(pads, rank, world);
        return;
    }
    const long chunk = n / E / world;  // packs per chunk; the host only picks two-shot when n divides evenly
    for (int c = 0; c < world; ++c)
        for (long i = first; i < chunk; i += stride) mine[c * chunk + i] = xv[c * chunk + i];
    pkb::block_barrier(pads, rank, world);
    for (long i = first; i < chunk; i += stride) {
        V s = pkb::sum_packs<T>(bufs, world, rank * chunk + i);
        mine[rank * chunk + i] = s;
        outv[rank * chunk + i] = s;
    }
    pkb::block_barrier(pads, rank, world);
    for (int k = 1; k < world; ++k) {
        const int c = (rank + k) % world;
        const V* theirs = reinterpret_cast<const V*>(bufs[c]);
        for (long i = first; i < chunk; i += stride) outv[c * chunk + i] = theirs[c * chunk + i];
    }
    pkb::block_barrier(pads, rank, world);
}

template <typename T>
static int launch(void* x, void* bufs, void* pads, void* out, long n, int rank, int world, int two_shot,
                  int max_blocks, void* stream) {
    long work = two_shot ? n / pkb::Pack<T>::n / world : n / pkb::Pack<T>::n;
    long blocks = (work + 511) / 512;
    blocks = blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks);
    all_reduce<T><<<(int)blocks, 512, 0, (cudaStream_t)stream>>>((const T*)x, (T* const*)bufs,
                                                                  (uint32_t* const*)pads, (T*)out, n, rank,
                                                                  world, two_shot);
    return (int)cudaGetLastError();
}

extern "C" int all_reduce_f32(void* x, void* bufs, void* pads, void* out, long n, int rank, int world,
                              int two_shot, int max_blocks, void* stream) {
    return launch<float>(x, bufs, pads, out, n, rank, world, two_shot, max_blocks, stream);
}

extern "C" int all_reduce_bf16(void* x, void* bufs, void* pads, void* out, long n, int rank, int world,
                               int two_shot, int max_blocks, void* stream) {
    return launch<__nv_bfloat16>(x, bufs, pads, out, n, rank, world, two_shot, max_blocks, stream);
}
"""

ARGS = ["ptr", "ptr", "ptr", "ptr", "i64", "i32", "i32", "i32", "i32", "stream"]
lib = load_cuda(SOURCE, functions={"all_reduce_f32": ARGS, "all_reduce_bf16": ARGS})
LAUNCH = {torch.float32: lib.all_reduce_f32, torch.bfloat16: lib.all_reduce_bf16}
ONE_SHOT_MAX_BYTES = 256 << 10
MAX_BLOCKS = 264  # two blocks of 512 threads per SM of an H100/H200 (132 SMs)
_raw_stream = torch._C._cuda_getCurrentRawStream if torch.cuda.is_available() else None

# (device, dtype, numel) -> the launch and every argument that does not change from call to call,
# or None for inputs that go the reference's way. At small sizes a call is bound by this Python
# path (calls run back to back), so everything that can be worked out once is.
_plans: dict = {}


def _plan(x: torch.Tensor):
    if not x.is_cuda or x.dtype not in LAUNCH or x.numel() == 0:
        return None  # CPU runs (gloo) and other dtypes
    world, rank = dist.get_world_size(), dist.get_rank()
    buf, handle, ptrs = symmetric_buffer(x.numel(), x.dtype, x.device)
    pads, slots = signal_pads(handle, x.device)
    nbytes = x.numel() * x.element_size()
    two_shot = nbytes > ONE_SHOT_MAX_BYTES and nbytes % (16 * world) == 0
    return (LAUNCH[x.dtype], ptrs.data_ptr(), pads.data_ptr(), x.numel(), rank, world, int(two_shot),
            min(MAX_BLOCKS, slots // world), x.device.index)


def solution(x: torch.Tensor) -> torch.Tensor:
    key = (x.device, x.dtype, x.numel())
    if key not in _plans:
        _plans[key] = _plan(x)  # the first call of a shape is collective on every rank (rendezvous)
    plan = _plans[key]
    if plan is None:
        out = x.clone()
        dist.all_reduce(out)
        return out
    launch, ptrs, pads, n, rank, world, two_shot, blocks, device = plan
    if not x.is_contiguous() or x.data_ptr() % 16:
        x = x.clone(memory_format=torch.contiguous_format)  # the kernel loads 16 aligned bytes at a time
    out = torch.empty_like(x)
    err = launch(x.data_ptr(), ptrs, pads, out.data_ptr(), n, rank, world, two_shot, blocks, _raw_stream(device))
    if err:
        raise RuntimeError(f"all_reduce launch failed: cudaError {err}")
    return out
