#include "server/openai.h"

#include <gtest/gtest.h>

#include <string>

namespace mox::server {
namespace {

using json = nlohmann::json;

engine::CompletionParams defaults() {
    engine::CompletionParams d;
    d.sampling.temperature = 0.8f;
    d.sampling.seed = 42;
    d.max_tokens = 100;
    return d;
}

// The ApiError a body raises (status and param), or a failure when it parses.
ApiError error_of(const std::string& body, Endpoint e = Endpoint::chat) {
    try {
        parse_request(body, e, defaults());
    } catch (const ApiError& err) {
        return err;
    }
    ADD_FAILURE() << "accepted: " << body;
    return ApiError(0, "");
}

TEST(OpenAiRequest, ChatFieldsOverrideTheDefaults) {
    const ApiRequest r = parse_request(
        R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
            "temperature": 0, "top_p": 0.5, "top_k": 7, "min_p": 0.1, "seed": 3, "max_tokens": 9,
            "stop": ["\n", "END"], "stream": true, "stream_options": {"include_usage": true},
            "presence_penalty": 0.5, "frequency_penalty": -0.5, "repeat_penalty": 1.1,
            "chat_template_kwargs": {"enable_thinking": false}, "user": "ignored"})",
        Endpoint::chat, defaults());
    EXPECT_EQ(r.model, "m");
    EXPECT_EQ(r.params.sampling.temperature, 0.0f);
    EXPECT_EQ(r.params.sampling.top_p, 0.5f);
    EXPECT_EQ(r.params.sampling.top_k, 7);
    EXPECT_FLOAT_EQ(r.params.sampling.min_p, 0.1f);
    EXPECT_EQ(r.params.sampling.seed, 3u);
    EXPECT_FLOAT_EQ(r.params.sampling.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(r.params.sampling.frequency_penalty, -0.5f);
    EXPECT_FLOAT_EQ(r.params.sampling.repetition_penalty, 1.1f);
    EXPECT_EQ(r.params.max_tokens, 9);
    EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n", "END"}));
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    ASSERT_TRUE(r.enable_thinking.has_value());
    EXPECT_FALSE(*r.enable_thinking);
    const json msgs = json::parse(r.messages_json);
    ASSERT_EQ(msgs.size(), 2u);
    EXPECT_EQ(msgs[1]["content"], "Hi there");  // text parts joined
}

TEST(OpenAiRequest, AbsentFieldsKeepTheServersDefaults) {
    const ApiRequest r = parse_request(R"({"prompt": "Once"})", Endpoint::completion, defaults());
    EXPECT_EQ(r.prompt, "Once");
    EXPECT_EQ(r.params.sampling.temperature, 0.8f);
    EXPECT_EQ(r.params.sampling.seed, 42u);
    EXPECT_EQ(r.params.max_tokens, 100);
    EXPECT_TRUE(r.params.stop.empty());
    EXPECT_FALSE(r.stream);
    EXPECT_EQ(parse_request(R"({"prompt": ["Once"], "max_completion_tokens": 5, "stop": "x"})",
                            Endpoint::completion, defaults())
                  .params.max_tokens,
              5);
    // A negative seed asks for a random one; developer is OpenAI's newer name for system.
    const ApiRequest c = parse_request(R"({"messages": [{"role": "developer", "content": "x"}], "seed": -1})",
                                       Endpoint::chat, defaults());
    EXPECT_EQ(c.params.sampling.seed, engine::kRandomSeed);
    EXPECT_EQ(json::parse(c.messages_json)[0]["role"], "system");
}

TEST(OpenAiRequest, BadBodiesNameTheField) {
    struct Case {
        const char* body;
        const char* param;
    };
    const Case cases[] = {
        {R"({"messages": []})", "messages"},
        {R"({"messages": "hi"})", "messages"},
        {R"({"messages": [1]})", "messages[0]"},
        {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
        {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
        {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
        {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content"},
        {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
        {R"({"messages": [{"role": "user", "content": "x"}], "temperature": -0.1})", "temperature"},
        {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5})", "top_p"},
        {R"({"messages": [{"role": "user", "content": "x"}], "top_k": 2.5})", "top_k"},
        {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
        {R"({"messages": [{"role": "user", "content": "x"}], "n": 3})", "n"},
        {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", "logprobs"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools"},
        {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})",
         "response_format"},
        {R"({"messages": [{"role": "user", "content": "x"}], "seed": "abc"})", "seed"},
        {R"({"messages": [{"role": "user", "content": "x"}], "model": 7})", "model"},
    };
    for (const Case& c : cases) {
        const ApiError e = error_of(c.body);
        EXPECT_EQ(e.status, 400) << c.body;
        EXPECT_EQ(e.param, c.param) << c.body << ": " << e.what();
    }
    EXPECT_EQ(error_of(R"({"prompt": 5})", Endpoint::completion).param, "prompt");
    EXPECT_EQ(error_of(R"({"prompt": ["a", "b"]})", Endpoint::completion).param, "prompt");
    EXPECT_EQ(error_of("{not json", Endpoint::completion).status, 400);
    EXPECT_EQ(error_of("[1, 2]", Endpoint::completion).status, 400);
    EXPECT_EQ(error_of("", Endpoint::completion).status, 400);
    // Found by fuzz/openai_fuzz: a number too large for a double was json's out_of_range, not 400.
    EXPECT_EQ(error_of(R"({"prompt": "x", "top_p": 6e6666})", Endpoint::completion).status, 400);
    EXPECT_EQ(error_of("{\"prompt\": \"\xff\"}", Endpoint::completion).status, 400);  // not UTF-8
}

TEST(OpenAiResponse, TimingsCarryTheExpertCacheWhenThereIsOne) {
    engine::CompletionResult r;
    r.prompt_tokens = 5;
    r.completion_tokens = 4;
    r.generate_seconds = 0.5;
    ApiRequest chat;
    chat.endpoint = Endpoint::chat;
    EXPECT_FALSE(response_body(chat, r, "c", 1, "m", {"", ""})["timings"].contains("expert_cache"));
    models::ExpertCacheStats s;
    s.tokens = 4, s.hits = 24, s.misses = 8, s.admissions = 3, s.bytes_copied = 6'000'000;
    r.expert_cache = s;
    const json t = response_body(chat, r, "c", 1, "m", {"", ""})["timings"]["expert_cache"];
    EXPECT_DOUBLE_EQ(t["hit_rate"].get<double>(), 0.75);
    EXPECT_DOUBLE_EQ(t["cpu_experts_per_token"].get<double>(), 2.0);
    EXPECT_EQ(t["admissions"], 3);
    EXPECT_EQ(t["bytes_copied"], 6000000);
    EXPECT_DOUBLE_EQ(t["copy_gb_per_second"].get<double>(), 0.012);
}

TEST(OpenAiResponse, ShapesFollowOpenAi) {
    engine::CompletionResult r;
    r.text = "Hello";
    r.prompt_tokens = 10;
    r.cached_tokens = 4;
    r.completion_tokens = 3;
    r.finish = engine::FinishReason::length;
    ApiRequest chat;
    chat.endpoint = Endpoint::chat;
    const json c = response_body(chat, r, "chatcmpl-1", 1700000000, "mox-tiny", {"", r.text});
    EXPECT_EQ(c["object"], "chat.completion");
    EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(c["choices"][0]["message"]["content"], "Hello");
    EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(c["usage"]["total_tokens"], 13);
    EXPECT_EQ(c["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
    ApiRequest text;
    text.endpoint = Endpoint::completion;
    const json t = response_body(text, r, "cmpl-1", 1700000000, "mox-tiny", {"", r.text});
    EXPECT_EQ(t["object"], "text_completion");
    EXPECT_EQ(t["choices"][0]["text"], "Hello");

    // Streamed: "data: {json}\n\n" events; the first chat delta carries the role, the last the reason.
    const std::string first = stream_chunk(chat, "chatcmpl-1", 1, "m", {"", "He"}, true, nullptr);
    ASSERT_EQ(first.rfind("data: ", 0), 0u);
    ASSERT_EQ(first.substr(first.size() - 2), "\n\n");
    const json f = json::parse(first.substr(6));
    EXPECT_EQ(f["object"], "chat.completion.chunk");
    EXPECT_EQ(f["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(f["choices"][0]["delta"]["content"], "He");
    EXPECT_TRUE(f["choices"][0]["finish_reason"].is_null());
    const json last = json::parse(stream_chunk(chat, "chatcmpl-1", 1, "m", {}, false, &r).substr(6));
    EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
    EXPECT_FALSE(last["choices"][0]["delta"].contains("content"));
    const json usage = json::parse(stream_usage(chat, "chatcmpl-1", 1, "m", r).substr(6));
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"]["completion_tokens"], 3);

    const json err = error_body(ApiError(400, "bad top_p", "top_p"));
    EXPECT_EQ(err["error"]["message"], "bad top_p");
    EXPECT_EQ(err["error"]["param"], "top_p");
    EXPECT_EQ(err["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace mox::server
