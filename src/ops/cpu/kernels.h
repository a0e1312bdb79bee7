// Internal: SIMD kernels of the attention and Gated DeltaNet ops, one set per instruction-set tier.
//
// Same rules as src/quant/cpu/kernels.h: the *_avx2.cpp / *_avx512.cpp files are compiled with their
// ISA's -m flags, define everything else in an anonymous namespace, include only C headers,
// <immintrin.h> and this file, and never instantiate inline functions or templates from shared
// headers. So this header holds plain declarations and plain structs (no default member
// initializers, no inline code). The dispatchers in ops/attention.cpp and ops/delta_net.cpp pick a
// tier from Context::isa.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mox::ops::cpu {

// KV cache row formats the attention kernels read (a subset of quant::TypeId, mapped by the caller).
enum class KvFormat : uint8_t { f32, f16, bf16, q8_0, q4_0 };

// Upper bounds the kernels rely on for their stack tiles; the dispatcher falls back to the
// reference for anything bigger.
inline constexpr int64_t kAttnMaxRows = 64;  // query rows per block
inline constexpr int64_t kAttnMaxDim = 512;  // head_dim, also a multiple of 32

// One block of query rows against one KV head over keys [k0, k1), flash style: the running max m,
// running sum l and unnormalised accumulator acc of each row are updated in place (start them at
// -inf, 0, 0). The output of a row is acc / l once every key range has been seen.
struct AttnBlock {
    const uint8_t* k;  // position 0 of this KV head's slice of the K cache
    const uint8_t* v;  // same for V
    size_t k_stride;   // bytes between positions
    size_t v_stride;
    KvFormat k_format;
    KvFormat v_format;
    int64_t d;               // head dim, multiple of 32, <= kAttnMaxDim
    int64_t n_rows;          // <= kAttnMaxRows
    const float* q;          // [n_rows][d], already multiplied by the softmax scale
    const int64_t* key_end;  // [n_rows]: row r attends to keys < key_end[r] (causal mask)
    int64_t k0;
    int64_t k1;
    float* m;    // [n_rows]
    float* l;    // [n_rows]
    float* acc;  // [n_rows][d]
};

void attention_block_avx2(const AttnBlock& b);
void attention_block_avx512(const AttnBlock& b);

// One gated delta-rule step for one value head (ops/delta_net.h), S [dv][dk], dk a multiple of 8
// (avx2) or 16 (avx512); decay = exp(g). Reads and writes each column of S once.
void delta_rule_step_avx2(float* S, const float* q, const float* k, const float* v, float decay, float beta,
                          int64_t dk, int64_t dv, float* out);
void delta_rule_step_avx512(float* S, const float* q, const float* k, const float* v, float decay, float beta,
                            int64_t dk, int64_t dv, float* out);

}  // namespace mox::ops::cpu
