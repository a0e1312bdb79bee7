// Attention kernel, avx2 tier (see ops/cpu/kernels.h for the rules of ISA-flagged files).
//
// Per block of query rows and tile of 16 keys: convert the tile's K and V rows to fp32 once (F16C,
// bf16 shift, q8_0/q4_0 block scale), score every row against them, update each row's running max
// and sum (one rescale of the accumulator per tile, not per key), then add p * V with the row's
// accumulator slice held in registers across the tile.
#include "ops/cpu/kernels.h"

#if defined(__AVX2__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

namespace mox::ops::cpu {

namespace {

constexpr int kTile = 16;

float half_to_float(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// Bytes of a d-element row slice in format f.
int64_t slice_bytes(KvFormat f, int64_t d) {
    switch (f) {
        case KvFormat::f32:
            return 4 * d;
        case KvFormat::f16:
        case KvFormat::bf16:
            return 2 * d;
        case KvFormat::q8_0:
            return d / 32 * 34;
        case KvFormat::q4_0:
            return d / 32 * 18;
    }
    return 0;
}

void prefetch_slice(const uint8_t* p, int64_t n) {
    for (int64_t i = 0; i < n; i += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + n - 1), _MM_HINT_T0);
}

// Converts one row slice of d elements (d % 32 == 0) to fp32. Returns where the fp32 values are:
// the source itself for f32 rows, else buf.
const float* row_to_f32(KvFormat f, const uint8_t* src, int64_t d, float* buf) {
    switch (f) {
        case KvFormat::f32:
            return reinterpret_cast<const float*>(src);
        case KvFormat::f16:
            for (int64_t i = 0; i < d; i += 8)
                _mm256_store_ps(
                    buf + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
            return buf;
        case KvFormat::bf16:
            for (int64_t i = 0; i < d; i += 8) {
                const __m256i w =
                    _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
                _mm256_store_ps(buf + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
            }
            return buf;
        case KvFormat::q8_0:
            // Block: f16 scale, 32 int8.
            for (int64_t i = 0; i < d; i += 32, src += 34) {
                const __m256 s = _mm256_set1_ps(half_to_float(src));
                for (int j = 0; j < 32; j += 8) {
                    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 2 + j));
                    _mm256_store_ps(buf + i + j,
                                    _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))));
                }
            }
            return buf;
        case KvFormat::q4_0: {
            // Block: f16 scale, 16 bytes; element j < 16 is the low nibble of byte j, element j + 16 the
            // high nibble, value (nibble - 8) * scale.
            const __m128i low = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
            for (int64_t i = 0; i < d; i += 32, src += 18) {
                const __m256 s = _mm256_set1_ps(half_to_float(src));
                const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2));
                const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, low), eight);
                const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), low), eight);
                const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
                for (int j = 0; j < 4; ++j)
                    _mm256_store_ps(buf + i + 8 * j,
                                    _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[j]))));
            }
            return buf;
        }
    }
    return buf;
}

// e^x for x <= 0 (x = -inf gives 0): x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor
// polynomial (truncation error < 2e-7 relative), 2^n built in the exponent field. Results below
// e^-87 (under FLT_MIN) are flushed to 0.
__m256 exp_nonpositive(__m256 x) {
    const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // ln2 split in two so that n * ln2_hi is exact (ln2_hi has 12 significant bits).
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// The four lane sums of a0..a3 in one vector.
__m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// acc_a += sum_jj pa[jj] V_jj (and the same for b when given), over a tile of nt keys.
void accumulate_pair(float* acc_a, const float* pa, float* acc_b, const float* pb, const float* const* vp,
                     int nt, int64_t d) {
    for (int64_t i0 = 0; i0 < d; i0 += 32) {
        __m256 a0 = _mm256_loadu_ps(acc_a + i0), a1 = _mm256_loadu_ps(acc_a + i0 + 8);
        __m256 a2 = _mm256_loadu_ps(acc_a + i0 + 16), a3 = _mm256_loadu_ps(acc_a + i0 + 24);
        if (acc_b) {
            __m256 b0 = _mm256_loadu_ps(acc_b + i0), b1 = _mm256_loadu_ps(acc_b + i0 + 8);
            __m256 b2 = _mm256_loadu_ps(acc_b + i0 + 16), b3 = _mm256_loadu_ps(acc_b + i0 + 24);
            for (int jj = 0; jj < nt; ++jj) {
                const __m256 x = _mm256_set1_ps(pa[jj]), y = _mm256_set1_ps(pb[jj]);
                const float* v = vp[jj] + i0;
                const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
                const __m256 v2 = _mm256_loadu_ps(v + 16), v3 = _mm256_loadu_ps(v + 24);
                a0 = _mm256_fmadd_ps(x, v0, a0);
                a1 = _mm256_fmadd_ps(x, v1, a1);
                a2 = _mm256_fmadd_ps(x, v2, a2);
                a3 = _mm256_fmadd_ps(x, v3, a3);
                b0 = _mm256_fmadd_ps(y, v0, b0);
                b1 = _mm256_fmadd_ps(y, v1, b1);
                b2 = _mm256_fmadd_ps(y, v2, b2);
                b3 = _mm256_fmadd_ps(y, v3, b3);
            }
            _mm256_storeu_ps(acc_b + i0, b0);
            _mm256_storeu_ps(acc_b + i0 + 8, b1);
            _mm256_storeu_ps(acc_b + i0 + 16, b2);
            _mm256_storeu_ps(acc_b + i0 + 24, b3);
        } else {
            for (int jj = 0; jj < nt; ++jj) {
                const __m256 x = _mm256_set1_ps(pa[jj]);
                const float* v = vp[jj] + i0;
                a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(v), a0);
                a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(v + 8), a1);
                a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(v + 16), a2);
                a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(v + 24), a3);
            }
        }
        _mm256_storeu_ps(acc_a + i0, a0);
        _mm256_storeu_ps(acc_a + i0 + 8, a1);
        _mm256_storeu_ps(acc_a + i0 + 16, a2);
        _mm256_storeu_ps(acc_a + i0 + 24, a3);
    }
}

}  // namespace

void attention_block_avx2(const AttnBlock& b) {
    const int64_t d = b.d, n_rows = b.n_rows;
    alignas(32) float kbuf[kTile][kAttnMaxDim];
    alignas(32) float vbuf[kTile][kAttnMaxDim];
    alignas(32) float s[kAttnMaxRows][kTile];
    const float* kp[kTile];
    const float* vp[kTile];
    bool live[kAttnMaxRows];
    const float neg_inf = -INFINITY;

    for (int64_t j0 = b.k0; j0 < b.k1; j0 += kTile) {
        const int nt = static_cast<int>(b.k1 - j0 < kTile ? b.k1 - j0 : kTile);
        bool any = false;
        for (int64_t r = 0; r < n_rows; ++r) any |= (live[r] = b.key_end[r] > j0);
        if (!any) break;  // rows are only masked from some key on, so no later tile has work either
        for (int jj = 0; jj < nt; ++jj) {
            kp[jj] = row_to_f32(b.k_format, b.k + static_cast<size_t>(j0 + jj) * b.k_stride, d, kbuf[jj]);
            vp[jj] = row_to_f32(b.v_format, b.v + static_cast<size_t>(j0 + jj) * b.v_stride, d, vbuf[jj]);
        }
        // The next tile's rows are read from memory while this one is computed (the slices of one KV
        // head are strided, which the hardware prefetchers follow poorly).
        for (int64_t j = j0 + kTile; j < j0 + 2 * kTile && j < b.k1; ++j) {
            prefetch_slice(b.k + static_cast<size_t>(j) * b.k_stride, slice_bytes(b.k_format, d));
            prefetch_slice(b.v + static_cast<size_t>(j) * b.v_stride, slice_bytes(b.v_format, d));
        }

        // Scores: four rows at a time share each K load.
        int64_t r = 0;
        for (; r + 4 <= n_rows; r += 4) {
            const float* q0 = b.q + r * d;
            int jj = 0;
            for (; jj + 2 <= nt; jj += 2) {
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0,
                       c3 = a0;
                const float* k = kp[jj];
                const float* k2 = kp[jj + 1];
                for (int64_t i = 0; i < d; i += 8) {
                    const __m256 x = _mm256_loadu_ps(k + i), y = _mm256_loadu_ps(k2 + i);
                    const __m256 u0 = _mm256_loadu_ps(q0 + i), u1 = _mm256_loadu_ps(q0 + d + i);
                    const __m256 u2 = _mm256_loadu_ps(q0 + 2 * d + i), u3 = _mm256_loadu_ps(q0 + 3 * d + i);
                    a0 = _mm256_fmadd_ps(u0, x, a0);
                    a1 = _mm256_fmadd_ps(u1, x, a1);
                    a2 = _mm256_fmadd_ps(u2, x, a2);
                    a3 = _mm256_fmadd_ps(u3, x, a3);
                    c0 = _mm256_fmadd_ps(u0, y, c0);
                    c1 = _mm256_fmadd_ps(u1, y, c1);
                    c2 = _mm256_fmadd_ps(u2, y, c2);
                    c3 = _mm256_fmadd_ps(u3, y, c3);
                }
                alignas(16) float t[8];
                _mm_store_ps(t, hsum4(a0, a1, a2, a3));
                _mm_store_ps(t + 4, hsum4(c0, c1, c2, c3));
                for (int x = 0; x < 4; ++x) {
                    s[r + x][jj] = t[x];
                    s[r + x][jj + 1] = t[4 + x];
                }
            }
            for (; jj < nt; ++jj) {
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                const float* k = kp[jj];
                for (int64_t i = 0; i < d; i += 8) {
                    const __m256 kv = _mm256_loadu_ps(k + i);
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + i), kv, a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d + i), kv, a1);
                    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 2 * d + i), kv, a2);
                    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 3 * d + i), kv, a3);
                }
                alignas(16) float t[4];
                _mm_store_ps(t, hsum4(a0, a1, a2, a3));
                for (int x = 0; x < 4; ++x) s[r + x][jj] = t[x];
            }
        }
        for (; r < n_rows; ++r) {
            const float* q = b.q + r * d;
            for (int jj = 0; jj < nt; ++jj) {
                __m256 a0 = _mm256_setzero_ps(), a1 = a0;
                const float* k = kp[jj];
                for (int64_t i = 0; i < d; i += 16) {
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
                }
                s[r][jj] = hsum(_mm256_add_ps(a0, a1));
            }
        }

        // Online softmax: p = e^(s - m_new), previous sum and accumulator scaled by e^(m_old - m_new).
        for (r = 0; r < n_rows; ++r) {
            if (!live[r]) continue;
            float* sr = s[r];
            const int64_t n_live = b.key_end[r] - j0;
            float mt = neg_inf;
            for (int jj = 0; jj < nt; ++jj) {
                if (jj >= n_live) sr[jj] = neg_inf;
                mt = sr[jj] > mt ? sr[jj] : mt;
            }
            for (int jj = nt; jj < kTile; ++jj) sr[jj] = neg_inf;
            const float m_old = b.m[r];
            const float m_new = mt > m_old ? mt : m_old;
            if (m_new > m_old && m_old != neg_inf) {
                const float c = expf(m_old - m_new);
                b.l[r] *= c;
                const __m256 cv = _mm256_set1_ps(c);
                float* acc = b.acc + r * d;
                for (int64_t i = 0; i < d; i += 8)
                    _mm256_storeu_ps(acc + i, _mm256_mul_ps(cv, _mm256_loadu_ps(acc + i)));
            }
            b.m[r] = m_new;
            const __m256 mv = _mm256_set1_ps(m_new);
            const __m256 p0 = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(sr), mv));
            const __m256 p1 = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(sr + 8), mv));
            _mm256_store_ps(sr, p0);
            _mm256_store_ps(sr + 8, p1);
            b.l[r] += hsum(_mm256_add_ps(p0, p1));
        }

        // acc += p V: two rows share each V load, and each keeps 32 columns of its accumulator in
        // registers across the tile (8 independent FMA chains). p is 0 past a row's key_end.
        for (r = 0; r < n_rows;) {
            if (!live[r]) {
                ++r;
                continue;
            }
            if (r + 1 < n_rows && live[r + 1]) {
                accumulate_pair(b.acc + r * d, s[r], b.acc + (r + 1) * d, s[r + 1], vp, nt, d);
                r += 2;
            } else {
                accumulate_pair(b.acc + r * d, s[r], nullptr, nullptr, vp, nt, d);
                ++r;
            }
        }
    }
}

}  // namespace mox::ops::cpu

#endif  // __AVX2__
