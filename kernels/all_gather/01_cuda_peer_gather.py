# expect: correct
# backend: cuda
# variant: all-gather as one CUDA kernel per call: each rank copies its shard into a symmetric buffer, then (after a per-block barrier on the signal pads) pulls every peer's shard over NVLink with 16-byte loads
"""All-gather by direct reads of the peers' symmetric buffers, one kernel per call.

In the kernel: block b copies its share of x into this rank's symmetric buffer; barrier with
block b of every peer (``pkb::block_barrier``); block b copies the same share of every rank's
buffer into out[r * n : (r + 1) * n]; barrier (nobody refills its buffer while a peer still reads
it). Pure data movement, so any dtype works: the kernel moves bytes, 16 at a time when every
address and the size allow, else one at a time.
"""

import torch
import torch.distributed as dist

from pkb_ray.cuda import load_cuda, signal_pads, symmetric_buffer

SOURCE = r"""
#include <pkb_ray/peer.cuh>

template <typename V>
__global__ void gather_peers(const V* x, V* const* bufs, uint32_t* const* pads, V* out, long units, int rank,
                             int world) {
    const long stride = (long)gridDim.x * blockDim.x, first = blockIdx.x * (long)blockDim.x + threadIdx.x;
    for (long i = first; i < units; i += stride) bufs[rank][i] = x[i];
    pkb::block_barrier(pads, rank, world);
    for (int k = 0; k < world; ++k) {
        const int r = (rank + k) % world;  // start with our own shard, then the peers in turn
        const V* src = bufs[r];
        V* dst = out + r * units;
        for (long i = first; i < units; i += stride) dst[i] = src[i];
    }
    pkb::block_barrier(pads, rank, world);
}

template <typename V>
static int launch(void* x, void* bufs, void* pads, void* out, long units, int rank, int world, int max_blocks,
                  void* stream) {
    long blocks = (units + 511) / 512;
    blocks = blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks);
    gather_peers<V><<<(int)blocks, 512, 0, (cudaStream_t)stream>>>((const V*)x, (V* const*)bufs,
                                                                    (uint32_t* const*)pads, (V*)out, units,
                                                                    rank, world);
    return (int)cudaGetLastError();
}

// bytes: one shard; vec16: every address and the size are multiples of 16
extern "C" int gather_peers_launch(void* x, void* bufs, void* pads, void* out, long bytes, int rank, int world,
                                   int vec16, int max_blocks, void* stream) {
    return vec16 ? launch<uint4>(x, bufs, pads, out, bytes / 16, rank, world, max_blocks, stream)
                 : launch<char>(x, bufs, pads, out, bytes, rank, world, max_blocks, stream);
}
"""

lib = load_cuda(SOURCE, functions={"gather_peers_launch": ["ptr", "ptr", "ptr", "ptr", "i64", "i32", "i32", "i32",
                                                           "i32", "stream"]})
MAX_BLOCKS = 264  # two blocks of 512 threads per SM of an H100/H200 (132 SMs)
_raw_stream = torch._C._cuda_getCurrentRawStream if torch.cuda.is_available() else None
_plans: dict = {}  # (device, dtype, numel) -> what stays the same from call to call (small calls are host-bound)


def _plan(x: torch.Tensor) -> tuple:
    world, rank = dist.get_world_size(), dist.get_rank()
    buf, handle, ptrs = symmetric_buffer(x.numel(), x.dtype, x.device)  # collective: first call of a shape
    pads, slots = signal_pads(handle, x.device)
    return (ptrs.data_ptr(), pads.data_ptr(), x.numel() * x.element_size(), rank, world,
            min(MAX_BLOCKS, slots // world), x.device.index)


def solution(x: torch.Tensor) -> torch.Tensor:
    if not x.is_cuda or x.numel() == 0:  # CPU runs (gloo): the reference's way
        world = dist.get_world_size()
        out = x.new_empty(world * x.numel())
        dist.all_gather(list(out.chunk(world)), x.contiguous())
        return out
    x = x.contiguous()
    key = (x.device, x.dtype, x.numel())
    if key not in _plans:
        _plans[key] = _plan(x)
    ptrs, pads, nbytes, rank, world, blocks, device = _plans[key]
    out = x.new_empty(world * x.numel())
    vec16 = nbytes % 16 == 0 and x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
    err = lib.gather_peers_launch(x.data_ptr(), ptrs, pads, out.data_ptr(), nbytes, rank, world, int(vec16), blocks,
                                  _raw_stream(device))
    if err:
        raise RuntimeError(f"gather_peers launch failed: cudaError {err}")
    return out
