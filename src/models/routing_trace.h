// A routing trace: which experts every token selected in every MoE layer of a run. `mox run
// --routing-trace-out` records one from a model computing real text; `--routing-trace` replays one
// (the model computes its router as usual, the experts that run are the trace's); `mox cache-sim`
// and the planner judge expert caches on them.
//
// File format (little-endian, version 1): the 8 bytes "MOXROUTE", u32 version, u32 id width in
// bytes (1 when n_expert <= 256, else 2), i64 n_expert, i64 k, i64 n_layers (traced MoE layers),
// i64 n_tokens, n_layers x i32 trunk layer index (strictly ascending), two strings (u32 length,
// bytes: the architecture, then the model's name), then the ids token-major: [n_tokens][n_layers][k]
// in the router's order (most probable first), the k ids of a token in a layer distinct. Nothing may
// follow.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mox::models {

struct Hparams;

struct RoutingTrace {
    std::string arch;   // general.architecture of the model that made it
    std::string model;  // its name (general.name, else the file name): informational
    int64_t n_expert = 0, k = 0;
    std::vector<int32_t> layers;  // trunk layer index of each traced layer, ascending
    int64_t n_tokens = 0;
    std::vector<uint16_t> ids;  // [n_tokens][layers.size()][k], each < n_expert

    // The k ids token t selected in traced layer li.
    const uint16_t* at(int64_t t, size_t li) const {
        return ids.data() + (static_cast<size_t>(t) * layers.size() + li) * static_cast<size_t>(k);
    }
};

// Throws mox::Error when the trace is inconsistent (sizes, ids out of range) or the file cannot be
// written.
void write_routing_trace(const std::string& path, const RoutingTrace& trace);
// Throws mox::Error naming `path` and what is wrong (magic, version, sizes, layer order, an id >=
// n_expert or repeated within a token's layer, truncation, trailing bytes); never reads past the
// file, and allocates only once the header's sizes match the file's.
RoutingTrace read_routing_trace(const std::string& path);
// The same from bytes in memory; `what` names them in errors (the fuzz target's entry).
RoutingTrace parse_routing_trace(std::span<const uint8_t> bytes, std::string_view what);

// Throws mox::Error, led by `what` (e.g. "routing replay"), when `trace` is not a routing of the model
// `hp` describes: a dense model, another architecture, expert count or top-k, traced layers other
// than every trunk layer, or no tokens.
void check_trace_fits(const RoutingTrace& trace, const Hparams& hp, std::string_view what);

}  // namespace mox::models
