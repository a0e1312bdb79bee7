// apply_chat_template on the real Qwen3.6 template, checked against the prompt format the model card
// and shared/spec/qwen35moe.md §4 describe (turns, thinking block, tool-call XML), plus the API's own
// rules (argument normalisation, options, errors). Byte-exact comparisons with jinja2 over many
// templates live in tests/py/test_chat_template.py.
#include "text/chat_template.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace mox::text {
namespace {

std::string qwen36() {
    std::ifstream f(std::filesystem::path(MOX_TEST_DATA_DIR) / "templates" / "Qwen-Qwen3.6-35B-A3B.jinja",
                    std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

ChatMessage msg(std::string role, std::string content) {
    ChatMessage m;
    m.role = std::move(role);
    m.content = std::move(content);
    return m;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ChatTemplate, QwenTurnsAndGenerationPrompt) {
    const std::vector<ChatMessage> conv = {msg("system", "You are helpful."), msg("user", "Hi")};
    ChatOptions opts;  // add_generation_prompt defaults to true; thinking left to the template (on)
    EXPECT_EQ(apply_chat_template(qwen36(), conv, opts),
              "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n<think>\n");
    opts.enable_thinking = false;
    EXPECT_EQ(apply_chat_template(qwen36(), conv, opts),
              "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    opts.add_generation_prompt = false;
    EXPECT_EQ(apply_chat_template(qwen36(), conv, opts),
              "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, QwenReasoningKeptOnlyAfterLastQueryUnlessPreserved) {
    ChatMessage a1 = msg("assistant", "4");
    a1.reasoning_content = "2+2=4";
    ChatMessage a2 = msg("assistant", "6");
    a2.reasoning_content = "3+3=6";
    const std::vector<ChatMessage> conv = {msg("user", "2+2?"), a1, msg("user", "3+3?"), a2};
    ChatOptions opts;
    opts.add_generation_prompt = false;
    const std::string plain = apply_chat_template(qwen36(), conv, opts);
    EXPECT_EQ(
        plain,
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n3+3=6\n</think>\n\n6<|im_end|>\n");
    opts.preserve_thinking = true;
    EXPECT_EQ(
        apply_chat_template(qwen36(), conv, opts),
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n2+2=4\n</think>\n\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n3+3=6\n</think>\n\n6<|im_end|>\n");
}

TEST(ChatTemplate, OpenAiToolCallsBecomeQwenXml) {
    ChatMessage call;
    call.role = "assistant";  // content stays null, as OpenAI sends it
    call.tool_calls_json =
        R"([{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}])";
    ChatMessage result = msg("tool", "18C");
    result.tool_call_id = "c1";
    ChatOptions opts;
    opts.add_generation_prompt = false;
    opts.tools_json = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])";
    const std::string out = apply_chat_template(qwen36(), {msg("user", "Weather?"), call, result}, opts);
    EXPECT_NE(out.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                       "\"parameters\": {}}}\n"
                       "</tools>"),
              std::string::npos)
        << out;
    // Arguments arrived as a JSON string and were rendered as parameters (strings raw, numbers as JSON).
    EXPECT_NE(
        out.find("<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n"
                 "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n"
                 "</tool_call><|im_end|>\n"),
        std::string::npos)
        << out;
    EXPECT_NE(out.find("<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n"),
              std::string::npos)
        << out;
}

TEST(ChatTemplate, JsonMessagesPassExtraFieldsThrough) {
    const std::string tmpl =
        "{% for m in messages %}{{ m.role }}:{{ m.content }}:{{ m.custom }};{% endfor %}";
    EXPECT_EQ(apply_chat_template_json(tmpl, R"([{"role": "user", "content": "x", "custom": [1, 2.5]}])", {}),
              "user:x:[1, 2.5];");
}

TEST(ChatTemplate, ContextVariables) {
    const std::string tmpl =
        "{{ tools is none }} {{ documents is none }} {{ bos_token }}{{ eos_token }} {{ add_generation_prompt "
        "}} "
        "{{ enable_thinking is defined }} {{ reasoning_effort }} {{ strftime_now('%Y-%m-%d %H:%M') }}";
    ChatOptions opts;
    opts.bos_token = "<s>";
    opts.eos_token = "</s>";
    opts.extra_json = R"({"reasoning_effort": "low"})";
    opts.now = 86400 * 365 + 3600;  // 1971-01-01 01:00 UTC
    EXPECT_EQ(apply_chat_template(tmpl, {}, opts), "True True <s></s> True False low 1971-01-01 01:00");
    opts.enable_thinking = true;
    opts.tools_json = "[]";
    EXPECT_EQ(apply_chat_template(tmpl, {}, opts), "False True <s></s> True True low 1971-01-01 01:00");
}

TEST(ChatTemplate, NullContentIsNone) {
    ChatMessage m;
    m.role = "assistant";
    EXPECT_EQ(apply_chat_template("{{ messages[0].content is none }}", {m}, {}), "True");
}

TEST(ChatTemplate, BuiltInChatMl) {
    ChatOptions opts;
    EXPECT_EQ(
        apply_chat_template(std::string(chatml_template()), {msg("system", "S"), msg("user", "U")}, opts),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
    opts.add_generation_prompt = false;
    EXPECT_EQ(
        apply_chat_template(std::string(chatml_template()), {msg("user", "U"), msg("assistant", "A")}, opts),
        "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
}

TEST(ChatTemplate, ErrorsAreClear) {
    // The template's own raise_exception message reaches the caller, with its position.
    const std::string no_user = error_of([] { apply_chat_template(qwen36(), {msg("system", "only")}, {}); });
    EXPECT_NE(no_user.find("No user query found in messages."), std::string::npos) << no_user;
    EXPECT_NE(no_user.find("template:"), std::string::npos) << no_user;
    ChatOptions bad_tools;
    bad_tools.tools_json = "[{";
    EXPECT_NE(error_of([&] {
                  apply_chat_template(qwen36(), {msg("user", "x")}, bad_tools);
              }).find("tools is not valid JSON"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  apply_chat_template_json(qwen36(), R"({"role": "user"})", {});
              }).find("must be a list"),
              std::string::npos);
    EXPECT_NE(error_of([] { apply_chat_template("{% if %}", {}, {}); }).find("template:1:7"),
              std::string::npos);
}

TEST(ChatTemplate, JsonValuesKeepOrderAndNumberKinds) {
    EXPECT_EQ(jinja::repr(parse_json_value(
                  R"({"b": 1, "a": 2.0, "c": [true, null, "x"], "d": 18446744073709551615})")),
              "{'b': 1, 'a': 2.0, 'c': [True, None, 'x'], 'd': 1.8446744073709552e+19}");
    EXPECT_THROW(parse_json_value("{"), Error);
}

}  // namespace
}  // namespace mox::text
