#include "place/execute.h"

#include "core/error.h"

namespace mox::place {

namespace {

models::ExpertHome home_of(Tier t) {
    switch (t) {
        case Tier::gpu:
            return models::ExpertHome::gpu;
        case Tier::pinned_host:
            return models::ExpertHome::pinned;
        case Tier::mmap_host:
            return models::ExpertHome::mmap;
    }
    return models::ExpertHome::mmap;
}

}  // namespace

models::GpuOptions gpu_options_for(const Placement& p, const models::Hparams& hp) {
    if (p.n_layer() != hp.n_layer) fail("placement has {} layers, the model {}", p.n_layer(), hp.n_layer);
    models::GpuOptions o;
    o.experts.assign(static_cast<size_t>(hp.n_trunk()), models::ExpertHome::gpu);
    for (const TensorEntry& t : p.tensors()) {
        if (t.layer >= hp.n_trunk() || t.cls == models::TensorClass::mtp) continue;  // not run
        if (t.part != ExpertPart::none) continue;  // expert stacks: below, per expert
        if (t.cls == models::TensorClass::embedding) {
            o.token_embd_on_gpu = t.tier == Tier::gpu;
            continue;
        }
        if (t.tier != Tier::gpu)
            fail(
                "{} on {}: the GPU forward keeps every tensor but the routed experts (a dense model's FFNs) "
                "and "
                "token_embd on the GPU (layers on the CPU are not supported: use -ngl all and move experts "
                "with "
                "--n-cpu-moe, --moe-cpu-layers or -ot, a dense model's FFNs with -ot 'ffn_=CPU' rules)",
                t.name, tier_name(t.tier));
    }
    for (int64_t l = 0; l < hp.n_trunk(); ++l) {
        if (!p.has_experts(l)) continue;
        const auto counts = p.expert_counts(l);
        int tiers = 0;
        for (int64_t c : counts) tiers += c > 0 ? 1 : 0;
        if (tiers > 1)
            fail(
                "layer {}: its experts are split across tiers ({} gpu, {} pinned_host, {} mmap_host); "
                "executing a "
                "per-expert split (the expert cache) is not supported yet: place a layer's experts together",
                l, counts[0], counts[1], counts[2]);
        o.experts[static_cast<size_t>(l)] = home_of(p.expert_tier(l, 0));
    }
    return o;
}

Placement all_on_gpu(const gguf::File& file) {
    Placement p = Placement::uniform(file, Tier::gpu);
    for (const TensorEntry& t : p.tensors())
        if (t.cls == models::TensorClass::embedding) p.set_tier(t.name, Tier::mmap_host);
    return p;
}

}  // namespace mox::place
