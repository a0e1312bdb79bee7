#include "models/synth.h"

#include "core/error.h"
#include "core/parallel.h"
#include "gguf/writer.h"
#include "models/synth_vocab.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <vector>

namespace mox::models {

using quant::TypeId;

// ---------------------------------------------------------------------------------------------
// Type recipes

QuantMix quant_mix_from_name(const std::string& name) {
    std::string n;
    for (char c : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (QuantMix m : {QuantMix::q4_k_m, QuantMix::q8_0, QuantMix::q6_k, QuantMix::iq4_xs, QuantMix::bf16,
                       QuantMix::f16, QuantMix::f32})
        if (n == quant_mix_name(m)) return m;
    fail("unknown quant mix '{}' (expected q4_k_m, q8_0, q6_k, iq4_xs, bf16, f16 or f32)", name);
}

const char* quant_mix_name(QuantMix mix) {
    switch (mix) {
        case QuantMix::q4_k_m:
            return "q4_k_m";
        case QuantMix::q8_0:
            return "q8_0";
        case QuantMix::q6_k:
            return "q6_k";
        case QuantMix::iq4_xs:
            return "iq4_xs";
        case QuantMix::bf16:
            return "bf16";
        case QuantMix::f16:
            return "f16";
        case QuantMix::f32:
            return "f32";
    }
    return "?";
}

uint32_t llama_ftype_of(QuantMix mix) {
    switch (mix) {
        case QuantMix::f32:
            return 0;
        case QuantMix::f16:
            return 1;
        case QuantMix::q8_0:
            return 7;
        case QuantMix::q4_k_m:
            return 15;
        case QuantMix::q6_k:
            return 18;
        case QuantMix::iq4_xs:
            return 30;
        case QuantMix::bf16:
            return 32;
    }
    return 0;
}

namespace {

bool ends_with(const std::string& s, const char* suffix) {
    return s.ends_with(suffix);
}
bool has(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}

// llama-quantize's "more bits" layer set: first and last eighth, and every third layer between.
bool use_more_bits(int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// Row-length fallback when ne0 is not a whole number of blocks (current llama-quantize table).
TypeId fallback_type(TypeId t, int64_t ne0) {
    auto fits = [&](TypeId x) { return ne0 % quant::traits(x).block_elems == 0; };
    if (fits(t)) return t;
    TypeId f;
    switch (t) {
        case TypeId::q4_k:
            f = TypeId::q5_0;
            break;
        case TypeId::q5_k:
            f = TypeId::q5_1;
            break;
        case TypeId::q6_k:
            f = TypeId::q8_0;
            break;
        case TypeId::iq4_xs:
            f = TypeId::iq4_nl;
            break;
        case TypeId::q2_k:
        case TypeId::q3_k:
            f = TypeId::q4_0;
            break;
        default:
            f = TypeId::f16;
    }
    return fits(f) ? f : TypeId::f16;
}

}  // namespace

quant::TypeId choose_tensor_type(const TensorSpec& spec, QuantMix mix, const Hparams& hp) {
    const std::string& n = spec.name;
    // Never quantized: 1-D tensors, non-".weight" tensors, norms, the routers, the conv kernel.
    if (!spec.is_2d_weight() || !ends_with(n, "weight") || ends_with(n, "_norm.weight") ||
        has(n, "ffn_gate_inp") || has(n, "ssm_conv1d"))
        return TypeId::f32;
    TypeId t = TypeId::f32;
    switch (mix) {
        case QuantMix::f32:
            return TypeId::f32;
        case QuantMix::f16:
            return TypeId::f16;
        case QuantMix::bf16:
            return TypeId::bf16;
        case QuantMix::q8_0:
            t = TypeId::q8_0;
            break;
        case QuantMix::q6_k:
            t = TypeId::q6_k;
            break;
        case QuantMix::q4_k_m: {
            t = TypeId::q4_k;
            // attn_v-like tensors (attn_v and the DeltaNet attn_qkv) follow a counter over themselves;
            // with exactly one per layer in layer order, the counter equals the layer index.
            if (n == "output.weight")
                t = TypeId::q6_k;
            else if ((has(n, "attn_v.weight") || has(n, "attn_qkv.weight")) &&
                     use_more_bits(spec.layer, hp.n_layer))
                t = TypeId::q6_k;
            else if (has(n, "ffn_down") && use_more_bits(spec.layer, hp.n_layer))
                t = TypeId::q6_k;
            // 8-expert models (Mixtral): llama.cpp keeps attn_v and attn_k at Q8_0, attn_output at Q5_K.
            if (hp.n_expert == 8 && (has(n, "attn_v.weight") || has(n, "attn_k.weight"))) t = TypeId::q8_0;
            if (hp.n_expert == 8 && has(n, "attn_output.weight")) t = TypeId::q5_k;
            break;
        }
        case QuantMix::iq4_xs: {
            t = TypeId::iq4_xs;
            const bool gqa4 = hp.n_head / hp.n_head_kv >= 4;
            if (n == "output.weight")
                t = TypeId::q6_k;
            else if ((has(n, "attn_v.weight") || has(n, "attn_qkv.weight")) && gqa4)
                t = TypeId::q5_k;
            else if (has(n, "ffn_down") && spec.layer >= 0 && spec.layer < hp.n_layer / 8)
                t = TypeId::q5_k;
            break;
        }
    }
    return fallback_type(t, spec.ne[0]);
}

// ---------------------------------------------------------------------------------------------
// Presets

namespace {

// The trunk every *-tiny preset shares: rows a multiple of 256, so the K-quant recipe applies
// unchanged, and heads of 64, a width the CUDA attention kernels have.
void toy_trunk(Hparams& hp, int64_t n_layer, int64_t n_rot) {
    hp.n_layer = n_layer;
    hp.n_ctx_train = 4096;
    hp.n_embd = 256;
    hp.n_vocab = 2048;
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim_k = hp.head_dim_v = 64;
    hp.n_rot = n_rot;
}

// The DeltaNet of the Qwen3.5 family's tiny presets (8 layers at the 3:1 pattern).
void toy_deltanet(Hparams& hp) {
    hp.ssm_k_heads = 2;
    hp.ssm_v_heads = 4;
    hp.ssm_state = 64;
    hp.ssm_inner = 256;
    hp.rope_sections = {4, 2, 2, 0};
}

}  // namespace

Hparams synth_preset(const std::string& name) {
    Hparams hp;  // defaults are Qwen3.6-35B-A3B (shared/spec/qwen35moe.md §1)
    if (name == "qwen3.6-35b-a3b" || name == "qwen3.5-35b-a3b") return hp;
    if (name == "tiny") {
        // Same structure at toy size.
        toy_trunk(hp, 8, 16);
        toy_deltanet(hp);
        hp.n_expert = 16;
        hp.n_expert_used = 4;
        hp.n_ff_exp = 256;
        hp.n_ff_shexp = 256;
        return hp;
    }
    if (name == "qwen3.6-27b" || name == "qwen35-tiny") {
        // Dense Qwen3.5/3.6 (shared/spec/archs.md §3.1): Qwen3.6-35B-A3B's trunk with a SwiGLU MLP.
        hp = hparams_for(Arch::qwen35);
        if (name == "qwen3.6-27b") {
            hp.n_layer = 64;
            hp.n_embd = 5120;
            hp.n_ff = 17408;
            hp.n_head = 24;
            hp.n_head_kv = 4;
            hp.ssm_k_heads = 16;
            hp.ssm_v_heads = 48;
            hp.ssm_inner = 6144;
        } else {
            toy_trunk(hp, 8, 16);
            toy_deltanet(hp);
            hp.n_ff = 512;
        }
        return hp;
    }
    if (name == "qwen3-30b-a3b" || name == "qwen3-235b-a22b" || name == "qwen3moe-tiny") {
        // Qwen3-MoE (shared/spec/archs.md §2.1): attention in every layer, no shared expert.
        hp = hparams_for(Arch::qwen3moe);
        hp.n_ff_shexp = 0;
        hp.n_ctx_train = 40960;
        hp.n_vocab = 151936;
        hp.n_head_kv = 4;
        hp.head_dim_k = hp.head_dim_v = hp.n_rot = 128;
        hp.rope_theta = 1e6;
        hp.n_expert = 128;
        hp.n_expert_used = 8;
        if (name == "qwen3-30b-a3b") {
            hp.n_layer = 48;
            hp.n_embd = 2048;
            hp.n_head = 32;
            hp.n_ff_exp = 768;
        } else if (name == "qwen3-235b-a22b") {
            hp.n_layer = 94;
            hp.n_embd = 4096;
            hp.n_head = 64;
            hp.n_ff_exp = 1536;
        } else {
            toy_trunk(hp, 4, 64);
            hp.n_expert = 16;
            hp.n_expert_used = 4;
            hp.n_ff_exp = 256;
        }
        return hp;
    }
    if (name == "mixtral-8x7b" || name == "mixtral-tiny") {
        // Mixtral (shared/spec/archs.md §4.1): llama with 8 experts top-2, no q/k norms, NORM rotary.
        hp = hparams_for(Arch::llama);
        hp.n_ff_shexp = 0;
        hp.n_expert = 8;
        hp.n_expert_used = 2;
        hp.rope_theta = 1e6;
        hp.rms_eps = 1e-5;
        if (name == "mixtral-8x7b") {
            hp.n_layer = 32;
            hp.n_ctx_train = 32768;
            hp.n_embd = 4096;
            hp.n_vocab = 32000;
            hp.n_head = 32;
            hp.n_head_kv = 8;
            hp.head_dim_k = hp.head_dim_v = hp.n_rot = 128;
            hp.n_ff_exp = 14336;
        } else {
            toy_trunk(hp, 4, 64);
            hp.n_ff_exp = 512;
        }
        return hp;
    }
    if (name == "phi-3.5-moe" || name == "phimoe-tiny") {
        // Phi-3.5-MoE (shared/spec/archs.md §5.1): LayerNorm, biases, longrope factors (all one
        // here), 16 experts top-2 by sparsemixer; cos/sin scaled by transformers' mscale 1.243163.
        hp = hparams_for(Arch::phimoe);
        hp.n_ff_shexp = 0;
        hp.n_expert = 16;
        hp.n_expert_used = 2;
        hp.rope_theta = 1e4;
        hp.rms_eps = 1e-5;
        hp.rope_attn_factor = 1.243163121016122;
        if (name == "phi-3.5-moe") {
            hp.n_layer = 32;
            hp.n_ctx_train = 131072;
            hp.n_ctx_orig = 4096;
            hp.n_embd = 4096;
            hp.n_vocab = 32064;
            hp.n_head = 32;
            hp.n_head_kv = 8;
            hp.head_dim_k = hp.head_dim_v = hp.n_rot = 128;
            hp.n_ff_exp = 6400;
        } else {
            toy_trunk(hp, 4, 64);
            hp.n_ctx_orig = 1024;
            hp.n_ff_exp = 256;
        }
        return hp;
    }
    fail(
        "unknown preset '{}' (expected qwen3.6-35b-a3b, tiny, qwen3.6-27b, qwen35-tiny, qwen3-30b-a3b, "
        "qwen3-235b-a22b, qwen3moe-tiny, mixtral-8x7b, mixtral-tiny, phi-3.5-moe or phimoe-tiny)",
        name);
}

// ---------------------------------------------------------------------------------------------
// Random values

namespace {

// xoshiro256** seeded through splitmix64: fast, good enough for weights, and the stream depends
// only on the seed, never on which thread draws it.
class Rng {
public:
    explicit Rng(uint64_t seed) {
        for (auto& word : s_) {
            seed += 0x9E3779B97F4A7C15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            word = z ^ (z >> 31);
        }
    }
    uint64_t next() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
    // Standard normal pairs by Box-Muller.
    void normals(float* out, int64_t n) {
        for (int64_t i = 0; i < n; i += 2) {
            const double u1 = 1.0 - uniform(), u2 = uniform();
            const double r = std::sqrt(-2.0 * std::log(u1));
            out[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
            if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
        }
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

uint64_t mix_seed(uint64_t a, uint64_t b) {
    return a * 0x100000001B3ull ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
}

uint64_t hash_name(const std::string& s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
    return h;
}

// How a tensor's values are drawn: value = offset + scale * N(0,1), plus the structured terms of
// the embedding (a shared direction) and the router (popularity bias along that direction).
struct ValueRecipe {
    float offset = 0;
    float scale = 1;
    bool log_uniform_negative = false;  // ssm_a = -exp(A_log), A_log ~ log U(1, 16) as HF initialises
};

ValueRecipe recipe_for(const TensorSpec& spec) {
    const std::string& n = spec.name;
    if (ends_with(n, "norm.weight")) return {1.0f, 0.1f};  // every norm incl. the gated ssm_norm
    if (ends_with(n, "ssm_a")) return {0, 0, true};
    if (ends_with(n, "ssm_dt.bias")) return {1.0f, 0.1f};
    if (has(n, "rope_factors_")) return {1.0f, 0.0f};  // unscaled rotary
    if (ends_with(n, ".bias")) return {0, 0.02f};      // projection and LayerNorm biases
    if (has(n, "ssm_conv1d")) return {0, 1.0f / std::sqrt(static_cast<float>(spec.ne[0]))};
    if (n == "token_embd.weight") return {0, 1.0f};
    // Projections: unit-variance outputs for unit-variance inputs.
    return {0, 1.0f / std::sqrt(static_cast<float>(spec.ne[0]))};
}

// Draws rows [row0, row0 + n_rows) of a tensor as floats.
struct RowGenerator {
    const TensorSpec* spec;
    ValueRecipe recipe;
    uint64_t seed;
    const std::vector<float>* shared_direction;    // unit vector of n_embd, or null
    float direction_weight = 0;                    // embedding rows: + weight * direction
    const std::vector<float>* row_bias = nullptr;  // router: + bias[row] * direction

    void generate(int64_t row0, int64_t n_rows, int64_t chunk_index, float* out) const {
        const int64_t ne0 = spec->ne[0];
        Rng rng(mix_seed(seed, static_cast<uint64_t>(chunk_index)));
        if (recipe.log_uniform_negative) {
            for (int64_t i = 0; i < n_rows * ne0; ++i)
                out[i] = -static_cast<float>(std::exp(std::log(1.0) + rng.uniform() * std::log(16.0)));
            return;
        }
        rng.normals(out, n_rows * ne0);
        for (int64_t i = 0; i < n_rows * ne0; ++i) out[i] = recipe.offset + recipe.scale * out[i];
        if (!shared_direction) return;
        for (int64_t r = 0; r < n_rows; ++r) {
            const float w =
                row_bias
                    ? (*row_bias)[static_cast<size_t>((row0 + r) % static_cast<int64_t>(row_bias->size()))]
                    : direction_weight;
            for (int64_t c = 0; c < ne0; ++c)
                out[r * ne0 + c] += w * (*shared_direction)[static_cast<size_t>(c)];
        }
    }
};

// Large quantized tensors (expert stacks, lm head) are assembled from a pool of independently
// quantized Gaussian blocks: each block of the tensor is a uniformly random pick from the pool.
// Values keep the distribution of quantized N(0, scale) weights while the file is written at copy
// speed instead of running the reference quantizer over 35 B weights.
class BlockPool {
public:
    BlockPool(TypeId type, float scale, uint64_t seed) : type_(type) {
        const quant::TypeTraits& t = quant::traits(type);
        block_bytes_ = t.block_bytes;
        const int64_t n = kBlocks * t.block_elems;
        std::vector<float> values(static_cast<size_t>(n));
        Rng rng(seed);
        rng.normals(values.data(), n);
        for (float& v : values) v *= scale;
        bytes_.resize(static_cast<size_t>(kBlocks) * block_bytes_);
        quantize(type, values.data(), bytes_.data(), n);
    }
    void fill(uint8_t* out, int64_t n_blocks, Rng& rng) const {
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint64_t pick = rng.next() % kBlocks;
            std::copy_n(bytes_.data() + pick * block_bytes_, block_bytes_,
                        out + b * static_cast<int64_t>(block_bytes_));
        }
    }
    static void quantize(TypeId type, const float* src, uint8_t* dst, int64_t n) {
        const quant::TypeTraits& t = quant::traits(type);
        if (type == TypeId::f32) {
            std::copy_n(reinterpret_cast<const uint8_t*>(src), n * 4, dst);
            return;
        }
        if (!t.quantize) fail("no reference quantizer for type {}", t.name);
        t.quantize(src, dst, n);
    }

private:
    static constexpr int64_t kBlocks = 16384;
    TypeId type_;
    size_t block_bytes_ = 0;
    std::vector<uint8_t> bytes_;
};

constexpr int64_t kDirectLimit = int64_t{1} << 26;    // elements; larger quantized tensors use a pool
constexpr int64_t kChunkElements = int64_t{1} << 21;  // per work item

std::vector<float> unit_direction(int64_t n, uint64_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    Rng rng(seed);
    rng.normals(v.data(), n);
    double norm = 0;
    for (float x : v) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    for (float& x : v) x = static_cast<float>(x / norm);
    return v;
}

}  // namespace

void write_synthetic_model(const std::string& path, const SynthOptions& o,
                           const std::function<void(const SynthProgress&)>& on_progress) {
    const Hparams& hp = o.hparams;
    hp.validate();
    const std::vector<TensorSpec> specs = model_tensors(hp);

    gguf::Writer w(path);
    w.set("general.name", gguf::Value::string(o.name));
    w.set("general.type", gguf::Value::string("model"));
    write_hparams(w, hp);
    w.set("general.file_type", gguf::Value::u32(llama_ftype_of(o.mix)));
    w.set("general.quantization_version", gguf::Value::u32(2));
    w.set("mox.synthetic.seed", gguf::Value::u64(o.seed));
    w.set("mox.synthetic.router_skew", gguf::Value::f32(static_cast<float>(o.router_skew)));
    if (o.vocab_path.empty())
        write_synth_vocab(w, hp.n_vocab);
    else
        write_vocab_from_file(w, o.vocab_path, hp.n_vocab, o.chat_template);

    std::vector<TypeId> types;
    for (const TensorSpec& s : specs) {
        types.push_back(choose_tensor_type(s, o.mix, hp));
        w.add_tensor(s.name, s.ne, types.back());
    }
    w.write_header();

    SynthProgress progress;
    for (size_t i = 0; i < specs.size(); ++i) progress.bytes_total += w.tensor_bytes(i);

    // The embedding shares one direction (as trained embeddings share a mean component); routers
    // get a per-expert bias along it, so expert popularity follows exp(-skew * ln(rank)) ~ rank^-skew.
    const std::vector<float> direction = unit_direction(hp.n_embd, mix_seed(o.seed, 1));
    const float embd_direction_weight = std::sqrt(static_cast<float>(hp.n_embd));
    // After RMSNorm the hidden state's component along the direction is about sqrt(n_embd / 2).
    const double direction_projection = std::sqrt(static_cast<double>(hp.n_embd) / 2.0);

    std::map<std::pair<TypeId, float>, std::unique_ptr<BlockPool>> pools;
    const int threads = o.threads > 0 ? o.threads : hardware_threads();

    for (size_t ti = 0; ti < specs.size(); ++ti) {
        const TensorSpec& spec = specs[ti];
        const TypeId type = types[ti];
        const quant::TypeTraits& tt = quant::traits(type);
        const int64_t ne0 = spec.ne[0];
        int64_t n_rows = 1;
        for (size_t d = 1; d < spec.ne.size(); ++d) n_rows *= spec.ne[d];
        const size_t row_bytes = quant::row_bytes(type, ne0);
        const uint64_t tensor_seed = mix_seed(o.seed, hash_name(spec.name));

        RowGenerator gen{&spec, recipe_for(spec), tensor_seed, nullptr};
        std::vector<float> router_bias;
        if (spec.name == "token_embd.weight") {
            gen.shared_direction = &direction;
            gen.direction_weight = embd_direction_weight;
        } else if (o.router_skew > 0 && has(spec.name, "ffn_gate_inp.weight")) {
            // Popularity rank of each expert: a per-layer random permutation.
            std::vector<int64_t> rank(static_cast<size_t>(hp.n_expert));
            std::iota(rank.begin(), rank.end(), 0);
            Rng prng(mix_seed(tensor_seed, 7));
            for (size_t i = rank.size(); i > 1; --i) std::swap(rank[i - 1], rank[prng.next() % i]);
            router_bias.resize(rank.size());
            for (size_t e = 0; e < rank.size(); ++e)
                router_bias[e] = static_cast<float>(
                    -o.router_skew * std::log(static_cast<double>(rank[e] + 1)) / direction_projection);
            gen.shared_direction = &direction;
            gen.row_bias = &router_bias;
        }

        const bool pooled =
            tt.block_elems > 1 && spec.name != "token_embd.weight" && n_rows * ne0 > kDirectLimit;
        const BlockPool* pool = nullptr;
        if (pooled) {
            auto key = std::make_pair(type, gen.recipe.scale);
            auto& slot = pools[key];
            if (!slot)
                slot = std::make_unique<BlockPool>(
                    type, gen.recipe.scale,
                    mix_seed(o.seed, static_cast<uint64_t>(type) * 1000003u +
                                         hash_name(std::to_string(gen.recipe.scale))));
            pool = slot.get();
        }

        const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElements / ne0);
        const int64_t n_chunks = (n_rows + rows_per_chunk - 1) / rows_per_chunk;
        // Work in waves: chunks of a wave are generated in parallel, then written in order.
        const int64_t wave = std::max(2 * threads, 1);
        std::vector<std::vector<uint8_t>> out(static_cast<size_t>(wave));
        for (int64_t c0 = 0; c0 < n_chunks; c0 += wave) {
            const int64_t in_wave = std::min(wave, n_chunks - c0);
            parallel_for(in_wave, threads, [&](int64_t k) {
                const int64_t chunk = c0 + k;
                const int64_t row0 = chunk * rows_per_chunk;
                const int64_t rows = std::min(rows_per_chunk, n_rows - row0);
                std::vector<uint8_t>& buf = out[static_cast<size_t>(k)];
                buf.resize(static_cast<size_t>(rows) * row_bytes);
                if (pool) {
                    Rng rng(mix_seed(tensor_seed, static_cast<uint64_t>(chunk)));
                    pool->fill(buf.data(), rows * ne0 / tt.block_elems, rng);
                    return;
                }
                std::vector<float> values(static_cast<size_t>(rows * ne0));
                gen.generate(row0, rows, chunk, values.data());
                BlockPool::quantize(type, values.data(), buf.data(), rows * ne0);
            });
            for (int64_t k = 0; k < in_wave; ++k) {
                w.write_data(out[static_cast<size_t>(k)]);
                progress.bytes_done += out[static_cast<size_t>(k)].size();
            }
            if (on_progress) on_progress(progress);
        }
    }
    w.finish();
}

}  // namespace mox::models
