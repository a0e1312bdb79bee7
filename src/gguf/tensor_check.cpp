// ReadOptions::check_tensor_data: no inf/NaN in float tensors or in the scales of quant blocks
// (what llama.cpp's --check-tensors rejects, shared/spec/gguf-and-quants.md §1.4 item 13). The
// checks look at bit patterns only: an all-ones exponent field means inf or NaN.
#include "core/error.h"
#include "gguf/parse.h"

#include <fmt/format.h>

#include <cstring>

namespace mox::gguf::detail {

namespace {

using quant::TypeId;

enum class Scale { fp16, fp32, e8m0, iq1m };

// One scale field inside a block: its byte offset and its name in ggml's struct.
struct ScaleField {
    uint32_t offset;
    Scale kind;
    const char* name;
};

struct BlockScales {
    ScaleField fields[2];
    int count;
};

// Byte offsets from the block layouts in shared/spec/gguf-and-quants.md §3-§4.
// Q8_1's `s` (= d * sum of quants) is a cached product, not a scale, and is not checked.
bool block_scales(TypeId t, BlockScales& out) {
    const ScaleField d0{0, Scale::fp16, "d"};
    switch (t) {
        case TypeId::q4_0:
        case TypeId::q5_0:
        case TypeId::q8_0:
        case TypeId::q8_1:
        case TypeId::iq4_nl:
        case TypeId::iq4_xs:
        case TypeId::iq2_xxs:
        case TypeId::iq2_xs:
        case TypeId::iq2_s:
        case TypeId::iq3_xxs:
        case TypeId::iq3_s:
        case TypeId::iq1_s:
            out = {{d0, d0}, 1};
            return true;
        case TypeId::q4_1:
        case TypeId::q5_1:
            out = {{d0, {2, Scale::fp16, "m"}}, 2};
            return true;
        case TypeId::q4_k:
        case TypeId::q5_k:
            out = {{d0, {2, Scale::fp16, "dmin"}}, 2};
            return true;
        case TypeId::q2_k:
            out = {{{80, Scale::fp16, "d"}, {82, Scale::fp16, "dmin"}}, 2};
            return true;
        case TypeId::q3_k:
            out = {{{108, Scale::fp16, "d"}, d0}, 1};
            return true;
        case TypeId::q6_k:
            out = {{{208, Scale::fp16, "d"}, d0}, 1};
            return true;
        case TypeId::q8_k:
            out = {{{0, Scale::fp32, "d"}, d0}, 1};
            return true;
        case TypeId::mxfp4:
            out = {{{0, Scale::e8m0, "e"}, d0}, 1};
            return true;
        // IQ1_M stores no d: its fp16 scale is the top nibbles of the four u16 words at byte 48.
        case TypeId::iq1_m:
            out = {{{48, Scale::iq1m, "scales (fp16 super-scale)"}, d0}, 1};
            return true;
        default:
            return false;
    }
}

uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
uint64_t load_u64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

bool fp16_bad(uint16_t h) {
    return (h & 0x7C00) == 0x7C00;
}
bool bf16_bad(uint16_t h) {
    return (h & 0x7F80) == 0x7F80;
}
bool fp32_bad(uint32_t u) {
    return (u & 0x7F800000u) == 0x7F800000u;
}
bool fp64_bad(uint64_t u) {
    return (u & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
}

bool scale_bad(const uint8_t* p, Scale kind) {
    switch (kind) {
        case Scale::fp16:
            return fp16_bad(load_u16(p));
        case Scale::fp32:
            return fp32_bad(load_u32(p));
        case Scale::e8m0:
            return *p == 0xFF;  // 0xFF is E8M0's NaN
        case Scale::iq1m: {
            uint16_t h = 0;
            for (int w = 0; w < 4; ++w) h |= static_cast<uint16_t>((load_u16(p + 2 * w) >> 12) << (4 * w));
            return fp16_bad(h);
        }
    }
    return false;
}

[[noreturn]] void bad_value(const TensorInfo& t, size_t index, const std::string& file, uint64_t byte,
                            std::string_view what) {
    fail_at(file, t.file_offset + byte, fmt::format("tensor {} '{}' data", index, printable(t.name)), what);
}

// Scans plain elements of `width` bytes with the test `bad`.
template <typename Load, typename Bad>
void scan_plain(const TensorInfo& t, size_t index, const std::string& file, size_t width, Load load,
                Bad bad) {
    const uint64_t n = t.n_bytes / width;
    for (uint64_t i = 0; i < n; ++i)
        if (bad(load(t.data + i * width)))
            bad_value(t, index, file, i * width,
                      fmt::format("{} element {} is inf or NaN", quant::type_name(t.type), i));
}

}  // namespace

void check_tensor_data(const TensorInfo& t, size_t index, const std::string& file) {
    switch (t.type) {
        case TypeId::f32:
            return scan_plain(t, index, file, 4, load_u32, fp32_bad);
        case TypeId::f16:
            return scan_plain(t, index, file, 2, load_u16, fp16_bad);
        case TypeId::bf16:
            return scan_plain(t, index, file, 2, load_u16, bf16_bad);
        case TypeId::f64:
            return scan_plain(t, index, file, 8, load_u64, fp64_bad);
        default:
            break;
    }
    BlockScales scales;
    if (!block_scales(t.type, scales)) return;  // integer types: nothing to check
    const size_t block_bytes = quant::traits(t.type).block_bytes;
    const uint64_t n_blocks = t.n_bytes / block_bytes;
    for (uint64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = t.data + b * block_bytes;
        for (int f = 0; f < scales.count; ++f) {
            const ScaleField& field = scales.fields[f];
            if (scale_bad(block + field.offset, field.kind))
                bad_value(t, index, file, b * block_bytes + field.offset,
                          fmt::format("{} block {} field {} is inf or NaN", quant::type_name(t.type), b,
                                      field.name));
        }
    }
}

}  // namespace mox::gguf::detail
