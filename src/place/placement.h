// Placement as data (DESIGN.md "Placement is data", STYLE.md #6/#7): for every tensor of a GGUF file
// the memory tier it lives in, and for the routed-expert stacks one tier per single expert.
//
// An expert is one unit of placement: expert e of layer L is the e-th slice (ne[2] index) of the
// three stacks blk.L.ffn_{gate,up,down}_exps, [n_in, n_out] each, row_bytes(type, n_in) * n_out
// bytes each. The three slices of an expert always share a tier (the CPU or GPU computes the whole
// expert; splitting gate/up from down would ship the hidden activations across PCIe for nothing).
//
// A dense model (no _exps stacks) places each layer's FFN, blk.L.ffn_{gate,up,down}, as a stack of one
// expert: the GPU forward computes an FFN left in host memory on the CPU as it does routed experts.
//
// Bytes are exact: every tensor's n_bytes comes from the file; an expert slice is n_bytes / n_expert
// of its stack (checked to divide and to equal the row arithmetic).
#pragma once

#include "gguf/reader.h"
#include "models/summary.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mox::place {

enum class Tier : uint8_t {
    gpu,          // device memory of the (single) GPU
    pinned_host,  // page-locked host RAM (cudaHostAlloc): fast DMA, counts as locked memory
    mmap_host,    // pages of the mapped file: page cache, evictable, the default for the CPU
};
inline constexpr int kTierCount = 3;
inline constexpr std::array<Tier, kTierCount> kAllTiers{Tier::gpu, Tier::pinned_host, Tier::mmap_host};

const char* tier_name(Tier t);                           // "gpu", "pinned_host", "mmap_host"
std::optional<Tier> tier_from_name(std::string_view s);  // the names above

// Bytes per tier, indexed by Tier.
struct TierBytes {
    std::array<uint64_t, kTierCount> bytes{};
    uint64_t& operator[](Tier t) { return bytes[static_cast<size_t>(t)]; }
    uint64_t operator[](Tier t) const { return bytes[static_cast<size_t>(t)]; }
    uint64_t total() const { return bytes[0] + bytes[1] + bytes[2]; }
};

enum class ExpertPart : int8_t { none = -1, gate = 0, up = 1, down = 2 };

// One tensor of the file, as the placement sees it.
struct TensorEntry {
    std::string name;
    int64_t layer = -1;  // N of blk.N.*, -1 for global tensors
    models::TensorClass cls = models::TensorClass::other;
    ExpertPart part = ExpertPart::none;  // which routed-expert stack, if any
    quant::TypeId type = quant::TypeId::f32;
    std::array<int64_t, gguf::kMaxDims> ne{1, 1, 1, 1};
    uint64_t n_bytes = 0;
    Tier tier = Tier::mmap_host;  // unused for expert stacks (their experts carry the tier)
};

class Placement {
public:
    // Every tensor of `file` on `tier`. n_layer is the file's block_count (trunk + MTP blocks).
    static Placement uniform(const gguf::File& file, Tier tier);

    int64_t n_layer() const { return n_layer_; }
    // 0 when the file has no expert stacks; 1 for a dense model's FFN
    int64_t n_expert() const { return n_expert_; }
    bool dense_ffn() const { return dense_ffn_; }  // the stacks are dense FFNs (no routed experts)
    const std::vector<TensorEntry>& tensors() const { return tensors_; }
    const TensorEntry& tensor(std::string_view name) const;  // throws mox::Error if absent
    bool has_experts(int64_t layer) const;

    // The tier of a tensor; for an expert stack the tier its experts share, or nullopt when the
    // experts of that layer are split across tiers.
    std::optional<Tier> tier_of(std::string_view name) const;
    Tier expert_tier(int64_t layer, int64_t expert) const;
    // How many experts of `layer` live on each tier.
    std::array<int64_t, kTierCount> expert_counts(int64_t layer) const;
    // Bytes of one expert of `layer` (its three slices) and of one slice of one stack.
    uint64_t expert_bytes(int64_t layer) const;
    uint64_t expert_slice_bytes(int64_t layer, ExpertPart part) const;

    // Edits. set_tier refuses an expert stack (use the expert forms: an expert moves as a whole).
    void set_tier(std::string_view name, Tier tier);
    void set_expert_tier(int64_t layer, int64_t expert, Tier tier);
    void set_layer_experts(int64_t layer, Tier tier);

    // Exact weight bytes per tier: whole tensors plus expert slices. total() = sum of n_bytes.
    TierBytes bytes_per_tier() const;
    uint64_t total_bytes() const;

private:
    struct LayerExperts {
        std::array<int64_t, 3> stack{-1, -1, -1};      // index into tensors_ per ExpertPart
        std::array<uint64_t, 3> slice_bytes{0, 0, 0};  // n_bytes / n_expert per stack
        std::vector<Tier> tier;                        // [n_expert]
    };
    const LayerExperts& experts_of(int64_t layer) const;
    LayerExperts& experts_of(int64_t layer);
    size_t index_of(std::string_view name) const;

    int64_t n_layer_ = 0;
    int64_t n_expert_ = 0;
    bool dense_ffn_ = false;
    std::vector<TensorEntry> tensors_;  // file order
    std::unordered_map<std::string, size_t> by_name_;
    std::vector<LayerExperts> experts_;  // [n_layer]; stack == -1 where a layer has no experts
};

// Per-layer view for printing: the tier of each part of the layer (nullopt: absent or split).
struct LayerView {
    int64_t layer = 0;
    bool attention = false;  // full attention (true) or Gated DeltaNet (false)
    bool mtp = false;        // a multi-token-prediction block (not run by the trunk)
    std::optional<Tier> mixer, router, shared_expert, norms;
    bool mixer_split = false, router_split = false, shared_split = false, norms_split = false;
    std::array<int64_t, kTierCount> experts{};  // count per tier
};
LayerView layer_view(const Placement& p, int64_t layer);

// The tier shared by every tensor of `layer` in class `cls`; nullopt if there are none or they
// differ (`split` tells which).
std::optional<Tier> class_tier(const Placement& p, int64_t layer, models::TensorClass cls,
                               bool* split = nullptr);

}  // namespace mox::place
