// libFuzzer target for the routing trace reader: any input must either parse into a consistent
// trace or throw mox::Error. A crash, a sanitizer report, another exception or an oversized
// allocation is a bug. Seed: tests/data/routing (scripts/fuzz.sh).
#include "core/error.h"
#include "models/routing_trace.h"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const mox::models::RoutingTrace t =
            mox::models::parse_routing_trace(std::span<const uint8_t>(data, size), "fuzz.trace");
        // What a parsed trace promises its users: the sizes agree and every id is in range.
        const size_t per_token = t.layers.size() * static_cast<size_t>(t.k);
        if (t.ids.size() != per_token * static_cast<size_t>(t.n_tokens)) __builtin_trap();
        for (int64_t tok = 0; tok < t.n_tokens; ++tok)
            for (size_t li = 0; li < t.layers.size(); ++li)
                for (int64_t j = 0; j < t.k; ++j)
                    if (t.at(tok, li)[j] >= t.n_expert) __builtin_trap();
        return 0;
    } catch (const mox::Error&) {
        return 0;
    }
}
