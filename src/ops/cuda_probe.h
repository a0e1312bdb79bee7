// Short measurements of CUDA device 0 for `mox calibrate` (the hardware profile the planner's speed
// model reads, plan/hardware.h). Plain C++ (no CUDA headers, STYLE.md #8); the implementation
// is ops/cuda/probe.cu, linked only with -DMOX_CUDA=ON. Every call makes device 0 current, checks
// every CUDA call (mox::Error on failure), times with CUDA events after warm-up runs, and returns the
// median of its repetitions. Rates use decimal units: GB/s = 1e9 bytes/s, TFLOP/s = 1e12 FLOP/s,
// with one multiply-add counted as 2 FLOPs.
#pragma once

#include "quant/types.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace mox::cuda {

struct DeviceMemoryUse {
    std::string name;          // "NVIDIA H200"
    uint64_t total_bytes = 0;  // cudaMemGetInfo's total
    // total - free at the time of the call. This is everything in use on the device, including
    // other processes' contexts and allocations: on a shared GPU it overstates mox's own cost.
    uint64_t used_bytes = 0;
};

// Creates the CUDA context on device 0 if the process has none yet and reads the device's memory
// use. Called first thing in a process (before any allocation) it is the context's own footprint;
// called again after the other probes freed their buffers it also counts the kernels they loaded
// (CUDA loads modules lazily, at first launch).
DeviceMemoryUse probe_memory_use();

// cudaMemcpyAsync host -> device of `bytes` on a non-blocking stream, GB/s. pinned: from page-locked
// memory (cudaHostAlloc; halved down to 16 MiB where the driver refuses the size, an error below
// that); otherwise from ordinary malloc'ed memory, touched first so no page fault is timed.
double probe_h2d_gbps(bool pinned, size_t bytes = size_t{256} << 20, int reps = 5);

// The fixed cost of one hybrid hand-off inside a CUDA graph, in seconds: a graph of `iterations`
// repetitions of [tiny kernel -> 8 KiB device->host copy into pinned memory -> empty host callback ->
// 8 KiB host->device copy -> tiny kernel], minus the same graph with only the two kernels, per
// iteration.
double probe_host_roundtrip_s(int iterations = 50, int reps = 10);

// The fixed cost of one decode hand-off of CPU experts as the decode graph runs it (ops/cuda_handoff.h:
// publish -> a host thread that is already spinning answers at once -> collect), in seconds: a graph
// of `slots` repetitions of [tiny kernel -> publish -> collect -> tiny kernel] served by this thread
// with no computation, minus the same graph with only the two tiny kernels, per slot. It includes the
// publish and collect launches. (probe_host_roundtrip_s is the copy + host-callback path that prefill
// micro-batches below the streaming threshold take.)
double probe_handoff_roundtrip_s(int slots = 40, int reps = 10);

// Seconds per kernel of a replayed graph of `kernels` small matvecs (a 2048 -> 16 Q8_0 weight that
// stays in L2): what every launch of a decode graph costs beyond its memory traffic (grid start,
// reduction, drain; an empty kernel measures ~0.75 us on an H200, a real one several times that).
double probe_launch_gap_s(int kernels = 400, int reps = 10);

// cuda::matvec with 1 column over 2048 -> 8192 matrices of `type` (random valid blocks), at least
// `min_bytes` of them (far larger than L2 at the default, so every weight streams from HBM), run
// back to back in a replayed graph as a decode step runs its projections: weight bytes per second,
// GB/s, launch ramps and tails included. Throws mox::Error for a type without a matvec kernel.
double probe_matvec_gbps(quant::TypeId type, size_t min_bytes = size_t{256} << 20, int reps = 20);

// cuda::matmul of `n_tokens` fp32 tokens through a 2048 -> 8192 weight of `type` (random valid
// blocks): TFLOP/s (2 * n_tokens * 2048 * 8192 FLOPs per call).
double probe_matmul_tflops(quant::TypeId type, int64_t n_tokens = 512, int reps = 10);

// The routed-expert part of one GPU MoE layer at decode, as the decode graph runs it: the fused
// router + gate/up launch and the down launch (ops/cuda_moe.h), for Qwen3.6-35B-A3B's shape (256
// experts of 2048 -> 512 -> 2048, k = 8, a shared expert of the same shape), all of `type`, 40 layers
// with their own routing back to back in a replayed graph: (k + 1) experts' weight bytes per second,
// GB/s. These launches are latency-bound (routing, then 9 experts' rows), so this rate is well below
// the matvec's. Throws mox::Error for a type without a matvec kernel.
double probe_moe_decode_gbps(quant::TypeId type, int reps = 10);

// Qwen3.6-35B-A3B's Gated DeltaNet shape at decode (16 key and 32 value heads of 128, conv kernel
// 4): seconds per layer of conv_silu + the sequential delta rule (ops/cuda_delta_net.h), 30 layers
// with their own states back to back in a replayed graph (the states, 60 MB, exceed L2 as in a
// real step). *state_bytes: one layer's conv + recurrent state bytes, to scale to other shapes.
double probe_deltanet_step_s(uint64_t* state_bytes, int reps = 10);

// Qwen3.6-35B-A3B's gated attention at decode (16 query and 2 KV heads of 256, f16 cache) over `keys`
// keys, as the decode graph launches it (its key bound rounded up like the graph's buckets: 256
// doubling): seconds per layer, 10 layers with their own caches back to back in a replayed graph.
// Short contexts take the one-block-per-head kernel whose key steps form a chain, long ones the
// tensor-core kernel split over the context plus the combine: neither is the cache's bytes at the
// matvec rate.
double probe_attention_decode_s(int64_t keys, int reps = 10);

// Prefill (the planner's prefill prediction). The batched MoE of one layer as a micro-batch
// of `n_tokens` runs it (ops/cuda_moe.h moe_batch: grouping, gate/up, down, combine), Qwen3.6-35B-A3B's
// shape with every matrix of `type` and uniform random routing (~16 tokens per expert at 512): the
// routed FLOPs (2 * n_tokens * k * 3 * 2048 * 512) per second, TFLOP/s. Well below the dense matmul's
// rate: each expert is a product of a few token rows. Throws mox::Error for a type without a matmul
// kernel.
double probe_moe_prefill_tflops(quant::TypeId type, int64_t n_tokens = 512, int reps = 5);

// Qwen3.6-35B-A3B's Gated DeltaNet shape at prefill: conv_silu + the delta rule over `n_tokens`
// tokens of one sequence (the chunked form, as a micro-batch runs it), seconds per token and layer;
// *state_bytes as probe_deltanet_step_s's, to scale to other shapes.
double probe_deltanet_prefill_token_s(uint64_t* state_bytes, int64_t n_tokens = 512, int reps = 5);

// A decode design question: a decode step is ~400 launches whose boundaries cost ~3 us each
// (probe_launch_gap_s); one persistent kernel would replace each boundary by a grid-wide barrier.
// This is that barrier's cost: `blocks_per_sm` blocks of 256 threads on every SM (a cooperative
// launch, so all are resident) pass `iterations` barriers (an arrival counter and a generation word
// in global memory, the last arriver releasing the rest), minus the same launch with one barrier, per
// barrier, in seconds. Not part of the hardware profile; `mox_cuda_tests` prints it.
double probe_grid_barrier_s(int blocks_per_sm = 1, int iterations = 1000, int reps = 5);

}  // namespace mox::cuda
