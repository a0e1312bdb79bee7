// Kernel launches that may overlap with the kernel before them (programmatic dependent launch,
// sm_90+). Only .cu files include this header.
//
// The idea: a decode step is ~420 short kernels in one graph, and each pays its launch, its ramp over
// the SMs and a chain of dependent loads strictly after the previous kernel ended. With
// launch_overlapped the next kernel's blocks start as soon as every block of the current one has
// passed its own dependency wait. Measured on the H200 (Qwen3.6-35B-A3B Q4_K_M, tg128) it made decode
// 11% slower, so it is off by default (MOX_PDL=1 turns it on for further experiments): ncu shows the
// decode kernels themselves, not their boundaries, take the time. Prefetching each kernel's weights
// into L2 before its wait was slower too (2%) and was removed
// (bench/results/2026-11-29-cuda-decode-pdl-h200).
//
// The contract of a kernel launched with launch_overlapped:
//  * it calls dependency_wait() in every thread that reads anything an earlier kernel of the stream
//    wrote, or writes anything, before that read or write. Before the wait it may only read constant
//    data (weights, and state that no kernel of this step writes before it) and touch shared memory;
//  * it calls allow_next_launch() after its wait (so at most one kernel runs ahead).
// A grid completes only after its waits returned, so completion stays transitive along the stream.
// Without the attribute (below sm_90, or MOX_PDL unset) both calls return at once: plain stream order.
#pragma once

#include "quant/cuda/check.cuh"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace mox::cuda {

__device__ __forceinline__ void dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Whether launches get the overlap attribute: the device is sm_90+ and MOX_PDL=1. Off by default:
// on the H200 (Qwen3.6-35B-A3B Q4_K_M, tg128, same run) it made decode slower, 196 t/s against 222
// with plain stream order; the graph's kernel boundaries were not where the time goes.
bool overlapped_launches();

// kernel<<<grid, block, smem, stream>>>(args...), with the overlap attribute where enabled, plus up
// to 3 `extra` attributes (e.g. a cluster shape).
template <class... Params, class... Args>
void launch_overlapped_with(const cudaLaunchAttribute* extra, int n_extra, void (*kernel)(Params...), dim3 grid,
                            dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    MOX_CHECK(n_extra >= 0 && n_extra <= 3, "{} extra launch attributes", n_extra);
    cudaLaunchAttribute attrs[4];
    int n = 0;
    for (int i = 0; i < n_extra; ++i) attrs[n++] = extra[i];
    if (overlapped_launches()) {
        attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[n].val.programmaticStreamSerializationAllowed = 1;
        ++n;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attrs;
    cfg.numAttrs = static_cast<unsigned>(n);
    MOX_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
}

template <class... Params, class... Args>
void launch_overlapped(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
    launch_overlapped_with(nullptr, 0, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace mox::cuda
