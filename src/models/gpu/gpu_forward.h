// A model's forward on one CUDA device, for every recipe the GPU blocks implement (check_supported),
// private to models/gpu: the class shared by
// gpu_forward.cpp (upload, the forward, the dense layers) and gpu_forward_experts.cpp (routed
// experts that stay in host memory: the CPU hand-off and prefill streaming).
//
// Every weight the GpuOptions place on the GPU is uploaded once; activations live in buffers sized
// for one micro-batch (n_ubatch tokens) at load, so a forward never allocates device memory. A
// decode step (one token) is captured in a CUDA graph per sequence and replayed, host hand-offs
// included (the graph's kernels and the launching thread meet in host-mapped memory,
// ops/cuda_handoff.h; or host nodes with MOX_HANDOFF=hostfn); it is re-captured only when the
// attention grid must grow (context buckets).
#pragma once

#include "models/gpu/gpu_expert_cache.h"
#include "models/model.h"
#include "ops/cuda_delta_net.h"
#include "ops/cuda_handoff.h"
#include "ops/cuda_memory.h"
#include "ops/moe.h"

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mox::models {

// Projections that read the same input, uploaded back to back in one allocation. A decode step runs
// each run of equal type (and width) as one matvec whose outputs land consecutively; a batch runs
// every part on its own (the tensor-core matmul), part i writing [n, n_out_i] at n_ubatch * offset[i].
struct InputGroup {
    struct Run {
        ops::Weight whole;   // the run's rows as one matrix
        int64_t offset = 0;  // output offset of its first row
    };
    std::vector<ops::Weight> parts;  // device views (into the WeightArena)
    std::vector<int64_t> offset;     // per part: rows before it
    std::vector<Run> runs;
    int64_t n_out = 0;  // rows of all parts

    // Where part i's output starts for n tokens inside a buffer laid out for this group.
    float* out(float* base, size_t i, int64_t n, int64_t n_ubatch) const {
        return base + (n == 1 ? 1 : n_ubatch) * offset[i];
    }
};

// Device views of one layer's weights (all inside the WeightArena); fp32 vectors as plain pointers.
struct GpuLayer {
    const float *attn_norm = nullptr, *ffn_norm = nullptr;
    const float *attn_norm_b = nullptr, *ffn_norm_b = nullptr;  // LayerNorm biases (NormKind::layer)
    // Gated DeltaNet
    InputGroup dn_in;  // attn_qkv, attn_gate (z), ssm_beta, ssm_alpha
    ops::Weight ssm_out;
    const float *ssm_conv1d = nullptr, *ssm_dt_bias = nullptr, *ssm_a = nullptr, *ssm_norm = nullptr;
    // Attention
    InputGroup attn_in;  // attn_q (query, and the gate where the recipe has one), attn_k, attn_v
    ops::Weight attn_output;
    const float *attn_q_norm = nullptr, *attn_k_norm = nullptr;
    // The recipe's projection biases, or null: one per part of attn_in (q, k, v), then the output's.
    const float* attn_in_b[3] = {nullptr, nullptr, nullptr};
    const float* attn_output_b = nullptr;
    // MoE
    // The router, with the shared expert's gate vector as one more row when there is a shared
    // expert: a decode step gets n_expert + 1 logits from one matvec, the last one the shared gate's.
    InputGroup router_in;
    ops::Weight gate_exps, up_exps, down_exps;  // not valid() when the experts stay on the host
    // The SwiGLU every token runs: the MoE's shared expert, or the dense FFN (FfnKind::dense).
    ops::Weight swiglu_down;
    InputGroup swiglu_gate_up;  // one matmul for both when they share a type
    const float* shexp_gate_inp = nullptr;
};

// Every weight the GPU holds in one device allocation, so that the driver rounds once and the
// memory model's byte count is the allocation (models/gpu_memory.h). Filled in two passes over the
// same upload code: a counting pass that only adds up sizes, then the real one.
class WeightArena {
public:
    static constexpr size_t kAlign = 256;
    static constexpr size_t kPad = 16;  // zero bytes after each upload (the kernels' vector loads)

    bool counting() const { return counting_; }
    size_t used() const { return used_; }
    // After the counting pass: one allocation of what it counted; the next pass fills it.
    void allocate();
    // Copies `parts` back to back (one padded run) and returns the device address of the first.
    // Counting pass: a null pointer.
    uint8_t* put(std::initializer_list<std::pair<const void*, size_t>> parts, cuda::StreamHandle s);
    uint8_t* put(const std::vector<std::pair<const void*, size_t>>& parts, cuda::StreamHandle s);

private:
    bool counting_ = true;
    size_t used_ = 0;
    cuda::DeviceBuffer buffer_;
};

// A layer whose routed experts stay in host memory (GpuOptions::experts != gpu).
struct HostExpertLayer {
    int64_t layer = 0;  // trunk layer
    ExpertHome home = ExpertHome::mmap;
    ops::ExpertStack stack;   // host views the CPU computes from (the file's pages or `copy`)
    cuda::PinnedBuffer copy;  // ExpertHome::pinned: the three stacks, page-locked
    bool streamable = false;  // stack memory is page-locked (copied or registered): DMA-able
    // Byte offsets of gate/up/down inside a staging buffer (each part padded by 16 bytes).
    size_t up_at = 0, down_at = 0, bytes = 0;
};

// What a host node needs: the layer and the token count of the hand-off it serves.
struct HostJob;

struct GpuSequence final : DeviceSequenceState {
    std::vector<cuda::DeviceBuffer> k, v;       // per attention layer: [n_ctx, row bytes]
    std::vector<cuda::DeviceBuffer> conv, ssm;  // per DeltaNet layer
    StateOptions options;
    cuda::Graph decode_graph;  // valid for keys up to graph_keys
    int64_t graph_keys = 0;
    int64_t graph_epoch = 0;  // GpuForward::graph_epoch_ when captured (a different one: capture again)

    uint64_t bytes() const override;
    void clear() override;
};

class GpuForward final : public ForwardBackend {
public:
    GpuForward(const Model& m, const GpuOptions& o);
    ~GpuForward() override;
    std::unique_ptr<DeviceSequenceState> new_state(const StateOptions& o) override;
    void forward(std::span<const SequenceBatch> batch, bool all_logits, std::vector<float>& logits) override;
    std::string summary() const override { return summary_; }
    std::optional<int32_t> last_argmax() const override { return last_argmax_; }
    std::optional<int32_t> forward_argmax(std::span<const SequenceBatch> batch, int64_t n_candidates,
                                          std::vector<float>& logits) override;
    void set_routing_replay(const RoutingTrace* trace) override;
    std::optional<ExpertCacheStats> expert_cache_stats() const override {
        return cache_ ? std::optional<ExpertCacheStats>(cache_->stats()) : std::nullopt;
    }

    // Called from a host node (gpu_forward_experts.cpp): the CPU computes the selected host experts
    // of the hand-off in hand_*; never throws (a failure is kept for forward() to rethrow).
    void run_host_job(const HostJob& job) noexcept;

private:
    // The forward of n <= n_ubatch tokens whose ids are already in tokens_ (or embeddings in
    // hand_embd_) and whose first position is in pos_, leaving the final-norm hidden states in u_.
    // Only launches and host nodes: capturable when n == 1.
    void trunk(GpuSequence& seq, int64_t n, int64_t max_keys);
    // The token mixers write their block output to `out` ([n, d]).
    void deltanet(const GpuLayer& L, int64_t ri, GpuSequence& seq, int64_t n, float* out);
    void attention(const GpuLayer& L, int64_t ai, GpuSequence& seq, int64_t n, int64_t max_keys, float* out);
    // Whether layer il's MoE input norm and router run as one launch (decode, GPU experts, a float
    // router in one run: cuda::add_rms_norm_matvec); trunk then leaves the logits to moe(). With the
    // DeltaNet conv in its projection's store (deltanet), 70 launches fewer per Qwen3.6 step: tg128
    // 340.4 vs 326.8 t/s on the H200, the norm about two thirds of it
    // (bench/results/2026-11-30-decode-fusions-h200).
    bool fused_norm_router(int64_t il, int64_t n) const;
    void moe(const GpuLayer& L, int64_t il, int64_t n, bool logits_ready = false);
    // The recipe's FFN block: u_ -> mix_.
    void ffn(const GpuLayer& L, int64_t il, int64_t n, bool logits_ready = false);
    // The recipe's norm of n rows (add_rms_norm's or add_layer_norm's residual adds, then the norm).
    void norm(float* x, const float* add, const float* w, const float* b, int64_t n, float* out,
              const float* add2 = nullptr);
    // The recipe's router over n rows of router_logits_ (row stride `stride`) into ids_ / weights_;
    // with a routing replay, layer il's ids then come from the trace.
    void route(int64_t il, int64_t n, int64_t stride, cuda::StreamHandle stream);
    // Replay: the trace's ids of the micro-batch at positions [pos, pos + n) into replay_ids_.
    void replay_upload(int64_t pos, int64_t n);
    // Decode of a host expert layer the cache serves: the pool's experts (and the shared expert) on
    // the side stream into shared_, while the CPU computes the rest; u_ -> mix_.
    void cached_moe_handoff(const GpuLayer& L, int64_t il);
    // The expert cache over the host expert layers (GpuOptions::expert_cache_bytes).
    void load_expert_cache(const GpuOptions& o);
    // The rotary frequency factors on the device for a sequence of this context, or null.
    const float* rope_factors(int64_t n_ctx) const;
    // out [n, d] = the layer's unrouted SwiGLU of u_ (the shared expert, not yet gated, or the dense
    // FFN), on `stream`.
    void swiglu(const GpuLayer& L, int64_t n, float* out, cuda::StreamHandle stream);
    // Uploads every weight the options place on the GPU into `arena`; returns their bytes.
    uint64_t upload_weights(const GpuOptions& o, WeightArena& arena);
    // Host expert layers (gpu_forward_experts.cpp).
    void load_host_experts(const GpuOptions& o);
    void host_moe_handoff(const GpuLayer& L, int64_t il, int64_t n);  // the CPU computes the experts
    // out [n, d] = the host experts of trunk layer `layer` for x [n, d] routed by ids/weights [n, k],
    // by the CPU; false (the exception kept for forward() to rethrow) if it failed now or before.
    bool host_moe(int64_t layer, int64_t n, const float* x, const int32_t* ids, const float* weights,
                  float* out) noexcept;
    // Decode with the polling hand-off: after the graph of `step` was launched, the CPU side of every
    // host layer in order; then, after the stream finished, the GPU side's verdict.
    void serve_host_layers(uint32_t step);
    void check_handoff() const;
    void host_moe_streamed(const GpuLayer& L, int64_t il, int64_t n);  // the GPU, from staging
    void stream_begin();  // before a micro-batch: start copying the first two streamed layers
    void stream_copy(size_t order, int buffer);  // the order-th streamed layer into staging[buffer]
    bool streaming(int64_t n) const;
    // F32 weights keep their precision in the batched products (the tensor cores' precise mode: weights
    // and activations as two fp16 parts each, ~1e-5 relative at 2-3x the time): a user who keeps F32
    // weights asks for it, and the goldens compare against transformers at F32. Other types round both
    // operands to fp16 as llama.cpp does.
    static bool precise(quant::TypeId weight_type) { return weight_type == quant::TypeId::f32; }
    // y [n, n_out] = x [n, n_in] W^T: matvec for up to 8 tokens, the tensor-core matmul above.
    void linear(const ops::Weight& w, const float* x, int64_t n, float* y, cuda::StreamHandle stream);
    void linear(const ops::Weight& w, const float* x, int64_t n, float* y) {
        linear(w, x, n, y, stream_.handle());
    }
    // Every part of g for n tokens of x, into a buffer laid out for g (InputGroup::out).
    void project(const InputGroup& g, const float* x, int64_t n, float* base);
    // Logits of `count` (<= 8) consecutive rows of u_ from row r0 into logits_; then to host memory.
    // A single row's arg max goes along (cuda::argmax, into the slot after the logit rows).
    void logits_compute(int64_t r0, int64_t count);
    // Into logits rows [row_out, row_out + count) (sized by the caller), or, during forward_argmax,
    // a single row's arg max alone when it is below argmax_limit_ (logits stays empty then).
    void logits_fetch(int64_t count, std::vector<float>& logits, int64_t row_out);
    uint64_t* argmax_slot(void* logits_base) const;  // in logits_ or logits_host_
    // Embedding rows of n tokens by the CPU into hand_embd_ (token_embd on the host).
    void embed_on_host(const int32_t* tokens, int64_t n);

    const Model& m_;
    const Hparams& hp_;
    const int64_t n_ubatch_;
    const int64_t n_ctx_max_;
    const int64_t stream_min_tokens_;
    cuda::Stream stream_;       // the forward
    cuda::Stream side_stream_;  // the shared expert while the CPU computes a hand-off
    cuda::Stream copy_stream_;  // expert streaming
    cuda::Event fork_, join_;
    cuda::Event ready_[2], freed_[2];  // staging buffer b: filled / no longer read
    std::string summary_;
    WeightArena arena_;
    ops::Weight token_embd_, output_;  // token_embd_ not valid() when it stays on the host
    const float* output_norm_ = nullptr;
    const float* output_norm_b_ = nullptr;  // NormKind::layer
    const float* output_b_ = nullptr;       // the recipe's output_bias
    const float *rope_factors_short_ = nullptr, *rope_factors_long_ = nullptr;
    std::vector<GpuLayer> layers_;
    // Host expert layers: per trunk layer an index into host_ (-1: on the GPU).
    std::vector<int64_t> host_index_;
    std::vector<HostExpertLayer> host_;
    std::vector<cuda::HostRegistration> registrations_;  // mmap'd stacks locked in place
    std::vector<int64_t> streamed_;                      // trunk layers streamed in prefill, in order
    std::vector<int64_t> stream_order_;                  // per trunk layer: its index in streamed_ (-1: none)
    cuda::DeviceBuffer staging_[2];
    std::vector<std::unique_ptr<HostJob>> decode_jobs_, batch_jobs_;  // per trunk layer
    // Host nodes: batches (n > 1, not in a graph) always, decode with MOX_HANDOFF=hostfn.
    cuda::PinnedBuffer hand_x_, hand_out_, hand_ids_, hand_weights_, hand_embd_;
    // Decode's polling hand-off, one slot per host layer (empty with MOX_HANDOFF=hostfn).
    cuda::HandoffChannel channel_;
    ops::Routing host_routing_;  // reused by every hand-off (no allocation per token once grown)
    std::exception_ptr host_error_;
    // Time the CPU spent in hand-offs (MOX_PROFILE=1 prints it when the model goes away): what the
    // decode of host expert layers costs on the CPU, against the token time the caller measures.
    bool profile_ = false;
    std::atomic<int64_t> host_jobs_{0}, host_tokens_{0}, host_ns_{0};
    std::atomic<bool> host_failed_{false};
    // The last logit row's arg max, computed on the device (last_argmax).
    std::optional<int32_t> last_argmax_;
    // While forward_argmax runs: its n_candidates (0 otherwise).
    int64_t argmax_limit_ = 0;
    int64_t decode_steps_ = 0;  // decode graph launches so far
    int64_t graph_epoch_ = 0;   // bumped when what a decode graph does changes (replay on or off)
    // Routing replay (Model::set_routing_replay): the trace, and each micro-batch's ids of every
    // trunk layer, int32 [n_layer][n_ubatch][k] (device, and its pinned staging).
    const RoutingTrace* replay_ = nullptr;
    cuda::DeviceBuffer replay_ids_;
    cuda::PinnedBuffer replay_stage_;
    std::unique_ptr<GpuExpertCache> cache_;
    cuda::DeviceBuffer cache_ids_, cache_weights_;  // a decode step's selections as pool slots [k]
    int64_t profile_step_ = 0;                      // MOX_CUDA_PROFILE_STEP; 0: none profiled
    // Activations for one micro-batch (fp32, token-major rows).
    cuda::DeviceBuffer tokens_, pos_;  // int32 [n_ubatch], int32 [1]
    cuda::DeviceBuffer x_, u_, mix_, shared_;
    // One token's mixer output where the MoE input norm is fused into the router: it joins the
    // residual x at the next norm (add_rms_norm's add2), after the MoE output in mix_ exists.
    cuda::DeviceBuffer mixer_out_;
    cuda::DeviceBuffer dn_proj_, conv_, y_;                 // DeltaNet: [qkv | z | beta | alpha] projections
    cuda::DeviceBuffer attn_proj_, q_, o_, attn_ws_;        // attention: [query+gate | k | v] projections
    cuda::DeviceBuffer router_logits_, ids_, weights_, h_;  // MoE
    cuda::DeviceBuffer swiglu_gu_,
        swiglu_h_;             // the shared expert's or the dense FFN's [gate | up], SiLU(gate) * up
    cuda::DeviceBuffer work_;  // matmul / batched-MoE scratch
    cuda::DeviceBuffer logits_;
    cuda::PinnedBuffer logits_host_;
    cuda::PinnedBuffer staging_ids_;  // token ids and position for the next upload
};

struct HostJob {
    GpuForward* self = nullptr;
    int64_t layer = 0;
    int64_t n = 1;
};

}  // namespace mox::models
