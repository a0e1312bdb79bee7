// vocab_from_gguf / vocab_to_gguf through mox's GGUF writer and reader. (The Python parity tests
// also read GGUFs written by gguf-py.)
#include "core/error.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "text/tokenizer.h"
#include "text/vocab_io.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace mox::text {
namespace {

std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("mox_vocab_" + name + ".gguf")).string();
}

// Writes a GGUF with `set` applied to its metadata and no tensors.
template <typename F>
std::string write_gguf(const std::string& name, F&& set) {
    const std::string path = temp_path(name);
    gguf::Writer w(path);
    w.set("general.architecture", gguf::Value::string("qwen35moe"));
    set(w);
    w.write_header();
    w.finish();
    return path;
}

TEST(VocabGguf, RoundTrip) {
    Vocab v = placeholder_vocab(300);
    v.chat_template = "{{ messages }}";
    const std::string path = write_gguf("round_trip", [&](gguf::Writer& w) { vocab_to_gguf(v, w); });
    const Vocab back = vocab_from_gguf(gguf::File::open(path));
    EXPECT_EQ(back.tokens, v.tokens);
    EXPECT_EQ(back.token_types, v.token_types);
    EXPECT_EQ(back.merges, v.merges);
    EXPECT_EQ(back.pre, "qwen35");
    EXPECT_EQ(back.normalizer, Normalizer::nfc);
    EXPECT_EQ(back.bos, v.bos);
    EXPECT_EQ(back.eos, v.eos);
    EXPECT_EQ(back.pad, v.pad);
    EXPECT_FALSE(back.add_bos);
    EXPECT_EQ(back.chat_template, v.chat_template);
    const Tokenizer a(v), b(back);
    const std::string text = "<|im_start|>user\nthe quick brown fox<|im_end|>";
    EXPECT_EQ(a.encode(text), b.encode(text));
    std::filesystem::remove(path);
}

TEST(VocabGguf, MissingOrMistypedKeysNameTheKey) {
    const auto expect_error = [](const std::string& name, auto&& set, const std::string& needle) {
        const std::string path = write_gguf(name, set);
        try {
            (void)vocab_from_gguf(gguf::File::open(path));
            ADD_FAILURE() << "no error for " << name;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
        std::filesystem::remove(path);
    };
    const Vocab v = placeholder_vocab(300);
    expect_error(
        "no_tokens", [](gguf::Writer& w) { w.set("tokenizer.ggml.model", gguf::Value::string("gpt2")); },
        "tokenizer.ggml.tokens");
    expect_error(
        "no_model",
        [&](gguf::Writer& w) { w.set("tokenizer.ggml.tokens", gguf::Value::string_array(v.tokens)); },
        "tokenizer.ggml.model");
    expect_error(
        "types_are_strings",
        [&](gguf::Writer& w) {
            vocab_to_gguf(v, w);
            w.set("tokenizer.ggml.token_type", gguf::Value::string_array(v.tokens));
        },
        "tokenizer.ggml.token_type");
    expect_error(
        "short_types",
        [&](gguf::Writer& w) {
            vocab_to_gguf(v, w);
            w.set("tokenizer.ggml.token_type", gguf::Value::i32_array({1, 1, 1}));
        },
        "token_type");
    expect_error(
        "eos_out_of_range",
        [&](gguf::Writer& w) {
            vocab_to_gguf(v, w);
            w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(5000));
        },
        "eos");
    expect_error(
        "wordpiece",
        [&](gguf::Writer& w) {
            vocab_to_gguf(v, w);
            w.set("tokenizer.ggml.model", gguf::Value::string("bert"));
        },
        "bert");
    expect_error(
        "scores_short",
        [&](gguf::Writer& w) {
            w.set("tokenizer.ggml.model", gguf::Value::string("llama"));
            w.set("tokenizer.ggml.tokens", gguf::Value::string_array(v.tokens));
            w.set("tokenizer.ggml.scores", gguf::Value::f32_array({0.0f, 1.0f}));
        },
        "tokenizer.ggml.scores");
}

}  // namespace
}  // namespace mox::text
