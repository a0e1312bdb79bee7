#include "server/http_server.h"

#include "core/error.h"
#include "core/log.h"
#include "server/openai.h"
#include "server/reasoning.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>

namespace mox::server {

using json = nlohmann::json;

struct HttpServer::Impl {
    models::Model& model;
    const text::Tokenizer& tokenizer;
    ServerOptions options;
    engine::CompletionSlot slot;
    std::mutex slot_mutex;  // one request generates at a time
    std::atomic<uint64_t> next_id{1};
    httplib::Server http;

    Impl(models::Model& m, const text::Tokenizer& t, const models::StateOptions& s, ServerOptions o)
        : model(m), tokenizer(t), options(std::move(o)), slot(m, t, s) {}

    static void send_json(httplib::Response& res, int status, const json& body) {
        res.status = status;
        res.set_content(dump_json(body), "application/json");
    }

    static void send_error(httplib::Response& res, const ApiError& e) {
        send_json(res, e.status, error_body(e));
    }

    bool authorized(const httplib::Request& req, httplib::Response& res) const {
        if (options.api_key.empty()) return true;
        if (req.get_header_value("Authorization") == "Bearer " + options.api_key) return true;
        send_error(res, ApiError(401, "missing or wrong API key (Authorization: Bearer ...)", "",
                                 "authentication_error"));
        return false;
    }

    // The request's prompt as tokens: the chat template for chat, the text as it is otherwise.
    // think: whether the answer starts inside a think block the template opened.
    std::vector<int32_t> prompt_tokens(const ApiRequest& r, bool* think) const {
        std::string text = r.prompt;
        if (r.endpoint == Endpoint::chat) {
            text::ChatOptions co = options.chat;
            if (r.enable_thinking) co.enable_thinking = r.enable_thinking;
            try {
                text = text::apply_chat_template_json(options.chat_template, r.messages_json, co);
            } catch (const Error& e) {
                throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(),
                               "messages");
            }
        }
        *think = r.endpoint == Endpoint::chat && prompt_opens_think(text);
        std::vector<int32_t> ids = tokenizer.encode(text);
        if (ids.empty())
            throw ApiError(400, "the prompt is empty", r.endpoint == Endpoint::chat ? "messages" : "prompt");
        if (static_cast<int64_t>(ids.size()) >= slot.n_ctx())
            throw ApiError(
                400,
                fmt::format("the prompt has {} tokens; the context holds {} (mox serve -c), and at least one "
                            "must be left to generate",
                            ids.size(), slot.n_ctx()),
                r.endpoint == Endpoint::chat ? "messages" : "prompt");
        return ids;
    }

    void complete(const httplib::Request& hreq, httplib::Response& res, Endpoint endpoint) {
        if (!authorized(hreq, res)) return;
        ApiRequest r;
        std::vector<int32_t> ids;
        bool think = false;
        try {
            r = parse_request(hreq.body, endpoint, options.defaults);
            ids = prompt_tokens(r, &think);
            engine::Sampler check(r.params.sampling);  // parameters the sampler refuses: 400, not 500
        } catch (const ApiError& e) {
            return send_error(res, e);
        } catch (const Error& e) {
            return send_error(res, ApiError(400, e.what()));
        }
        const std::string id =
            fmt::format("{}-{}", endpoint == Endpoint::chat ? "chatcmpl" : "cmpl", next_id++);
        const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count();
        const std::string model_name = options.model_name;
        // Chat answers of a thinking model: <think>...</think> to reasoning_content (reasoning.h).
        const bool split = endpoint == Endpoint::chat && options.split_reasoning;
        if (!r.stream) {
            engine::CompletionResult out;
            try {
                std::lock_guard lock(slot_mutex);
                out = slot.complete(ids, r.params, nullptr);
            } catch (const std::exception& e) {
                return send_error(res, ApiError(500, e.what(), "", "server_error"));
            }
            log_request(r, out);
            SplitText text{"", out.text};
            if (split) {
                ReasoningSplit splitter(think);
                text = splitter.push(out.text);
                const SplitText rest = splitter.finish();
                text.reasoning += rest.reasoning;
                text.content += rest.content;
            }
            return send_json(res, 200, response_body(r, out, id, created, model_name, text));
        }
        // Streaming: the generation runs inside the content provider, on this connection's thread.
        res.set_chunked_content_provider("text/event-stream", [this, r, ids, id, created, model_name, split,
                                                               think](size_t, httplib::DataSink& sink) {
            auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
            bool first = true;
            ReasoningSplit splitter(think);
            // A delta goes out when it holds something (a tag being held back sends nothing yet).
            auto send = [&](const SplitText& t) {
                if (t.reasoning.empty() && t.content.empty()) return true;
                const bool ok = write(stream_chunk(r, id, created, model_name, t, first, nullptr));
                first = false;
                return ok;
            };
            std::lock_guard lock(slot_mutex);
            try {
                const engine::CompletionResult out =
                    slot.complete(ids, r.params, [&](const std::string& piece) {
                        return send(split ? splitter.push(piece) : SplitText{"", piece});
                    });
                log_request(r, out);
                if (out.finish != engine::FinishReason::cancelled) {
                    if (split) send(splitter.finish());
                    write(stream_chunk(r, id, created, model_name, {}, first, &out));
                    if (r.include_usage) write(stream_usage(r, id, created, model_name, out));
                    write(std::string(kStreamDone));
                }
            } catch (const std::exception& e) {
                // The status line has gone out: the error travels as an event, as OpenAI's do.
                // Nothing may escape into httplib's connection thread.
                write("data: " + dump_json(error_body(ApiError(500, e.what(), "", "server_error"))) + "\n\n");
            }
            sink.done();
            return true;
        });
    }

    void log_request(const ApiRequest& r, const engine::CompletionResult& out) const {
        log::info(
            "{} {}: prompt {} tokens ({} cached) in {:.2f} s, {} generated in {:.2f} s ({:.1f} t/s), {}",
            r.endpoint == Endpoint::chat ? "chat" : "completion", r.stream ? "stream" : "json",
            out.prompt_tokens, out.cached_tokens, out.prompt_seconds, out.completion_tokens,
            out.generate_seconds,
            out.generate_seconds > 0 ? out.completion_tokens / out.generate_seconds : 0.0,
            engine::finish_reason_name(out.finish));
    }

    void routes() {
        http.set_payload_max_length(options.max_body_bytes);
        http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
            send_json(res, 200, {{"status", "ok"}});
        });
        http.Get("(/v1)?/models", [this](const httplib::Request& req, httplib::Response& res) {
            if (!authorized(req, res)) return;
            send_json(
                res, 200,
                {{"object", "list"},
                 {"data",
                  json::array({{{"id", options.model_name},
                                {"object", "model"},
                                {"created", 0},
                                {"owned_by", "mox"},
                                {"meta", {{"n_ctx", slot.n_ctx()}, {"n_vocab", tokenizer.n_tokens()}}}}})}});
        });
        http.Post("(/v1)?/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
            complete(req, res, Endpoint::chat);
        });
        http.Post("(/v1)?/completions", [this](const httplib::Request& req, httplib::Response& res) {
            complete(req, res, Endpoint::completion);
        });
        // Everything httplib answers by itself (unknown path 404, wrong method, body too large 413)
        // gets OpenAI's error object too.
        http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return;
            const std::string what = res.status == 404   ? "no such endpoint: " + req.method + " " + req.path
                                     : res.status == 413 ? std::string("the request body is too large")
                                                         : "HTTP " + std::to_string(res.status);
            send_error(res, ApiError(res.status, what));
        });
        http.set_exception_handler(
            [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
                std::string what = "unknown error";
                try {
                    std::rethrow_exception(ep);
                } catch (const std::exception& e) {
                    what = e.what();
                } catch (...) {
                }
                send_error(res, ApiError(500, what, "", "server_error"));
            });
    }
};

HttpServer::HttpServer(models::Model& model, const text::Tokenizer& tokenizer,
                       const models::StateOptions& state, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, tokenizer, state, std::move(options))) {
    impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
    const ServerOptions& o = impl_->options;
    if (o.port < 0 || o.port > 65535) fail("--port {}: expected 0..65535", o.port);
    if (o.port == 0) {
        const int port = impl_->http.bind_to_any_port(o.host);
        if (port < 0) fail("cannot listen on {} (any port)", o.host);
        return port;
    }
    if (!impl_->http.bind_to_port(o.host, o.port))
        fail("cannot listen on {}:{} (in use, or not this machine's address?)", o.host, o.port);
    return o.port;
}

void HttpServer::run() {
    impl_->http.listen_after_bind();
}

void HttpServer::stop() {
    impl_->http.stop();
}

}  // namespace mox::server
