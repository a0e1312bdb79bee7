// The SentencePiece side of `mox convert` without model files: the vocabulary rules on hand-made
// pieces (spm_vocab.h), gguf-py's special-token rules (hf_special_tokens.h), the Llama-style
// tokenizer.json reader (spm_hf_json.h), and the library-backed model reader on bytes that are no
// model. tests/py/test_convert_spm.py holds whole conversions to llama.cpp's rules and to the
// sentencepiece package.
#include "models/spm_vocab.h"
#include "core/error.h"
#include "models/hf_special_tokens.h"
#include "text/spm_hf_json.h"
#include "text/spm_model.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

namespace mox::models {
namespace {

using nlohmann::json;
using text::TokenType;

const std::string kSpace = "\xe2\x96\x81";  // U+2581

// <unk> <s> </s>, two byte pieces, then normal pieces with falling scores.
text::SpmModel small_model() {
    text::SpmModel m;
    m.pieces = {{"<unk>", 0, TokenType::tt_unknown}, {"<s>", 0, TokenType::tt_control},
                {"</s>", 0, TokenType::tt_control},  {"<0x00>", 0, TokenType::tt_byte},
                {"<0x01>", 0, TokenType::tt_byte},   {kSpace + "a", -1, TokenType::tt_normal},
                {"b", -2, TokenType::tt_normal},     {"a", -3, TokenType::tt_normal}};
    m.add_dummy_prefix = true;
    return m;
}

TEST(SpmVocab, PiecesThenUnusedRows) {
    const ConvertedVocab c = spm_vocab_llama(small_model(), {}, 10);
    const text::Vocab& v = c.vocab;
    ASSERT_EQ(v.size(), 10);
    EXPECT_EQ(v.model, "llama");
    EXPECT_EQ(v.pre, "default");
    EXPECT_EQ(v.tokens[5], kSpace + "a");
    EXPECT_EQ(v.scores[6], -2.0f);
    EXPECT_EQ(v.type(0), TokenType::tt_unknown);
    EXPECT_EQ(v.type(3), TokenType::tt_byte);
    EXPECT_EQ(v.tokens[8], "[PAD8]");
    EXPECT_EQ(v.type(9), TokenType::tt_unused);
    EXPECT_EQ(v.scores[9], -10000.0f);
    // Nothing names ids or flags: BOS added (with llama.cpp's id 1), EOS not, no unk key.
    EXPECT_TRUE(v.add_bos);
    EXPECT_EQ(v.bos, 1);
    EXPECT_FALSE(v.add_eos);
    EXPECT_FALSE(v.eos);
    EXPECT_FALSE(v.unk);
    EXPECT_TRUE(v.add_space_prefix);
    EXPECT_TRUE(c.extra_keys.empty());
}

TEST(SpmVocab, LlamaAddedTokenRules) {
    const json added = {{"<x>", 8}, {"<far>", 50}};
    const json config = {{"added_tokens_decoder",
                          {{"0", {{"content", "<unk>"}, {"special", true}}},
                           {"8", {{"content", "<y>"}, {"special", false}}},
                           {"9", {{"content", "<|tool|>"}, {"special", false}}},
                           {"10", {{"content", "to" + kSpace + "be"}}},
                           {"99", {{"content", "<beyond>"}, {"special", true}}}}}};
    const ConvertedVocab c =
        spm_vocab_llama(small_model(), {.tokenizer_config = &config, .added_tokens = &added}, 12);
    const text::Vocab& v = c.vocab;
    EXPECT_EQ(v.type(0), TokenType::tt_control);  // special in added_tokens_decoder: no longer unknown
    EXPECT_EQ(v.scores[0], -1000.0f);
    EXPECT_EQ(v.tokens[8], "<y>");  // added_tokens_decoder after added_tokens.json
    EXPECT_EQ(v.type(8), TokenType::tt_user_defined);
    EXPECT_EQ(v.type(9), TokenType::tt_control);  // spelled like a special
    EXPECT_EQ(v.tokens[10], "to be");             // U+2581 of a user-defined token is a space
    EXPECT_EQ(v.type(10), TokenType::tt_user_defined);
    EXPECT_EQ(v.tokens[11], "[PAD11]");  // ids 50 and 99 are past the rows: skipped
}

TEST(SpmVocab, LooksSpecial) {
    for (const char* t : {"<|end|>", "<pad>", "<mask>", "<unused12>", "[@BOS@]",
                          "<\xef\xbd\x9c"
                          "x\xef\xbd\x9c>"})
        EXPECT_TRUE(looks_special(t)) << t;
    for (const char* t : {"<|", "|>", "<s>", "</s>", "<unk>", "plain", "<|x"})
        EXPECT_FALSE(looks_special(t)) << t;
}

TEST(SpmVocab, PiecesBeyondTheRows) {
    // Mixtral's rules drop them; Phi's fail.
    const ConvertedVocab c = spm_vocab_llama(small_model(), {}, 6);
    EXPECT_EQ(c.vocab.size(), 6);
    EXPECT_EQ(c.vocab.tokens[5], kSpace + "a");
    EXPECT_THROW(spm_vocab_phi3(small_model(), {}, 6), Error);
}

TEST(SpmVocab, Phi3AddedTokens) {
    const json config = {{"added_tokens_decoder",
                          {{"2", {{"content", "</s>"}, {"special", false}}},
                           {"8", {{"content", "<|end|>"}, {"special", true}}},
                           {"9", {{"content", "<|x|>"}, {"special", false}}}}},
                         {"eos_token", "<|end|>"}};
    const json tokenizer = {{"added_tokens",
                             {{{"id", 8}, {"content", "<|end|>"}, {"special", true}},
                              {{"id", 10}, {"content", "<|user|>"}, {"special", true}}}}};
    const ConvertedVocab c =
        spm_vocab_phi3(small_model(), {.tokenizer = &tokenizer, .tokenizer_config = &config}, 11);
    const text::Vocab& v = c.vocab;
    EXPECT_EQ(v.type(2), TokenType::tt_user_defined);
    EXPECT_EQ(v.type(8), TokenType::tt_control);
    EXPECT_EQ(v.type(9), TokenType::tt_user_defined);  // Phi's rules do not look at the spelling
    EXPECT_EQ(v.tokens[10], "<|user|>");
    EXPECT_EQ(v.eos, 8);  // eos_token's text, found among tokenizer.json's added tokens
}

TEST(SpmVocab, BadAddedTokens) {
    const json not_object = json::array({"<a>"});
    EXPECT_THROW(spm_vocab_llama(small_model(), {.added_tokens = &not_object}, 10), Error);
    const json negative = {{"<a>", -1}};
    EXPECT_THROW(spm_vocab_llama(small_model(), {.added_tokens = &negative}, 10), Error);
    const json bad_key = {{"added_tokens_decoder", {{"1x", {{"content", "<a>"}}}}}};
    EXPECT_THROW(spm_vocab_llama(small_model(), {.tokenizer_config = &bad_key}, 10), Error);
    const json no_content = {{"added_tokens_decoder", {{"8", {{"special", true}}}}}};
    EXPECT_THROW(spm_vocab_llama(small_model(), {.tokenizer_config = &no_content}, 10), Error);
    // Two added tokens with one text would be matched ambiguously: refused by the vocabulary check.
    const json twice = {{"<a>", 8}, {"<b>", 9}};
    const json again = {{"added_tokens_decoder", {{"9", {{"content", "<a>"}}}}}};
    EXPECT_THROW(spm_vocab_llama(small_model(), {.tokenizer_config = &again, .added_tokens = &twice}, 10),
                 Error);
}

// ---------------------------------------------------------------------------------------------

json template_processing(const json& single, const json& pair) {
    return {{"post_processor", {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}}},
            {"added_tokens",
             {{{"id", 1}, {"content", "<s>"}},
              {{"id", 2}, {"content", "</s>"}},
              {{"id", 7}, {"content", "<|eot|>"}}}}};
}
json special(const char* id) {
    return {{"SpecialToken", {{"id", id}}}};
}
json sequence(const char* id) {
    return {{"Sequence", {{"id", id}}}};
}

TEST(HfSpecialTokens, LlamaTemplateProcessing) {
    // Llama's tokenizer.json: <s> $A and <s> $A <s> $B. The middle <s> is no separator: add_sep false.
    const json tok = template_processing({special("<s>"), sequence("A")},
                                         {special("<s>"), sequence("A"), special("<s>"), sequence("B")});
    const json config = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    const HfSpecialTokens s = hf_special_tokens(&tok, &config, nullptr, 100);
    EXPECT_EQ(s.ids.at("bos"), 1);
    EXPECT_EQ(s.ids.at("eos"), 2);
    EXPECT_TRUE(s.add.at("bos"));
    EXPECT_FALSE(s.add.at("sep"));
    EXPECT_FALSE(s.add.count("eos"));
}

TEST(HfSpecialTokens, TrailingTokenBecomesEosAndOldEosEot) {
    const json tok = template_processing({special("<s>"), sequence("A"), special("<|eot|>")}, json::array());
    const json config = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    const HfSpecialTokens s = hf_special_tokens(&tok, &config, nullptr, 100);
    EXPECT_EQ(s.ids.at("eos"), 7);
    EXPECT_EQ(s.ids.at("eot"), 2);
    EXPECT_TRUE(s.add.at("eos"));
}

TEST(HfSpecialTokens, SourcesInOrder) {
    // tokenizer_config.json's flag overrides the post-processor; its token text (found among the
    // added tokens) wins over config.json's id; an id past the vocabulary is skipped.
    const json tok = template_processing({special("<s>"), sequence("A")}, json::array());
    const json tc = {{"add_bos_token", false}, {"eos_token", {{"content", "</s>"}}}, {"pad_token", "<none>"}};
    const json config = {{"eos_token_id", 5},
                         {"pad_token_id", 3},
                         {"unk_token_id", 100},
                         {"bos_token_id", nullptr},
                         {"text_config", {{"bos_token_id", 4}}}};
    const HfSpecialTokens s = hf_special_tokens(&tok, &tc, &config, 100);
    EXPECT_FALSE(s.add.at("bos"));
    EXPECT_EQ(s.ids.at("eos"), 2);
    EXPECT_EQ(s.ids.at("pad"), 3);
    EXPECT_EQ(s.ids.at("bos"), 4);
    EXPECT_FALSE(s.ids.count("unk"));
    const json negative = {{"eos_token_id", -1}};
    EXPECT_THROW(hf_special_tokens(nullptr, nullptr, &negative, 100), Error);
}

TEST(HfSpecialTokens, NoTokenizerConfigMeansConfigOnly) {
    const json tok = template_processing({special("<s>"), sequence("A")}, json::array());
    const json config = {{"bos_token_id", 1}};
    const HfSpecialTokens s = hf_special_tokens(&tok, nullptr, &config, 100);
    EXPECT_TRUE(s.add.at("bos"));  // the post-processor still tells
    EXPECT_EQ(s.ids.at("bos"), 1);
    EXPECT_EQ(s.ids.size(), 1u);
}

// ---------------------------------------------------------------------------------------------

json llama_json() {
    return {{"normalizer",
             {{"type", "Sequence"},
              {"normalizers",
               {{{"type", "Prepend"}, {"prepend", kSpace}},
                {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}}}}},
            {"pre_tokenizer", nullptr},
            {"added_tokens", {{{"id", 0}, {"content", "<unk>"}, {"special", true}}}},
            {"model",
             {{"type", "BPE"},
              {"byte_fallback", true},
              {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}, {"abb", 4}, {"bb", 5}}},
              {"merges", {"a b", json::array({"b", "b"}), "ab b", "a bb"}}}}};
}

TEST(SpmHfJson, ScoresFromMergeRanks) {
    const text::SpmHfJson h = text::spm_from_hf_json(llama_json(), "t.json");
    EXPECT_EQ(h.vocab, (std::vector<std::string>{"<unk>", "a", "b", "ab", "abb", "bb"}));
    // ab: rank 0, bb: 1, abb: 2 (first of its two merges); the rest below every merge.
    EXPECT_EQ(h.scores, (std::vector<float>{-4, -4, -4, 0, -2, -1}));
    EXPECT_TRUE(h.add_dummy_prefix);
    ASSERT_EQ(h.added_tokens.size(), 1u);
    EXPECT_TRUE(h.added_tokens[0].special);
}

TEST(SpmHfJson, WhatIsRefused) {
    EXPECT_FALSE(text::is_spm_hf_json({{"model", {{"type", "BPE"}, {"byte_fallback", false}}}}));
    EXPECT_FALSE(text::is_spm_hf_json({{"model", {{"type", "Unigram"}}}}));
    EXPECT_TRUE(text::is_spm_hf_json(llama_json()));
    const auto refused = [](const std::function<void(json&)>& edit) {
        json j = llama_json();
        edit(j);
        EXPECT_THROW(text::spm_from_hf_json(j, "t.json"), Error) << j.dump();
    };
    refused([](json& j) { j["normalizer"]["normalizers"].push_back({{"type", "NFKC"}}); });
    refused([](json& j) {
        j["normalizer"] = {{"type", "Prepend"}, {"prepend", kSpace}};
    });  // spaces stay spaces
    refused([&](json& j) {
        j["normalizer"] = nullptr;
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "first"}};
    });
    refused([](json& j) { j["model"]["vocab"]["c"] = 3; });             // an id twice
    refused([](json& j) { j["model"]["vocab"]["c"] = 9; });             // not 0..n-1
    refused([](json& j) { j["model"]["merges"].push_back("b a"); });    // forms no token
    refused([](json& j) { j["model"]["merges"].push_back("a x"); });    // joins an unknown one
    refused([](json& j) { j["added_tokens"] = {{{"id", "1"}}}; });      // malformed entry
    refused([](json& j) { j["added_tokens"][0]["special"] = "yes"; });  // wrong type
    // Metaspace without a prefix spells text as SentencePiece without its dummy prefix.
    json j = llama_json();
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "never"}};
    EXPECT_FALSE(text::spm_from_hf_json(j, "t.json").add_dummy_prefix);
}

TEST(SpmHfJson, LlamaHfVocabulary) {
    json j = llama_json();
    j["model"]["vocab"]["<0x41>"] = 6;
    j["model"]["vocab"]["<s>"] = 7;
    j["added_tokens"].push_back({{"id", 9}, {"content", "<tool>"}, {"special", false}});
    j["added_tokens"].push_back({{"id", 8}, {"content", "<|im_start|>"}, {"special", true}});
    const json config = {{"additional_special_tokens", {"<|im_start|>"}}};
    const ConvertedVocab c =
        spm_vocab_llama_hf(text::spm_from_hf_json(j, "t.json"), {.tokenizer_config = &config}, 12);
    const text::Vocab& v = c.vocab;
    EXPECT_EQ(v.type(0), TokenType::tt_control);  // <unk>: LlamaTokenizerFast's default special
    EXPECT_EQ(v.type(6), TokenType::tt_byte);
    EXPECT_EQ(v.type(7), TokenType::tt_control);
    EXPECT_EQ(v.type(3), TokenType::tt_normal);
    EXPECT_EQ(v.tokens[8], "<|im_start|>");
    EXPECT_EQ(v.type(8), TokenType::tt_control);
    EXPECT_EQ(v.type(9), TokenType::tt_user_defined);
    EXPECT_EQ(v.scores[9], -1000.0f);
    EXPECT_EQ(v.type(11), TokenType::tt_unused);
    // Added ids must follow the vocabulary without gaps.
    j["added_tokens"].push_back({{"id", 11}, {"content", "<gap>"}});
    EXPECT_THROW(spm_vocab_llama_hf(text::spm_from_hf_json(j, "t.json"), {}, 12), Error);
}

// ---------------------------------------------------------------------------------------------

TEST(SpmModel, BytesThatAreNoModelAreErrors) {
    EXPECT_THROW(text::spm_model_from_bytes("", "empty"), Error);
    EXPECT_THROW(text::spm_model_from_bytes("{\"model\": 1}", "json"), Error);
    std::mt19937 rng(3);
    for (int i = 0; i < 200; ++i) {
        std::string bytes(rng() % 512, '\0');
        for (char& c : bytes) c = static_cast<char>(rng());
        try {
            text::spm_model_from_bytes(bytes, "random");
            ADD_FAILURE() << "random bytes loaded as a model";
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()).rfind("random: not a SentencePiece model", 0), 0u) << e.what();
        }
    }
}

}  // namespace
}  // namespace mox::models
