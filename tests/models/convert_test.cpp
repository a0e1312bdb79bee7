// The safetensors reader (valid and hostile inputs) and `mox convert` on the committed golden
// checkpoint, checked against tests/data/goldens/qwen35moe/transforms.json (computed by the golden
// script in torch from the HF model, shared/spec/qwen35moe.md §2.6) without numpy.
#include "core/error.h"
#include "gguf/reader.h"
#include "models/convert.h"
#include "models/safetensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace mox::models {

namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(MOX_TEST_DATA_DIR) / "goldens" / "qwen35moe";

// Builds a safetensors image from (name, header entry, data) triples: data is appended in order and
// data_offsets are filled in unless the entry already has them.
struct Entry {
    std::string name;
    nlohmann::json header;
    std::vector<uint8_t> data;
};

std::vector<uint8_t> image(const std::vector<Entry>& entries,
                           const nlohmann::json& extra = nlohmann::json::object()) {
    nlohmann::json h = extra;
    std::vector<uint8_t> blob;
    for (const Entry& e : entries) {
        nlohmann::json j = e.header;
        if (!j.contains("data_offsets")) j["data_offsets"] = {blob.size(), blob.size() + e.data.size()};
        h[e.name] = j;
        blob.insert(blob.end(), e.data.begin(), e.data.end());
    }
    const std::string text = h.dump();
    std::vector<uint8_t> out(8);
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
    out.insert(out.end(), text.begin(), text.end());
    out.insert(out.end(), blob.begin(), blob.end());
    return out;
}

std::vector<uint8_t> f32_bytes(std::initializer_list<float> v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.begin(), b.size());
    return b;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
    try {
        SafetensorsFile::parse(bytes, "t.safetensors");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

class TempDir {
  public:
    TempDir() {
        path_ = fs::temp_directory_path() /
                ("mox_convert_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    const fs::path& path() const { return path_; }

  private:
    static inline int counter_ = 0;
    fs::path path_;
};

void write_file(const fs::path& p, const std::vector<uint8_t>& bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_text(const fs::path& p, const std::string& s) {
    std::ofstream(p) << s;
}

nlohmann::json read_json(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Safetensors

TEST(Safetensors, ReadsTensorsAndMetadata) {
    const uint16_t f16_one_half[2] = {0x3C00, 0x3800};  // 1.0, 0.5
    const uint16_t bf16_vals[2] = {0x4040, 0xBF80};     // 3.0, -1.0
    std::vector<uint8_t> f16(4), bf16(4);
    std::memcpy(f16.data(), f16_one_half, 4);
    std::memcpy(bf16.data(), bf16_vals, 4);
    const auto bytes = image({{"b", {{"dtype", "F32"}, {"shape", {2, 2}}}, f32_bytes({1, 2, 3, 4})},
                              {"a", {{"dtype", "F16"}, {"shape", {2}}}, f16},
                              {"c", {{"dtype", "BF16"}, {"shape", {1, 2}}}, bf16}},
                             {{"__metadata__", {{"format", "pt"}}}});
    const SafetensorsFile f = SafetensorsFile::parse(bytes, "t.safetensors");
    ASSERT_EQ(f.tensors().size(), 3u);
    EXPECT_EQ(f.tensors()[0].name, "a");  // sorted by name
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const StTensor* b = f.find("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(b->n_elements(), 4);
    float out[4];
    st_read_f32(*b, 1, 3, out);
    EXPECT_EQ(out[0], 2.0f);
    EXPECT_EQ(out[2], 4.0f);
    st_read_f32(*f.find("a"), 0, 2, out);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 0.5f);
    st_read_f32(*f.find("c"), 0, 2, out);
    EXPECT_EQ(out[0], 3.0f);
    EXPECT_EQ(out[1], -1.0f);
    EXPECT_EQ(f.find("zz"), nullptr);
}

TEST(Safetensors, ScalarAndEmptyTensors) {
    const auto bytes = image({{"s", {{"dtype", "F32"}, {"shape", nlohmann::json::array()}}, f32_bytes({7})},
                              {"e", {{"dtype", "F32"}, {"shape", {0, 3}}}, {}}});
    const SafetensorsFile f = SafetensorsFile::parse(bytes, "t");
    EXPECT_EQ(f.find("s")->n_elements(), 1);
    EXPECT_EQ(f.find("e")->n_elements(), 0);
}

TEST(Safetensors, RejectsMalformedHeaders) {
    auto t = [](nlohmann::json header, std::vector<uint8_t> data) {
        return image({{"x", std::move(header), std::move(data)}});
    };
    const auto four = f32_bytes({1, 2, 3, 4});
    EXPECT_NE(error_of(t({{"dtype", "F7"}, {"shape", {4}}}, four)).find("unknown dtype 'F7'"),
              std::string::npos);
    EXPECT_NE(error_of(t({{"shape", {4}}}, four)).find("dtype"), std::string::npos);
    EXPECT_NE(error_of(t({{"dtype", "F32"}}, four)).find("shape"), std::string::npos);
    EXPECT_NE(error_of(t({{"dtype", "F32"}, {"shape", {-4}}}, four)).find("non-negative"), std::string::npos);
    EXPECT_NE(error_of(t({{"dtype", "F32"}, {"shape", {1.5}}}, four)).find("non-negative"),
              std::string::npos);
    EXPECT_NE(error_of(t({{"dtype", "F32"}, {"shape", {3}}}, four)).find("needs 12 bytes"),
              std::string::npos);
    EXPECT_NE(
        error_of(t({{"dtype", "F32"}, {"shape", {8}}, {"data_offsets", {0, 32}}}, four)).find("truncated"),
        std::string::npos);
    EXPECT_NE(error_of(t({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 0}}}, four)).find("end"),
              std::string::npos);
    EXPECT_NE(
        error_of(t({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0}}}, four)).find("data_offsets"),
        std::string::npos);
    // Element count overflow: 2^40 * 2^40.
    EXPECT_NE(error_of(t({{"dtype", "F32"}, {"shape", {uint64_t{1} << 40, uint64_t{1} << 40}}}, four))
                  .find("overflow"),
              std::string::npos);
    EXPECT_NE(error_of(t({{"dtype", "U8"}, {"shape", {uint64_t{1} << 63, 2}}}, four)).find("overflow"),
              std::string::npos);
    // Two tensors sharing bytes.
    const auto overlap = image({{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}, four},
                                {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}, {}}});
    EXPECT_NE(error_of(overlap).find("overlap"), std::string::npos);
    // Metadata must be strings.
    EXPECT_NE(error_of(image({}, {{"__metadata__", {{"k", 1}}}})).find("__metadata__"), std::string::npos);
}

TEST(Safetensors, RejectsBadFraming) {
    EXPECT_NE(error_of({1, 2, 3}).find("shorter than"), std::string::npos);
    std::vector<uint8_t> huge(8, 0);
    huge[4] = 1;  // 2^32-byte header
    EXPECT_NE(error_of(huge).find("limit"), std::string::npos);
    std::vector<uint8_t> longer = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    EXPECT_NE(error_of(longer).find("truncated"), std::string::npos);
    std::vector<uint8_t> not_json = {3, 0, 0, 0, 0, 0, 0, 0, '{', 'x', '}'};
    EXPECT_NE(error_of(not_json).find("not valid JSON"), std::string::npos);
    std::vector<uint8_t> not_object = {2, 0, 0, 0, 0, 0, 0, 0, '[', ']'};
    EXPECT_NE(error_of(not_object).find("object"), std::string::npos);
}

TEST(Safetensors, EveryTruncationIsAnErrorNotACrash) {
    const auto bytes = image({{"a", {{"dtype", "F32"}, {"shape", {2, 2}}}, f32_bytes({1, 2, 3, 4})},
                              {"b", {{"dtype", "BF16"}, {"shape", {2}}}, {0, 0x3f, 0, 0x40}}});
    for (size_t n = 0; n < bytes.size(); ++n) {
        const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
        EXPECT_FALSE(error_of(cut).empty()) << n;
    }
    EXPECT_TRUE(error_of(bytes).empty());
}

TEST(Safetensors, ReadingIntegerTensorAsFloatFails) {
    const auto bytes = image({{"i", {{"dtype", "I32"}, {"shape", {1}}}, {1, 0, 0, 0}}});
    const SafetensorsFile f = SafetensorsFile::parse(bytes, "t");
    float out;
    try {
        st_read_f32(*f.find("i"), 0, 1, &out);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("I32"), std::string::npos);
    }
}

TEST(SafetensorsCheckpoint, ShardsFromIndex) {
    TempDir d;
    write_file(d.path() / "s1.safetensors",
               image({{"x", {{"dtype", "F32"}, {"shape", {1}}}, f32_bytes({1})}}));
    write_file(d.path() / "s2.safetensors",
               image({{"y", {{"dtype", "F32"}, {"shape", {1}}}, f32_bytes({2})}}));
    write_text(d.path() / "model.safetensors.index.json",
               R"({"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
    const auto ck = SafetensorsCheckpoint::open_dir(d.path().string());
    EXPECT_EQ(ck.n_files(), 2u);
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"x", "y"}));
    float v = 0;
    st_read_f32(*ck.find("y"), 0, 1, &v);
    EXPECT_EQ(v, 2.0f);
}

TEST(SafetensorsCheckpoint, RejectsInconsistentIndexes) {
    auto expect_error = [](const fs::path& dir, const char* needle) {
        try {
            SafetensorsCheckpoint::open_dir(dir.string());
            ADD_FAILURE() << "expected an error containing " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    TempDir d;
    const auto x = image({{"x", {{"dtype", "F32"}, {"shape", {1}}}, f32_bytes({1})}});
    write_file(d.path() / "s1.safetensors", x);
    write_file(d.path() / "s2.safetensors", x);
    const fs::path index = d.path() / "model.safetensors.index.json";
    write_text(index, R"({"weight_map": {"x": "../s1.safetensors"}})");
    expect_error(d.path(), "not a plain file name");
    write_text(index, R"({"weight_map": {"x": "s1.safetensors", "z": "s2.safetensors"}})");
    expect_error(d.path(), "appears in both");  // x is in both shards
    write_text(index, R"({"weight_map": {"x": "s1.safetensors", "q": "s1.safetensors"}})");
    expect_error(d.path(), "lacks it");
    write_text(index, R"({"weight_map": {"x": "missing.safetensors"}})");
    expect_error(d.path(), "cannot open");
    write_text(index, R"([1, 2])");
    expect_error(d.path(), "weight_map");
    fs::remove(index);
    expect_error(d.path(), "no model.safetensors");
}

// ---------------------------------------------------------------------------------------------
// config.json

TEST(ConvertConfig, GoldenConfigGivesSpecHparams) {
    const nlohmann::json c = read_json(kGolden / "hf" / "config.json");
    const HfTextConfig h = hparams_from_hf_config(c);
    const Hparams& hp = h.hparams;
    EXPECT_EQ(hp.n_layer, c["num_hidden_layers"].get<int64_t>());
    EXPECT_EQ(hp.n_embd, c["hidden_size"].get<int64_t>());
    EXPECT_EQ(hp.ssm_inner,
              c["linear_num_value_heads"].get<int64_t>() * c["linear_value_head_dim"].get<int64_t>());
    // rope.dimension_count = int(head_dim * partial_rotary_factor) (spec §2.6 item 7)
    EXPECT_EQ(hp.n_rot, static_cast<int64_t>(c["head_dim"].get<double>() *
                                             c["rope_parameters"]["partial_rotary_factor"].get<double>()));
    EXPECT_EQ(hp.rope_theta, c["rope_parameters"]["rope_theta"].get<double>());
    EXPECT_EQ(hp.rope_sections, (std::vector<int32_t>{3, 3, 2, 0}));
    EXPECT_EQ(hp.full_attn_interval, 4);
    EXPECT_EQ(hp.n_nextn, 0);
    EXPECT_FALSE(h.tie_word_embeddings);

    // The multimodal wrapper's nested text_config gives the same numbers.
    const HfTextConfig mm =
        hparams_from_hf_config(read_json(kGolden / "hf_multimodal_config.json"));
    EXPECT_EQ(mm.hparams.n_layer, hp.n_layer);
    EXPECT_EQ(mm.hparams.n_rot, hp.n_rot);
    EXPECT_EQ(mm.hparams.ssm_v_heads, hp.ssm_v_heads);
    EXPECT_EQ(mm.hparams.rope_sections, hp.rope_sections);
}

TEST(ConvertConfig, Qwen3MoeGoldenConfigGivesSpecHparams) {
    const nlohmann::json c = read_json(kGolden.parent_path() / "qwen3moe" / "hf" / "config.json");
    const Hparams hp = hparams_from_hf_config(c).hparams;
    EXPECT_EQ(hp.arch, Arch::qwen3moe);
    EXPECT_EQ(hp.n_layer, 4);
    EXPECT_EQ(hp.n_attention_layers(), 4);  // no DeltaNet layers
    EXPECT_EQ(hp.n_head, 4);
    EXPECT_EQ(hp.n_head_kv, 2);
    EXPECT_EQ(hp.head_dim_k, 64);  // head_dim, not hidden_size / heads
    EXPECT_EQ(hp.n_rot, 64);       // rotary over the whole head
    EXPECT_EQ(hp.q_proj_rows(), 4 * 64);
    EXPECT_EQ(hp.rope_theta, 1e6);
    EXPECT_EQ(hp.n_expert, 16);  // the config names it num_local_experts
    EXPECT_EQ(hp.n_expert_used, 4);
    EXPECT_EQ(hp.n_ff_exp, 32);
    EXPECT_FALSE(hp.has_shared_expert());
    EXPECT_EQ(hp.recurrent_state_bytes(), 0u);
    EXPECT_FALSE(hparams_from_hf_config(c).tie_word_embeddings);

    auto error = [&](auto&& edit) {
        nlohmann::json e = c;
        edit(e);
        try {
            hparams_from_hf_config(e);
        } catch (const Error& err) {
            return std::string(err.what());
        }
        return std::string();
    };
    EXPECT_NE(error([](auto& e) { e["norm_topk_prob"] = false; }).find("norm_topk_prob"), std::string::npos);
    EXPECT_NE(error([](auto& e) { e["mlp_only_layers"] = {1}; }).find("mlp_only_layers"), std::string::npos);
    EXPECT_NE(error([](auto& e) { e["decoder_sparse_step"] = 2; }).find("decoder_sparse_step"), std::string::npos);
    EXPECT_NE(error([](auto& e) { e["rope_parameters"]["rope_type"] = "yarn"; }).find("yarn"), std::string::npos);
    EXPECT_NE(error([](auto& e) { e.erase("num_local_experts"); }).find("num_local_experts"), std::string::npos);
}

TEST(ConvertConfig, RejectsWhatGgufCannotHold) {
    const nlohmann::json base = read_json(kGolden / "hf" / "config.json");
    auto error = [&](auto&& edit) {
        nlohmann::json c = base;
        edit(c);
        try {
            hparams_from_hf_config(c);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(error([](auto& c) { c["model_type"] = "llama4_text"; }).find("llama4_text"), std::string::npos);
    EXPECT_NE(error([](auto& c) { c.erase("hidden_size"); }).find("hidden_size"), std::string::npos);
    EXPECT_NE(error([](auto& c) { c["num_experts"] = -3; }).find("num_experts"), std::string::npos);
    EXPECT_NE(error([](auto& c) { c["linear_key_head_dim"] = 16; }).find("linear_key_head_dim"),
              std::string::npos);
    EXPECT_NE(error([](auto& c) { c["layer_types"][1] = "full_attention"; }).find("layer_types"),
              std::string::npos);
    EXPECT_NE(error([](auto& c) { c["rope_parameters"]["rope_type"] = "yarn"; }).find("yarn"),
              std::string::npos);
    EXPECT_NE(error([](auto& c) { c["num_experts_per_tok"] = 17; }).find("expert_used_count"),
              std::string::npos);
    EXPECT_TRUE(error([](auto& c) { c.erase("layer_types"); }).empty());  // full_attention_interval default 4
}

// ---------------------------------------------------------------------------------------------
// The golden checkpoint, converted to F32 and read back

class ConvertGolden : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new TempDir();
        ConvertOptions o;
        o.hf_dir = (kGolden / "hf").string();
        o.output = (dir_->path() / "golden-f32.gguf").string();
        o.mix = QuantMix::f32;
        o.threads = 2;
        summary_ = convert_hf(o);
    }
    static void TearDownTestSuite() {
        delete dir_;
        dir_ = nullptr;
    }
    static gguf::File open() { return gguf::File::open((dir_->path() / "golden-f32.gguf").string()); }
    static std::vector<float> values(const gguf::TensorInfo& t) {
        EXPECT_EQ(t.type, quant::TypeId::f32);
        std::vector<float> v(static_cast<size_t>(t.n_elements()));
        std::memcpy(v.data(), t.data, v.size() * sizeof(float));
        return v;
    }
    static inline TempDir* dir_ = nullptr;
    static inline ConvertSummary summary_;
};

TEST_F(ConvertGolden, MatchesTransformGolden) {
    const gguf::File f = open();
    const nlohmann::json golden = read_json(kGolden / "transforms.json")["tensors"];
    ASSERT_GT(golden.size(), 30u);
    for (const auto& [name, entry] : golden.items()) {
        SCOPED_TRACE(name);
        const gguf::TensorInfo* t = f.find_tensor(name);
        ASSERT_NE(t, nullptr);
        std::vector<int64_t> ne(t->ne.begin(), t->ne.begin() + t->n_dims);
        EXPECT_EQ(ne, entry["ne"].get<std::vector<int64_t>>());
        const std::vector<float> v = values(*t);
        const std::vector<double> sums = entry["row_checksums"].get<std::vector<double>>();
        const int64_t ne0 = t->ne[0];
        // Exact copies match to rounding of the sum; -exp(A_log) is rounded to fp32 in the file.
        const double rel = name.ends_with("ssm_a") ? 1e-6 : 1e-9;
        ASSERT_EQ(static_cast<int64_t>(sums.size()) * ne0, t->n_elements());
        for (size_t r = 0; r < sums.size(); ++r) {
            double s = 0;
            for (int64_t c = 0; c < ne0; ++c)
                s += static_cast<double>(v[r * static_cast<size_t>(ne0) + static_cast<size_t>(c)]) *
                     static_cast<double>(c + 1);
            EXPECT_NEAR(s, sums[r], rel * std::max(1.0, std::abs(sums[r]))) << "row " << r;
        }
        if (entry.contains("values")) {
            const std::vector<double> want = entry["values"].get<std::vector<double>>();
            for (size_t i = 0; i < want.size(); ++i)
                EXPECT_NEAR(v[i], want[i], 2e-7 * std::abs(want[i])) << i;
        }
    }
}

TEST_F(ConvertGolden, SsmAIsMinusExpALogInTiledHeadOrder) {
    const gguf::File f = open();
    const auto ck = SafetensorsCheckpoint::open_dir((kGolden / "hf").string());
    const Hparams& hp = summary_.hparams;
    const int64_t hk = hp.ssm_k_heads, hv = hp.ssm_v_heads;
    for (int64_t layer = 0; layer < hp.n_layer; ++layer) {
        if (!hp.is_recurrent(layer)) continue;
        const StTensor* a_log = ck.find(fmt::format("model.layers.{}.linear_attn.A_log", layer));
        ASSERT_NE(a_log, nullptr);
        std::vector<float> hf(static_cast<size_t>(hv));
        st_read_f32(*a_log, 0, hv, hf.data());
        const std::vector<float> ssm_a = values(*f.find_tensor(fmt::format("blk.{}.ssm_a", layer)));
        for (int64_t h = 0; h < hv; ++h) {
            const int64_t hf_head = (h % hk) * (hv / hk) + h / hk;
            EXPECT_NEAR(ssm_a[static_cast<size_t>(h)],
                        -std::exp(static_cast<double>(hf[static_cast<size_t>(hf_head)])),
                        2e-7 * std::exp(static_cast<double>(hf[static_cast<size_t>(hf_head)])));
        }
    }
}

TEST_F(ConvertGolden, WritesEveryTensorAndTheLlamaCppKeys) {
    const gguf::File f = open();
    EXPECT_EQ(f.tensors().size(), model_tensors(summary_.hparams).size());
    EXPECT_EQ(f.get_string("general.architecture"), "qwen35moe");
    EXPECT_EQ(f.get_uint("general.file_type"), 0u);
    EXPECT_EQ(f.get_uint("qwen35moe.ssm.group_count"), 2u);
    EXPECT_EQ(f.get_uint("qwen35moe.rope.dimension_count"), 16u);
    // Norms carry the +1, the gated norm does not: spot-check against the HF tensors.
    const auto ck = SafetensorsCheckpoint::open_dir((kGolden / "hf").string());
    float w_hf[4], gated_hf[4];
    st_read_f32(*ck.find("model.norm.weight"), 0, 4, w_hf);
    st_read_f32(*ck.find("model.layers.0.linear_attn.norm.weight"), 0, 4, gated_hf);
    const std::vector<float> out_norm = values(*f.find_tensor("output_norm.weight"));
    const std::vector<float> ssm_norm = values(*f.find_tensor("blk.0.ssm_norm.weight"));
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(out_norm[static_cast<size_t>(i)], 1.0f + w_hf[i]);
        EXPECT_EQ(ssm_norm[static_cast<size_t>(i)], gated_hf[i]);
    }
}

TEST(Convert, FailureLeavesNoOutput) {
    TempDir d;
    fs::copy(kGolden / "hf", d.path() / "hf");
    write_text(d.path() / "hf" / "tokenizer.json", "{}");
    ConvertOptions o;
    o.hf_dir = (d.path() / "hf").string();
    o.output = (d.path() / "out.gguf").string();
    EXPECT_THROW(convert_hf(o), Error);
    EXPECT_FALSE(fs::exists(o.output));
}

}  // namespace mox::models
