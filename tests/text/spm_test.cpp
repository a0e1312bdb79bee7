// SentencePiece (tokenizer.ggml.model "llama") vocabularies on a small hand-built layout laid out
// like Mixtral's: <unk> <s> </s>, the 256 byte tokens, then normal tokens with scores. Expected ids
// follow from llama.cpp's rules (score order, leftmost among equals, byte fallback, the space
// prefix); tests/py/test_tokenizer_spm.py holds the same code against the sentencepiece package.
#include "text/spm.h"
#include "core/error.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/vocab_io.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <random>

namespace mox::text {
namespace {

using Ids = std::vector<int32_t>;
constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;
constexpr int32_t kFirstNormal = 3 + 256;
const std::string kSp = "\xE2\x96\x81";  // U+2581

int32_t byte_tok(uint8_t b) {
    return 3 + b;
}

struct SpmSpec {
    std::vector<std::pair<std::string, float>> normal;  // spelled with U+2581 for spaces
    std::vector<std::pair<std::string, TokenType>> added = {};
    bool add_space_prefix = true;
};

// Normal token k gets id kFirstNormal + k; added tokens follow.
Vocab make_spm(const SpmSpec& spec) {
    Vocab v;
    v.model = "llama";
    v.pre = "default";
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.token_types = {TokenType::tt_unknown, TokenType::tt_control, TokenType::tt_control};
    v.scores = {0, 0, 0};
    for (int b = 0; b < 256; ++b) {
        v.tokens.push_back(fmt::format("<0x{:02X}>", b));
        v.token_types.push_back(TokenType::tt_byte);
        v.scores.push_back(0);
    }
    for (const auto& [text, score] : spec.normal) {
        v.tokens.push_back(text);
        v.token_types.push_back(TokenType::tt_normal);
        v.scores.push_back(score);
    }
    for (const auto& [text, type] : spec.added) {
        v.tokens.push_back(text);
        v.token_types.push_back(type);
        v.scores.push_back(0);
    }
    v.unk = kUnk;
    v.bos = kBos;
    v.eos = kEos;
    v.add_bos = true;
    v.add_space_prefix = spec.add_space_prefix;
    return v;
}

const EncodeOptions kNoBos{.parse_special = true, .add_special = false};

TEST(Spm, EscapeAndUnescape) {
    EXPECT_EQ(spm_escape("a b  c", false), "a" + kSp + "b" + kSp + kSp + "c");
    EXPECT_EQ(spm_escape("x", true), kSp + "x");
    EXPECT_EQ(spm_escape("", true), kSp);
    EXPECT_EQ(spm_unescape(kSp + "a" + kSp + kSp), " a  ");
    // A lone byte of U+2581's encoding is left alone.
    EXPECT_EQ(spm_unescape("\xE2\x96 x"), "\xE2\x96 x");
}

TEST(Spm, HigherScoreMergesFirst) {
    // ab = 262 (score -2), bc = 263 (score -1): bc wins, a stays alone.
    const Tokenizer tok(make_spm(
        {.normal = {{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -2}, {"bc", -1}}, .add_space_prefix = false}));
    const int32_t a = kFirstNormal, c = kFirstNormal + 2, ab = kFirstNormal + 3, bc = kFirstNormal + 4;
    EXPECT_EQ(tok.encode("abc", kNoBos), (Ids{a, bc}));
    const Tokenizer swapped(make_spm(
        {.normal = {{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}}, .add_space_prefix = false}));
    EXPECT_EQ(swapped.encode("abc", kNoBos), (Ids{ab, c}));
}

TEST(Spm, EqualScoresMergeLeftmostFirst) {
    const Tokenizer tok(make_spm({.normal = {{"a", -5}, {"aa", -1}}, .add_space_prefix = false}));
    const int32_t a = kFirstNormal, aa = kFirstNormal + 1;
    EXPECT_EQ(tok.encode("aaa", kNoBos), (Ids{aa, a}));
    EXPECT_EQ(tok.encode("aaaa", kNoBos), (Ids{aa, aa}));
    EXPECT_EQ(tok.encode("aaaaa", kNoBos), (Ids{aa, aa, a}));
}

TEST(Spm, MergesOnlyThroughTokens) {
    // "abc" is a token but neither "ab" nor "bc" is: SentencePiece BPE only merges neighbours whose
    // concatenation is a token, so "abc" is never reached.
    const Tokenizer tok(
        make_spm({.normal = {{"a", -1}, {"b", -1}, {"c", -1}, {"abc", 0}}, .add_space_prefix = false}));
    EXPECT_EQ(tok.encode("abc", kNoBos), (Ids{kFirstNormal, kFirstNormal + 1, kFirstNormal + 2}));
    // Longer merges chain through the intermediate tokens, and a merged left symbol is merged again.
    const Tokenizer chain(
        make_spm({.normal = {{"a", -9}, {"b", -9}, {"c", -9}, {"ab", -3}, {"abc", -4}, {"bc", -5}},
                  .add_space_prefix = false}));
    EXPECT_EQ(chain.encode("abc", kNoBos), (Ids{kFirstNormal + 4}));
    EXPECT_EQ(chain.encode("abcab", kNoBos), (Ids{kFirstNormal + 4, kFirstNormal + 3}));
}

TEST(Spm, SpacePrefixAndSpaces) {
    const SpmSpec spec{.normal = {{kSp, -9}, {"a", -9}, {kSp + "a", -1}, {kSp + kSp, -2}}};
    const Tokenizer tok(make_spm(spec));
    const int32_t sp = kFirstNormal, a = kFirstNormal + 1, sp_a = kFirstNormal + 2, sp_sp = kFirstNormal + 3;
    EXPECT_EQ(tok.encode("a"), (Ids{kBos, sp_a}));
    EXPECT_EQ(tok.encode(""), (Ids{kBos}));
    EXPECT_EQ(tok.encode("", kNoBos), (Ids{}));
    // " a": two U+2581 then a; ▁a (score -1) beats ▁▁ (score -2).
    EXPECT_EQ(tok.encode(" a", kNoBos), (Ids{sp, sp_a}));
    EXPECT_EQ(tok.encode("a  ", kNoBos), (Ids{sp_a, sp_sp}));
    EXPECT_EQ(tok.encode("a a", kNoBos), (Ids{sp_a, sp_a}));
    SpmSpec no_prefix = spec;
    no_prefix.add_space_prefix = false;
    const Tokenizer bare(make_spm(no_prefix));
    EXPECT_EQ(bare.encode("a a", kNoBos), (Ids{a, sp_a}));
    EXPECT_EQ(bare.decode(Ids{a, sp_a}), "a a");
}

TEST(Spm, ByteFallback) {
    const Tokenizer tok(make_spm({.normal = {{kSp, -9}, {"a", -9}, {kSp + "a", -1}, {"\xC3\xA9", -9}}}));
    const int32_t sp = kFirstNormal, sp_a = kFirstNormal + 2, e_acute = kFirstNormal + 3;
    // é is a token; ü and the emoji are not: their UTF-8 bytes become <0xAB> tokens.
    EXPECT_EQ(tok.encode("a\xC3\xA9", kNoBos), (Ids{sp_a, e_acute}));
    EXPECT_EQ(tok.encode("\xC3\xBC", kNoBos), (Ids{sp, byte_tok(0xC3), byte_tok(0xBC)}));
    EXPECT_EQ(tok.encode("a\xF0\x9F\x98\x80", kNoBos),
              (Ids{sp_a, byte_tok(0xF0), byte_tok(0x9F), byte_tok(0x98), byte_tok(0x80)}));
    // A newline has no normal token here either.
    EXPECT_EQ(tok.encode("a\n", kNoBos), (Ids{sp_a, byte_tok('\n')}));
    // Decoding reassembles the bytes.
    EXPECT_EQ(tok.decode(tok.encode("a\xC3\xBC\xF0\x9F\x98\x80 a\n", kNoBos)),
              "a\xC3\xBC\xF0\x9F\x98\x80 a\n");
}

TEST(Spm, IllFormedBytesSplitByTheLeadByte) {
    const Tokenizer tok(make_spm({.normal = {{kSp, -9}, {"A", -9}}}));
    const int32_t sp = kFirstNormal, A = kFirstNormal + 1;
    // 0xC3 claims two bytes ("\xC3" "A" is one symbol, not a token): both become byte tokens, as
    // in llama.cpp. A stray continuation byte is a symbol of its own.
    EXPECT_EQ(tok.encode("\xC3"
                         "A",
                         kNoBos),
              (Ids{sp, byte_tok(0xC3), byte_tok('A')}));
    EXPECT_EQ(tok.encode("\x80"
                         "A",
                         kNoBos),
              (Ids{sp, byte_tok(0x80), A}));
    // A truncated character at the end is cut at the end.
    EXPECT_EQ(tok.encode("A\xE4\xBD", kNoBos), (Ids{sp, A, byte_tok(0xE4), byte_tok(0xBD)}));
    // Any bytes round-trip, but for a space inside the bytes a lead byte claims: spaces are escaped
    // before the split, so the lead byte would take part of U+2581 (as in llama.cpp).
    std::mt19937 rng(7);
    for (int i = 0; i < 200; ++i) {
        std::string s(rng() % 48, '\0');
        for (char& c : s) c = static_cast<char>(rng());
        for (char& c : s)
            if (c == ' ') c = 'A';
        ASSERT_EQ(tok.decode(tok.encode(s, kNoBos)), s);
    }
}

TEST(Spm, AddedTokensAndTheSpaceAfterThem) {
    const Tokenizer tok(make_spm({.normal = {{kSp, -9}, {"a", -9}, {kSp + "a", -1}, {"<", -9}, {">", -9}},
                                  .added = {{"<u>", TokenType::tt_user_defined}}}));
    const int32_t sp = kFirstNormal, a = kFirstNormal + 1, sp_a = kFirstNormal + 2, lt = kFirstNormal + 3,
                  gt = kFirstNormal + 4, u = kFirstNormal + 5;
    // After an added token the next span gets the space prefix again (llama.cpp).
    EXPECT_EQ(tok.encode("a</s>a"), (Ids{kBos, sp_a, kEos, sp_a}));
    EXPECT_EQ(tok.encode("<s>a", kNoBos), (Ids{kBos, sp_a}));
    EXPECT_EQ(tok.encode("a<u>", kNoBos), (Ids{sp_a, u}));
    EXPECT_EQ(tok.encode("<u><u>a", kNoBos), (Ids{u, u, sp_a}));
    // <unk> is matched like a control token.
    EXPECT_EQ(tok.encode("<unk>", kNoBos), (Ids{kUnk}));
    // parse_special off: control tokens are text; user-defined ones still match.
    EXPECT_EQ(tok.encode("</s>a<u>", {.parse_special = false, .add_special = false}),
              (Ids{sp, lt, byte_tok('/'), byte_tok('s'), gt, a, u}));
    // skip_special drops control and unknown tokens, keeps user-defined ones.
    EXPECT_EQ(tok.decode(Ids{sp_a, kEos, kUnk, u}), "a</s><unk><u>");
    EXPECT_EQ(tok.decode(Ids{sp_a, kEos, kUnk, u}, {.skip_special = true}), "a<u>");
    EXPECT_TRUE(tok.is_special(kUnk));
    EXPECT_TRUE(tok.is_special(kEos));
    EXPECT_FALSE(tok.is_special(u));
}

TEST(Spm, DecodeDropsTheSpaceOfTheFirstTokenOnly) {
    const Tokenizer tok(make_spm({.normal = {{kSp, -9}, {"a", -9}, {kSp + "a", -1}}}));
    const int32_t sp_a = kFirstNormal + 2;
    EXPECT_EQ(tok.decode(Ids{sp_a, sp_a}), "a a");
    // A leading BOS takes the first-token slot, so the space after it stays (llama.cpp).
    EXPECT_EQ(tok.decode(Ids{kBos, sp_a}), "<s> a");
    EXPECT_EQ(tok.decode(Ids{kBos, sp_a}, {.skip_special = true}), " a");
    // One piece at a time (streamed generation) keeps the space: a word starts with it.
    EXPECT_EQ(tok.token_piece(sp_a), " a");
    DecodeStream stream(tok);
    EXPECT_EQ(stream.push(sp_a) + stream.push(sp_a), " a a");
}

TEST(Spm, EndOfGenerationByText) {
    // Phi-3.5's <|end|> is an added token; llama.cpp ends generation on it and treats it as control.
    Vocab v = make_spm(
        {.normal = {{kSp, -9}},
         .added = {{"<|end|>", TokenType::tt_user_defined}, {"<|user|>", TokenType::tt_user_defined}}});
    const int32_t end = kFirstNormal + 1, user = kFirstNormal + 2;
    const Tokenizer tok(v);
    EXPECT_EQ(tok.end_of_generation(), (Ids{kEos, end}));
    EXPECT_TRUE(tok.is_special(end));
    EXPECT_FALSE(tok.is_special(user));
    // As control, it is text when parse_special is off: ▁ and 7 byte tokens.
    EXPECT_EQ(tok.encode("<|end|>", {.parse_special = false, .add_special = false}).size(), 8u);
}

TEST(Spm, RstripTokensSwallowTheWhitespaceAfterThem) {
    Vocab v = make_spm(
        {.normal = {{kSp, -9}, {"a", -9}, {kSp + "a", -1}}, .added = {{"<|user|>", TokenType::tt_control}}});
    const int32_t sp_a = kFirstNormal + 2, user = kFirstNormal + 3;
    const std::string text = "<|user|>\n a";
    EXPECT_EQ(Tokenizer(v).encode(text, kNoBos), (Ids{user, kFirstNormal, byte_tok('\n'), sp_a}));
    v.rstrip = {user};
    EXPECT_EQ(Tokenizer(v).encode(text, kNoBos), (Ids{user, sp_a}));
    EXPECT_EQ(Tokenizer(v).encode("<|user|>\n", kNoBos), (Ids{user}));
}

TEST(Spm, ValidationErrors) {
    const SpmSpec spec{.normal = {{"a", -1}}};
    Vocab v = make_spm(spec);
    v.scores.pop_back();
    EXPECT_THROW(Tokenizer{v}, Error);
    v = make_spm(spec);
    v.tokens[3] = "<0xZZ>";  // a byte token that is not <0xAB>
    EXPECT_THROW(Tokenizer{v}, Error);
    v = make_spm(spec);
    v.merges = {"a b"};
    EXPECT_THROW(Tokenizer{v}, Error);
    v = make_spm(spec);
    v.model = "bert";
    EXPECT_THROW(Tokenizer{v}, Error);
    v = make_spm(spec);
    v.pre = "no-such-pre";  // SentencePiece vocabularies have no pre-tokenizer: ignored
    EXPECT_NO_THROW(Tokenizer{v});
    EXPECT_THROW(vocab_to_hf_json(make_spm(spec)), Error);
}

TEST(Spm, LongText) {
    const Tokenizer tok(
        make_spm({.normal = {{"a", -9}, {"aa", -1}, {"aaaa", -2}}, .add_space_prefix = false}));
    const auto ids = tok.encode(std::string(100001, 'a'), kNoBos);
    ASSERT_EQ(ids.size(), 25001u);
    for (size_t i = 0; i + 1 < ids.size(); ++i) ASSERT_EQ(ids[i], kFirstNormal + 2);
    EXPECT_EQ(ids.back(), kFirstNormal);
}

std::string temp_gguf(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("mox_spm_" + name + ".gguf")).string();
}

TEST(SpmGguf, RoundTripAndLlamaCppDefaults) {
    Vocab v = make_spm({.normal = {{kSp, -9}, {"a", -9}, {kSp + "a", -1.5f}}});
    v.add_space_prefix = false;
    v.chat_template = "{{ bos_token }}";
    const std::string path = temp_gguf("round_trip");
    {
        gguf::Writer w(path);
        w.set("general.architecture", gguf::Value::string("llama"));
        vocab_to_gguf(v, w);
        w.write_header();
        w.finish();
    }
    const Vocab back = vocab_from_gguf(gguf::File::open(path));
    EXPECT_EQ(back.model, "llama");
    EXPECT_EQ(back.tokens, v.tokens);
    EXPECT_EQ(back.token_types, v.token_types);
    EXPECT_EQ(back.scores, v.scores);
    EXPECT_FALSE(back.add_space_prefix);
    EXPECT_TRUE(back.add_bos);
    EXPECT_EQ(back.chat_template, v.chat_template);
    EXPECT_TRUE(back.rstrip.empty());

    // Only model, tokens and types, in a file named like Phi-3: llama.cpp's defaults (bos 1, eos 2,
    // unk 0, BOS added, space prefix on, scores 0) and the Phi-3 rstrip on the added tokens but
    // <unk>, <s> and <|endoftext|>.
    const std::string bare = temp_gguf("bare");
    Vocab phi = make_spm({.normal = {{kSp, -9}},
                          .added = {{"<|endoftext|>", TokenType::tt_control},
                                    {"<|end|>", TokenType::tt_user_defined},
                                    {"<|user|>", TokenType::tt_control}}});
    {
        gguf::Writer w(bare);
        w.set("general.architecture", gguf::Value::string("phimoe"));
        w.set("general.name", gguf::Value::string("Phi-3.5-MoE-instruct"));
        w.set("tokenizer.ggml.model", gguf::Value::string("llama"));
        w.set("tokenizer.ggml.tokens", gguf::Value::string_array(phi.tokens));
        std::vector<int32_t> types;
        for (TokenType t : phi.token_types) types.push_back(static_cast<int32_t>(t));
        w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
        w.write_header();
        w.finish();
    }
    const Vocab d = vocab_from_gguf(gguf::File::open(bare));
    EXPECT_EQ(d.bos, kBos);
    EXPECT_EQ(d.eos, kEos);
    EXPECT_EQ(d.unk, kUnk);
    EXPECT_TRUE(d.add_bos);
    EXPECT_TRUE(d.add_space_prefix);
    EXPECT_EQ(d.scores, std::vector<float>(d.tokens.size(), 0.0f));
    EXPECT_EQ(d.rstrip, (Ids{kEos, kFirstNormal + 2, kFirstNormal + 3}));
    const Tokenizer tok(d);
    EXPECT_EQ(tok.encode("<|user|>\n<|end|>\n"), (Ids{kBos, kFirstNormal + 3, kFirstNormal + 2}));
    std::filesystem::remove(path);
    std::filesystem::remove(bare);
}

TEST(SpmChat, TemplateBosIsNotDoubled) {
    const Tokenizer tok(make_spm({.normal = {{kSp, -9}, {"a", -9}, {kSp + "a", -1}}}));
    ChatOptions co;
    co.bos_token = tok.token_piece(kBos);
    co.eos_token = tok.token_piece(kEos);
    co.strip_bos = tok.vocab().add_bos;
    const std::string tmpl = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}";
    ChatMessage user;
    user.role = "user";
    user.content = "a";
    const std::string prompt = apply_chat_template(tmpl, {user}, co);
    EXPECT_EQ(prompt, "a");
    EXPECT_EQ(tok.encode(prompt), (Ids{kBos, kFirstNormal + 2}));
    co.strip_bos = false;
    EXPECT_EQ(apply_chat_template(tmpl, {user}, co), "<s>a");
}

}  // namespace
}  // namespace mox::text
