// Device-side helpers for candidates that talk to peer GPUs through torch symmetric memory.
//
//     #include <pkb_ray/peer.cuh>   // on the include path of every load_cuda build
//
// Pointers come from the host: `buffer_ptrs` and `signal_pad_ptrs` of a symmetric-memory handle,
// passed as int64 tensors (pkb_ray.cuda.symmetric_buffer and pkb_ray.cuda.signal_pads). A signal
// pad is an array of uint32 slots per rank, zero at allocation; slot (b * world + r) of rank p's
// pad means "rank r's block b signalled rank p". Signals are consumed by the waiter (back to 0),
// so a slot can be reused call after call.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

namespace pkb {

// Raise `slot` (on a peer's pad) once it is free; spins while the peer has not consumed the last one.
__device__ __forceinline__ void put_signal(uint32_t* slot) {
    while (atomicCAS_system(slot, 0u, 1u) != 0u) {
    }
}

// Wait for `slot` (on this rank's pad) to be raised, and consume it.
__device__ __forceinline__ void wait_signal(uint32_t* slot) {
    while (atomicCAS_system(slot, 1u, 0u) != 1u) {
    }
}

// Barrier between block blockIdx.x of every rank. Everything this block wrote before the call
// (locally or into peers' buffers) is visible to the same block of every peer after it. Every
// rank must launch the same number of blocks, and each block must only read, after a barrier,
// what the same block of the peers wrote before it: that is what makes a per-block barrier enough.
// Needs world * gridDim.x slots in the pads (see pkb_ray.cuda.signal_pads).
__device__ __forceinline__ void block_barrier(uint32_t* const* pads, int rank, int world) {
    __threadfence_system();
    __syncthreads();
    int peer = threadIdx.x;
    if (peer < world && peer != rank) {
        put_signal(pads[peer] + blockIdx.x * world + rank);
        wait_signal(pads[rank] + blockIdx.x * world + peer);
        __threadfence_system();
    }
    __syncthreads();
}

// Barrier between this block and the same block of one peer only (pairwise exchanges).
// `base` picks a separate set of world * gridDim.x slots for independent kinds of signal.
__device__ __forceinline__ void signal_peer(uint32_t* const* pads, int rank, int world, int peer, long base) {
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) put_signal(pads[peer] + base + blockIdx.x * world + rank);
}

__device__ __forceinline__ void wait_peer(uint32_t* const* pads, int rank, int world, int peer, long base) {
    if (threadIdx.x == 0) {
        wait_signal(pads[rank] + base + blockIdx.x * world + peer);
        __threadfence_system();
    }
    __syncthreads();
}

// 16 bytes of T, summed in float (the accumulator of every reduction here).
template <typename T>
struct Pack {
    static constexpr int n = 16 / sizeof(T);
};

template <typename T>
__device__ __forceinline__ void add_pack(float (&acc)[Pack<T>::n], const uint4& v) {
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int k = 0; k < Pack<T>::n; ++k) acc[k] += static_cast<float>(e[k]);
}

template <typename T>
__device__ __forceinline__ uint4 to_pack(const float (&acc)[Pack<T>::n]) {
    uint4 v;
    T* e = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int k = 0; k < Pack<T>::n; ++k) e[k] = static_cast<T>(acc[k]);
    return v;
}

// Sum of pack i of every rank's buffer, ranks in order 0..world-1 (the same order on every rank,
// so every rank gets bit-identical results); all loads are issued before the first add.
template <typename T, int MaxWorld = 8>
__device__ __forceinline__ uint4 sum_packs(const T* const* bufs, int world, long i) {
    uint4 v[MaxWorld];
#pragma unroll
    for (int r = 0; r < MaxWorld; ++r)
        if (r < world) v[r] = reinterpret_cast<const uint4*>(bufs[r])[i];
    float acc[Pack<T>::n] = {};
#pragma unroll
    for (int r = 0; r < MaxWorld; ++r)
        if (r < world) add_pack<T>(acc, v[r]);
    for (int r = MaxWorld; r < world; ++r) add_pack<T>(acc, reinterpret_cast<const uint4*>(bufs[r])[i]);
    return to_pack<T>(acc);
}

}  // namespace pkb
