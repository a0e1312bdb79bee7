// Shared by the planner's tests: hand-written hardware profiles and full-size model files without
// their weights.
//
// The profiles' numbers are MADE UP for the tests (loosely shaped like an H200 host and an RTX 3090
// desktop); nothing here is a measurement. The model files carry the real tensor table of
// Qwen3.6-35B-A3B (names, shapes, llama-quantize's Q4_K_M types, or a custom type per tensor) and
// a data section that is a hole in a sparse file: the planner only reads sizes, so a 20 GB model
// costs a few hundred KB of disk.
#pragma once

#include "core/error.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "models/hparams.h"
#include "models/synth.h"
#include "place/placement.h"
#include "plan/hardware.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace mox::plan::fixtures {

inline constexpr uint64_t kGiB = 1ull << 30;
inline constexpr uint64_t kMiB = 1ull << 20;

// Made up: a big datacenter GPU with a 16-core host.
inline HardwareProfile h200_like() {
    HardwareProfile p;
    p.machine = "test-h200-like";
    p.measured = false;
    p.host_ram_bytes = 125 * kGiB;
    p.host_lockable_bytes = 125 * kGiB;
    p.cpu.threads = 16;
    p.cpu.dram_gbps = 80;
    p.cpu.expert_gbps = {{"F32", 40}, {"F16", 45}, {"Q4_K", 55}, {"Q6_K", 50}, {"Q8_0", 60}, {"Q4_0", 55}};
    p.cpu.expert_gflops = {{"F32", 300},  {"F16", 500},   {"Q4_K", 900},
                           {"Q6_K", 800}, {"Q8_0", 1000}, {"Q4_0", 900}};
    GpuProfile g;
    g.name = "made-up H200-like";
    g.total_bytes = 140 * kGiB;
    g.context_bytes = 600 * kMiB;
    g.matvec_gbps = {{"F32", 3500},  {"F16", 3400},  {"Q4_K", 3000},
                     {"Q6_K", 2800}, {"Q8_0", 3300}, {"Q4_0", 3100}};
    g.matmul_tflops = {{"F32", 50}, {"F16", 400}, {"Q4_K", 250}, {"Q6_K", 230}, {"Q8_0", 300}, {"Q4_0", 260}};
    g.launch_gap_s = 3e-6;
    g.h2d_pinned_gbps = 50;
    g.h2d_pageable_gbps = 18;
    g.host_roundtrip_s = 25e-6;
    p.gpu = g;
    return p;
}

// Made up: a 24 GiB consumer GPU with an 8-core desktop.
inline HardwareProfile rtx3090_like() {
    HardwareProfile p;
    p.machine = "test-3090-like";
    p.measured = false;
    p.host_ram_bytes = 64 * kGiB;
    p.host_lockable_bytes = 64 * kGiB;
    p.cpu.threads = 8;
    p.cpu.dram_gbps = 45;
    p.cpu.expert_gbps = {{"F32", 25}, {"F16", 28}, {"Q4_K", 33}, {"Q6_K", 30}, {"Q8_0", 35}, {"Q4_0", 33}};
    p.cpu.expert_gflops = {{"F32", 150},  {"F16", 250},  {"Q4_K", 400},
                           {"Q6_K", 350}, {"Q8_0", 450}, {"Q4_0", 400}};
    GpuProfile g;
    g.name = "made-up 3090-like";
    g.total_bytes = 24 * kGiB;
    g.context_bytes = 400 * kMiB;
    g.matvec_gbps = {{"F32", 820}, {"F16", 800}, {"Q4_K", 700}, {"Q6_K", 650}, {"Q8_0", 760}, {"Q4_0", 720}};
    g.matmul_tflops = {{"F32", 18}, {"F16", 70}, {"Q4_K", 45}, {"Q6_K", 40}, {"Q8_0", 55}, {"Q4_0", 48}};
    g.launch_gap_s = 5e-6;
    g.h2d_pinned_gbps = 24;
    g.h2d_pageable_gbps = 11;
    g.host_roundtrip_s = 40e-6;
    p.gpu = g;
    return p;
}

// The same machine without a usable GPU.
inline HardwareProfile cpu_only_like() {
    HardwareProfile p = h200_like();
    p.machine = "test-cpu-only";
    p.gpu.reset();
    return p;
}

using TypeOf = std::function<quant::TypeId(const models::TensorSpec&)>;

// A qwen35moe GGUF whose data section is a hole: the header comes from gguf::Writer, which removes
// an unfinished file when destroyed, so a hard link taken before that keeps the header; the file
// is then extended to its full size without writing (a sparse file).
inline void write_sparse_model(const std::string& path, const models::Hparams& hp, const TypeOf& type_of) {
    const std::string partial = path + ".header";
    constexpr uint64_t kAlign = 32;
    uint64_t data_bytes = 0;
    std::filesystem::remove(path);
    {
        gguf::Writer w(partial, kAlign);
        models::write_hparams(w, hp);
        for (const models::TensorSpec& t : models::model_tensors(hp)) {
            const size_t i = w.add_tensor(t.name, std::span<const int64_t>(t.ne), type_of(t));
            data_bytes += (w.tensor_bytes(i) + kAlign - 1) / kAlign * kAlign;
        }
        w.write_header();
        if (::link(partial.c_str(), path.c_str()) != 0) fail("link {} -> {} failed", partial, path);
    }
    std::filesystem::resize_file(path, std::filesystem::file_size(path) + data_bytes);
}

struct SparseModel {
    std::string path;
    models::Hparams hp;
    gguf::File file;
    SparseModel(std::string p, const models::Hparams& h, const TypeOf& type_of)
        : path((write_sparse_model(p, h, type_of), p)),
          hp(models::read_hparams(gguf::File::open(path))),
          file(gguf::File::open(path)) {}
    ~SparseModel() { std::filesystem::remove(path); }
    place::Placement all_gpu() const { return place::Placement::uniform(file, place::Tier::gpu); }
};

inline std::string temp_path(const std::string& tag) {
    return (std::filesystem::temp_directory_path() / fmt::format("mox_plan_test_{}_{}.gguf", tag, getpid()))
        .string();
}

// Full-size Qwen3.6-35B-A3B with llama-quantize's Q4_K_M types (some layers' ffn_down in Q6_K).
inline const SparseModel& q36_q4km() {
    static const SparseModel m(temp_path("q36"), models::synth_preset("qwen3.6-35b-a3b"),
                               [](const models::TensorSpec& t) {
                                   static const models::Hparams hp = models::synth_preset("qwen3.6-35b-a3b");
                                   return models::choose_tensor_type(t, models::QuantMix::q4_k_m, hp);
                               });
    return m;
}

// Full-size dense Qwen3.6-27B (qwen35) with llama-quantize's Q4_K_M types.
inline const SparseModel& q36_27b_q4km() {
    static const SparseModel m(temp_path("q36_27b"), models::synth_preset("qwen3.6-27b"),
                               [](const models::TensorSpec& t) {
                                   static const models::Hparams hp = models::synth_preset("qwen3.6-27b");
                                   return models::choose_tensor_type(t, models::QuantMix::q4_k_m, hp);
                               });
    return m;
}

// An Unsloth-UD-like variant: the experts of layers 0..3 in Q8_0 (about twice the bytes), every
// other weight as Q4_K_M.
inline constexpr int64_t kFatLayers = 4;
inline const SparseModel& q36_ud_like() {
    static const SparseModel m(
        temp_path("q36ud"), models::synth_preset("qwen3.6-35b-a3b"), [](const models::TensorSpec& t) {
            static const models::Hparams hp = models::synth_preset("qwen3.6-35b-a3b");
            if (t.name.find("_exps") != std::string::npos)
                return t.layer < kFatLayers ? quant::TypeId::q8_0 : quant::TypeId::q4_k;
            return models::choose_tensor_type(t, models::QuantMix::q4_k_m, hp);
        });
    return m;
}

}  // namespace mox::plan::fixtures
