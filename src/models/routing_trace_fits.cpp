// models::check_trace_fits (routing_trace.h), apart from the reader: the fuzz target builds
// routing_trace.cpp alone, without the architecture registry this needs.
#include "core/error.h"
#include "models/hparams.h"
#include "models/routing_trace.h"

namespace mox::models {

void check_trace_fits(const RoutingTrace& r, const Hparams& hp, std::string_view what) {
    if (!hp.has_moe()) fail("{}: {} is a dense model (no routed experts)", what, hp.arch_name());
    if (r.arch != hp.arch_name() || r.n_expert != hp.n_expert || r.k != hp.n_expert_used ||
        static_cast<int64_t>(r.layers.size()) != hp.n_trunk())
        fail(
            "{}: the trace is of a {} model with {} layers of {} experts, top {} ('{}'); this model is {} "
            "with {} "
            "layers of {} experts, top {}",
            what, r.arch, r.layers.size(), r.n_expert, r.k, r.model, hp.arch_name(), hp.n_trunk(),
            hp.n_expert, hp.n_expert_used);
    for (size_t i = 0; i < r.layers.size(); ++i)
        if (r.layers[i] != static_cast<int32_t>(i))
            fail("{}: the trace's layer {} is trunk layer {}; this model routes every layer", what, i,
                 r.layers[i]);
    if (r.n_tokens < 1) fail("{}: the trace holds no tokens", what);
}

}  // namespace mox::models
