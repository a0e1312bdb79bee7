// mox serve's HTTP side: an OpenAI-compatible API over one loaded model (cpp-httplib).
//   GET  /health                      {"status": "ok"}
//   GET  /v1/models                   the one model, under its alias
//   POST /v1/chat/completions         messages through the model's chat template
//   POST /v1/completions              a raw prompt
// (the same paths without /v1 too). Streaming is server-sent events as OpenAI sends them, ending
// with "data: [DONE]". One sequence slot: requests are answered one at a time, in arrival order;
// the slot reuses the previous request's state when the new prompt continues it (a chat's next
// turn), see engine/completion.h. Bad requests get HTTP 4xx with OpenAI's error object, never a
// crash; a client that disconnects mid-stream cancels its generation.
#pragma once

#include "engine/completion.h"
#include "models/model.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>

namespace mox::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                    // 0: any free port (bind() says which)
    std::string api_key;                // "": no authentication; else "Authorization: Bearer KEY" required
    std::string model_name;             // what /v1/models lists and responses name
    engine::CompletionParams defaults;  // sampling and token limit where a request does not say
    std::string chat_template;          // Jinja source
    text::ChatOptions chat;             // bos/eos tokens and template switches for every request
    bool split_reasoning = true;        // chat: <think>...</think> to reasoning_content (server/reasoning.h)
    size_t max_body_bytes = size_t{16} << 20;
};

class HttpServer {
public:
    HttpServer(models::Model& model, const text::Tokenizer& tokenizer, const models::StateOptions& state,
               ServerOptions options);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds host:port; returns the port (the chosen one for port 0). A mox::Error when it cannot.
    int bind();
    // Serves until stop() (from another thread or a signal handler's thread).
    void run();
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mox::server
