// The speed model: predicted decode and prefill tokens/s of a Placement on a
// machine described by a HardwareProfile (plan/hardware.h, measured by `mox calibrate`).
//
// It models what the hybrid runtime executes (docs/plan.md "Speed model" has the formulas):
//  - every trunk layer's mixer (attention or Gated DeltaNet), norms, router and shared expert, and
//    the output head run on the GPU; a layer's routed experts are all on the GPU or all on the host;
//  - decode, per token: the GPU reads its weights at the measured matvec rate of their block type,
//    the k selected experts of each GPU layer (k / n_expert of the stacks), the KV cache up to the
//    depth and the DeltaNet state (read and written); each host layer costs one GPU -> CPU -> GPU
//    hand-off plus the CPU's k experts at its measured rate, overlapped only with the layer's
//    shared expert; every kernel adds a launch gap;
//  - prefill, per micro-batch of n_ubatch tokens: each GPU matrix costs the larger of its
//    tensor-core time (2 * params * tokens flops) and one read of its bytes; a host layer either
//    streams its whole expert stacks to the GPU (double-buffered: the copy of one host layer
//    overlaps the GPU's work until its buffer is needed) when the batch has >= stream_min_tokens
//    tokens, or has the CPU compute its selected experts.
// With an expert cache (ExpertCacheLoad) decode charges each host layer the CPU for its misses only,
// the GPU for the pool's hits (beside the hand-off, which every host layer still makes), and the
// admissions' copies as DRAM traffic the CPU's expert reads share.
// Without any weight on the GPU the placement is the CPU forward: weights stream from DRAM, the
// experts at their measured CPU rates.
//
// Everything here is arithmetic on the placement's exact byte counts and the profile's rates: a
// pure function, deterministic, testable with hand-written profiles.
#pragma once

#include "place/memory.h"
#include "place/placement.h"
#include "plan/hardware.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mox::plan {

// Kernel launches the decode graph replays per trunk layer and for the output, each charged
// GpuProfile::launch_gap_s unless a calibrated probe measured it (DecodePrediction::probed_kernels).
// A Gated DeltaNet layer: in-projection, conv (inside the projection's store, but
// the DeltaNet probe still times it as a launch of its own, so it stays counted here), delta rule
// (+ gated norm), out-projection, the MoE input norm with the router, MoE gate/up, MoE down, residual
// add + the next layer's norm; an attention layer: q/gate, k and v projections, q/k norm + RoPE (+ the
// KV cache store), attention, out-projection, the norm with the router, MoE gate/up and down, the next
// norm. A layer whose experts stay on the host keeps the MoE input norm as a launch of its own
// (kDecodeKernelsHostNorm). Output: the first norm, the head, and the greedy token's arg max, a
// memset and a kernel. (ncu of one all-GPU step of Qwen3.6-35B-A3B: 312 launches = 30 x 7 + 10 x 10 + 2
// and the arg max, bench/results/2026-12-01-decode-step-h200.)
inline constexpr int64_t kDecodeKernelsRecurrent = 8;
inline constexpr int64_t kDecodeKernelsAttention = 10;
inline constexpr int64_t kDecodeKernelsHostNorm = 1;
inline constexpr int64_t kDecodeKernelsOutput = 4;
// Launches of one prefill micro-batch per trunk layer and for the output (a rough count: prefill
// is dominated by its matrix products).
inline constexpr int64_t kKernelsPerLayer = 10;
inline constexpr int64_t kKernelsOutput = 4;
// The launches a host layer's decode adds to the GPU's critical path (models/gpu/
// gpu_forward_experts.cpp: host_moe_handoff): the separate top-k kernel, publish, collect and the
// shared expert's gated add, each costed as a launch gap; publish and collect are not when the
// profile's hand-off probe (gpu.handoff_roundtrip_s) measured them with the round trip.
inline constexpr int64_t kExtraLaunchesPerHandoff = 4;
// The prefill streaming threshold the runtime uses when no plan sets one (the batch size where,
// on typical machines, copying a layer's experts beats computing them on the CPU).
inline constexpr int64_t kDefaultStreamMinTokens = 32;

// The kernel a host layer adds at decode when an expert cache serves it: the lookup that maps the
// token's k experts to the pool's slots (cuda::expert_cache_lookup). The pool's MoE launches replace
// the shared expert's (they compute it in the same launches).
inline constexpr int64_t kDecodeKernelsCacheLookup = 1;

// An expert cache at decode (models/gpu/gpu_expert_cache.h): one pool of GPU slots shared by every
// host layer, as a routing profile predicts it (plan/cache_hits.h). Prefill is not affected (it
// streams the host layers' stacks as without a cache).
struct ExpertCacheLoad {
    double hit_rate = 0;              // of the host layers' selections, the fraction the pool holds
    double admissions_per_token = 0;  // experts copied into the pool per token
};

struct SpeedOptions {
    place::RunShape run;  // n_ubatch, and whether host layers' experts may be streamed for prefill
    // Micro-batches with at least this many tokens stream host layers' experts to the GPU; fewer
    // tokens: the CPU computes them. 0: choose the crossover of the two costs (best_stream_min).
    int64_t stream_min_tokens = 0;
    int64_t prompt_tokens = 0;  // prefill prediction for this prompt; 0: min(n_ctx, 4096)
    std::optional<ExpertCacheLoad> expert_cache{};  // decode with an expert cache over the host layers
};

// One generated token at a given depth (tokens already in the context).
struct DecodePrediction {
    int64_t depth = 0;
    double gpu_weight_bytes = 0;  // weights read by the GPU per token
    double gpu_cache_bytes = 0;   // KV cache up to the depth + DeltaNet state read and written
    double cpu_bytes = 0;         // weights (experts, or all on a CPU-only placement) read by the CPU
    int64_t handoffs = 0;         // GPU -> CPU -> GPU round trips (one per host layer)
    int64_t kernels = 0;          // launches on the GPU
    int64_t probed_kernels = 0;   // of which a calibrated probe timed (MoE, DeltaNet): no launch gap
    // With an expert cache: the hit rate charged (gpu_weight_bytes and gpu_s include the pool's
    // experts, cpu_bytes only the misses), and the admissions' host -> device bytes per token with
    // the CPU time they take from its expert reads (part of cpu_s).
    double cache_hit_rate = 0;
    double cache_copy_bytes = 0;
    double cache_copy_s = 0;
    // Seconds: total = gpu + cpu + handoff + launch - overlap (overlap: the shared experts that run
    // on the GPU while the CPU computes).
    double gpu_s = 0, cpu_s = 0, handoff_s = 0, launch_s = 0, overlap_s = 0;
    double total_s = 0;
    double tokens_per_s = 0;
};

// A prompt of prompt_tokens tokens in micro-batches of n_ubatch.
struct PrefillPrediction {
    int64_t prompt_tokens = 0;
    int64_t n_ubatch = 0;
    int64_t micro_batches = 0;
    bool streaming = false;         // host layers' experts may be streamed (staging buffers exist)
    int64_t stream_min_tokens = 0;  // the threshold used
    double copy_bytes = 0;          // host -> device expert copies, whole prompt
    double cpu_bytes = 0;           // expert bytes the CPU reads (batches below the threshold)
    int64_t handoffs = 0;
    // Seconds: total = gpu_compute + copy_stall + cpu + handoff + launch. copy_s is the time the
    // copy engine is busy (mostly hidden under compute); copy_stall_s the part the GPU waited for.
    double gpu_compute_s = 0, copy_s = 0, copy_stall_s = 0, cpu_s = 0, handoff_s = 0, launch_s = 0;
    double total_s = 0;
    double tokens_per_s = 0;
};

struct SpeedPrediction {
    bool cpu_only = false;         // nothing on the GPU: the CPU forward
    int64_t host_layers = 0;       // trunk layers whose experts live on the host
    DecodePrediction decode;       // at depth 0
    DecodePrediction decode_half;  // at depth n_ctx / 2
    PrefillPrediction prefill;
    std::vector<std::string> notes;  // approximations taken (e.g. a rate borrowed from another type)
};

// Throws mox::Error when the placement is one the runtime refuses (a layer's experts split across
// tiers, a non-expert trunk weight or the output head off the GPU while something is on it), or
// when the profile lacks a rate the placement needs: the message names every missing type and
// the `mox calibrate --types` command that measures them.
SpeedPrediction predict_speed(const place::Placement& p, const models::Hparams& hp,
                              const place::CacheOptions& cache, const SpeedOptions& options,
                              const HardwareProfile& profile);

// One generated token at `depth` tokens of context (predict_speed's decode and decode_half are this at
// 0 and n_ctx / 2): what `mox bench` compares a tgN row at depth d with, at d + N / 2, the mean
// context of its tokens. Throws as predict_speed does.
DecodePrediction predict_decode(const place::Placement& p, const models::Hparams& hp,
                                const place::CacheOptions& cache, int64_t depth, const HardwareProfile& profile,
                                const std::optional<ExpertCacheLoad>& expert_cache = std::nullopt);

// The smallest micro-batch (1..n_ubatch) from which streaming the host layers' experts costs no
// more than computing them on the CPU; n_ubatch + 1 when streaming never pays within a
// micro-batch; kDefaultStreamMinTokens when no layer is on the host.
int64_t best_stream_min(const place::Placement& p, const models::Hparams& hp, int64_t n_ubatch,
                        const HardwareProfile& profile);

// Per-token decode seconds that moving layer `layer`'s experts from the GPU to the host adds
// (hand-off + CPU experts - GPU experts - shared-expert overlap, launches): the difference of the
// two decode predictions at depth 0, with the layer's current types.
// The search orders layers by this cost per byte of VRAM freed.
double host_layer_decode_cost(const place::Placement& p, const models::Hparams& hp, int64_t layer,
                              const HardwareProfile& profile);

}  // namespace mox::plan
