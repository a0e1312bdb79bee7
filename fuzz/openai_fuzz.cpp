// libFuzzer target for mox serve's request parser (server/openai.h): any bytes as a chat or a text
// completion body. It must either parse or throw ApiError with a 4xx status; nothing else (no other
// exception, no crash, no sanitizer report). Parsed requests are turned into a response and a
// stream chunk, which must serialise.
#include "server/openai.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace mox::server;
    if (size == 0) return 0;
    const Endpoint endpoint = data[0] & 1 ? Endpoint::chat : Endpoint::completion;
    const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        const ApiRequest r = parse_request(body, endpoint, mox::engine::CompletionParams{});
        mox::engine::CompletionResult res;
        res.text = r.prompt.substr(0, 16);
        const SplitText text{res.text, res.text};
        (void)dump_json(response_body(r, res, "id", 0, r.model, text));
        (void)stream_chunk(r, "id", 0, r.model, text, true, &res);
    } catch (const ApiError& e) {
        if (e.status < 400 || e.status >= 500) std::abort();
    }
    return 0;
}
