// Tokenizer driver for tests/py/test_tokenizer_parity.py and for benchmarking.
//
//   tok_tool encode VOCAB FILE [--no-special]        ids of FILE's bytes, space-separated
//   tok_tool decode VOCAB IDS_FILE                   bytes of the whitespace-separated ids
//   tok_tool encode-batch VOCAB IN.json [--no-special]
//       IN.json: ["hex bytes", ...] -> stdout: [[ids], ...]
//   tok_tool decode-batch VOCAB IN.json [--lossy] [--skip-special]
//       IN.json: [[ids], ...] -> stdout: ["hex bytes", ...]
//   tok_tool placeholder N OUT.json [TEXT_FILE]    placeholder_vocab(N) written as tokenizer.json
//   tok_tool bench VOCAB FILE [SECONDS]              encoding speed over FILE (tokens/s, MB/s)
//   tok_tool info VOCAB                              JSON summary (pre, normalizer, sizes, eog)
//
// VOCAB is an HF tokenizer.json, or a GGUF file (name ending in .gguf) whose tokenizer.ggml.*
// metadata is read.
#include "core/error.h"
#include "gguf/reader.h"
#include "text/tokenizer.h"
#include "text/vocab_io.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using mox::text::Tokenizer;
using nlohmann::json;

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) mox::fail("cannot open {}", path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

Tokenizer load(const std::string& path) {
    if (path.ends_with(".gguf")) return Tokenizer(mox::text::vocab_from_gguf(mox::gguf::File::open(path)));
    return Tokenizer(mox::text::vocab_from_hf_json_file(path));
}

bool has_flag(int argc, char** argv, int from, std::string_view flag) {
    for (int i = from; i < argc; ++i)
        if (argv[i] == flag) return true;
    return false;
}

std::string from_hex(const std::string& hex) {
    if (hex.size() % 2) mox::fail("odd-length hex string");
    std::string out;
    for (size_t i = 0; i < hex.size(); i += 2)
        out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

std::string to_hex(std::string_view bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    for (char c : bytes) {
        out += kDigits[static_cast<uint8_t>(c) >> 4];
        out += kDigits[static_cast<uint8_t>(c) & 15];
    }
    return out;
}

int run(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: tok_tool encode|decode|encode-batch|decode-batch|placeholder|bench ...\n";
        return 2;
    }
    const std::string cmd = argv[1];
    if (cmd == "placeholder" && argc >= 4) {
        const std::string text = argc >= 5 ? read_file(argv[4]) : std::string();
        const auto vocab = mox::text::placeholder_vocab(std::stoi(argv[2]), text);
        std::ofstream(argv[3], std::ios::binary) << mox::text::vocab_to_hf_json(vocab);
        return 0;
    }
    if (cmd == "info") {
        const Tokenizer tok = load(argv[2]);
        const auto& v = tok.vocab();
        std::cout << json{{"n_tokens", v.size()},
                          {"n_merges", v.merges.size()},
                          {"model", v.model},
                          {"pre", v.pre},
                          {"pre_regex", v.sentencepiece() ? std::string() : v.effective_pre_regex()},
                          {"normalizer", v.normalizer == mox::text::Normalizer::nfc ? "nfc" : "none"},
                          {"eog", tok.end_of_generation()},
                          {"add_bos", v.add_bos},
                          {"add_space_prefix", v.add_space_prefix},
                          {"rstrip", v.rstrip},
                          {"bos", v.bos ? json(*v.bos) : json()},
                          {"eos", v.eos ? json(*v.eos) : json()},
                          {"pad", v.pad ? json(*v.pad) : json()}}
                         .dump()
                  << "\n";
        return 0;
    }
    if (argc < 4) mox::fail("{} needs VOCAB and an input file", cmd);
    const Tokenizer tok = load(argv[2]);
    const bool parse_special = !has_flag(argc, argv, 4, "--no-special");
    if (cmd == "encode") {
        const auto ids = tok.encode(read_file(argv[3]), {.parse_special = parse_special});
        std::string line;
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
        std::cout << line << "\n";
    } else if (cmd == "decode") {
        std::istringstream in(read_file(argv[3]));
        std::vector<int32_t> ids;
        for (int64_t id; in >> id;) ids.push_back(static_cast<int32_t>(id));
        const std::string text = tok.decode(ids);
        std::fwrite(text.data(), 1, text.size(), stdout);
    } else if (cmd == "encode-batch") {
        json out = json::array();
        for (const json& item : json::parse(read_file(argv[3])))
            out.push_back(tok.encode(from_hex(item.get<std::string>()), {.parse_special = parse_special}));
        std::cout << out.dump() << "\n";
    } else if (cmd == "decode-batch") {
        const mox::text::DecodeOptions options{.skip_special = has_flag(argc, argv, 4, "--skip-special"),
                                               .lossy = has_flag(argc, argv, 4, "--lossy")};
        json out = json::array();
        for (const json& item : json::parse(read_file(argv[3]))) {
            try {
                out.push_back(to_hex(tok.decode(item.get<std::vector<int32_t>>(), options)));
            } catch (const mox::Error& e) {
                out.push_back({{"error", e.what()}});
            }
        }
        std::cout << out.dump() << "\n";
    } else if (cmd == "bench") {
        const std::string text = read_file(argv[3]);
        const double seconds = argc >= 5 ? std::stod(argv[4]) : 2.0;
        using clock = std::chrono::steady_clock;
        const auto start = clock::now();
        size_t n_tokens = 0, n_bytes = 0, reps = 0;
        double elapsed = 0;
        do {
            n_tokens += tok.encode(text).size();
            n_bytes += text.size();
            ++reps;
            elapsed = std::chrono::duration<double>(clock::now() - start).count();
        } while (elapsed < seconds);
        std::cout << json{{"reps", reps},
                          {"tokens", n_tokens},
                          {"bytes", n_bytes},
                          {"seconds", elapsed},
                          {"tokens_per_s", static_cast<double>(n_tokens) / elapsed},
                          {"mb_per_s", static_cast<double>(n_bytes) / elapsed / 1e6}}
                         .dump()
                  << "\n";
    } else {
        mox::fail("unknown command '{}'", cmd);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const mox::Error& e) {
        std::cerr << "tok_tool: " << e.what() << "\n";
        return 1;
    }
}
