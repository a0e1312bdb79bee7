#include "server/openai.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace mox::server {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError(400, message, param);
}

// A number field within [lo, hi] (null or absent: unchanged).
template <typename T>
void read_number(const json& body, const char* key, T& out, double lo, double hi) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return;
    if (!it->is_number()) bad(key, fmt::format("'{}' must be a number", key));
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi)
        bad(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v));
    out = static_cast<T>(v);
}

void read_integer(const json& body, const char* key, int64_t& out, int64_t lo, int64_t hi) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return;
    if (!it->is_number_integer()) bad(key, fmt::format("'{}' must be an integer", key));
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) bad(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v));
    out = v;
}

bool read_bool(const json& body, const char* key, bool fallback) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) bad(key, fmt::format("'{}' must be true or false", key));
    return it->get<bool>();
}

// OpenAI content: a string, null, or an array of parts of which mox reads the text ones.
json text_content(const json& content, const std::string& where) {
    if (content.is_null() || content.is_string()) return content;
    if (!content.is_array())
        bad(where, fmt::format("'{}' must be a string, null or an array of parts", where));
    std::string text;
    for (const json& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
            bad(where, fmt::format("'{}': only parts of type text are supported", where));
        text += part["text"].get<std::string>();
    }
    return text;
}

std::string read_messages(const json& body) {
    const auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty())
        bad("messages", "'messages' must be a non-empty array");
    json out = json::array();
    for (size_t i = 0; i < it->size(); ++i) {
        const json& m = (*it)[i];
        const std::string where = fmt::format("messages[{}]", i);
        if (!m.is_object()) bad(where, fmt::format("'{}' must be an object", where));
        if (!m.contains("role") || !m["role"].is_string())
            bad(where + ".role", fmt::format("'{}.role' must be a string", where));
        std::string role = m["role"].get<std::string>();
        if (role == "developer") role = "system";  // OpenAI's newer name for it
        if (role != "system" && role != "user" && role != "assistant" && role != "tool")
            bad(where + ".role",
                fmt::format("'{}.role' must be system, developer, user, assistant or tool, got '{}'", where,
                            role));
        json copy = m;  // other fields (name, tool_calls, reasoning_content...) go to the template as sent
        copy["role"] = role;
        copy["content"] = text_content(m.value("content", json()), where + ".content");
        if (copy["content"].is_null() && role != "assistant")
            bad(where + ".content", fmt::format("'{}.content' is required for role {}", where, role));
        out.push_back(std::move(copy));
    }
    return out.dump();
}

std::string read_prompt(const json& body) {
    const auto it = body.find("prompt");
    if (it != body.end() && it->is_string()) return it->get<std::string>();
    if (it != body.end() && it->is_array() && it->size() == 1 && (*it)[0].is_string())
        return (*it)[0].get<std::string>();
    bad("prompt", "'prompt' must be a string (or an array of exactly one string)");
}

std::vector<std::string> read_stop(const json& body) {
    const auto it = body.find("stop");
    if (it == body.end() || it->is_null()) return {};
    if (it->is_string()) return {it->get<std::string>()};
    constexpr size_t kMaxStops = 16;
    if (!it->is_array() || it->size() > kMaxStops)
        bad("stop", fmt::format("'stop' must be a string or an array of at most {} strings", kMaxStops));
    std::vector<std::string> out;
    for (const json& s : *it) {
        if (!s.is_string()) bad("stop", "'stop' must hold strings only");
        out.push_back(s.get<std::string>());
    }
    return out;
}

// Fields mox does not implement: refused rather than silently ignored, so a client never gets an
// answer it did not ask for.
void refuse_unsupported(const json& body) {
    int64_t n = 1;
    read_integer(body, "n", n, 1, std::numeric_limits<int64_t>::max());
    if (n != 1) bad("n", "'n' must be 1: mox serves one choice per request");
    if (read_bool(body, "logprobs", false) ||
        (body.contains("top_logprobs") && !body["top_logprobs"].is_null()))
        bad("logprobs", "log probabilities are not supported");
    for (const char* key : {"tools", "functions"}) {
        const auto it = body.find(key);
        if (it != body.end() && !it->is_null() && !(it->is_array() && it->empty()))
            bad(key, "tool calls are not supported yet");
    }
    if (const auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
        if (!it->is_object() || it->value("type", "") != "text")
            bad("response_format", "only response_format {\"type\": \"text\"} is supported");
    }
}

json usage_json(const engine::CompletionResult& r) {
    return {{"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", r.completion_tokens},
            {"total_tokens", r.prompt_tokens + r.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

// llama-server's timings object: what the request cost, by phase.
json timings_json(const engine::CompletionResult& r) {
    const int64_t processed = r.prompt_tokens - r.cached_tokens;
    json t = {
        {"prompt_n", processed},
        {"prompt_ms", r.prompt_seconds * 1e3},
        {"prompt_per_second", r.prompt_seconds > 0 ? processed / r.prompt_seconds : 0.0},
        {"predicted_n", r.completion_tokens},
        {"predicted_ms", r.generate_seconds * 1e3},
        {"predicted_per_second", r.generate_seconds > 0 ? r.completion_tokens / r.generate_seconds : 0.0}};
    if (const auto& c = r.expert_cache) {  // mox's own: the GPU expert cache during this request's decode
        const double tokens = static_cast<double>(std::max<int64_t>(c->tokens, 1));
        t["expert_cache"] = {{"hit_rate", c->hit_rate()},
                             {"cpu_experts_per_token", static_cast<double>(c->misses) / tokens},
                             {"admissions", c->admissions},
                             {"bytes_copied", c->bytes_copied},
                             {"copy_gb_per_second", r.generate_seconds > 0
                                                        ? static_cast<double>(c->bytes_copied) / 1e9 / r.generate_seconds
                                                        : 0.0}};
    }
    return t;
}

std::string event(const json& j) {
    return "data: " + dump_json(j) + "\n\n";
}

const char* object_name(const ApiRequest& req, bool chunk) {
    if (req.endpoint == Endpoint::chat) return chunk ? "chat.completion.chunk" : "chat.completion";
    return "text_completion";
}

}  // namespace

std::string dump_json(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiRequest parse_request(std::string_view body_text, Endpoint endpoint,
                         const engine::CompletionParams& defaults) {
    json body;
    try {
        body = json::parse(body_text);
    } catch (const json::exception& e) {  // malformed, invalid UTF-8, a number out of range
        bad("", fmt::format("the body is not valid JSON: {}", e.what()));
    }
    if (!body.is_object()) bad("", "the body must be a JSON object");
    ApiRequest req;
    req.endpoint = endpoint;
    req.params = defaults;
    if (const auto it = body.find("model"); it != body.end() && !it->is_null()) {
        if (!it->is_string()) bad("model", "'model' must be a string");
        req.model = it->get<std::string>();
    }
    if (endpoint == Endpoint::chat)
        req.messages_json = read_messages(body);
    else
        req.prompt = read_prompt(body);
    refuse_unsupported(body);

    engine::SamplerParams& s = req.params.sampling;
    read_number(body, "temperature", s.temperature, 0.0, 100.0);
    read_number(body, "top_p", s.top_p, 0.0, 1.0);
    read_number(body, "min_p", s.min_p, 0.0, 1.0);
    read_number(body, "presence_penalty", s.presence_penalty, -2.0, 2.0);
    read_number(body, "frequency_penalty", s.frequency_penalty, -2.0, 2.0);
    read_number(body, "repeat_penalty", s.repetition_penalty, 1e-3, 100.0);
    int64_t top_k = s.top_k, last_n = s.penalty_last_n;
    read_integer(body, "top_k", top_k, 0, std::numeric_limits<int32_t>::max());
    read_integer(body, "repeat_last_n", last_n, -1, std::numeric_limits<int32_t>::max());
    s.top_k = static_cast<int>(top_k);
    s.penalty_last_n = static_cast<int>(last_n);
    if (const auto it = body.find("seed"); it != body.end() && !it->is_null()) {
        if (!it->is_number_integer()) bad("seed", "'seed' must be an integer");
        const int64_t seed = it->get<int64_t>();
        s.seed = seed < 0 ? engine::kRandomSeed : static_cast<uint64_t>(seed);
    }
    int64_t max_tokens = req.params.max_tokens;
    read_integer(body, "max_tokens", max_tokens, 1, std::numeric_limits<int64_t>::max());
    read_integer(body, "max_completion_tokens", max_tokens, 1, std::numeric_limits<int64_t>::max());
    req.params.max_tokens = max_tokens;
    req.params.stop = read_stop(body);

    req.stream = read_bool(body, "stream", false);
    if (const auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) bad("stream_options", "'stream_options' must be an object");
        req.include_usage = read_bool(*it, "include_usage", false);
    }
    if (const auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        if (it->contains("enable_thinking")) req.enable_thinking = read_bool(*it, "enable_thinking", true);
    }
    return req;
}

json error_body(const ApiError& e) {
    return {{"error",
             {{"message", e.what()},
              {"type", e.type},
              {"param", e.param.empty() ? json() : json(e.param)},
              {"code", e.status}}}};
}

json response_body(const ApiRequest& req, const engine::CompletionResult& r, const std::string& id,
                   int64_t created, const std::string& model, const SplitText& text) {
    json choice = {{"index", 0}, {"finish_reason", engine::finish_reason_name(r.finish)}};
    if (req.endpoint == Endpoint::chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text.content}};
        if (!text.reasoning.empty()) choice["message"]["reasoning_content"] = text.reasoning;
    } else {
        choice["text"] = text.content;
        choice["logprobs"] = nullptr;
    }
    return {{"id", id},
            {"object", object_name(req, false)},
            {"created", created},
            {"model", model},
            {"choices", json::array({choice})},
            {"usage", usage_json(r)},
            {"timings", timings_json(r)}};
}

std::string stream_chunk(const ApiRequest& req, const std::string& id, int64_t created,
                         const std::string& model, const SplitText& text, bool first,
                         const engine::CompletionResult* finish) {
    json choice = {{"index", 0},
                   {"finish_reason", finish ? json(engine::finish_reason_name(finish->finish)) : json()}};
    if (req.endpoint == Endpoint::chat) {
        json delta = json::object();
        if (first) delta["role"] = "assistant";
        if (!text.reasoning.empty()) delta["reasoning_content"] = text.reasoning;
        if (!text.content.empty() || (first && !finish && text.reasoning.empty()))
            delta["content"] = text.content;
        choice["delta"] = std::move(delta);
    } else {
        choice["text"] = text.content;
        choice["logprobs"] = nullptr;
    }
    json j = {{"id", id},
              {"object", object_name(req, true)},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice})}};
    if (finish) j["timings"] = timings_json(*finish);
    return event(j);
}

std::string stream_usage(const ApiRequest& req, const std::string& id, int64_t created,
                         const std::string& model, const engine::CompletionResult& r) {
    return event({{"id", id},
                  {"object", object_name(req, true)},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array()},
                  {"usage", usage_json(r)}});
}

}  // namespace mox::server
