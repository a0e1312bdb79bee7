// The expert cache of the GPU forward: one pool of expert slots in device memory shared by every layer
// whose routed experts live in host memory (DESIGN.md "Expert cache", seed 000 §6.2.1). At decode the
// GPU computes the selected experts the pool holds while the CPU computes the others through the usual
// hand-off; the two sums meet on the GPU. A policy (models/expert_cache_policy.h) decides which experts
// deserve a slot; admissions are copied on their own stream from page-locked host memory and never
// stall a step.
//
// Residency changes only between decode steps, and the device and the host always agree on it for a
// step: before each step, admissions whose copies finished enter the host table, and a changed table is
// uploaded on the forward stream ahead of the step's graph; an eviction leaves the host table at once,
// so the next upload drops it before the copy that reuses its slot can be read by any step (the step
// that last read it has finished: steps are synchronous).
//
// A slot holds one expert of any served layer, gate | up | down at fixed offsets sized for the largest
// layer (Q4_K_M mixes Q4_K and Q6_K down stacks); the kernels read the pool through views whose expert
// stride is the slot size (ops::Weight::expert_bytes). One more slot of zeros takes the selections the
// pool does not hold, so the GPU's sum adds exactly nothing for them.
#pragma once

#include "models/expert_cache_policy.h"
#include "ops/cuda_memory.h"
#include "ops/moe.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace mox::models {

class GpuExpertCache {
public:
    struct Layer {
        int64_t layer = 0;      // trunk layer
        ops::ExpertStack host;  // page-locked (pinned or registered) host stacks: the copies' source
    };
    // A pool of as many slots as fit in `bytes` (at least one, else a mox::Error saying how many bytes
    // one slot takes) for `layers`, of a model with n_layer trunk layers of n_expert experts.
    GpuExpertCache(std::vector<Layer> layers, int64_t n_layer, int64_t n_expert, uint64_t bytes,
                   std::shared_ptr<ExpertCachePolicy> policy, int64_t admit_cap, cuda::StreamHandle stream);

    // Device bytes of one slot for these stacks (the pool is a whole number of them plus the zero slot).
    static uint64_t slot_bytes_for(const std::vector<ops::ExpertStack>& stacks);

    bool serves(int64_t layer) const { return view_index_[static_cast<size_t>(layer)] >= 0; }
    // The pool as expert stacks of `layer`'s types: slot s is expert s (ids from lookup()).
    const ops::ExpertStack& pool_view(int64_t layer) const;
    // The device table of `layer`: [n_expert] slot or -1.
    const int32_t* device_table(int64_t layer) const;
    int32_t zero_slot() const { return static_cast<int32_t>(slots_); }
    uint64_t device_bytes() const { return pool_.size() + table_.size(); }

    // Host side, on the thread that runs decode, in this order per step:
    // before the step's launch: finished admissions enter, the table goes up if it changed.
    void before_step(cuda::StreamHandle stream);
    // During the step (the hand-off of `layer`): whether the pool holds `expert` for this step. Every
    // selection of the token is reported once through it.
    bool access(int64_t layer, int32_t expert);
    // After the step finished: the policy's decisions, admissions enqueued on the copy stream.
    void after_step();

    ExpertCacheStats stats() const {
        ExpertCacheStats s = stats_;
        s.slots = slots_;
        s.slot_bytes = slot_bytes_;
        s.device_bytes = device_bytes();
        return s;
    }
    const std::string& policy_name() const { return policy_name_; }

private:
    struct Pending {
        int64_t slot = 0;
        ExpertKey key = 0;
        size_t event = 0;  // index into events_
    };
    void copy_in(ExpertKey key, int64_t slot);
    void upload_table(cuda::StreamHandle stream);

    int64_t n_layer_ = 0, n_expert_ = 0, slots_ = 0, admit_cap_ = 0;
    uint64_t slot_bytes_ = 0, up_at_ = 0, down_at_ = 0;
    std::shared_ptr<ExpertCachePolicy> policy_;
    std::string policy_name_;
    std::vector<Layer> layers_;
    std::vector<int64_t> view_index_;      // per trunk layer: index into layers_ / views_, or -1
    std::vector<ops::ExpertStack> views_;  // the pool as each served layer's stacks
    cuda::DeviceBuffer pool_;              // [slots + 1][slot_bytes]: the last slot is zeros
    cuda::DeviceBuffer table_;             // int32 [n_layer][n_expert]
    cuda::PinnedBuffer table_stage_;       // the host table as the next upload sends it
    std::vector<int32_t> host_table_;      // what the device table holds for the current step
    bool table_dirty_ = false;
    std::vector<ExpertKey> slot_key_;  // [slots]: the key a slot holds or is receiving, -1 free
    std::vector<int64_t> key_slot_;    // [n_keys]: the slot holding or receiving a key, -1
    std::vector<int64_t> free_;        // free slots (the last one is taken next)
    std::vector<Pending> pending_;
    cuda::Stream copy_stream_;
    std::vector<cuda::Event> events_;  // one per step that enqueued copies, reused round robin
    size_t next_event_ = 0;
    std::vector<ExpertKey> missed_;  // this token's misses, in access order
    ExpertCacheStats stats_;
};

}  // namespace mox::models
