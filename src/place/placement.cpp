#include "place/placement.h"

#include "core/error.h"
#include "quant/types.h"

#include <algorithm>
#include <charconv>
#include <utility>

namespace mox::place {

const char* tier_name(Tier t) {
    switch (t) {
        case Tier::gpu:
            return "gpu";
        case Tier::pinned_host:
            return "pinned_host";
        case Tier::mmap_host:
            return "mmap_host";
    }
    return "?";
}

std::optional<Tier> tier_from_name(std::string_view s) {
    for (Tier t : kAllTiers)
        if (s == tier_name(t)) return t;
    return std::nullopt;
}

namespace {

// N of "blk.N.rest", or -1.
int64_t layer_of(std::string_view name) {
    constexpr std::string_view prefix = "blk.";
    if (name.substr(0, prefix.size()) != prefix) return -1;
    const std::string_view rest = name.substr(prefix.size());
    int64_t n = -1;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
    if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.') return -1;
    return n;
}

// dense: the file has no routed experts, and a layer's dense FFN (ffn_gate, ffn_up, ffn_down) is
// placed as a stack of one expert (models::Hparams::n_ffn_experts).
ExpertPart expert_part_of(std::string_view name, int64_t layer, bool dense) {
    if (layer < 0) return ExpertPart::none;
    const size_t dot = name.find('.', 4);  // after "blk.N"
    const std::string_view rest = name.substr(dot + 1);
    if (rest == (dense ? "ffn_gate.weight" : "ffn_gate_exps.weight")) return ExpertPart::gate;
    if (rest == (dense ? "ffn_up.weight" : "ffn_up_exps.weight")) return ExpertPart::up;
    if (rest == (dense ? "ffn_down.weight" : "ffn_down_exps.weight")) return ExpertPart::down;
    return ExpertPart::none;
}

const char* part_name(ExpertPart p) {
    switch (p) {
        case ExpertPart::gate:
            return "gate";
        case ExpertPart::up:
            return "up";
        case ExpertPart::down:
            return "down";
        case ExpertPart::none:
            break;
    }
    return "none";
}

}  // namespace

Placement Placement::uniform(const gguf::File& file, Tier tier) {
    Placement p;
    const std::string arch = file.get_string_or("general.architecture", "");
    const int64_t block_count =
        arch.empty() ? 0 : static_cast<int64_t>(file.get_uint_or(arch + ".block_count", 0));
    const int64_t n_nextn =
        arch.empty() ? 0 : static_cast<int64_t>(file.get_uint_or(arch + ".nextn_predict_layers", 0));
    int64_t max_layer = -1;
    for (const gguf::TensorInfo& t : file.tensors()) max_layer = std::max(max_layer, layer_of(t.name));
    if (max_layer >= block_count && block_count > 0)
        fail("{}: tensor of layer {} but {}.block_count is {}", file.path(), max_layer, arch, block_count);
    p.n_layer_ = block_count > 0 ? block_count : max_layer + 1;
    const int64_t mtp_first = n_nextn > 0 ? p.n_layer_ - n_nextn : -1;
    p.experts_.resize(static_cast<size_t>(p.n_layer_));
    const bool dense =
        std::none_of(file.tensors().begin(), file.tensors().end(),
                     [](const gguf::TensorInfo& t) { return t.name.find("_exps.") != std::string::npos; });
    p.dense_ffn_ = dense;

    for (const gguf::TensorInfo& t : file.tensors()) {
        TensorEntry e;
        e.name = t.name;
        e.layer = layer_of(t.name);
        e.cls = models::classify_tensor(t.name, mtp_first);
        e.part = expert_part_of(t.name, e.layer, dense);
        e.type = t.type;
        e.ne = t.ne;
        e.n_bytes = t.n_bytes;
        e.tier = tier;
        const size_t index = p.tensors_.size();
        if (e.part != ExpertPart::none) {
            // [n_in, n_out, n_expert]: every expert a contiguous slice of n_out rows (a dense FFN's
            // [n_in, n_out]: one expert).
            const int64_t n_expert = dense ? 1 : t.ne[2];
            if (t.n_dims != (dense ? 2 : 3) || n_expert < 1)
                fail("{}: {} must be {}", file.path(), t.name,
                     dense ? "2-D [n_in, n_out]" : "an expert stack, 3-D [n_in, n_out, n_expert]");
            if (p.n_expert_ == 0) p.n_expert_ = n_expert;
            if (n_expert != p.n_expert_)
                fail("{}: {} has {} experts, earlier stacks {}", file.path(), t.name, n_expert, p.n_expert_);
            const uint64_t slice = quant::row_bytes(t.type, t.ne[0]) * static_cast<uint64_t>(t.ne[1]);
            if (slice * static_cast<uint64_t>(n_expert) != t.n_bytes)
                fail("{}: {} holds {} bytes, not {} experts of {} bytes", file.path(), t.name, t.n_bytes,
                     n_expert, slice);
            LayerExperts& le = p.experts_[static_cast<size_t>(e.layer)];
            const auto k = static_cast<size_t>(e.part);
            if (le.stack[k] >= 0) fail("{}: duplicate expert stack {}", file.path(), t.name);
            le.stack[k] = static_cast<int64_t>(index);
            le.slice_bytes[k] = slice;
            le.tier.assign(static_cast<size_t>(n_expert), tier);
        }
        if (!p.by_name_.emplace(e.name, index).second) fail("{}: duplicate tensor {}", file.path(), t.name);
        p.tensors_.push_back(std::move(e));
    }
    for (int64_t l = 0; l < p.n_layer_; ++l) {
        const LayerExperts& le = p.experts_[static_cast<size_t>(l)];
        const int present = (le.stack[0] >= 0) + (le.stack[1] >= 0) + (le.stack[2] >= 0);
        if (present != 0 && present != 3)
            fail("{}: layer {} has {} of the three expert stacks (gate, up, down)", file.path(), l, present);
    }
    return p;
}

size_t Placement::index_of(std::string_view name) const {
    const auto it = by_name_.find(std::string(name));
    if (it == by_name_.end()) fail("no tensor named '{}' in the model", name);
    return it->second;
}

const TensorEntry& Placement::tensor(std::string_view name) const {
    return tensors_[index_of(name)];
}

bool Placement::has_experts(int64_t layer) const {
    return layer >= 0 && layer < n_layer_ && experts_[static_cast<size_t>(layer)].stack[0] >= 0;
}

const Placement::LayerExperts& Placement::experts_of(int64_t layer) const {
    if (layer < 0 || layer >= n_layer_)
        fail("layer {} out of range: the model has layers 0..{}", layer, n_layer_ - 1);
    const LayerExperts& le = experts_[static_cast<size_t>(layer)];
    if (le.stack[0] < 0) fail("layer {} has no routed experts", layer);
    return le;
}

Placement::LayerExperts& Placement::experts_of(int64_t layer) {
    return const_cast<LayerExperts&>(std::as_const(*this).experts_of(layer));
}

std::optional<Tier> Placement::tier_of(std::string_view name) const {
    const TensorEntry& e = tensors_[index_of(name)];
    if (e.part == ExpertPart::none) return e.tier;
    const std::vector<Tier>& tiers = experts_of(e.layer).tier;
    for (Tier t : tiers)
        if (t != tiers.front()) return std::nullopt;
    return tiers.front();
}

Tier Placement::expert_tier(int64_t layer, int64_t expert) const {
    const LayerExperts& le = experts_of(layer);
    if (expert < 0 || expert >= n_expert_)
        fail("expert {} out of range: the model has experts 0..{}", expert, n_expert_ - 1);
    return le.tier[static_cast<size_t>(expert)];
}

std::array<int64_t, kTierCount> Placement::expert_counts(int64_t layer) const {
    std::array<int64_t, kTierCount> counts{};
    if (!has_experts(layer)) return counts;
    for (Tier t : experts_of(layer).tier) counts[static_cast<size_t>(t)]++;
    return counts;
}

uint64_t Placement::expert_slice_bytes(int64_t layer, ExpertPart part) const {
    MOX_CHECK(part != ExpertPart::none, "expert_slice_bytes needs a stack");
    return experts_of(layer).slice_bytes[static_cast<size_t>(part)];
}

uint64_t Placement::expert_bytes(int64_t layer) const {
    const LayerExperts& le = experts_of(layer);
    return le.slice_bytes[0] + le.slice_bytes[1] + le.slice_bytes[2];
}

void Placement::set_tier(std::string_view name, Tier tier) {
    TensorEntry& e = tensors_[index_of(name)];
    if (e.part != ExpertPart::none)
        fail(
            "{} is an expert stack ({}): experts are placed one by one, with their gate, up and down slices "
            "together",
            e.name, part_name(e.part));
    e.tier = tier;
}

void Placement::set_expert_tier(int64_t layer, int64_t expert, Tier tier) {
    LayerExperts& le = experts_of(layer);
    if (expert < 0 || expert >= n_expert_)
        fail("expert {} out of range: the model has experts 0..{}", expert, n_expert_ - 1);
    le.tier[static_cast<size_t>(expert)] = tier;
}

void Placement::set_layer_experts(int64_t layer, Tier tier) {
    LayerExperts& le = experts_of(layer);
    std::fill(le.tier.begin(), le.tier.end(), tier);
}

TierBytes Placement::bytes_per_tier() const {
    TierBytes out;
    for (const TensorEntry& e : tensors_)
        if (e.part == ExpertPart::none) out[e.tier] += e.n_bytes;
    for (const LayerExperts& le : experts_) {
        if (le.stack[0] < 0) continue;
        const uint64_t per_expert = le.slice_bytes[0] + le.slice_bytes[1] + le.slice_bytes[2];
        for (Tier t : le.tier) out[t] += per_expert;
    }
    return out;
}

uint64_t Placement::total_bytes() const {
    uint64_t sum = 0;
    for (const TensorEntry& e : tensors_) sum += e.n_bytes;
    return sum;
}

std::optional<Tier> class_tier(const Placement& p, int64_t layer, models::TensorClass cls, bool* split) {
    std::optional<Tier> tier;
    bool mixed = false;
    for (const TensorEntry& e : p.tensors()) {
        if (e.layer != layer || e.cls != cls) continue;
        const std::optional<Tier> t = p.tier_of(e.name);
        if (!t || (tier && *tier != *t))
            mixed = true;
        else
            tier = t;
    }
    if (split) *split = mixed;
    return mixed ? std::nullopt : tier;
}

LayerView layer_view(const Placement& p, int64_t layer) {
    LayerView v;
    v.layer = layer;
    bool any_attention = false, any_mtp = false;
    for (const TensorEntry& e : p.tensors()) {
        if (e.layer != layer) continue;
        any_attention |= e.cls == models::TensorClass::attention;
        any_mtp |= e.cls == models::TensorClass::mtp;
    }
    v.attention = any_attention;
    v.mtp = any_mtp;
    using C = models::TensorClass;
    v.mixer =
        class_tier(p, layer, any_mtp ? C::mtp : (any_attention ? C::attention : C::deltanet), &v.mixer_split);
    v.router = class_tier(p, layer, C::router, &v.router_split);
    v.shared_expert = class_tier(p, layer, C::shared_expert, &v.shared_split);
    v.norms = class_tier(p, layer, C::norms, &v.norms_split);
    v.experts = p.expert_counts(layer);
    return v;
}

}  // namespace mox::place
