// The OpenAI API's request and response bodies for mox serve: parsing with every field checked
// (a bad value is an ApiError naming the field, answered with HTTP 400 and OpenAI's error object),
// and the JSON of completions, stream chunks and errors. No HTTP and no model here: pure functions.
#pragma once

#include "engine/completion.h"
#include "server/reasoning.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mox::server {

// An error the client caused (status 4xx) or the server hit (5xx), with OpenAI's error fields.
class ApiError : public std::runtime_error {
public:
    ApiError(int status, const std::string& message, std::string param = {},
             std::string type = "invalid_request_error")
        : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
    int status;
    std::string param;  // the request field at fault ("" when none)
    std::string type;   // invalid_request_error, authentication_error, server_error, ...
};

enum class Endpoint { chat, completion };

struct ApiRequest {
    Endpoint endpoint = Endpoint::chat;
    std::string model;          // as sent ("" when absent): echoed in the response
    std::string messages_json;  // chat: the messages as a JSON array, string content throughout
    std::string prompt;         // completion
    engine::CompletionParams params;
    bool stream = false;
    bool include_usage = false;           // stream_options.include_usage
    std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking
};

// body: the request's JSON text. defaults: the server's sampling settings and token limit, which
// the request's fields override. Throws ApiError.
ApiRequest parse_request(std::string_view body, Endpoint endpoint, const engine::CompletionParams& defaults);

nlohmann::json error_body(const ApiError& e);

// JSON text for the wire; invalid UTF-8 in a string (never expected: requests are validated and
// generated text is decoded whole) becomes U+FFFD instead of an exception.
std::string dump_json(const nlohmann::json& j);

// The non-streamed response. id: "chatcmpl-..." or "cmpl-..."; created: unix seconds. text: the
// answer (r.text, or its content part when the reasoning was split off); reasoning: the chat
// message's reasoning_content ("" : none).
nlohmann::json response_body(const ApiRequest& req, const engine::CompletionResult& r, const std::string& id,
                             int64_t created, const std::string& model, const SplitText& text);

// One server-sent event "data: {...}\n\n" of a streamed response: a delta (content and/or
// reasoning_content; the first chat chunk also carries the role), or with finish set, the last
// chunk of the choice.
std::string stream_chunk(const ApiRequest& req, const std::string& id, int64_t created,
                         const std::string& model, const SplitText& text, bool first,
                         const engine::CompletionResult* finish);
// The usage chunk (stream_options.include_usage): no choices, the token counts.
std::string stream_usage(const ApiRequest& req, const std::string& id, int64_t created,
                         const std::string& model, const engine::CompletionResult& r);
inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";

}  // namespace mox::server
