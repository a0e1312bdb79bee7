#include "plan/speed.h"

#include "core/error.h"
#include "quant/types.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace mox::plan {

namespace {

constexpr double kGiga = 1e9;   // GB/s and GFLOP/s
constexpr double kTera = 1e12;  // TFLOP/s
// The micro-batch of GpuProfile::moe_prefill_tflops (CalibrateOptions::gpu_matmul_tokens' default).
constexpr double kMoePrefillTokens = 512;

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Profile maps are keyed by type name; calibrate may spell them "q4_K" or "Q4_K": compare without case.
std::optional<double> lookup(const std::map<std::string, double>& m, quant::TypeId t) {
    const std::string want = lower(quant::type_name(t));
    for (const auto& [k, v] : m)
        if (lower(k) == want && v > 0) return v;
    return std::nullopt;
}

double best_of(const std::map<std::string, double>& m) {
    double best = 0;
    for (const auto& [k, v] : m) best = std::max(best, v);
    return best;
}

// Rates in bytes/s or flop/s. A rate the placement needs and the profile lacks is recorded, so one
// error can name every missing type at the end of the analysis instead of the first one.
class Rates {
public:
    Rates(const HardwareProfile& p, std::vector<std::string>& notes) : p_(p), notes_(notes) {}

    bool has_gpu() const { return p_.gpu.has_value(); }
    const GpuProfile& gpu() const { return *p_.gpu; }

    double gpu_matvec(quant::TypeId t) {
        return need(has_gpu() ? &gpu().matvec_gbps : nullptr, t, "GPU matvec", kGiga);
    }
    double gpu_matmul(quant::TypeId t) {
        return need(has_gpu() ? &gpu().matmul_tflops : nullptr, t, "GPU matmul", kTera);
    }
    double cpu_expert(quant::TypeId t) { return need(&p_.cpu.expert_gbps, t, "CPU expert", kGiga); }
    double cpu_flops(quant::TypeId t) { return need(&p_.cpu.expert_gflops, t, "CPU expert GFLOP/s", kGiga); }

    // Vectors (norms, gates, conv kernels) and the DeltaNet state: the best rate the GPU streams
    // anything at (they are small; no type-specific kernel reads them).
    double gpu_stream() {
        const double b = has_gpu() ? best_of(gpu().matvec_gbps) : 0;
        if (b <= 0) missing_["GPU matvec"].insert("any");
        return b > 0 ? b * kGiga : 1;
    }
    // The KV cache is read by the attention kernel, not a matvec; its block type's matvec rate is
    // the closest measurement (dequantizing q8_0/q4_0 costs what it costs in a matvec).
    double gpu_kv(quant::TypeId t) {
        if (has_gpu())
            if (auto r = lookup(gpu().matvec_gbps, t)) return *r * kGiga;
        note(fmt::format("KV cache type {} read at the best measured GPU rate (no matvec rate for it)",
                         quant::type_name(t)));
        return gpu_stream();
    }
    // Attention scores and weighted sums at prefill run in fp16 on the tensor cores.
    double gpu_attention_flops() {
        if (auto r = has_gpu() ? lookup(gpu().matmul_tflops, quant::TypeId::f16) : std::nullopt)
            return *r * kTera;
        const double b = has_gpu() ? best_of(gpu().matmul_tflops) : 0;
        if (b <= 0) {
            missing_["GPU matmul"].insert("F16");
            return 1;
        }
        note("prefill attention at the best measured GPU matmul rate (no F16 entry)");
        return b * kTera;
    }
    double dram() {
        if (p_.cpu.dram_gbps <= 0) missing_["CPU DRAM bandwidth"].insert("dram_gbps");
        return p_.cpu.dram_gbps > 0 ? p_.cpu.dram_gbps * kGiga : 1;
    }
    // The CPU forward's matmuls and attention at prefill, for which only the expert operator was
    // measured: its best rate stands in.
    double cpu_generic_flops() {
        const double b = best_of(p_.cpu.expert_gflops);
        if (b <= 0) missing_["CPU expert GFLOP/s"].insert("any");
        note("CPU-only prefill: dense matmuls and attention at the best measured CPU expert GFLOP/s");
        return b > 0 ? b * kGiga : 1;
    }

    // The fused MoE decode launches' measured rate for a type, if `mox calibrate` measured it.
    std::optional<double> gpu_moe_decode(quant::TypeId t) const {
        if (!has_gpu()) return std::nullopt;
        if (auto r = lookup(gpu().moe_decode_gbps, t)) return *r * kGiga;
        return std::nullopt;
    }
    // A DeltaNet layer's conv + delta rule at decode: the probe's time scaled by state bytes, if
    // measured.
    std::optional<double> gpu_deltanet_step(double state_bytes) const {
        if (!has_gpu() || gpu().deltanet_step_s <= 0 || gpu().deltanet_state_bytes == 0) return std::nullopt;
        return gpu().deltanet_step_s * state_bytes / static_cast<double>(gpu().deltanet_state_bytes);
    }

    // The batched MoE's measured routed FLOP rate for a micro-batch of `tokens`, if measured: the
    // 512-token rate, or, where the profile also has the rate at a larger micro-batch, the two
    // interpolated in log2 of the tokens (clamped to the measured sizes).
    std::optional<double> gpu_moe_prefill(quant::TypeId t, double tokens) const {
        if (!has_gpu()) return std::nullopt;
        const auto small = lookup(gpu().moe_prefill_tflops, t);
        if (!small) return std::nullopt;
        const auto big_tokens = static_cast<double>(gpu().moe_prefill_large_tokens);
        const auto large =
            big_tokens > kMoePrefillTokens ? lookup(gpu().moe_prefill_large_tflops, t) : std::nullopt;
        if (!large) return *small * kTera;
        const double f = std::clamp((std::log2(std::max(tokens, 1.0)) - std::log2(kMoePrefillTokens)) /
                                        (std::log2(big_tokens) - std::log2(kMoePrefillTokens)),
                                    0.0, 1.0);
        return (*small + f * (*large - *small)) * kTera;
    }
    // A DeltaNet layer's conv + chunked rule per prefill token, scaled by state bytes, if measured.
    std::optional<double> gpu_deltanet_prefill_token(double state_bytes) const {
        if (!has_gpu() || gpu().deltanet_prefill_token_s <= 0 || gpu().deltanet_state_bytes == 0)
            return std::nullopt;
        return gpu().deltanet_prefill_token_s * state_bytes / static_cast<double>(gpu().deltanet_state_bytes);
    }

    // An attention layer's decode launch over depth + 1 keys of an f16 cache, from the probe's points
    // (linear between them, the first point's time below it, the last segment's slope beyond it),
    // scaled by the cache bytes per key against the probe's shape (2 KV heads x (256 + 256)); nullopt
    // without points (the caller charges the cache's bytes). Other cache types are charged at least
    // this too (the caller takes the larger of it and their bytes): the short-context kernel is the
    // same latency chain for every type, and beyond it only f16 has the tensor-core kernel. Charged by
    // bytes alone, q8_0 came out ~5% faster than f16, so the planner chose it at 24 GiB, and it
    // measured 4% slower (tg128 324.5 vs 338.3 t/s in one run,
    // bench/results/2026-11-30-decode-fusions-h200).
    std::optional<double> gpu_attention_decode(const models::Hparams& hp, int64_t depth) const {
        if (!has_gpu()) return std::nullopt;
        const auto& pts = gpu().attention_decode_f16;
        if (pts.empty()) return std::nullopt;
        const auto keys = static_cast<double>(depth + 1);
        double t = pts.front().second;
        if (pts.size() >= 2 && keys > static_cast<double>(pts.front().first)) {
            size_t i = 1;
            while (i + 1 < pts.size() && keys > static_cast<double>(pts[i].first)) ++i;
            const auto [k0, t0] = pts[i - 1];
            const auto [k1, t1] = pts[i];
            t = t0 + (t1 - t0) * (keys - static_cast<double>(k0)) / static_cast<double>(k1 - k0);
        }
        const double per_key = static_cast<double>(hp.n_head_kv * (hp.head_dim_k + hp.head_dim_v));
        return std::max(t, 0.0) * per_key / (2.0 * (256 + 256));
    }

    double roundtrip() const { return has_gpu() ? gpu().host_roundtrip_s : 0; }
    // A host layer's hand-off in the decode graph: the probe of the graph's own protocol (its publish
    // and collect launches included) when the profile has one, else the copy + callback round trip.
    bool handoff_probed() const { return has_gpu() && gpu().handoff_roundtrip_s > 0; }
    double decode_handoff() const { return handoff_probed() ? gpu().handoff_roundtrip_s : roundtrip(); }
    double launch_gap() const { return has_gpu() ? gpu().launch_gap_s : 0; }
    double h2d(place::Tier t) {
        const double r = !has_gpu()                      ? 0
                         : t == place::Tier::pinned_host ? gpu().h2d_pinned_gbps
                                                         : gpu().h2d_pageable_gbps;
        if (r <= 0) missing_["GPU host-to-device copy"].insert(place::tier_name(t));
        return r > 0 ? r * kGiga : 1;
    }

    void note(std::string s) {
        if (std::find(notes_.begin(), notes_.end(), s) == notes_.end()) notes_.push_back(std::move(s));
    }

    void throw_if_missing() const {
        if (missing_.empty()) return;
        std::string what;
        std::set<std::string> types;
        for (const auto& [kind, ts] : missing_) {
            std::string list;
            for (const std::string& t : ts) {
                list += (list.empty() ? "" : ", ") + t;
                types.insert(lower(t));
            }
            what += fmt::format("{}{}: {}", what.empty() ? "" : "; ", kind, list);
        }
        std::string arg;
        for (const std::string& t : types)
            if (t != "any" && t != "dram_gbps" && t != "pinned_host" && t != "mmap_host")
                arg += (arg.empty() ? "" : ",") + t;
        fail("the hardware profile{} has no measured rate for {} (run `mox calibrate{}` to measure {})",
             p_.machine.empty() ? "" : fmt::format(" of {}", p_.machine), what,
             arg.empty() ? "" : fmt::format(" --types {}", arg), arg.empty() ? "this machine" : "them");
    }

private:
    double need(const std::map<std::string, double>* m, quant::TypeId t, const char* kind, double scale) {
        if (m != nullptr) {
            if (auto r = lookup(*m, t)) return *r * scale;
            // Plain float weights (the F32 router, BF16/F16 files) have no block format to decode:
            // their kernels stream at the machine's best rate, which stands in when `mox calibrate`
            // did not measure them (its default types are the quantized ones).
            const double best = best_of(*m);
            if (!quant::traits(t).is_quantized && best > 0) {
                note(fmt::format("{} {} at the best measured rate (not measured for it)", kind,
                                 quant::type_name(t)));
                return best * scale;
            }
        }
        missing_[kind].insert(std::string(quant::type_name(t)));
        return 1;  // keeps the arithmetic finite until throw_if_missing
    }

    const HardwareProfile& p_;
    std::vector<std::string>& notes_;
    std::map<std::string, std::set<std::string>> missing_;
};

// One weight as the time model sees it.
struct Matrix {
    quant::TypeId type = quant::TypeId::f32;
    double bytes = 0;
    double params = 0;
    bool matrix = false;  // read by a matvec/matmul (2-D, rows of at least one block); else a vector
    bool shared_expert = false;
};

Matrix matrix_of(const place::TensorEntry& e) {
    Matrix m;
    m.type = e.type;
    m.bytes = static_cast<double>(e.n_bytes);
    m.params = static_cast<double>(e.ne[0]) * static_cast<double>(e.ne[1]) * static_cast<double>(e.ne[2]) *
               static_cast<double>(e.ne[3]);
    // conv1d [kernel, channels] and 1-D norms/gates are elementwise work, not matrix products.
    m.matrix = e.ne[1] > 1 && e.ne[0] >= 32;
    m.shared_expert = e.cls == models::TensorClass::shared_expert;
    return m;
}

struct Layer {
    int64_t index = 0;
    bool recurrent = false;
    std::vector<Matrix> dense;  // mixer, norms, router, shared expert: the GPU's part in a hybrid plan
    std::vector<Matrix> shexp;  // the shared expert alone (it overlaps a host hand-off)
    bool has_experts = false;
    place::Tier tier = place::Tier::gpu;
    std::array<Matrix, 3> expert;  // one expert's slice of the gate, up and down stacks
    double stack_bytes = 0;        // the three stacks, all experts
};

struct Model {
    bool cpu_only = false;
    std::vector<Layer> layers;  // trunk layers, in order
    std::vector<Matrix> head;   // output norm + output matrix
};

// The placement as per-layer work lists; refuses what the runtime refuses.
Model analyse(const place::Placement& p, const models::Hparams& hp) {
    if (p.n_layer() != hp.n_layer)
        fail("placement has {} layers but the hyper-parameters {}", p.n_layer(), hp.n_layer);
    Model m;
    m.cpu_only = p.bytes_per_tier()[place::Tier::gpu] == 0;
    m.layers.resize(static_cast<size_t>(hp.n_trunk()));
    for (int64_t l = 0; l < hp.n_trunk(); ++l) {
        Layer& L = m.layers[static_cast<size_t>(l)];
        L.index = l;
        L.recurrent = hp.is_recurrent(l);
        L.has_experts = p.has_experts(l);
        if (!L.has_experts) continue;
        const auto counts = p.expert_counts(l);
        int tiers = 0;
        for (place::Tier t : place::kAllTiers)
            if (counts[static_cast<size_t>(t)] > 0) {
                L.tier = t;
                ++tiers;
            }
        if (tiers != 1)
            fail(
                "layer {}: its experts are split across tiers ({} gpu, {} pinned_host, {} mmap_host); the "
                "runtime places a layer's routed experts all on the GPU or all on the host",
                l, counts[0], counts[1], counts[2]);
    }
    const bool has_output =
        std::any_of(p.tensors().begin(), p.tensors().end(),
                    [](const place::TensorEntry& e) { return e.cls == models::TensorClass::output; });
    for (const place::TensorEntry& e : p.tensors()) {
        if (e.layer >= hp.n_trunk() || e.cls == models::TensorClass::mtp) continue;  // MTP blocks: not run
        if (e.cls == models::TensorClass::embedding && has_output) continue;  // a row lookup: negligible
        const bool on_gpu = e.tier == place::Tier::gpu;
        if (e.layer < 0) {
            if (!m.cpu_only && !on_gpu)
                fail("{} is on {}: the runtime runs the output head on the GPU when anything is there",
                     e.name, place::tier_name(e.tier));
            m.head.push_back(matrix_of(e));
            continue;
        }
        Layer& L = m.layers[static_cast<size_t>(e.layer)];
        if (e.part != place::ExpertPart::none) {
            Matrix x = matrix_of(e);
            const double n_expert = static_cast<double>(p.n_expert());
            x.bytes /= n_expert;
            x.params /= n_expert;
            L.expert[static_cast<size_t>(e.part)] = x;
            L.stack_bytes += static_cast<double>(e.n_bytes);
            continue;
        }
        if (!m.cpu_only && !on_gpu)
            fail(
                "{} is on {}: the runtime keeps every non-expert weight of the trunk on the GPU (only routed "
                "experts and token_embd may live on the host)",
                e.name, place::tier_name(e.tier));
        L.dense.push_back(matrix_of(e));
        if (e.cls == models::TensorClass::shared_expert) L.shexp.push_back(matrix_of(e));
    }
    return m;
}

uint64_t state_layer_bytes(const models::Hparams& hp) {
    return static_cast<uint64_t>((hp.ssm_conv_kernel - 1) * hp.conv_channels() +
                                 hp.ssm_v_heads * hp.ssm_state * hp.ssm_state) *
           sizeof(float);
}

// Seconds for the GPU to read `fraction` of a weight once (decode).
double gpu_read_s(Rates& r, const Matrix& m, double fraction = 1.0) {
    return m.bytes * fraction / (m.matrix ? r.gpu_matvec(m.type) : r.gpu_stream());
}

// Seconds for a matrix product over `tokens` tokens on the GPU: tensor-core time or one read of
// the weight, whichever is longer.
double gpu_product_s(Rates& r, const Matrix& m, double tokens) {
    if (!m.matrix) return m.bytes / r.gpu_stream();
    return std::max(2.0 * m.params * tokens / r.gpu_matmul(m.type), m.bytes / r.gpu_matvec(m.type));
}

// Expected distinct experts that `tokens` tokens choose (k each of n, uniform routing).
double distinct_experts(double tokens, double k, double n) {
    return n * (1.0 - std::pow(1.0 - k / n, tokens));
}

// The selected experts of one layer for `tokens` tokens (1: decode, k experts read once each).
double experts_gpu_s(Rates& r, const Layer& L, const models::Hparams& hp, double tokens) {
    const auto k = static_cast<double>(hp.n_ffn_experts_used());
    double s = 0;
    for (const Matrix& x : L.expert) {
        if (tokens <= 1) {
            s += k * x.bytes / r.gpu_matvec(x.type);
        } else {
            // The batched MoE's measured rate when the profile has it (its small per-expert products
            // run far below the dense matmul's), else the dense matmul's rate; never faster than
            // reading the selected experts once.
            const double used = distinct_experts(tokens, k, static_cast<double>(hp.n_ffn_experts()));
            const auto moe = r.gpu_moe_prefill(x.type, tokens);
            const double flops_rate = moe ? *moe : r.gpu_matmul(x.type);
            s += std::max(2.0 * tokens * k * x.params / flops_rate, used * x.bytes / r.gpu_matvec(x.type));
        }
    }
    return s;
}

struct CpuExperts {
    double s = 0;
    double bytes = 0;  // expert weight bytes the CPU reads
};

CpuExperts experts_cpu(Rates& r, const Layer& L, const models::Hparams& hp, double tokens) {
    const auto k = static_cast<double>(hp.n_ffn_experts_used());
    CpuExperts c;
    for (const Matrix& x : L.expert) {
        if (tokens <= 1) {
            c.s += k * x.bytes / r.cpu_expert(x.type);
            c.bytes += k * x.bytes;
        } else {
            const double used = distinct_experts(tokens, k, static_cast<double>(hp.n_ffn_experts()));
            c.s += std::max(2.0 * tokens * k * x.params / r.cpu_flops(x.type),
                            used * x.bytes / r.cpu_expert(x.type));
            c.bytes += used * x.bytes;
        }
    }
    return c;
}

double shexp_gpu_s(Rates& r, const Layer& L) {
    double s = 0;
    for (const Matrix& m : L.shexp) s += gpu_read_s(r, m);
    return s;
}

// A GPU expert layer's MoE at decode from the measured rate of its fused launches: the k routed
// experts' and the shared expert's matrices at Rates::gpu_moe_decode of their types (a shared
// matrix of a type without one at its matvec rate). nullopt when a routed part's type was not
// measured: the caller charges bytes at the matvec rate and a launch gap per kernel instead.
std::optional<double> moe_decode_s(Rates& r, const Layer& L, const models::Hparams& hp) {
    const auto k = static_cast<double>(hp.n_ffn_experts_used());
    double s = 0;
    for (const Matrix& x : L.expert) {
        const auto rate = r.gpu_moe_decode(x.type);
        if (!rate) {
            r.note(
                fmt::format("GPU experts of type {} at the matvec rate (the profile has no MoE decode rate "
                            "for it; `mox calibrate` measures one)",
                            quant::type_name(x.type)));
            return std::nullopt;
        }
        s += k * x.bytes / *rate;
    }
    for (const Matrix& x : L.shexp) {
        if (!x.matrix) continue;
        const auto rate = r.gpu_moe_decode(x.type);
        s += rate ? x.bytes / *rate : gpu_read_s(r, x);
    }
    return s;
}

// The pool's share of a host layer's k selected experts, computed on the GPU at decode: `fraction`
// of them at the measured rate of the fused MoE launches of their types, as a GPU expert layer's
// (the matvec rate where the profile has none). The selections the pool misses go to its zero slot
// with weight 0 and read the same few bytes each time (cached): not charged.
double pool_experts_gpu_s(Rates& r, const Layer& L, const models::Hparams& hp, double fraction) {
    const auto k = static_cast<double>(hp.n_ffn_experts_used());
    double s = 0;
    for (const Matrix& x : L.expert) {
        const auto moe = r.gpu_moe_decode(x.type);
        s += fraction * k * x.bytes / (moe ? *moe : r.gpu_matvec(x.type));
    }
    return s;
}

double expert_bytes(const Layer& L) {
    double b = 0;
    for (const Matrix& x : L.expert) b += x.bytes;
    return b;
}

void validate_cache_load(const ExpertCacheLoad& c, const models::Hparams& hp) {
    if (!hp.has_moe()) fail("an expert cache needs routed experts; {} is a dense model", hp.arch_name());
    if (!(c.hit_rate >= 0 && c.hit_rate <= 1)) fail("expert cache hit rate {}: expected 0..1", c.hit_rate);
    if (!(c.admissions_per_token >= 0))
        fail("expert cache admissions per token {}: expected 0 or more", c.admissions_per_token);
}

DecodePrediction decode_at(Rates& r, const Model& m, const models::Hparams& hp,
                           const place::CacheOptions& cache, int64_t depth,
                           const ExpertCacheLoad* pool = nullptr) {
    DecodePrediction d;
    d.depth = depth;
    const auto k = static_cast<double>(hp.n_ffn_experts_used());
    const double k_row = static_cast<double>(quant::row_bytes(cache.k_type, hp.n_head_kv * hp.head_dim_k));
    const double v_row = static_cast<double>(quant::row_bytes(cache.v_type, hp.n_head_kv * hp.head_dim_v));
    const auto state = static_cast<double>(state_layer_bytes(hp));
    const auto dd = static_cast<double>(depth);
    if (m.cpu_only) {
        // Everything streams from DRAM; the experts at the rate of mox's CPU MoE operator.
        const double dram = r.dram();
        for (const Layer& L : m.layers) {
            double bytes = L.recurrent ? 2 * state : dd * (k_row + v_row);
            for (const Matrix& x : L.dense) bytes += x.bytes;
            d.cpu_bytes += bytes;
            d.cpu_s += bytes / dram;
            if (!L.has_experts) continue;
            const CpuExperts c = experts_cpu(r, L, hp, 1);
            d.cpu_bytes += c.bytes;
            d.cpu_s += c.s;
        }
        for (const Matrix& x : m.head) {
            d.cpu_bytes += x.bytes;
            d.cpu_s += x.bytes / dram;
        }
    } else {
        const double rt = r.decode_handoff();
        for (const Layer& L : m.layers) {
            const bool gpu_experts = L.has_experts && L.tier == place::Tier::gpu;
            // A dense FFN runs as plain matvecs: the MoE launches' measured rates are not its.
            const std::optional<double> moe =
                gpu_experts && hp.has_moe() ? moe_decode_s(r, L, hp) : std::nullopt;
            d.kernels += L.recurrent ? kDecodeKernelsRecurrent : kDecodeKernelsAttention;
            if (L.has_experts && !gpu_experts) d.kernels += kDecodeKernelsHostNorm;
            for (const Matrix& x : L.dense) {
                d.gpu_weight_bytes += x.bytes;
                if (moe && x.shared_expert && x.matrix) continue;  // in the MoE launches' measured time
                d.gpu_s += gpu_read_s(r, x);
            }
            if (L.recurrent) {
                d.gpu_cache_bytes += 2 * state;  // read and written back
                if (const auto step = r.gpu_deltanet_step(state)) {
                    d.gpu_s += *step;
                    d.probed_kernels += 2;  // conv + delta rule
                } else {
                    d.gpu_s += 2 * state / r.gpu_stream();
                }
            } else {
                d.gpu_cache_bytes += dd * (k_row + v_row);
                const double bytes_s =
                    dd * k_row / r.gpu_kv(cache.k_type) + dd * v_row / r.gpu_kv(cache.v_type);
                if (const auto t = r.gpu_attention_decode(hp, depth)) {
                    const bool f16 = cache.k_type == quant::TypeId::f16 && cache.v_type == quant::TypeId::f16;
                    d.gpu_s += f16 ? *t : std::max(*t, bytes_s);
                    d.probed_kernels += 1;  // the attention launch (with its combine when split)
                } else {
                    d.gpu_s += bytes_s;
                }
            }
            if (!L.has_experts) continue;
            if (gpu_experts) {
                for (const Matrix& x : L.expert) d.gpu_weight_bytes += k * x.bytes;
                if (moe) {
                    d.gpu_s += *moe;
                    d.probed_kernels += 2;  // router + gate/up, down
                } else {
                    d.gpu_s += experts_gpu_s(r, L, hp, 1);
                }
            } else {
                // With a pool the CPU computes only the selections it misses; the GPU computes the
                // hits on the side stream with the shared expert, while the hand-off runs (the
                // runtime hands every host layer off, hits or not: models/gpu/gpu_forward_experts.cpp).
                const double miss = pool ? 1 - pool->hit_rate : 1;
                const CpuExperts c = experts_cpu(r, L, hp, 1);
                d.cpu_bytes += miss * c.bytes;
                d.cpu_s += miss * c.s;
                double side_s = shexp_gpu_s(r, L);
                if (pool) {
                    const double hits_s = pool_experts_gpu_s(r, L, hp, pool->hit_rate);
                    d.gpu_weight_bytes += pool->hit_rate * k * expert_bytes(L);
                    d.gpu_s += hits_s;
                    side_s += hits_s;
                    d.kernels += kDecodeKernelsCacheLookup;
                }
                d.handoff_s += rt;
                d.handoffs++;
                if (r.handoff_probed()) d.probed_kernels += 2;  // publish, collect
                d.overlap_s += std::min(side_s, rt + miss * c.s);
            }
        }
        if (pool && d.handoffs > 0) {
            // Admissions copy whole experts of the host layers (their mean size) from page-locked host
            // memory while the CPU reads its experts from the same DRAM. Modelled as shared DRAM
            // bandwidth: the copies' bytes take their time at cpu.dram_gbps from the CPU's reads (the
            // profile measures the PCIe and CPU rates apart, never together; the copies' own PCIe
            // time runs on the copy engine, beside the step, and is not charged).
            double host_expert_bytes = 0;
            for (const Layer& L : m.layers)
                if (L.has_experts && L.tier != place::Tier::gpu) host_expert_bytes += expert_bytes(L);
            d.cache_hit_rate = pool->hit_rate;
            d.cache_copy_bytes =
                pool->admissions_per_token * host_expert_bytes / static_cast<double>(d.handoffs);
            if (d.cache_copy_bytes > 0) {
                d.cache_copy_s = d.cache_copy_bytes / r.dram();
                d.cpu_s += d.cache_copy_s;
            }
        }
        for (const Matrix& x : m.head) {
            d.gpu_weight_bytes += x.bytes;
            d.gpu_s += gpu_read_s(r, x);
        }
        d.kernels += kDecodeKernelsOutput + d.handoffs * kExtraLaunchesPerHandoff;
        d.launch_s = static_cast<double>(d.kernels - d.probed_kernels) * r.launch_gap();
    }
    d.total_s = d.gpu_s + d.cpu_s + d.handoff_s + d.launch_s - d.overlap_s;
    d.tokens_per_s = d.total_s > 0 ? 1.0 / d.total_s : 0;
    return d;
}

// Attention flops of `tokens` queries after `past` cached tokens (causal: query i sees past + i + 1 keys).
double attention_flops(const models::Hparams& hp, double tokens, double past) {
    const double pairs = tokens * past + tokens * (tokens + 1) / 2;
    return 2.0 * pairs * static_cast<double>(hp.n_head) * static_cast<double>(hp.head_dim_k + hp.head_dim_v);
}

// The prompt through the runtime's micro-batch loop, as a timeline of the GPU and the copy engine.
PrefillPrediction prefill_run(Rates& r, const Model& m, const models::Hparams& hp, int64_t prompt,
                              int64_t n_ubatch, bool streaming, int64_t stream_min) {
    PrefillPrediction p;
    p.prompt_tokens = prompt;
    p.n_ubatch = n_ubatch;
    p.streaming = streaming;
    p.stream_min_tokens = stream_min;
    double gpu_t = 0;                         // when the GPU finishes the work issued so far
    double copy_free = 0;                     // when the copy engine is free
    std::array<double, 2> buffer_free{0, 0};  // when each staging buffer's last layer is computed
    int64_t staged = 0;  // host layers streamed so far (they alternate between the buffers)
    const double rt = r.roundtrip();
    const auto state = static_cast<double>(state_layer_bytes(hp));
    for (int64_t done = 0; done < prompt; done += n_ubatch) {
        const auto tokens = static_cast<double>(std::min(n_ubatch, prompt - done));
        const bool stream = streaming && tokens >= static_cast<double>(stream_min);
        p.micro_batches++;
        if (m.cpu_only) {
            const double flops = r.cpu_generic_flops();
            for (const Layer& L : m.layers) {
                for (const Matrix& x : L.dense)
                    p.cpu_s += x.matrix ? 2.0 * x.params * tokens / r.cpu_flops(x.type) : x.bytes / r.dram();
                if (!L.recurrent) p.cpu_s += attention_flops(hp, tokens, static_cast<double>(done)) / flops;
                if (L.has_experts) {
                    const CpuExperts c = experts_cpu(r, L, hp, tokens);
                    p.cpu_s += c.s;
                    p.cpu_bytes += c.bytes;
                }
            }
            continue;
        }
        for (const Layer& L : m.layers) {
            double dense = 0;
            for (const Matrix& x : L.dense) dense += gpu_product_s(r, x, tokens);
            if (!L.recurrent)
                dense += attention_flops(hp, tokens, static_cast<double>(done)) / r.gpu_attention_flops();
            else if (const auto per_token = r.gpu_deltanet_prefill_token(state))
                dense += tokens * *per_token;  // conv + chunked delta rule (without a probe: not charged)
            gpu_t += dense;
            p.gpu_compute_s += dense;
            if (!L.has_experts) continue;
            if (L.tier == place::Tier::gpu || stream) {
                const double experts = experts_gpu_s(r, L, hp, tokens);
                if (L.tier != place::Tier::gpu) {
                    // Both host tiers copy at the pinned rate: the runtime locks mapped stacks in
                    // place (cudaHostRegister) before streaming them, and a stack it cannot lock
                    // is not streamed (its layer's prefill runs on the CPU).
                    const double copy = L.stack_bytes / r.h2d(place::Tier::pinned_host);
                    double& buffer = buffer_free[static_cast<size_t>(staged++ % 2)];
                    const double start = std::max(copy_free, buffer);
                    copy_free = start + copy;
                    p.copy_s += copy;
                    p.copy_bytes += L.stack_bytes;
                    if (copy_free > gpu_t) {
                        p.copy_stall_s += copy_free - gpu_t;
                        gpu_t = copy_free;
                    }
                    gpu_t += experts;
                    buffer = gpu_t;
                } else {
                    gpu_t += experts;
                }
                p.gpu_compute_s += experts;
            } else {
                const CpuExperts c = experts_cpu(r, L, hp, tokens);
                gpu_t += rt + c.s;
                p.cpu_s += c.s;
                p.cpu_bytes += c.bytes;
                p.handoff_s += rt;
                p.handoffs++;
            }
        }
        const double launch =
            static_cast<double>(static_cast<int64_t>(m.layers.size()) * kKernelsPerLayer + kKernelsOutput) *
            r.launch_gap();
        gpu_t += launch;
        p.launch_s += launch;
    }
    // Logits of the last prompt token only.
    for (const Matrix& x : m.head) {
        const double s = m.cpu_only ? x.bytes / r.dram() : gpu_read_s(r, x);
        (m.cpu_only ? p.cpu_s : p.gpu_compute_s) += s;
    }
    p.total_s = p.gpu_compute_s + p.copy_stall_s + p.cpu_s + p.handoff_s + p.launch_s;
    p.tokens_per_s = p.total_s > 0 ? static_cast<double>(prompt) / p.total_s : 0;
    return p;
}

bool any_host_layer(const Model& m) {
    return std::any_of(m.layers.begin(), m.layers.end(),
                       [](const Layer& L) { return L.has_experts && L.tier != place::Tier::gpu; });
}

int64_t crossover(Rates& r, const Model& m, const models::Hparams& hp, int64_t n_ubatch) {
    if (m.cpu_only || !any_host_layer(m)) return kDefaultStreamMinTokens;
    // Streaming pays from T tokens when one micro-batch of T with every host layer streamed takes no
    // longer than with every host layer computed by the CPU; the difference falls as T grows (the
    // copy is fixed, the CPU's work grows with T), so bisect.
    auto streams = [&](int64_t t) {
        return prefill_run(r, m, hp, t, t, true, 1).total_s <= prefill_run(r, m, hp, t, t, false, 1).total_s;
    };
    if (!streams(n_ubatch)) return n_ubatch + 1;
    int64_t lo = 0, hi = n_ubatch;  // streams(hi) holds; lo == 0 or !streams(lo)
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (streams(mid) ? hi : lo) = mid;
    }
    return hi;
}

}  // namespace

SpeedPrediction predict_speed(const place::Placement& p, const models::Hparams& hp,
                              const place::CacheOptions& cache, const SpeedOptions& options,
                              const HardwareProfile& profile) {
    place::validate_cache_options(hp, cache);
    if (options.run.n_ubatch < 1) fail("n_ubatch {}: at least 1", options.run.n_ubatch);
    SpeedPrediction s;
    Rates r(profile, s.notes);
    const Model m = analyse(p, hp);
    if (!m.cpu_only && !profile.gpu)
        fail("the placement puts weights on the GPU but the hardware profile{} has no GPU",
             profile.machine.empty() ? "" : fmt::format(" of {}", profile.machine));
    s.cpu_only = m.cpu_only;
    for (const Layer& L : m.layers) s.host_layers += L.has_experts && L.tier != place::Tier::gpu;
    const ExpertCacheLoad* pool = options.expert_cache ? &*options.expert_cache : nullptr;
    if (pool) validate_cache_load(*pool, hp);
    s.decode = decode_at(r, m, hp, cache, 0, pool);
    s.decode_half = decode_at(r, m, hp, cache, cache.n_ctx / 2, pool);
    const int64_t prompt =
        options.prompt_tokens > 0 ? options.prompt_tokens : std::min<int64_t>(cache.n_ctx, 4096);
    const bool streaming = options.run.stream_experts && !m.cpu_only && any_host_layer(m);
    const int64_t stream_min =
        options.stream_min_tokens > 0 ? options.stream_min_tokens : crossover(r, m, hp, options.run.n_ubatch);
    s.prefill = prefill_run(r, m, hp, prompt, options.run.n_ubatch, streaming, stream_min);
    r.throw_if_missing();
    return s;
}

DecodePrediction predict_decode(const place::Placement& p, const models::Hparams& hp,
                                const place::CacheOptions& cache, int64_t depth,
                                const HardwareProfile& profile,
                                const std::optional<ExpertCacheLoad>& expert_cache) {
    if (depth < 0) fail("decode depth {}: at least 0", depth);
    if (expert_cache) validate_cache_load(*expert_cache, hp);
    std::vector<std::string> notes;
    Rates r(profile, notes);
    const Model m = analyse(p, hp);
    if (!m.cpu_only && !profile.gpu)
        fail("the placement puts weights on the GPU but the hardware profile{} has no GPU",
             profile.machine.empty() ? "" : fmt::format(" of {}", profile.machine));
    DecodePrediction d = decode_at(r, m, hp, cache, depth, expert_cache ? &*expert_cache : nullptr);
    r.throw_if_missing();
    return d;
}

int64_t best_stream_min(const place::Placement& p, const models::Hparams& hp, int64_t n_ubatch,
                        const HardwareProfile& profile) {
    std::vector<std::string> notes;
    Rates r(profile, notes);
    const Model m = analyse(p, hp);
    const int64_t t = crossover(r, m, hp, n_ubatch);
    r.throw_if_missing();
    return t;
}

double host_layer_decode_cost(const place::Placement& p, const models::Hparams& hp, int64_t layer,
                              const HardwareProfile& profile) {
    if (!profile.gpu || !p.has_experts(layer)) return 0;
    std::vector<std::string> notes;
    Rates r(profile, notes);
    // The two decode predictions at depth 0 (no KV cache read), differing in this layer's tier.
    Model m = analyse(p, hp);
    if (m.cpu_only) return 0;
    Layer& L = m.layers.at(static_cast<size_t>(layer));
    const place::CacheOptions cache{};
    L.tier = place::Tier::gpu;
    const double on_gpu = decode_at(r, m, hp, cache, 0).total_s;
    L.tier = place::Tier::pinned_host;
    const double on_host = decode_at(r, m, hp, cache, 0).total_s;
    r.throw_if_missing();
    return on_host - on_gpu;
}

}  // namespace mox::plan
