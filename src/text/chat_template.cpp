#include "text/chat_template.h"

#include "core/error.h"
#include "text/jinja_template.h"

#include <nlohmann/json.hpp>

#include <ctime>

namespace mox::text {
namespace {

using json = nlohmann::ordered_json;
using jinja::Value;

Value to_value(const json& j, int depth = 0) {
    if (depth > 256) fail("JSON nested too deeply");
    switch (j.type()) {
        case json::value_t::null:
            return Value::none();
        case json::value_t::boolean:
            return Value(j.get<bool>());
        case json::value_t::number_integer:
            return Value(j.get<int64_t>());
        case json::value_t::number_unsigned: {
            const uint64_t u = j.get<uint64_t>();
            if (u > uint64_t(INT64_MAX)) return Value(double(u));
            return Value(int64_t(u));
        }
        case json::value_t::number_float:
            return Value(j.get<double>());
        case json::value_t::string:
            return Value(j.get<std::string>());
        case json::value_t::array: {
            std::vector<Value> items;
            for (const json& x : j) items.push_back(to_value(x, depth + 1));
            return Value::list(std::move(items));
        }
        case json::value_t::object: {
            Value d = Value::dict();
            for (auto it = j.begin(); it != j.end(); ++it)
                d.dict_mut().set(Value(it.key()), to_value(it.value(), depth + 1));
            return d;
        }
        default:
            fail("unsupported JSON value");
    }
}

json parse(std::string_view text, std::string_view what) {
    try {
        return json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
        fail("chat template: {} is not valid JSON: {}", what, e.what());
    }
}

// OpenAI tool calls carry arguments as a JSON string; templates want the object.
void normalize_tool_calls(Value& message) {
    if (!message.is_dict()) return;
    Value* calls = message.dict_mut().find(Value("tool_calls"));
    if (!calls || !calls->is_list()) return;
    for (Value& call : calls->items_mut()) {
        if (!call.is_dict()) continue;
        Value* fn = call.dict_mut().find(Value("function"));
        Value* holder = fn && fn->is_dict() ? fn : &call;
        Value* args = holder->dict_mut().find(Value("arguments"));
        if (!args || !args->is_string()) continue;
        const json parsed = json::parse(args->as_string(), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) *args = to_value(parsed);
    }
}

Value strftime_now(std::optional<int64_t> now) {
    return Value::function("strftime_now", [now](jinja::CallArgs& a) {
        if (a.pos.size() != 1 || !a.pos[0].is_string()) fail("strftime_now() takes one format string");
        const std::time_t t = now ? std::time_t(*now) : std::time(nullptr);
        std::tm tm{};
        if (now)
            gmtime_r(&t, &tm);
        else
            localtime_r(&t, &tm);
        char buf[512];
        const size_t n = std::strftime(buf, sizeof buf, a.pos[0].as_string().c_str(), &tm);
        return Value(std::string(buf, n));
    });
}

std::string render(const std::string& tmpl, Value messages, const ChatOptions& opts) {
    if (!messages.is_list()) fail("chat template: messages must be a list");
    for (Value& m : messages.items_mut()) normalize_tool_calls(m);
    Value ctx = Value::dict();
    jinja::Dict& d = ctx.dict_mut();
    d.set(Value("messages"), std::move(messages));
    d.set(Value("tools"),
          opts.tools_json.empty() ? Value::none() : to_value(parse(opts.tools_json, "tools")));
    d.set(Value("documents"), Value::none());
    d.set(Value("add_generation_prompt"), Value(opts.add_generation_prompt));
    d.set(Value("bos_token"), Value(opts.bos_token));
    d.set(Value("eos_token"), Value(opts.eos_token));
    if (opts.enable_thinking) d.set(Value("enable_thinking"), Value(*opts.enable_thinking));
    if (opts.preserve_thinking) d.set(Value("preserve_thinking"), Value(*opts.preserve_thinking));
    if (!opts.extra_json.empty()) {
        const Value extra = to_value(parse(opts.extra_json, "extra template variables"));
        if (!extra.is_dict()) fail("chat template: extra template variables must be a JSON object");
        for (const auto& [k, v] : extra.as_dict().items) d.set(k, v);
    }
    d.set(Value("strftime_now"), strftime_now(opts.now));
    std::string out;
    try {
        out = jinja::Template(tmpl).render(ctx);
    } catch (const Error& e) {
        fail("chat template: {}", e.what());
    }
    // The tokenizer adds these itself; a template that writes them too would double them.
    if (opts.strip_bos && !opts.bos_token.empty() && out.starts_with(opts.bos_token))
        out.erase(0, opts.bos_token.size());
    if (opts.strip_eos && !opts.eos_token.empty() && out.ends_with(opts.eos_token))
        out.erase(out.size() - opts.eos_token.size());
    return out;
}

}  // namespace

jinja::Value parse_json_value(std::string_view text) {
    return to_value(parse(text, "input"));
}

std::string apply_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                const ChatOptions& opts) {
    std::vector<Value> list;
    for (const ChatMessage& m : messages) {
        Value d = Value::dict();
        jinja::Dict& md = d.dict_mut();
        md.set(Value("role"), Value(m.role));
        md.set(Value("content"), m.content ? Value(*m.content) : Value::none());
        if (m.reasoning_content) md.set(Value("reasoning_content"), Value(*m.reasoning_content));
        if (!m.tool_calls_json.empty())
            md.set(Value("tool_calls"), to_value(parse(m.tool_calls_json, "tool_calls")));
        if (m.name) md.set(Value("name"), Value(*m.name));
        if (m.tool_call_id) md.set(Value("tool_call_id"), Value(*m.tool_call_id));
        list.push_back(std::move(d));
    }
    return render(tmpl, Value::list(std::move(list)), opts);
}

std::string apply_chat_template_json(const std::string& tmpl, std::string_view messages_json,
                                     const ChatOptions& opts) {
    return render(tmpl, to_value(parse(messages_json, "messages")), opts);
}

std::string_view chatml_template() {
    // Written for mox: ChatML turns, then the assistant header when a reply is wanted.
    return "{%- for message in messages %}"
           "{{- '<|im_start|>' + message.role + '\\n' + (message.content if message.content is string else "
           "'') "
           "+ '<|im_end|>\\n' }}"
           "{%- endfor %}"
           "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
}

}  // namespace mox::text
