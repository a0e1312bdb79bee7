// tmpl_tool TEMPLATE.jinja REQUEST.json
// Renders a chat template with mox's interpreter and writes the prompt to stdout, byte for byte, for
// tests/py/test_chat_template.py to compare against Python's jinja2.
// REQUEST.json: {"messages": [...], "tools": [...]?, "add_generation_prompt": bool?,
//                "bos_token": str?, "eos_token": str?, "enable_thinking": bool?,
//                "preserve_thinking": bool?, "extra": {...}?, "now": int?}
// Exit status 1 with the error on stderr when rendering fails (as jinja2 would raise).
#include "core/error.h"
#include "text/chat_template.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace {

std::string read_file(const char* path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) mox::fail("cannot open {}", path);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: tmpl_tool TEMPLATE.jinja REQUEST.json\n");
        return 2;
    }
    try {
        const std::string tmpl = read_file(argv[1]);
        const auto req = nlohmann::ordered_json::parse(read_file(argv[2]));
        mox::text::ChatOptions opts;
        opts.add_generation_prompt = req.value("add_generation_prompt", false);
        opts.bos_token = req.value("bos_token", "");
        opts.eos_token = req.value("eos_token", "");
        if (req.contains("enable_thinking")) opts.enable_thinking = req["enable_thinking"].get<bool>();
        if (req.contains("preserve_thinking")) opts.preserve_thinking = req["preserve_thinking"].get<bool>();
        if (req.contains("tools") && !req["tools"].is_null()) opts.tools_json = req["tools"].dump();
        if (req.contains("extra")) opts.extra_json = req["extra"].dump();
        if (req.contains("now")) opts.now = req["now"].get<int64_t>();
        const std::string out = mox::text::apply_chat_template_json(tmpl, req.at("messages").dump(), opts);
        std::fwrite(out.data(), 1, out.size(), stdout);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tmpl_tool: %s\n", e.what());
        return 1;
    }
}
