// A model of any architecture in the registry (models/arch.h): weights bound to a GGUF file and the
// generic trunk every recipe shares,
//   x = embed(tokens); per layer: x += mixer(norm(x)); x += ffn(ffn_norm(x)); logits = output(norm(x)),
// with the mixer (attention or Gated DeltaNet) and the FFN (routed experts or a dense MLP) and their
// options taken from the recipe. The CPU
// forward is here (reference path: fp32 activations, weights dequantized on the fly; faster kernels
// plug in below the op calls); the GPU forward is models/gpu/gpu_forward.cpp.
#pragma once

#include "core/thread_pool.h"
#include "gguf/reader.h"
#include "models/expert_cache_policy.h"
#include "models/hparams.h"
#include "models/routing_trace.h"
#include "ops/moe.h"
#include "ops/weight.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mox::models {

struct LayerWeights {
    bool recurrent = false;                      // the mixer is Gated DeltaNet (else attention)
    std::vector<float> attn_norm, ffn_norm;      // the mixer's and the MoE's input norms
    std::vector<float> attn_norm_b, ffn_norm_b;  // their biases (NormKind::layer), else empty
    // Gated DeltaNet
    ops::Weight attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_out;
    std::vector<float> ssm_conv1d, ssm_dt_bias, ssm_a, ssm_norm;
    // Full attention (attn_q holds [query | gate] per head when the recipe gates the output)
    ops::Weight attn_q, attn_k, attn_v, attn_output;
    std::vector<float> attn_q_norm, attn_k_norm;                     // empty without the recipe's q/k norms
    std::vector<float> attn_q_b, attn_k_b, attn_v_b, attn_output_b;  // the recipe's biases, else empty
    // Dense FFN (FfnKind::dense)
    ops::Weight ffn_gate, ffn_up, ffn_down;
    // MoE
    ops::Weight router;
    ops::ExpertStack experts;
    ops::Weight shexp_gate, shexp_up, shexp_down;
    std::vector<float> shexp_gate_inp;  // [n_embd]: the shared expert's sigmoid gate
};

// Where the model runs. cuda: the model on the first GPU (models/gpu/gpu_forward.cpp; needs a
// -DMOX_CUDA=ON build), with the routed experts of chosen layers left in host memory (GpuOptions).
enum class Device { cpu, cuda };

// Where a layer's routed experts live when the model runs on the GPU.
enum class ExpertHome : uint8_t {
    gpu,     // uploaded to device memory
    pinned,  // copied into page-locked host memory (full-speed DMA for prefill streaming)
    mmap,    // left in the mapped file (page cache), its pages locked in place for prefill streaming
};

// How the GPU forward is laid out. place/ builds it from a Placement (the planner's or the
// user's flags); the backend executes it and never re-decides.
//  - Host expert layers: at decode the GPU hands the normalized hidden state and the top-k ids to the
//    CPU, which computes the selected experts while the GPU computes the shared expert; a prefill
//    micro-batch of at least stream_min_tokens tokens instead copies the layer's expert stacks to the
//    GPU (two staging buffers: the copy of the next host layer overlaps the compute of this one);
//    smaller batches are computed by the CPU like decode.
//  - vram_budget: every device allocation of the backend is counted against it (with the CUDA
//    context as the driver reports it); exceeding it is a mox::Error before the allocation.
struct GpuOptions {
    std::vector<ExpertHome> experts;  // per trunk layer; empty = every layer on the GPU
    bool token_embd_on_gpu = true;    // false: embedding rows looked up by the CPU and uploaded
    int64_t n_ubatch = 512;           // tokens per prefill micro-batch (activations sized for it)
    int64_t stream_min_tokens = 32;   // host expert layers: stream at >= this many tokens, else CPU
    int64_t n_ctx_max = 0;            // longest context a state may have (attention scratch); 0: trained
    uint64_t vram_budget = 0;         // bytes; 0 = no limit
    // The expert cache (models/gpu/gpu_expert_cache.h): a pool of about this many device bytes of
    // expert slots shared by the host expert layers, filled by the policy; 0: none. Decode computes
    // the experts it holds on the GPU and the others on the CPU; prefill streams as without it.
    uint64_t expert_cache_bytes = 0;
    std::shared_ptr<ExpertCachePolicy> expert_cache_policy;  // required with a cache
    int64_t expert_cache_admit_cap = 32;  // admissions per token (and copies in flight) at most
};

// The device-side part of a sequence's state (KV cache, DeltaNet state, captured decode graph),
// owned by the state and defined by the backend that made it.
struct DeviceSequenceState {
    virtual ~DeviceSequenceState() = default;
    virtual uint64_t bytes() const = 0;
    virtual void clear() = 0;
};

// Per-sequence state: KV cache of the attention layers and the DeltaNet conv/recurrent state.
struct StateOptions {
    int64_t n_ctx = 4096;
    quant::TypeId k_type = quant::TypeId::f16;
    quant::TypeId v_type = quant::TypeId::f16;
};

class SequenceState {
public:
    int64_t n_past() const { return n_past_; }
    int64_t n_ctx() const { return options_.n_ctx; }
    const StateOptions& options() const { return options_; }
    uint64_t bytes() const;  // everything this state allocated
    void clear();            // back to an empty sequence

private:
    friend class Model;
    friend class GpuForward;
    StateOptions options_;
    int64_t n_past_ = 0;
    std::vector<std::vector<uint8_t>> k_, v_;      // per attention layer: [n_ctx, row bytes]
    std::vector<std::vector<float>> conv_, ssm_;   // per DeltaNet layer
    std::unique_ptr<DeviceSequenceState> device_;  // instead of the above when the model runs on a GPU
};

// A batch: tokens of one or more sequences, each continuing its own state.
struct SequenceBatch {
    SequenceState* state = nullptr;
    std::span<const int32_t> tokens;
};

// The forward pass of a backend other than the CPU's: the model hands it the validated batch.
class ForwardBackend {
public:
    virtual ~ForwardBackend() = default;
    virtual std::unique_ptr<DeviceSequenceState> new_state(const StateOptions& options) = 0;
    virtual void forward(std::span<const SequenceBatch> batch, bool all_logits,
                         std::vector<float>& logits) = 0;
    virtual std::string summary() const = 0;
    // The arg max of the last logit row the last forward returned (the lowest index of the largest
    // value, as std::max_element), where the backend found it on the device; nullopt otherwise.
    virtual std::optional<int32_t> last_argmax() const { return std::nullopt; }
    // Model::forward_argmax's work (the batch already validated).
    virtual std::optional<int32_t> forward_argmax(std::span<const SequenceBatch> batch, int64_t n_candidates,
                                                  std::vector<float>& logits) {
        forward(batch, false, logits);
        const std::optional<int32_t> a = last_argmax();
        return a && *a < n_candidates ? a : std::nullopt;
    }
    // Model::set_routing_replay's trace (checked against the model already; null: none). The trace
    // outlives its use: the model holds it.
    virtual void set_routing_replay(const RoutingTrace* trace) = 0;
    // The expert cache's counters since load, where the backend has one.
    virtual std::optional<ExpertCacheStats> expert_cache_stats() const { return std::nullopt; }
};

class Model;
// Uploads the model to the first CUDA device as `options` place it (models/gpu/gpu_forward.cpp); a
// build without CUDA throws a mox::Error saying so.
std::unique_ptr<ForwardBackend> make_gpu_forward(const Model& model, const GpuOptions& options);

class Model {
public:
    // Binds every tensor of the file (checking names, shapes and that its type is supported).
    // n_threads <= 0: one per physical core. isa caps the CPU kernels (Isa::scalar: the reference
    // path); pin_threads binds the pool's workers to cores.
    // device: where the forward runs (Device::cuda uploads every weight to the GPU here).
    Model(const gguf::File& file, int n_threads, quant::Isa isa = quant::host_isa(), bool pin_threads = true,
          Device device = Device::cpu, const GpuOptions& gpu_options = {});
    ~Model();

    Device device() const { return device_; }
    const GpuOptions& gpu_options() const { return gpu_options_; }

    const Hparams& hparams() const { return hp_; }
    int64_t n_vocab() const { return hp_.n_vocab; }

    // Throws mox::Error if the KV types or the context are unusable for this model.
    std::unique_ptr<SequenceState> new_state(const StateOptions& options) const;

    // Runs the batch. logits receives [n_rows, n_vocab]: one row per token when all_logits, else
    // one row (the last token) per sequence, in batch order. A sequence that would exceed its
    // context is a mox::Error and leaves every state unchanged.
    void forward(std::span<const SequenceBatch> batch, bool all_logits, std::vector<float>& logits);
    // The arg max of the last row forward returned when the device computed it (the GPU path: the
    // caller's greedy choice without a scan of the vocabulary on the host); nullopt otherwise.
    std::optional<int32_t> last_argmax() const { return gpu_ ? gpu_->last_argmax() : std::nullopt; }
    // forward for a caller that wants only the arg max of the last row over ids [0, n_candidates)
    // (greedy decoding): where the device finds it (the GPU path) only it is copied back, logits is
    // left empty and the result is it. Otherwise (the CPU path, or the device's pick was not below
    // n_candidates) logits holds the last row as forward's and the result is nullopt.
    std::optional<int32_t> forward_argmax(std::span<const SequenceBatch> batch, int64_t n_candidates,
                                          std::vector<float>& logits);

    // The expert cache's counters since load (GpuOptions::expert_cache_bytes), or nullopt without one.
    std::optional<ExpertCacheStats> expert_cache_stats() const {
        return gpu_ ? gpu_->expert_cache_stats() : std::nullopt;
    }

    // Usage histogram of routed experts since load: [n_layer][n_expert] selections.
    const std::vector<std::vector<int64_t>>& expert_usage() const { return expert_usage_; }

    // When on, every forward appends each token's selected experts: trace[layer] holds
    // [n_tokens_seen, n_expert_used] ids in batch order (for routing statistics).
    // "2 threads (pinned), avx512 kernels": what the CPU path runs with.
    std::string cpu_summary() const;
    // "cuda: NVIDIA H200, 20.1 GiB of weights": what the GPU path runs with ("" on the CPU).
    std::string device_summary() const;
    void set_routing_trace(bool on) {
        if (on && !hp_.has_moe())
            fail("routing statistics: {} is a dense model (no routed experts)", hp_.arch_name());
        trace_routing_ = on;
    }
    const std::vector<std::vector<int32_t>>& routing_trace() const { return routing_trace_; }
    // What set_routing_trace collected, as a routing trace of this model (models/routing_trace.h).
    RoutingTrace recorded_routing(std::string name) const;

    // Routing replay (`--routing-trace`): the router still computes its top-k and their weights, but
    // the experts that run are the trace's, the i-th taking the router's i-th weight. A token at
    // position p of its sequence runs trace token p mod n_tokens: a trace shorter than the sequence
    // starts over. Throws mox::Error if the trace is of another model (architecture, experts, top-k,
    // layers). Null: the router's own choice again.
    void set_routing_replay(std::shared_ptr<const RoutingTrace> trace);
    const RoutingTrace* routing_replay() const { return replay_.get(); }

    // When on, every CPU forward appends its named intermediates, each [n_tokens, n_embd] in batch
    // order: "l{layer}_mixer_in" (the normed mixer input), "l{layer}_mixer_out", "l{layer}_moe_in",
    // "l{layer}_moe_out" (ffn_in, ffn_out for a dense FFN) (`mox logits --dump-activations`: an architecture
    // diffed layer by layer against transformers). The GPU path refuses it.
    void set_activation_dump(bool on) { dump_activations_ = on; }
    const std::map<std::string, std::vector<float>>& activations() const { return activations_; }

private:
    friend class GpuForward;
    // forward's checks of a batch (states, context, token ids), before anything runs.
    void check_batch(std::span<const SequenceBatch> batch) const;
    void deltanet(const LayerWeights& L, int64_t il, std::span<const SequenceBatch> batch, const float* u,
                  float* out);
    void attention(const LayerWeights& L, int64_t il, std::span<const SequenceBatch> batch, const float* u,
                   float* out);
    void moe(const LayerWeights& L, int64_t il, const float* u, int64_t n_tokens, float* out);
    // The recipe's FFN block: the MoE, or the dense SwiGLU.
    void ffn(const LayerWeights& L, int64_t il, const float* u, int64_t n_tokens, float* out);
    // The recipe's norm of n_tokens rows: RMSNorm (b unused) or LayerNorm.
    void norm(const float* x, const std::vector<float>& w, const std::vector<float>& b, int64_t n_tokens,
              float* out) const;
    // The rotary frequency factors of a sequence with this context (the recipe's rope_factors: the
    // long set beyond the original context), or null.
    const float* rope_factors(int64_t n_ctx) const;

    Hparams hp_;
    ThreadPool pool_;
    ops::Context ctx_;
    ops::Weight token_embd_, output_;
    std::vector<float> output_norm_, output_norm_b_, output_b_;
    std::vector<float> rope_factors_short_, rope_factors_long_;
    std::vector<LayerWeights> layers_;
    std::vector<int64_t> attn_index_, rec_index_;  // layer -> index among attention / DeltaNet layers
    std::vector<std::vector<int64_t>> expert_usage_;
    bool trace_routing_ = false;
    std::vector<std::vector<int32_t>> routing_trace_;
    std::shared_ptr<const RoutingTrace> replay_;
    std::vector<int64_t> replay_rows_;  // the trace token of each row of the batch the CPU computes
    // Replaces the ids of layer il's routing (rows of the batch in replay_rows_) by the trace's.
    void replay_routing(int64_t il, ops::Routing& routing) const;
    bool dump_activations_ = false;
    std::map<std::string, std::vector<float>> activations_;
    Device device_ = Device::cpu;
    GpuOptions gpu_options_;
    std::unique_ptr<ForwardBackend> gpu_;
};

}  // namespace mox::models
