#include "ops/attention.h"

#include "core/error.h"
#include "ops/basic.h"
#include "ops/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

namespace mox::ops {

namespace {

void store_row(quant::TypeId type, uint8_t* dst, const float* src, int64_t n) {
    if (type == quant::TypeId::f32) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    const quant::TypeTraits& t = quant::traits(type);
    MOX_CHECK(t.quantize != nullptr, "KV type {} has no quantizer", t.name);
    t.quantize(src, dst, n);
}

void load_row(quant::TypeId type, const uint8_t* src, int64_t n, float* dst) {
    if (type == quant::TypeId::f32) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    quant::traits(type).dequantize(src, dst, n);
}

}  // namespace

void kv_store(const KvView& kv, int64_t pos, const float* k_row, const float* v_row) {
    MOX_CHECK(pos >= 0 && pos < kv.capacity, "KV position {} outside capacity {}", pos, kv.capacity);
    store_row(kv.k_type, kv.k + static_cast<size_t>(pos) * kv.k_row_bytes, k_row, kv.row_elems);
    store_row(kv.v_type, kv.v + static_cast<size_t>(pos) * kv.v_row_bytes, v_row, kv.row_elems);
}


void attention_reference(const KvView& kv, const AttentionShape& s, const float* q, int64_t n_keys, float* out) {
    MOX_CHECK(n_keys >= 1 && n_keys <= kv.capacity);
    MOX_CHECK(s.n_head % s.n_head_kv == 0);
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t d = s.head_dim;
    std::vector<float> row(static_cast<size_t>(kv.row_elems));
    std::vector<float> scores(static_cast<size_t>(s.n_head * n_keys));
    for (int64_t j = 0; j < n_keys; ++j) {
        load_row(kv.k_type, kv.k + static_cast<size_t>(j) * kv.k_row_bytes, kv.row_elems, row.data());
        for (int64_t h = 0; h < s.n_head; ++h) {
            const float* k = row.data() + (h / group) * d;
            const float* qh = q + h * d;
            float dot = 0;
            for (int64_t i = 0; i < d; ++i) dot += qh[i] * k[i];
            scores[static_cast<size_t>(h * n_keys + j)] = dot * s.scale;
        }
    }
    for (int64_t h = 0; h < s.n_head; ++h) softmax(scores.data() + h * n_keys, n_keys);
    std::fill(out, out + s.n_head * d, 0.0f);
    for (int64_t j = 0; j < n_keys; ++j) {
        load_row(kv.v_type, kv.v + static_cast<size_t>(j) * kv.v_row_bytes, kv.row_elems, row.data());
        for (int64_t h = 0; h < s.n_head; ++h) {
            const float p = scores[static_cast<size_t>(h * n_keys + j)];
            const float* v = row.data() + (h / group) * d;
            float* o = out + h * d;
            for (int64_t i = 0; i < d; ++i) o[i] += p * v[i];
        }
    }
}

namespace {

std::optional<cpu::KvFormat> kv_format(quant::TypeId t) {
    switch (t) {
        case quant::TypeId::f32: return cpu::KvFormat::f32;
        case quant::TypeId::f16: return cpu::KvFormat::f16;
        case quant::TypeId::bf16: return cpu::KvFormat::bf16;
        case quant::TypeId::q8_0: return cpu::KvFormat::q8_0;
        case quant::TypeId::q4_0: return cpu::KvFormat::q4_0;
        default: return std::nullopt;
    }
}

using BlockFn = void (*)(const cpu::AttnBlock&);

// The kernel for this tier and shape, or nullptr where only the reference applies.
BlockFn block_kernel(const Context& ctx, const KvView& kv, const AttentionShape& s) {
#if defined(__x86_64__) || defined(__i386__)
    if (ctx.isa < quant::Isa::avx2) return nullptr;
    if (s.head_dim % 32 != 0 || s.head_dim > cpu::kAttnMaxDim) return nullptr;
    if (!kv_format(kv.k_type) || !kv_format(kv.v_type)) return nullptr;
    if (ctx.isa >= quant::Isa::avx512 && s.head_dim % 64 == 0) return cpu::attention_block_avx512;
    return cpu::attention_block_avx2;
#else
    return nullptr;
#endif
}

// Rows of one KV head are (token i, group member g) pairs, r = i * group + g; a task takes a block
// of up to kRowsPerBlock rows and one range of keys.
constexpr int64_t kRowsPerBlock = 32;
static_assert(kRowsPerBlock <= cpu::kAttnMaxRows);
// Below this many keys per task, splitting the context costs more in merging than it gains.
constexpr int64_t kMinKeysPerSplit = 512;

// Query i of the block sees keys [0, first_end + i).
void attention_fast(const Context& ctx, BlockFn kernel, const KvView& kv, const AttentionShape& s, const float* q,
                    int64_t n_q, int64_t first_end, float* out) {
    const int64_t H = s.n_head, Hkv = s.n_head_kv, d = s.head_dim, group = H / Hkv;
    const int64_t rows = n_q * group;
    const int64_t n_blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    const int64_t max_end = first_end + n_q - 1;
    // Split the context when heads x blocks alone leave threads idle (decode at batch 1).
    const int64_t base_tasks = Hkv * n_blocks;
    const int64_t want = ctx.threads() > 1 ? 4 * static_cast<int64_t>(ctx.threads()) : 1;
    int64_t n_split = std::max<int64_t>(1, (want + base_tasks - 1) / base_tasks);
    n_split = std::min(n_split, std::max<int64_t>(1, max_end / kMinKeysPerSplit));
    const int64_t n_tasks = base_tasks * n_split;

    // Per task: q rows (scaled), then m, l, acc. Unsplit blocks (prefill) are finished by their task
    // in a slot of the thread that runs it; split ones (few tasks: decode) keep every partial for the
    // merge below.
    const int64_t slot = kRowsPerBlock * (2 * d + 2);
    thread_local std::vector<float> scratch_tl;
    std::vector<float>& scratch = scratch_tl;  // the caller's buffer, also inside the pool's tasks
    if (n_split > 1) scratch.resize(static_cast<size_t>(n_tasks * slot));
    const cpu::KvFormat kf = *kv_format(kv.k_type), vf = *kv_format(kv.v_type);

    auto block_rows = [&](int64_t blk) { return std::min(kRowsPerBlock, rows - blk * kRowsPerBlock); };
    ctx.parallel(n_tasks, [&](int64_t task) {
        const int64_t split = task % n_split, blk = (task / n_split) % n_blocks, h_kv = task / (n_split * n_blocks);
        const int64_t nr = block_rows(blk), r0 = blk * kRowsPerBlock;
        float* qs = nullptr;
        if (n_split == 1) {
            thread_local std::vector<float> own;  // this worker's own slot
            own.resize(static_cast<size_t>(slot));
            qs = own.data();
        } else {
            qs = scratch.data() + task * slot;
        }
        float* m = qs + kRowsPerBlock * d;
        float* l = m + kRowsPerBlock;
        float* acc = l + kRowsPerBlock;
        int64_t key_end[kRowsPerBlock];
        for (int64_t r = 0; r < nr; ++r) {
            const int64_t i = (r0 + r) / group, h = h_kv * group + (r0 + r) % group;
            const float* src = q + (i * H + h) * d;
            for (int64_t c = 0; c < d; ++c) qs[r * d + c] = src[c] * s.scale;
            key_end[r] = first_end + i;
            m[r] = -std::numeric_limits<float>::infinity();
            l[r] = 0;
        }
        std::fill(acc, acc + nr * d, 0.0f);
        // This block's keys, cut in n_split ranges of whole 16-key tiles.
        const int64_t blk_end = key_end[nr - 1];
        const int64_t per = ((blk_end + n_split - 1) / n_split + 15) / 16 * 16;
        const int64_t k0 = std::min(blk_end, split * per), k1 = std::min(blk_end, k0 + per);
        if (k0 >= k1) return;
        const size_t k_off = quant::row_bytes(kv.k_type, h_kv * d), v_off = quant::row_bytes(kv.v_type, h_kv * d);
        const cpu::AttnBlock b{kv.k + k_off, kv.v + v_off, kv.k_row_bytes, kv.v_row_bytes, kf, vf, d, nr, qs, key_end,
                               k0, k1, m, l, acc};
        kernel(b);
        if (n_split > 1) return;
        for (int64_t r = 0; r < nr; ++r) {
            const int64_t i = (r0 + r) / group, h = h_kv * group + (r0 + r) % group;
            float* o = out + (i * H + h) * d;
            const float inv = 1.0f / l[r];
            for (int64_t e = 0; e < d; ++e) o[e] = acc[r * d + e] * inv;
        }
    });
    if (n_split == 1) return;

    // Merge the splits of each row: out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c.
    ctx.parallel(Hkv * n_blocks, [&](int64_t hb) {
        const int64_t blk = hb % n_blocks, h_kv = hb / n_blocks;
        const int64_t nr = block_rows(blk), r0 = blk * kRowsPerBlock;
        for (int64_t r = 0; r < nr; ++r) {
            const int64_t i = (r0 + r) / group, h = h_kv * group + (r0 + r) % group;
            float* o = out + (i * H + h) * d;
            auto part = [&](int64_t split) { return scratch.data() + (hb * n_split + split) * slot + kRowsPerBlock * d; };
            float M = -std::numeric_limits<float>::infinity();
            for (int64_t c = 0; c < n_split; ++c)
                if (part(c)[kRowsPerBlock + r] > 0) M = std::max(M, part(c)[r]);
            float L = 0;
            std::fill(o, o + d, 0.0f);
            for (int64_t c = 0; c < n_split; ++c) {
                const float* p = part(c);
                if (p[kRowsPerBlock + r] <= 0) continue;  // no key of this row in this range
                const float w = std::exp(p[r] - M);
                L += w * p[kRowsPerBlock + r];
                const float* acc = p + 2 * kRowsPerBlock + r * d;
                for (int64_t e = 0; e < d; ++e) o[e] += w * acc[e];
            }
            const float inv = 1.0f / L;
            for (int64_t e = 0; e < d; ++e) o[e] *= inv;
        }
    });
}

void check_shape(const KvView& kv, const AttentionShape& s) {
    MOX_CHECK(s.n_head_kv >= 1 && s.n_head % s.n_head_kv == 0, "{} heads over {} KV heads", s.n_head, s.n_head_kv);
    MOX_CHECK(s.n_head_kv * s.head_dim == kv.row_elems, "KV row of {} elements for {} x {}", kv.row_elems, s.n_head_kv,
              s.head_dim);
}

}  // namespace

void attention(const Context& ctx, const KvView& kv, const AttentionShape& s, const float* q, int64_t n_keys,
               float* out) {
    check_shape(kv, s);
    MOX_CHECK(n_keys >= 1 && n_keys <= kv.capacity);
    if (BlockFn kernel = block_kernel(ctx, kv, s)) attention_fast(ctx, kernel, kv, s, q, 1, n_keys, out);
    else attention_reference(kv, s, q, n_keys, out);
}

void attention_batch(const Context& ctx, const KvView& kv, const AttentionShape& s, const float* q, int64_t n_q,
                     int64_t pos0, float* out) {
    check_shape(kv, s);
    MOX_CHECK(n_q >= 1 && pos0 >= 0 && pos0 + n_q <= kv.capacity, "queries {}..{} outside capacity {}", pos0,
              pos0 + n_q, kv.capacity);
    if (BlockFn kernel = block_kernel(ctx, kv, s)) {
        attention_fast(ctx, kernel, kv, s, q, n_q, pos0 + 1, out);
        return;
    }
    const int64_t row = s.n_head * s.head_dim;
    ctx.parallel(n_q, [&](int64_t i) { attention_reference(kv, s, q + i * row, pos0 + i + 1, out + i * row); });
}

}  // namespace mox::ops
