// Chat templates: a conversation -> the prompt text the model was trained on, by rendering the
// model's Jinja template (GGUF key tokenizer.chat_template) the way HF transformers'
// apply_chat_template does: variables messages, tools (None when absent), documents (None),
// add_generation_prompt, bos_token, eos_token, the template switches (enable_thinking,
// preserve_thinking, anything in extra_json), and the functions raise_exception and strftime_now.
//
// Message fields follow the OpenAI chat format that HF templates read: role, content (null for an
// assistant turn that only calls tools), reasoning_content, tool_calls, name, tool_call_id.
// OpenAI sends tool-call arguments as a JSON *string*; templates iterate them as a mapping
// (`tool_call.arguments|items`), so a string that parses to a JSON object is replaced by the object.
#pragma once

#include "text/jinja_value.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mox::text {

struct ChatMessage {
    std::string role;
    std::optional<std::string> content;  // nullopt: JSON null
    std::optional<std::string> reasoning_content;
    std::string tool_calls_json;  // OpenAI-style JSON array of tool calls; empty: none
    std::optional<std::string> name;
    std::optional<std::string> tool_call_id;
};

struct ChatOptions {
    bool add_generation_prompt = true;
    std::optional<bool> enable_thinking;    // unset: the template's default (Qwen3.6: thinking on)
    std::optional<bool> preserve_thinking;  // Qwen3.6: keep reasoning of all past assistant turns
    std::string bos_token, eos_token;
    // Cut a bos_token that starts / an eos_token that ends the rendered text, for a tokenizer that
    // adds BOS / EOS itself (add_bos: Mixtral's template opens with {{ bos_token }}), as llama.cpp's
    // chat does.
    bool strip_bos = false, strip_eos = false;
    std::string tools_json;  // JSON array of tool definitions; empty: no tools
    std::string extra_json;  // JSON object of further template variables, e.g. {"reasoning_effort": "low"}
    std::optional<int64_t> now;  // unix seconds (UTC) for strftime_now; unset: the local clock
};

// Renders `tmpl`. Throws mox::Error on template errors (including the template's own
// raise_exception, whose message is kept) and on malformed JSON in the options or messages.
std::string apply_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                const ChatOptions& opts);

// Same, with the messages given as a JSON array of OpenAI-format message objects (what the server
// receives); extra fields in the objects are passed through to the template.
std::string apply_chat_template_json(const std::string& tmpl, std::string_view messages_json,
                                     const ChatOptions& opts);

// Plain ChatML (<|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n) for models whose
// GGUF carries no template.
std::string_view chatml_template();

// JSON text -> template value (objects keep their key order; integers stay integers). Throws
// mox::Error with the parser's message on malformed JSON.
jinja::Value parse_json_value(std::string_view json);

}  // namespace mox::text
