#include "models/gpu/gpu_expert_cache.h"

#include "core/error.h"
#include "core/units.h"
#include "models/gpu_memory.h"

#include <algorithm>
#include <cstring>

namespace mox::models {

namespace {

uint64_t slice_bytes(const ops::Weight& w) {
    return static_cast<uint64_t>(w.n_out) * w.row_bytes;
}

// The slot of the largest gate, up and down slices of these stacks (models/gpu_memory.h: the planner
// sizes the pool with the same arithmetic).
ExpertSlotLayout slot_layout(const std::vector<ops::ExpertStack>& stacks) {
    uint64_t g = 0, u = 0, d = 0;
    for (const ops::ExpertStack& s : stacks) {
        g = std::max(g, slice_bytes(s.gate));
        u = std::max(u, slice_bytes(s.up));
        d = std::max(d, slice_bytes(s.down));
    }
    return expert_slot_layout(g, u, d);
}

}  // namespace

uint64_t GpuExpertCache::slot_bytes_for(const std::vector<ops::ExpertStack>& stacks) {
    return slot_layout(stacks).bytes;
}

GpuExpertCache::GpuExpertCache(std::vector<Layer> layers, int64_t n_layer, int64_t n_expert, uint64_t bytes,
                               std::shared_ptr<ExpertCachePolicy> policy, int64_t admit_cap,
                               cuda::StreamHandle stream)
    : n_layer_(n_layer),
      n_expert_(n_expert),
      admit_cap_(admit_cap),
      policy_(std::move(policy)),
      layers_(std::move(layers)) {
    MOX_CHECK(policy_ != nullptr, "expert cache without a policy");
    MOX_CHECK(!layers_.empty(), "expert cache without host expert layers");
    if (admit_cap_ < 0) fail("--cache-admit-cap {}: expected 0 or more admissions per token", admit_cap_);
    std::vector<ops::ExpertStack> stacks;
    for (const Layer& l : layers_) stacks.push_back(l.host);
    const ExpertSlotLayout layout = slot_layout(stacks);
    slot_bytes_ = layout.bytes, up_at_ = layout.up_at, down_at_ = layout.down_at;
    slots_ = expert_cache_slots(bytes, slot_bytes_);  // the zero slot is one more
    if (slots_ < 1)
        fail("--expert-cache {}: smaller than two expert slots of {} each (one expert and the zero slot)",
             format_bytes(bytes), format_bytes(slot_bytes_));
    policy_name_ = policy_->name();
    const int64_t n_keys = n_layer_ * n_expert_;
    policy_->reset(slots_, n_keys);

    pool_ = cuda::DeviceBuffer(expert_cache_pool_bytes(slots_, slot_bytes_));
    pool_.zero(stream);
    cuda::device_synchronize();  // the zeros land before any copy of the copy stream
    table_ = cuda::DeviceBuffer(static_cast<size_t>(n_keys) * sizeof(int32_t));
    std::string why;
    table_stage_ = cuda::PinnedBuffer::try_alloc(table_.size(), &why);
    if (table_stage_.empty()) fail("--expert-cache: pinned host memory for the slot table: {}", why);
    host_table_.assign(static_cast<size_t>(n_keys), -1);
    slot_key_.assign(static_cast<size_t>(slots_), -1);
    key_slot_.assign(static_cast<size_t>(n_keys), -1);
    for (int64_t slot = slots_ - 1; slot >= 0; --slot) free_.push_back(slot);
    for (int i = 0; i < 4; ++i) events_.emplace_back();

    view_index_.assign(static_cast<size_t>(n_layer_), -1);
    for (size_t i = 0; i < layers_.size(); ++i) {
        const Layer& l = layers_[i];
        MOX_CHECK(l.layer >= 0 && l.layer < n_layer_ && l.host.gate.n_expert == n_expert_,
                  "expert cache layer {}", l.layer);
        view_index_[static_cast<size_t>(l.layer)] = static_cast<int64_t>(i);
        ops::ExpertStack v = l.host;
        const auto* base = pool_.as<const uint8_t>();
        v.gate.data = base;
        v.up.data = base + up_at_;
        v.down.data = base + down_at_;
        for (ops::Weight* w : {&v.gate, &v.up, &v.down}) {
            w->n_expert = slots_ + 1;
            w->expert_bytes = slot_bytes_;
        }
        views_.push_back(v);
    }

    // A policy's starting set (a static hot set): copied now, resident from the first step.
    for (const ExpertKey key : policy_->initial()) {
        MOX_CHECK(key >= 0 && key < n_keys && key_slot_[static_cast<size_t>(key)] < 0,
                  "cache policy {}: initial key {}", policy_name_, key);
        if (free_.empty()) break;
        if (!serves(key / n_expert_)) continue;  // a layer whose experts the GPU holds anyway
        const int64_t slot = free_.back();
        copy_in(key, slot);
        host_table_[static_cast<size_t>(key)] = static_cast<int32_t>(slot);
        policy_->admitted(key);
        stats_.admissions++;
    }
    copy_stream_.synchronize();
    upload_table(stream);
}

const ops::ExpertStack& GpuExpertCache::pool_view(int64_t layer) const {
    MOX_CHECK(serves(layer), "expert cache: layer {} is not served", layer);
    return views_[static_cast<size_t>(view_index_[static_cast<size_t>(layer)])];
}

const int32_t* GpuExpertCache::device_table(int64_t layer) const {
    return table_.as<const int32_t>() + layer * n_expert_;
}

void GpuExpertCache::copy_in(ExpertKey key, int64_t slot) {
    const int64_t layer = key / n_expert_, expert = key % n_expert_;
    const ops::ExpertStack& h = layers_[static_cast<size_t>(view_index_[static_cast<size_t>(layer)])].host;
    auto* dst = pool_.as<uint8_t>() + static_cast<size_t>(slot) * slot_bytes_;
    const cuda::StreamHandle c = copy_stream_.handle();
    const ops::Weight g = h.gate.expert(expert), u = h.up.expert(expert), d = h.down.expert(expert);
    cuda::copy_to_device(dst, g.data, slice_bytes(g), c);
    cuda::copy_to_device(dst + up_at_, u.data, slice_bytes(u), c);
    cuda::copy_to_device(dst + down_at_, d.data, slice_bytes(d), c);
    stats_.bytes_copied += slice_bytes(g) + slice_bytes(u) + slice_bytes(d);
    slot_key_[static_cast<size_t>(slot)] = key;
    key_slot_[static_cast<size_t>(key)] = slot;
    MOX_CHECK(!free_.empty() && free_.back() == slot, "expert cache: slot {} is not the next free one", slot);
    free_.pop_back();
}

void GpuExpertCache::upload_table(cuda::StreamHandle stream) {
    std::memcpy(table_stage_.data(), host_table_.data(), table_.size());
    cuda::copy_to_device(table_.data(), table_stage_.data(), table_.size(), stream);
    table_dirty_ = false;
}

void GpuExpertCache::before_step(cuda::StreamHandle stream) {
    // The copy stream runs in order: admissions finish in the order they were enqueued.
    size_t done = 0;
    for (; done < pending_.size(); ++done) {
        const Pending& p = pending_[done];
        if (!events_[p.event].done()) break;
        // Evicted again before its copy landed: the slot went to a later key (its own pending entry).
        if (slot_key_[static_cast<size_t>(p.slot)] != p.key) continue;
        host_table_[static_cast<size_t>(p.key)] = static_cast<int32_t>(p.slot);
        table_dirty_ = true;
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(done));
    if (table_dirty_) upload_table(stream);  // the previous upload finished: steps are synchronous
}

bool GpuExpertCache::access(int64_t layer, int32_t expert) {
    const ExpertKey key = layer * n_expert_ + expert;
    const bool hit = host_table_[static_cast<size_t>(key)] >= 0;
    policy_->access(key, hit);
    if (hit) {
        stats_.hits++;
    } else {
        stats_.misses++;
        missed_.push_back(key);
    }
    return hit;
}

void GpuExpertCache::after_step() {
    stats_.tokens++;
    policy_->end_token();
    int64_t copies = 0;
    for (const ExpertKey key : missed_) {
        if (copies >= admit_cap_ || static_cast<int64_t>(pending_.size()) >= admit_cap_) break;
        if (key_slot_[static_cast<size_t>(key)] >= 0) continue;  // already on its way in
        if (!policy_->admit(key)) continue;
        if (free_.empty()) {
            const ExpertKey victim = policy_->victim();
            MOX_CHECK(victim >= 0 && victim < n_layer_ * n_expert_, "cache policy {}: victim {}",
                      policy_name_, victim);
            const int64_t slot = key_slot_[static_cast<size_t>(victim)];
            MOX_CHECK(slot >= 0, "cache policy {}: victim {} is not resident", policy_name_, victim);
            policy_->evicted(victim);
            stats_.evictions++;
            if (host_table_[static_cast<size_t>(victim)] >= 0) table_dirty_ = true;
            host_table_[static_cast<size_t>(victim)] = -1;
            key_slot_[static_cast<size_t>(victim)] = -1;
            slot_key_[static_cast<size_t>(slot)] = -1;
            free_.push_back(slot);
        }
        const int64_t slot = free_.back();
        copy_in(key, slot);
        pending_.push_back({slot, key, next_event_});
        policy_->admitted(key);
        stats_.admissions++;
        copies++;
    }
    missed_.clear();
    if (copies > 0) {
        events_[next_event_].record(copy_stream_.handle());
        next_event_ = (next_event_ + 1) % events_.size();
    }
}

}  // namespace mox::models
