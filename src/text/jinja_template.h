// A parsed Jinja template and its renderer: the subset of jinja2 that HF / GGUF chat templates use,
// rendered the way HF renders them (trim_blocks, lstrip_blocks, loop controls, no autoescape).
//
//   jinja::Template t(source);                  // throws mox::Error "template:L:C: ..." on bad syntax
//   std::string s = t.render(context_dict);     // throws mox::Error "template:L:C: ..." on errors
//
// Scoping is jinja2's: each for-loop iteration and each macro call gets a fresh scope that reads
// through to the enclosing one; `set` writes into the innermost scope (so it does not leak out of
// loops; namespace() objects are the way out); if-blocks do not open scopes. A macro sees the
// variables of the scope it was defined in, as they are when it is called.
//
// Rendering is bounded (steps, output size, macro recursion), so no template can hang or exhaust the
// process; exceeding a bound is an ordinary mox::Error.
#pragma once

#include "text/jinja_parser.h"
#include "text/jinja_value.h"

#include <string>
#include <string_view>
#include <vector>

namespace mox::jinja {

// Bounds of one render: far above what real chat templates need (a 1000-message Qwen conversation
// takes ~10^5 steps), low enough that a hostile template fails within seconds.
inline constexpr uint64_t kMaxRenderSteps = 5'000'000;
inline constexpr int kMaxCallDepth = 64;

class Template {
  public:
    explicit Template(std::string_view source);
    // context: a dict Value (messages, add_generation_prompt, ...). Names not in it fall back to the
    // global functions (range, namespace, dict, joiner, raise_exception), then to undefined.
    // max_steps bounds the work (statements + expression nodes + loop iterations) of one render.
    std::string render(const Value& context, uint64_t max_steps = kMaxRenderSteps) const;

  private:
    std::vector<StmtPtr> body_;
};

}  // namespace mox::jinja
