#include "models/synth_vocab.h"

#include "core/error.h"

#include <string>
#include <vector>

namespace mox::models {

namespace {

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// GPT-2 byte-level BPE spells every byte as one printable code point: printable Latin-1 bytes as
// themselves, the others (controls, space, 0x7F-0xA0, 0xAD) as 256, 257, ... in byte order.
std::vector<std::string> byte_symbols() {
    std::vector<std::string> sym(256);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        append_utf8(sym[b], printable ? b : next++);
    }
    return sym;
}

}  // namespace

void write_synth_vocab(gguf::Writer& w, int64_t n_vocab) {
    const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    const int64_t n_regular = n_vocab - static_cast<int64_t>(specials.size());
    if (n_regular < 256) fail("a synthetic vocabulary needs at least {} tokens, got {}", 256 + specials.size(), n_vocab);

    const std::vector<std::string> sym = byte_symbols();
    // Bytes in the order their merges are ranked: lower-case letters, space, upper case, digits,
    // punctuation, then everything else. Gives English-looking merges the best ranks.
    std::vector<int> order;
    std::vector<bool> seen(256, false);
    auto take = [&](int lo, int hi) {
        for (int b = lo; b <= hi; ++b)
            if (!seen[b]) seen[b] = true, order.push_back(b);
    };
    take('a', 'z');
    take(' ', ' ');
    take('A', 'Z');
    take('0', '9');
    take(0x21, 0x7E);
    take(0, 255);

    std::vector<std::string> tokens(sym.begin(), sym.end());
    std::vector<std::string> merges;
    tokens.reserve(static_cast<size_t>(n_vocab));
    // Level 2: every byte pair; level 3: each pair token followed by a byte; and so on, until full.
    // Every new token is a distinct byte string, produced by exactly one merge of two existing tokens.
    std::vector<std::string> previous_level;
    for (int a : order)
        for (int b : order) previous_level.push_back(sym[a] + " " + sym[b]);
    while (static_cast<int64_t>(tokens.size()) < n_regular) {
        std::vector<std::string> next_level;
        for (const std::string& merge : previous_level) {
            if (static_cast<int64_t>(tokens.size()) >= n_regular) break;
            const size_t space = merge.find(' ');
            std::string token = merge.substr(0, space) + merge.substr(space + 1);
            merges.push_back(merge);
            for (int c : order) next_level.push_back(token + " " + sym[c]);
            tokens.push_back(std::move(token));
            if (next_level.size() > static_cast<size_t>(n_regular)) next_level.resize(static_cast<size_t>(n_regular));
        }
        previous_level = std::move(next_level);
    }
    std::vector<int32_t> types(tokens.size(), 1);  // NORMAL
    for (const std::string& s : specials) {
        tokens.push_back(s);
        types.push_back(3);  // CONTROL
    }

    using gguf::Value;
    w.set("tokenizer.ggml.model", Value::string("gpt2"));
    w.set("tokenizer.ggml.pre", Value::string("qwen35"));
    w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
    w.set("tokenizer.ggml.token_type", Value::i32_array(types));
    w.set("tokenizer.ggml.merges", Value::string_array(merges));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(static_cast<uint32_t>(n_regular + 2)));  // <|im_end|>
    w.set("tokenizer.ggml.padding_token_id", Value::u32(static_cast<uint32_t>(n_regular)));  // <|endoftext|>
    w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
}

}  // namespace mox::models
