// The quant registry against the facts of shared/spec/gguf-and-quants.md §2 (ids, block sizes, bytes)
// and §6 (the activation type each weight type's dot product pairs with).
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

namespace mox::quant {
namespace {

struct SpecRow {
    uint32_t id;
    const char* name;
    int64_t block_elems;
    size_t block_bytes;
};

// Spec §2 table, for every type mox knows.
constexpr SpecRow kSpec[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {39, "MXFP4", 32, 17},
};

TEST(Registry, MatchesSpecTable) {
    EXPECT_EQ(all_types().size(), std::size(kSpec));
    for (const SpecRow& s : kSpec) {
        const TypeTraits* t = find_type(s.id);
        ASSERT_NE(t, nullptr) << s.name;
        EXPECT_EQ(static_cast<uint32_t>(t->id), s.id);
        EXPECT_EQ(t->name, s.name);
        EXPECT_EQ(t->block_elems, s.block_elems) << s.name;
        EXPECT_EQ(t->block_bytes, s.block_bytes) << s.name;
        EXPECT_EQ(t->is_quantized, s.block_elems > 1) << s.name;
    }
}

TEST(Registry, IdsAndNamesAreUnique) {
    std::set<uint32_t> ids;
    std::set<std::string> names;
    for (const TypeTraits& t : all_types()) {
        EXPECT_TRUE(ids.insert(static_cast<uint32_t>(t.id)).second) << t.name;
        EXPECT_TRUE(names.insert(std::string(t.name)).second) << t.name;
        EXPECT_EQ(&traits(t.id), &t);
    }
}

TEST(Registry, RejectsRemovedAndUnknownIds) {
    // 4, 5: Q4_2/Q4_3; 31-33: Q4_0_4_4/4_8/8_8; 36-38: IQ4_NL_4_4/4_8/8_8 (block size 0 in ggml).
    for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u}) EXPECT_EQ(find_type(id), nullptr) << id;
    for (uint32_t id : {43u, 63u, 64u, 142u, 1000u, UINT32_MAX}) EXPECT_EQ(find_type(id), nullptr) << id;
}

TEST(Registry, TypeFromName) {
    EXPECT_EQ(type_from_name("Q4_K"), TypeId::q4_k);
    EXPECT_EQ(type_from_name("q4_k"), TypeId::q4_k);
    EXPECT_EQ(type_from_name("bf16"), TypeId::bf16);
    EXPECT_EQ(type_from_name("Iq4_Nl"), TypeId::iq4_nl);
    EXPECT_EQ(type_from_name("MXFP4"), TypeId::mxfp4);
    for (const TypeTraits& t : all_types()) EXPECT_EQ(type_from_name(t.name), t.id);
    EXPECT_EQ(type_from_name(""), std::nullopt);
    EXPECT_EQ(type_from_name("Q4_2"), std::nullopt);
    EXPECT_EQ(type_from_name("q4_k "), std::nullopt);
    EXPECT_EQ(type_from_name("Q4"), std::nullopt);
}

TEST(Registry, RowBytes) {
    EXPECT_EQ(row_bytes(TypeId::q4_k, 4096), 16u * 144u);
    EXPECT_EQ(row_bytes(TypeId::q8_0, 64), 68u);
    EXPECT_EQ(row_bytes(TypeId::f32, 3), 12u);
    EXPECT_EQ(row_bytes(TypeId::mxfp4, 0), 0u);
}

TEST(RegistryDeathTest, RowBytesRejectsPartialBlocks) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(row_bytes(TypeId::q4_k, 100), "whole number");
}

// Spec §6: the CPU activation format of each weight type.
TEST(Registry, VecDotTypes) {
    for (TypeId t : {TypeId::q4_0, TypeId::q5_0, TypeId::q8_0, TypeId::iq4_nl, TypeId::mxfp4})
        EXPECT_EQ(traits(t).vec_dot_type, TypeId::q8_0) << type_name(t);
    for (TypeId t : {TypeId::q4_1, TypeId::q5_1})
        EXPECT_EQ(traits(t).vec_dot_type, TypeId::q8_1) << type_name(t);
    for (TypeId t : {TypeId::q2_k, TypeId::q3_k, TypeId::q4_k, TypeId::q5_k, TypeId::q6_k, TypeId::iq4_xs,
                     TypeId::iq2_xxs, TypeId::iq2_xs, TypeId::iq2_s, TypeId::iq3_xxs, TypeId::iq3_s,
                     TypeId::iq1_s, TypeId::iq1_m})
        EXPECT_EQ(traits(t).vec_dot_type, TypeId::q8_k) << type_name(t);
    EXPECT_EQ(traits(TypeId::f16).vec_dot_type, TypeId::f16);
    EXPECT_EQ(traits(TypeId::bf16).vec_dot_type, TypeId::bf16);
    EXPECT_EQ(traits(TypeId::f32).vec_dot_type, TypeId::f32);
}

// The types whose scalar references live in quant/reference.h must have both functions registered; the
// integer types have none. (The grid i-quants are checked where they are implemented.)
TEST(Registry, ReferenceFunctionsPresent) {
    for (TypeId t :
         {TypeId::f32, TypeId::f16, TypeId::bf16, TypeId::f64, TypeId::q4_0, TypeId::q4_1, TypeId::q5_0,
          TypeId::q5_1, TypeId::q8_0, TypeId::q8_1, TypeId::q2_k, TypeId::q3_k, TypeId::q4_k, TypeId::q5_k,
          TypeId::q6_k, TypeId::q8_k, TypeId::iq4_nl, TypeId::iq4_xs, TypeId::mxfp4}) {
        EXPECT_NE(traits(t).dequantize, nullptr) << type_name(t);
        EXPECT_NE(traits(t).quantize, nullptr) << type_name(t);
    }
    for (TypeId t : {TypeId::i8, TypeId::i16, TypeId::i32, TypeId::i64}) {
        EXPECT_EQ(traits(t).dequantize, nullptr) << type_name(t);
        EXPECT_EQ(traits(t).quantize, nullptr) << type_name(t);
    }
}

}  // namespace
}  // namespace mox::quant
