// The qwen35moe shape and recipe against the facts of shared/spec/qwen35moe.md.
#include "models/hparams.h"
#include "models/synth.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <set>

namespace mox::models {

using quant::TypeId;

TEST(Model, FullSizeShapeMatchesSpec) {
    const Hparams hp = synth_preset("qwen3.6-35b-a3b");
    const auto specs = model_tensors(hp);
    EXPECT_EQ(specs.size(), 733u);  // spec §2.5: 3 + 30x19 + 10x16
    double params = 0;
    for (const auto& s : specs) {
        double n = 1;
        for (int64_t d : s.ne) n *= static_cast<double>(d);
        params += n;
    }
    EXPECT_NEAR(params / 1e9, 34.66, 0.005);  // spec §1: 34.66 B trunk parameters
    EXPECT_EQ(hp.n_attention_layers(), 10);
    EXPECT_EQ(hp.n_recurrent_layers(), 30);
    EXPECT_FALSE(hp.is_recurrent(3));
    EXPECT_TRUE(hp.is_recurrent(4));
    EXPECT_EQ(hp.conv_channels(), 8192);
}

TEST(Model, WithMtpHas753Tensors) {
    Hparams hp = synth_preset("qwen3.6-35b-a3b");
    hp.n_layer = 41;
    hp.n_nextn = 1;
    EXPECT_EQ(model_tensors(hp).size(), 753u);
    EXPECT_FALSE(hp.is_recurrent(40));  // the MTP block is attention
    EXPECT_EQ(hp.n_attention_layers(), 10);  // trunk only
}

TEST(Model, KvCacheAndStateBytesMatchSpec) {
    const Hparams hp = synth_preset("qwen3.6-35b-a3b");
    // spec §5: 20480 / 10880 / 5760 bytes per token; 5.00 GiB at 262144 f16; GDN state 62.8 MiB.
    EXPECT_DOUBLE_EQ(hp.kv_cache_bytes_per_token(TypeId::f16), 20480.0);
    EXPECT_DOUBLE_EQ(hp.kv_cache_bytes_per_token(TypeId::q8_0), 10880.0);
    EXPECT_DOUBLE_EQ(hp.kv_cache_bytes_per_token(TypeId::q4_0), 5760.0);
    EXPECT_DOUBLE_EQ(hp.kv_cache_bytes_per_token(TypeId::f16) * 262144, 5.0 * (1ull << 30));
    EXPECT_EQ(hp.recurrent_state_bytes(), 30ull * (3 * 8192 + 128 * 4096) * 4);
    EXPECT_NEAR(static_cast<double>(hp.recurrent_state_bytes()) / (1 << 20), 62.8, 0.05);
}

TEST(Model, Q4KMRecipeMatchesSpecTable) {
    const Hparams hp = synth_preset("qwen3.6-35b-a3b");
    // spec §6: attn_v Q6_K at 3,7,19,31,35,39; attn_qkv Q6_K at 0,1,2,4,10,13,16,22,25,28,34,36,37,38;
    // ffn_down(_exps/_shexp) Q6_K on S; output Q6_K; routers, norms, conv, ssm_a, dt F32; rest Q4_K.
    const std::set<int64_t> s = {0, 1, 2, 3, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 34, 35, 36, 37, 38, 39};
    const std::set<int64_t> attn_v_q6 = {3, 7, 19, 31, 35, 39};
    const std::set<int64_t> qkv_q6 = {0, 1, 2, 4, 10, 13, 16, 22, 25, 28, 34, 36, 37, 38};
    double bytes = 0;
    for (const auto& spec : model_tensors(hp)) {
        const TypeId t = choose_tensor_type(spec, QuantMix::q4_k_m, hp);
        double n = 1;
        for (int64_t d : spec.ne) n *= static_cast<double>(d);
        bytes += n * static_cast<double>(quant::traits(t).block_bytes) / static_cast<double>(quant::traits(t).block_elems);
        const std::string& name = spec.name;
        SCOPED_TRACE(name);
        if (name == "output.weight") EXPECT_EQ(t, TypeId::q6_k);
        else if (name == "token_embd.weight") EXPECT_EQ(t, TypeId::q4_k);
        else if (name.ends_with("attn_v.weight")) EXPECT_EQ(t, attn_v_q6.count(spec.layer) ? TypeId::q6_k : TypeId::q4_k);
        else if (name.ends_with("attn_qkv.weight")) EXPECT_EQ(t, qkv_q6.count(spec.layer) ? TypeId::q6_k : TypeId::q4_k);
        else if (name.find("ffn_down") != std::string::npos) EXPECT_EQ(t, s.count(spec.layer) ? TypeId::q6_k : TypeId::q4_k);
        else if (spec.ne.size() == 1 || name.find("ffn_gate_inp") != std::string::npos ||
                 name.find("ssm_conv1d") != std::string::npos)
            EXPECT_EQ(t, TypeId::f32);
        else EXPECT_EQ(t, TypeId::q4_k);
    }
    EXPECT_NEAR(bytes / (1ull << 30), 19.70, 0.005);  // spec §6: 19.70 GiB without MTP
}

TEST(Model, FallbackWhenRowsAreNotWholeBlocks) {
    Hparams hp = synth_preset("tiny");
    hp.n_embd = 96;  // not a multiple of 256
    TensorSpec spec{"blk.0.ffn_up_shexp.weight", {96, 256}, 0};
    EXPECT_EQ(choose_tensor_type(spec, QuantMix::q4_k_m, hp), TypeId::q5_0);
    TensorSpec out{"output.weight", {96, 100}, -1};
    EXPECT_EQ(choose_tensor_type(out, QuantMix::q4_k_m, hp), TypeId::q8_0);
}

TEST(Model, RejectsInconsistentHparams) {
    Hparams hp = synth_preset("tiny");
    hp.ssm_inner = 100;
    EXPECT_THROW(hp.validate(), Error);
    hp = synth_preset("tiny");
    hp.n_expert_used = hp.n_expert + 1;
    EXPECT_THROW(hp.validate(), Error);
}

}  // namespace mox::models
