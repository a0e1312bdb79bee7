// The one table of block formats. Sizes and pairings: shared/spec/gguf-and-quants.md §2 and §6.
#include "core/error.h"
#include "quant/reference.h"
#include "quant/reference_iq_grid.h"
#include "quant/types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace mox::quant {

namespace {

using T = TypeId;

// Grouped by family; find_type() looks rows up by id.
constexpr TypeTraits kTypes[] = {
    // id        name       blk  bytes quantized dequantize quantize vec_dot_type
    // (reference functions: quant/reference.h)
    // plain floats
    {T::f32,     "F32",       1,   4, false, ref::dequantize_f32, ref::quantize_f32, T::f32},
    {T::f16,     "F16",       1,   2, false, ref::dequantize_f16, ref::quantize_f16, T::f16},
    {T::bf16,    "BF16",      1,   2, false, ref::dequantize_bf16, ref::quantize_bf16, T::bf16},
    {T::f64,     "F64",       1,   8, false, ref::dequantize_f64, ref::quantize_f64, T::f64},
    // legacy 32-element blocks
    {T::q4_0,    "Q4_0",     32,  18, true, ref::dequantize_q4_0, ref::quantize_q4_0, T::q8_0},
    {T::q4_1,    "Q4_1",     32,  20, true, ref::dequantize_q4_1, ref::quantize_q4_1, T::q8_1},
    {T::q5_0,    "Q5_0",     32,  22, true, ref::dequantize_q5_0, ref::quantize_q5_0, T::q8_0},
    {T::q5_1,    "Q5_1",     32,  24, true, ref::dequantize_q5_1, ref::quantize_q5_1, T::q8_1},
    {T::q8_0,    "Q8_0",     32,  34, true, ref::dequantize_q8_0, ref::quantize_q8_0, T::q8_0},
    {T::q8_1,    "Q8_1",     32,  36, true, ref::dequantize_q8_1, ref::quantize_q8_1, T::q8_1},
    // K-quants (256-element super-blocks)
    {T::q2_k,    "Q2_K",    256,  84, true, ref::dequantize_q2_k, ref::quantize_q2_k, T::q8_k},
    {T::q3_k,    "Q3_K",    256, 110, true, ref::dequantize_q3_k, ref::quantize_q3_k, T::q8_k},
    {T::q4_k,    "Q4_K",    256, 144, true, ref::dequantize_q4_k, ref::quantize_q4_k, T::q8_k},
    {T::q5_k,    "Q5_K",    256, 176, true, ref::dequantize_q5_k, ref::quantize_q5_k, T::q8_k},
    {T::q6_k,    "Q6_K",    256, 210, true, ref::dequantize_q6_k, ref::quantize_q6_k, T::q8_k},
    {T::q8_k,    "Q8_K",    256, 292, true, ref::dequantize_q8_k, ref::quantize_q8_k, T::q8_k},
    // non-linear 4-bit
    {T::iq4_nl,  "IQ4_NL",   32,  18, true, ref::dequantize_iq4_nl, ref::quantize_iq4_nl, T::q8_0},
    {T::iq4_xs,  "IQ4_XS",  256, 136, true, ref::dequantize_iq4_xs, ref::quantize_iq4_xs, T::q8_k},
    {T::mxfp4,   "MXFP4",    32,  17, true, ref::dequantize_mxfp4, ref::quantize_mxfp4, T::q8_0},

    // integer types (no arithmetic on them in mox; listed so files holding them parse)
    {T::i8,      "I8",        1,   1, false, nullptr, nullptr, T::i8},
    {T::i16,     "I16",       1,   2, false, nullptr, nullptr, T::i16},
    {T::i32,     "I32",       1,   4, false, nullptr, nullptr, T::i32},
    {T::i64,     "I64",       1,   8, false, nullptr, nullptr, T::i64},

    // grid-based i-quants
    {T::iq2_xxs, "IQ2_XXS", 256,  66, true,  ref::dequantize_iq2_xxs,  nullptr, T::q8_k},
    {T::iq2_xs,  "IQ2_XS",  256,  74, true,  ref::dequantize_iq2_xs,   nullptr, T::q8_k},
    {T::iq2_s,   "IQ2_S",   256,  82, true,  ref::dequantize_iq2_s,    nullptr, T::q8_k},
    {T::iq3_xxs, "IQ3_XXS", 256,  98, true,  ref::dequantize_iq3_xxs,  nullptr, T::q8_k},
    {T::iq3_s,   "IQ3_S",   256, 110, true,  ref::dequantize_iq3_s,    nullptr, T::q8_k},
    {T::iq1_s,   "IQ1_S",   256,  50, true,  ref::dequantize_iq1_s,    nullptr, T::q8_k},
    {T::iq1_m,   "IQ1_M",   256,  56, true,  ref::dequantize_iq1_m,    nullptr, T::q8_k},
};

constexpr uint32_t kMaxId = 64;

constexpr std::array<int, kMaxId> build_index() {
    std::array<int, kMaxId> index{};
    for (auto& i : index) i = -1;
    for (int r = 0; r < static_cast<int>(std::size(kTypes)); ++r) index[static_cast<uint32_t>(kTypes[r].id)] = r;
    return index;
}
constexpr auto kIndex = build_index();

}  // namespace

std::span<const TypeTraits> all_types() { return kTypes; }

const TypeTraits* find_type(uint32_t id) {
    if (id >= kMaxId || kIndex[id] < 0) return nullptr;
    return &kTypes[kIndex[id]];
}

const TypeTraits& traits(TypeId id) {
    const TypeTraits* t = find_type(static_cast<uint32_t>(id));
    MOX_CHECK(t != nullptr, "type id {} has no registry row", static_cast<uint32_t>(id));
    return *t;
}

std::optional<TypeId> type_from_name(std::string_view name) {
    std::string upper(name);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const TypeTraits& t : kTypes)
        if (t.name == upper) return t.id;
    return std::nullopt;
}

size_t row_bytes(TypeId id, int64_t n) {
    const TypeTraits& t = traits(id);
    MOX_CHECK(n >= 0 && n % t.block_elems == 0, "{} elements is not a whole number of {} blocks", n, t.name);
    return static_cast<size_t>(n / t.block_elems) * t.block_bytes;
}

}  // namespace mox::quant
