// Gated DeltaNet on the GPU (shared/spec/qwen35moe.md §3a): the causal conv + SiLU and the
// gated delta rule with its gated RMSNorm, for one token (decode) or a block of tokens of one
// sequence (prefill). Same math as ops/delta_net.h and the DeltaNet part of models/qwen35moe.cpp
// (the CPU reference these kernels are tested against). Plain C++; kernels in ops/cuda/delta_net.cu,
// linked only with -DMOX_CUDA=ON. All pointers are device memory, fp32.
#pragma once

#include "quant/cuda_stream.h"
#include "quant/types.h"

#include <cstddef>
#include <cstdint>

namespace mox::cuda {

// Causal depthwise conv over n_tokens tokens of one sequence, then SiLU:
//   out[t, c] = silu(sum_j weight[c * kernel + j] * window_t[j, c])
// where window_t holds the previous kernel-1 inputs then x[t]; `state` [(kernel-1), channels] holds
// the inputs before x[0], oldest first, and is updated to the last kernel-1 inputs. x rows are
// x + t * x_stride; out is [n_tokens, channels]. weight is ggml's {kernel, channels} (tap fastest).
void conv_silu(float* state, const float* weight, const float* x, int64_t x_stride, int64_t n_tokens,
               int64_t channels, int64_t kernel, float* out, StreamHandle stream = nullptr);

// Decode (one token): y = W x for the n_out rows of a DeltaNet input projection whose first
// `channels` rows feed the conv, with conv_silu's step (n_tokens 1) done as those rows are stored:
// conv_out[c] = silu(...) of row c and `state` shifted, for c < channels; rows past them go to y[r]
// (y[0..channels) is not written). One launch instead of matvec + conv_silu, the same results bit for
// bit (ops/cuda/conv_projection.cu says why). W, row_bytes, x as quant/cuda_matvec.h's matvec;
// state, taps (weight), kernel as conv_silu's.
// Only for weights whose one-column product uses 8-bit activations (conv_projection_supported:
// cuda::int8_activations' types); other types throw, the caller runs matvec + conv_silu instead.
bool conv_projection_supported(quant::TypeId type);
void conv_projection(quant::TypeId type, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out,
                     const float* x, float* y, float* state, const float* taps, int64_t kernel,
                     int64_t channels, float* conv_out, StreamHandle stream = nullptr);

struct DeltaNetShape {
    int64_t n_k_heads = 0;  // Hk: query/key heads
    int64_t n_v_heads = 0;  // Hv: value heads (a multiple of Hk)
    int64_t dk = 0;         // key/query head dim
    int64_t dv = 0;         // value head dim
    float eps = 1e-6f;      // of the L2 norms and the gated RMSNorm
};

// Per-layer constants, fp32 device copies of the GGUF tensors.
struct DeltaNetWeights {
    const float* a = nullptr;        // ssm_a [Hv] (= -exp(A_log))
    const float* dt_bias = nullptr;  // ssm_dt.bias [Hv]
    const float* norm = nullptr;     // ssm_norm [dv], shared by all heads
};

// The gated delta rule over n_tokens tokens of one sequence, then the gated RMSNorm:
//   conv rows [n_tokens, C] = [q: Hk x dk | k: Hk x dk | v: Hv x dv] (the conv_silu output),
//   q, k L2-normalised per head (eps), q scaled by 1/sqrt(dk); value head h uses q/k head h % Hk;
//   beta = sigmoid(b[t, h]), g = a[h] * softplus(alpha[t, h] + dt_bias[h]);
//   S_h <- exp(g) S_h;  u = S_h^T k;  S_h <- S_h + k (beta (v - u))^T;  o = S_h^T q;
//   out[t, h * dv + j] = rms_norm(o)[j] * norm[j] * silu(z[t, h * dv + j]).
// S: [Hv][dv][dk] (ops/delta_net.h's layout), updated in place. b, alpha: [n_tokens, Hv];
// z, out: [n_tokens, Hv * dv].
//
// Two forms of the rule: `sequential` walks the tokens one by one (fp32 throughout; decode and short
// blocks); `chunked` is spec §3a's chunked form over chunks of 64 tokens, its matrix products on
// tensor cores in split tf32 (hi + lo parts, close to fp32: ~1e-6 relative against the
// recurrence), for dk 64 or 128 and dv a multiple of 32. `automatic` picks chunked for n_tokens >=
// 16 where the shape allows it. Forcing `chunked` on another shape throws.
// The chunked form first prepares every chunk's state-independent factors at once (in parallel
// over chunks), then walks the chunks in order: workspace is device scratch of workspace_bytes >=
// delta_net_workspace_bytes(shape, n_tokens) (unused, and may be null, when the sequential form
// runs; a chunked call with less throws).
enum class DeltaNetMethod { automatic, sequential, chunked };

size_t delta_net_workspace_bytes(const DeltaNetShape& shape, int64_t n_tokens);
void delta_net(float* S, const float* conv, const float* b, const float* alpha, const float* z,
               const DeltaNetWeights& w, const DeltaNetShape& shape, int64_t n_tokens, float* out,
               void* workspace, size_t workspace_bytes, StreamHandle stream = nullptr,
               DeltaNetMethod method = DeltaNetMethod::automatic);

}  // namespace mox::cuda
