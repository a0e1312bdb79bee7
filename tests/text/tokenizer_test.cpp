// Tokenizer behaviour on small hand-built vocabularies, where the expected ids follow from the
// merge rules and the vocabulary layout.
#include "text/tokenizer.h"
#include "core/error.h"
#include "text/byte_level.h"
#include "text/vocab_io.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

namespace mox::text {
namespace {

// 256 byte tokens (id == byte value), then `extra` normal tokens given in raw bytes, then the
// added tokens. Merges are given as raw-byte pairs too.
struct Spec {
    std::vector<std::string> extra = {};
    std::vector<std::pair<std::string, std::string>> merges = {};
    std::vector<std::pair<std::string, TokenType>> added = {};
};

Vocab make_vocab(const Spec& spec) {
    Vocab v;
    v.pre = "qwen35";
    for (int b = 0; b < 256; ++b) v.tokens.push_back(bytes_to_mapped(std::string(1, static_cast<char>(b))));
    for (const auto& t : spec.extra) v.tokens.push_back(bytes_to_mapped(t));
    v.token_types.assign(v.tokens.size(), TokenType::tt_normal);
    for (const auto& [text, type] : spec.added) {
        v.tokens.push_back(text);
        v.token_types.push_back(type);
    }
    for (const auto& [a, b] : spec.merges) v.merges.push_back(bytes_to_mapped(a) + " " + bytes_to_mapped(b));
    return v;
}

int32_t byte_id(char c) {
    return static_cast<uint8_t>(c);
}
using Ids = std::vector<int32_t>;

TEST(Bpe, LowerRankMergesFirst) {
    // ids: ab = 256, bc = 257. "b c" has rank 0, so "abc" -> a, bc.
    const Tokenizer tok(make_vocab({.extra = {"ab", "bc"}, .merges = {{"b", "c"}, {"a", "b"}}}));
    EXPECT_EQ(tok.encode("abc"), (Ids{byte_id('a'), 257}));
    // With the ranks swapped, a + b wins.
    const Tokenizer tok2(make_vocab({.extra = {"ab", "bc"}, .merges = {{"a", "b"}, {"b", "c"}}}));
    EXPECT_EQ(tok2.encode("abc"), (Ids{256, byte_id('c')}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
    const Tokenizer tok(make_vocab({.extra = {"aa"}, .merges = {{"a", "a"}}}));
    EXPECT_EQ(tok.encode("aaa"), (Ids{256, byte_id('a')}));
    EXPECT_EQ(tok.encode("aaaa"), (Ids{256, 256}));
    EXPECT_EQ(tok.encode("aaaaa"), (Ids{256, 256, byte_id('a')}));
}

TEST(Bpe, MergesChainAndStayInsidePieces) {
    const Tokenizer tok(make_vocab({.extra = {"ab", "abc"}, .merges = {{"a", "b"}, {"ab", "c"}}}));
    EXPECT_EQ(tok.encode("abc"), (Ids{257}));
    // " abc" is one piece (space + letters): the space byte stays alone, the rest merges.
    EXPECT_EQ(tok.encode("abc abc"), (Ids{257, byte_id(' '), 257}));
    // "ab" then "c" across a piece boundary never merge: "ab1c" splits at the digit.
    EXPECT_EQ(tok.encode("ab1c"), (Ids{256, byte_id('1'), byte_id('c')}));
}

TEST(Bpe, LongPiece) {
    const Tokenizer tok(make_vocab({.extra = {"aa", "aaaa"}, .merges = {{"a", "a"}, {"aa", "aa"}}}));
    const auto ids = tok.encode(std::string(100001, 'a'));
    ASSERT_EQ(ids.size(), 25001u);
    for (size_t i = 0; i + 1 < ids.size(); ++i) ASSERT_EQ(ids[i], 257);
    EXPECT_EQ(ids.back(), byte_id('a'));
}

TEST(Bpe, BadMergesAreErrors) {
    EXPECT_THROW(Tokenizer(make_vocab({.extra = {"ab"}, .merges = {{"a", "x1"}}})), Error);  // part unknown
    EXPECT_THROW(Tokenizer(make_vocab({.extra = {}, .merges = {{"a", "b"}}})), Error);       // result unknown
    Vocab v = make_vocab({});
    v.merges.push_back("nospace");
    EXPECT_THROW(Tokenizer{v}, Error);
}

TEST(Tokenizer, AddedTokensLeftmostLongest) {
    const Tokenizer tok(make_vocab({.added = {{"<a>", TokenType::tt_control},
                                              {"<a>b", TokenType::tt_control},
                                              {"<u>", TokenType::tt_user_defined}}}));
    const int32_t a = 256, ab = 257, u = 258;
    EXPECT_EQ(tok.encode("<a>b"), (Ids{ab}));
    EXPECT_EQ(tok.encode("z<a><a>"), (Ids{byte_id('z'), a, a}));
    EXPECT_EQ(tok.encode("<u><a>"), (Ids{u, a}));
    // parse_special off: control tokens are text, user-defined ones still match.
    const auto plain = tok.encode("<a><u>", {.parse_special = false});
    EXPECT_EQ(plain, (Ids{byte_id('<'), byte_id('a'), byte_id('>'), u}));
    // Decoding gives the literal texts back; skip_special drops control tokens only.
    EXPECT_EQ(tok.decode(Ids{a, u, byte_id('x')}), "<a><u>x");
    EXPECT_EQ(tok.decode(Ids{a, u, byte_id('x')}, {.skip_special = true}), "<u>x");
}

TEST(Tokenizer, IllFormedBytesRoundTrip) {
    const Tokenizer tok(make_vocab({.extra = {"ab"}, .merges = {{"a", "b"}}}));
    const std::string text =
        "ab\xFF"
        "ab\xE4\xBD"
        "ab\xC0";
    const auto ids = tok.encode(text);
    EXPECT_EQ(ids, (Ids{256, 0xFF, 256, 0xE4, 0xBD, 256, 0xC0}));
    EXPECT_EQ(tok.decode(ids), text);
    EXPECT_EQ(tok.decode(ids, {.lossy = true}),
              "ab\xEF\xBF\xBD"
              "ab\xEF\xBF\xBD"
              "ab\xEF\xBF\xBD");

    std::mt19937 rng(42);
    for (int i = 0; i < 200; ++i) {
        std::string s(rng() % 64, '\0');
        for (char& c : s) c = static_cast<char>(rng());
        ASSERT_EQ(tok.decode(tok.encode(s)), s);
    }
}

TEST(Tokenizer, DecodeRejectsUnknownIdsAndSkipsPadding) {
    Vocab v = make_vocab({});
    v.tokens.push_back("[PAD256]");
    v.token_types.push_back(TokenType::tt_unused);
    const Tokenizer tok(v);
    EXPECT_EQ(tok.decode(Ids{byte_id('h'), 256, byte_id('i')}), "hi");
    EXPECT_THROW(tok.decode(Ids{257}), Error);
    EXPECT_THROW(tok.decode(Ids{-1}), Error);
    EXPECT_THROW(tok.token_piece(1000), Error);
    // Padding rows are never produced, even when their text appears.
    EXPECT_EQ(tok.encode("[PAD256]").size(), 8u);
}

TEST(Tokenizer, BosEosOnlyWhenAsked) {
    Vocab v = make_vocab({.added = {{"<s>", TokenType::tt_control}, {"</s>", TokenType::tt_control}}});
    v.bos = 256;
    v.eos = 257;
    const Tokenizer never(v);
    EXPECT_EQ(never.encode("x"), (Ids{byte_id('x')}));
    v.add_bos = true;
    v.add_eos = true;
    const Tokenizer both(v);
    EXPECT_EQ(both.encode("x"), (Ids{256, byte_id('x'), 257}));
    EXPECT_EQ(both.encode("x", {.add_special = false}), (Ids{byte_id('x')}));
    EXPECT_EQ(both.end_of_generation(), (Ids{257}));
}

TEST(Tokenizer, NfcWhenTheVocabularyAsks) {
    Vocab v = make_vocab({});
    const std::string decomposed = "e\xCC\x81", composed = "\xC3\xA9";
    const Tokenizer raw(v);
    EXPECT_EQ(raw.decode(raw.encode(decomposed)), decomposed);
    v.normalizer = Normalizer::nfc;
    const Tokenizer nfc(v);
    EXPECT_EQ(nfc.encode(decomposed), nfc.encode(composed));
    EXPECT_EQ(nfc.decode(nfc.encode(decomposed)), composed);
    // Embedded NUL bytes survive normalization.
    const std::string with_nul(
        "a\0"
        "e\xCC\x81",
        5);
    EXPECT_EQ(nfc.decode(nfc.encode(with_nul)), std::string("a\0"
                                                            "\xC3\xA9",
                                                            4));
}

TEST(DecodeStream, HoldsBackSplitCharacters) {
    const Tokenizer tok(make_vocab({}));
    const auto ids = tok.encode(
        "a\xE4\xBD\xA0"
        "b");  // a 你 b, one byte token each
    ASSERT_EQ(ids.size(), 5u);
    DecodeStream stream(tok);
    std::vector<std::string> out;
    for (int32_t id : ids) out.push_back(stream.push(id));
    EXPECT_EQ(out, (std::vector<std::string>{"a", "", "", "\xE4\xBD\xA0", "b"}));
    EXPECT_EQ(stream.finish(), "");
    DecodeStream cut(tok);
    EXPECT_EQ(cut.push(0xE4), "");
    EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, ConcurrentEncodingSharesTheCache) {
    const Tokenizer tok(placeholder_vocab(600));
    std::vector<std::string> texts;
    std::mt19937 rng(9);
    for (int i = 0; i < 64; ++i) {
        std::string s;
        for (int w = 0; w < 50; ++w)
            s += std::string(" the int for ") + std::to_string(rng() % 1000) + "\xC3\xA9x";
        texts.push_back(s);
    }
    std::vector<Ids> expected;
    for (const auto& t : texts) expected.push_back(tok.encode(t));
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int rep = 0; rep < 20; ++rep)
                for (size_t i = 0; i < texts.size(); ++i)
                    mismatches[t] += tok.encode(texts[i]) != expected[i];
        });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(tok.decode(expected[i]), texts[i]);
}

TEST(Vocab, ValidationErrors) {
    Vocab v = make_vocab({});
    v.bos = 999;
    EXPECT_THROW(v.validate(), Error);
    v = make_vocab({});
    v.tokens[5] = v.tokens[6];
    EXPECT_THROW(v.validate(), Error);
    v = make_vocab({});
    v.pre = "no-such-pre";
    EXPECT_THROW(v.validate(), Error);
    v = make_vocab({});
    v.model = "bert";
    EXPECT_THROW(v.validate(), Error);
    v = make_vocab({});
    v.model = "llama";  // SentencePiece needs scores and no merges list
    EXPECT_THROW(v.validate(), Error);
    v = make_vocab({});
    v.token_types.pop_back();
    EXPECT_THROW(v.validate(), Error);
    v = make_vocab({});
    v.add_bos = true;
    EXPECT_THROW(v.validate(), Error);
}

TEST(PlaceholderVocab, LayoutAndRoundTrip) {
    const Vocab v = placeholder_vocab(400);
    ASSERT_EQ(v.size(), 400);
    const Tokenizer tok(v);
    const int32_t eot = *v.bos;
    EXPECT_EQ(v.tokens[static_cast<size_t>(eot)], "<|endoftext|>");
    EXPECT_EQ(v.tokens[static_cast<size_t>(*v.eos)], "<|im_end|>");
    EXPECT_FALSE(v.add_bos);
    EXPECT_EQ(tok.end_of_generation(), (Ids{eot, *v.eos}));
    EXPECT_EQ(tok.encode("<|im_start|>"), (Ids{eot + 1}));
    // Learned merges make common English shorter than its bytes.
    const std::string common = "the quick brown fox and the lazy dog";
    EXPECT_LT(tok.encode(common).size(), common.size());

    std::mt19937 rng(1);
    for (int i = 0; i < 300; ++i) {
        std::string s(rng() % 80, '\0');
        for (char& c : s) c = static_cast<char>(rng() % 3 ? 'a' + rng() % 26 : rng());
        const auto ids = tok.encode(s, {.parse_special = false});
        for (int32_t id : ids) ASSERT_LT(id, eot);
        ASSERT_EQ(tok.decode(ids), s);
    }
    EXPECT_THROW(placeholder_vocab(258), Error);
    // A tiny vocabulary: bytes + specials only.
    EXPECT_EQ(placeholder_vocab(259).merges.size(), 0u);
}

TEST(HfJson, WriteThenReadGivesTheSameVocab) {
    const Vocab v = placeholder_vocab(350);
    const Vocab back = vocab_from_hf_json(vocab_to_hf_json(v));
    EXPECT_EQ(back.tokens, v.tokens);
    EXPECT_EQ(back.token_types, v.token_types);
    EXPECT_EQ(back.merges, v.merges);
    EXPECT_EQ(back.pre, v.pre);
    EXPECT_EQ(back.normalizer, v.normalizer);
    EXPECT_FALSE(back.add_bos);
}

TEST(HfJson, RejectsWhatItCannotTokenizeTheSame) {
    const auto with = [](const std::string& model_extra, const std::string& added) {
        return R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [])" + model_extra +
               R"(}, "added_tokens": [)" + added +
               R"(], "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}})";
    };
    EXPECT_NO_THROW(vocab_from_hf_json(with("", "")));
    EXPECT_THROW(vocab_from_hf_json(with(R"(, "byte_fallback": true)", "")), Error);
    EXPECT_THROW(vocab_from_hf_json(with(R"(, "continuing_subword_prefix": "##")", "")), Error);
    EXPECT_THROW(
        vocab_from_hf_json(with("", R"({"id": 1, "content": "<m>", "lstrip": true, "special": true})")),
        Error);
    EXPECT_THROW(vocab_from_hf_json("{not json"), Error);
    EXPECT_THROW(vocab_from_hf_json(R"({"model": {"type": "WordPiece", "vocab": {}}})"), Error);
    const Vocab gpt2 = vocab_from_hf_json(with("", R"({"id": 3, "content": "<m>", "special": false})"));
    EXPECT_EQ(gpt2.pre, "gpt2");
    ASSERT_EQ(gpt2.size(), 4);
    EXPECT_EQ(gpt2.type(3), TokenType::tt_user_defined);
    EXPECT_EQ(gpt2.type(1), TokenType::tt_unused);  // a gap in the ids
}

}  // namespace
}  // namespace mox::text
