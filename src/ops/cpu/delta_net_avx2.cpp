// Gated delta-rule step, avx2 tier (see ops/cpu/kernels.h for the rules of ISA-flagged files).
//
// Per column j of S (dk floats, contiguous): u_j = decay * (S_j . k) from one read, then
// S_j <- decay * S_j + delta_j k written back while o_j = S_j . q is summed from the new values, so
// S crosses the cache once per token. Four columns at a time share the loads of k and q.
#include "ops/cpu/kernels.h"

#if defined(__AVX2__)

#include <immintrin.h>

namespace mox::ops::cpu {

namespace {

float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void columns(float* S, const float* q, const float* k, const float* v, float decay, float beta, int64_t dk,
             int64_t j, float* out) {
    float* c0 = S + j * dk;
    float* c1 = c0 + dk;
    float* c2 = c1 + dk;
    float* c3 = c2 + dk;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < dk; i += 8) {
        const __m256 kv = _mm256_loadu_ps(k + i);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(c0 + i), kv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(c1 + i), kv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(c2 + i), kv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(c3 + i), kv, a3);
    }
    const __m256 d0 = _mm256_set1_ps(beta * (v[j] - decay * hsum(a0)));
    const __m256 d1 = _mm256_set1_ps(beta * (v[j + 1] - decay * hsum(a1)));
    const __m256 d2 = _mm256_set1_ps(beta * (v[j + 2] - decay * hsum(a2)));
    const __m256 d3 = _mm256_set1_ps(beta * (v[j + 3] - decay * hsum(a3)));
    const __m256 dc = _mm256_set1_ps(decay);
    __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
    for (int64_t i = 0; i < dk; i += 8) {
        const __m256 kv = _mm256_loadu_ps(k + i), qv = _mm256_loadu_ps(q + i);
        const __m256 n0 = _mm256_fmadd_ps(d0, kv, _mm256_mul_ps(dc, _mm256_loadu_ps(c0 + i)));
        const __m256 n1 = _mm256_fmadd_ps(d1, kv, _mm256_mul_ps(dc, _mm256_loadu_ps(c1 + i)));
        const __m256 n2 = _mm256_fmadd_ps(d2, kv, _mm256_mul_ps(dc, _mm256_loadu_ps(c2 + i)));
        const __m256 n3 = _mm256_fmadd_ps(d3, kv, _mm256_mul_ps(dc, _mm256_loadu_ps(c3 + i)));
        _mm256_storeu_ps(c0 + i, n0);
        _mm256_storeu_ps(c1 + i, n1);
        _mm256_storeu_ps(c2 + i, n2);
        _mm256_storeu_ps(c3 + i, n3);
        o0 = _mm256_fmadd_ps(n0, qv, o0);
        o1 = _mm256_fmadd_ps(n1, qv, o1);
        o2 = _mm256_fmadd_ps(n2, qv, o2);
        o3 = _mm256_fmadd_ps(n3, qv, o3);
    }
    out[j] = hsum(o0);
    out[j + 1] = hsum(o1);
    out[j + 2] = hsum(o2);
    out[j + 3] = hsum(o3);
}

void column(float* S, const float* q, const float* k, const float* v, float decay, float beta, int64_t dk,
            int64_t j, float* out) {
    float* c = S + j * dk;
    __m256 a = _mm256_setzero_ps();
    for (int64_t i = 0; i < dk; i += 8)
        a = _mm256_fmadd_ps(_mm256_loadu_ps(c + i), _mm256_loadu_ps(k + i), a);
    const __m256 dl = _mm256_set1_ps(beta * (v[j] - decay * hsum(a)));
    const __m256 dc = _mm256_set1_ps(decay);
    __m256 o = _mm256_setzero_ps();
    for (int64_t i = 0; i < dk; i += 8) {
        const __m256 n =
            _mm256_fmadd_ps(dl, _mm256_loadu_ps(k + i), _mm256_mul_ps(dc, _mm256_loadu_ps(c + i)));
        _mm256_storeu_ps(c + i, n);
        o = _mm256_fmadd_ps(n, _mm256_loadu_ps(q + i), o);
    }
    out[j] = hsum(o);
}

}  // namespace

void delta_rule_step_avx2(float* S, const float* q, const float* k, const float* v, float decay, float beta,
                          int64_t dk, int64_t dv, float* out) {
    int64_t j = 0;
    for (; j + 4 <= dv; j += 4) columns(S, q, k, v, decay, beta, dk, j, out);
    for (; j < dv; ++j) column(S, q, k, v, decay, beta, dk, j, out);
}

}  // namespace mox::ops::cpu

#endif  // __AVX2__
