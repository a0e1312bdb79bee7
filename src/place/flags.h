// A Placement from the flags llama.cpp users know (-ngl, -ot, --cpu-moe, --n-cpu-moe) plus mox's
// --moe-cpu-layers. The semantics follow llama.cpp (common/arg.cpp, src/llama-model.cpp,
// src/llama-model-loader.cpp of the vendored copy); docs/plan.md states them with examples.
//
// How the flags combine (and why):
//  1. -ngl N picks a base tier per layer. llama.cpp numbers the repeating layers 0..n_layer-1 and
//     the output layer (output.weight, output_norm.weight) n_layer, and puts the last N of those
//     n_layer + 1 on the GPU: -ngl 1 is the output layer only, -ngl 2 adds blk.{n_layer-1}, and
//     -ngl n_layer + 1 (or more, or -1 = all) is everything. n_layer is the file's block_count
//     (MTP blocks included). token_embd stays on the host whatever N is (llama.cpp keeps the input
//     layer on the CPU: it is a row lookup, not worth VRAM).
//  2. Override rules (-ot, --cpu-moe, --n-cpu-moe, --moe-cpu-layers) are one list in command-line
//     order; for each tensor the first rule whose regex matches (ECMAScript regex_search on the
//     name, as llama.cpp) decides its tier, whatever -ngl said. So `--n-cpu-moe 10 -ot X=CUDA0`
//     keeps layer 5's experts on the CPU even if X matches them, and the reverse order moves them.
//  3. An expert is one unit (placement.h): if the rules leave a layer's gate/up/down stacks on
//     different tiers, that is an error naming the layer (llama.cpp would split them).
// "The CPU" is mmap_host: like llama.cpp with mmap on (its default), CPU weights stay pages of the
// mapped file. -ot can name pinned_host (and the other mox tier names) directly.
#pragma once

#include "gguf/reader.h"
#include "place/placement.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mox::place {

struct OverrideRule {
    std::string pattern;  // ECMAScript regex, searched anywhere in the tensor name
    Tier tier = Tier::mmap_host;
    std::string origin;  // the flag it came from, for messages: "-ot blk\.3\.=CPU", "--n-cpu-moe 4"
};

struct PlacementFlags {
    int64_t n_gpu_layers = 0;  // -ngl: 0 = none, -1 = all, N = the last N of n_layer + 1 (see above)
    std::vector<OverrideRule> overrides;  // command-line order, first match wins
};

// -ngl's value: a count >= 0, -1, or "all" (= -1). "auto" (llama.cpp's fit) is the commands' business
// (the planner's search, plan/auto_plan.h); here it is refused.
int64_t parse_n_gpu_layers(std::string_view value);

// DEVICE of -ot: CPU -> mmap_host, CUDA0 -> gpu (llama.cpp's buffer-type names), or a mox tier
// name (gpu, pinned_host, mmap_host). Throws mox::Error listing the accepted names.
Tier tier_from_device(std::string_view device);

// -ot "REGEX=DEVICE,REGEX=DEVICE,...": one rule per item, in order. The regex is checked here.
std::vector<OverrideRule> parse_override_tensor(std::string_view value);
// --cpu-moe: every layer's routed-expert stacks on the CPU.
OverrideRule cpu_moe_rule();
// --n-cpu-moe N: the expert stacks of layers 0..N-1 on the CPU (N > n_layer is all of them, as in
// llama.cpp; N < 0 is an error).
std::vector<OverrideRule> n_cpu_moe_rules(int64_t n, int64_t n_layer);
// --moe-cpu-layers LIST ("0-9,20,31-39"): the expert stacks of those layers on the CPU.
std::vector<OverrideRule> moe_cpu_layers_rules(std::string_view list, int64_t n_layer);
// LIST -> sorted distinct layers; each item N or A-B (inclusive), all within 0..n_layer-1.
std::vector<int64_t> parse_layer_list(std::string_view list, int64_t n_layer);
// The inverse: ascending distinct layers -> "0-3,8,12-15" ("" when empty).
std::string format_layer_list(const std::vector<int64_t>& layers);

// Applies the flags to `file` (see the header comment for the order).
Placement place_from_flags(const gguf::File& file, const PlacementFlags& flags);

}  // namespace mox::place
