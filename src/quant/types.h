// The quant-type registry: one row per GGML block format (STYLE.md #2). Everything that needs to
// know a type's facts (GGUF validation, inspect's byte counts, kernels, tests) asks this table.
// Ids are ggml's `enum ggml_type` values, which is what GGUF files store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace mox::quant {

enum class TypeId : uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q8_1 = 9,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    q8_k = 15,
    iq2_xxs = 16,
    iq2_xs = 17,
    iq3_xxs = 18,
    iq1_s = 19,
    iq4_nl = 20,
    iq3_s = 21,
    iq2_s = 22,
    iq4_xs = 23,
    i8 = 24,
    i16 = 25,
    i32 = 26,
    i64 = 27,
    f64 = 28,
    iq1_m = 29,
    bf16 = 30,
    mxfp4 = 39,
};

// Reference (scalar, obviously correct, bit-exact with ggml) conversions. n is a multiple of the
// type's block_elems; src/dst are packed blocks with no alignment requirement.
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);

struct TypeTraits {
    TypeId id;
    std::string_view name;      // ggml's name, upper case: "Q4_K", "IQ2_XXS", "BF16"
    int64_t block_elems;        // elements per block (1 for plain types)
    size_t block_bytes;         // bytes per block
    bool is_quantized;          // block-quantized (false for F32/F16/BF16/I*/F64)
    DequantizeFn dequantize;    // nullptr only for the integer types
    QuantizeFn quantize;        // nullptr where no reference quantizer exists
    TypeId vec_dot_type;        // the activation format its dot product pairs with on the CPU
};

// Every known type, grouped by family (floats, legacy, K, IQ4/MXFP4, integers, grid i-quants).
std::span<const TypeTraits> all_types();

// The row for a GGUF type id, or nullptr if the id is unknown or a removed type (ggml ids 4, 5,
// 31-33, 36-38, and anything newer than this table).
const TypeTraits* find_type(uint32_t id);

// The row for a known type. Never fails.
const TypeTraits& traits(TypeId id);

// Parses a name like "q4_k", "Q4_K", "bf16" (case-insensitive).
std::optional<TypeId> type_from_name(std::string_view name);

inline std::string_view type_name(TypeId id) { return traits(id).name; }

// Bytes of a row of n elements; n must be a multiple of block_elems (checked).
size_t row_bytes(TypeId id, int64_t n);

}  // namespace mox::quant
