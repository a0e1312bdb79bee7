#include "text/spm_model.h"

#include "core/error.h"

#include <fmt/format.h>

#include <sentencepiece_processor.h>

#include <fstream>
#include <sstream>

namespace mox::text {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// Whether encoding "a" starts with U+2581: the normalized text is the concatenation of the pieces
// (a byte piece stands for its byte), so this is the dummy prefix. An unknown piece hides it.
std::optional<bool> dummy_prefix(const sentencepiece::SentencePieceProcessor& sp) {
    std::vector<int> ids;
    if (!sp.Encode("a", &ids).ok() || ids.empty()) return std::nullopt;
    std::string normalized;
    for (const int id : ids) {
        if (sp.IsUnknown(id)) return std::nullopt;
        const std::string& piece = sp.IdToPiece(id);
        if (sp.IsByte(id))
            normalized += static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
        else
            normalized += piece;
    }
    return normalized.starts_with(kSpace);
}

// The library's reason, printable: its parse failure names a source line and a call, and a broken
// piece may hold any bytes.
std::string reason(const sentencepiece::util::Status& status) {
    const std::string msg = status.message();
    if (msg.find("ParseFromArray") != std::string::npos) return "it does not parse as a ModelProto";
    std::string out;
    for (const unsigned char c : msg)
        out += c >= 0x20 && c < 0x7f ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
    return out;
}

}  // namespace

SpmModel spm_model_from_bytes(std::string_view bytes, const std::string& name) {
    sentencepiece::SentencePieceProcessor sp;
    const sentencepiece::util::Status status = sp.LoadFromSerializedProto(bytes);
    if (!status.ok()) fail("{}: not a SentencePiece model: {}", name, reason(status));
    SpmModel m;
    const int n = sp.GetPieceSize();
    m.pieces.reserve(static_cast<size_t>(n));
    for (int id = 0; id < n; ++id) {
        SpmPiece p{.text = sp.IdToPiece(id), .score = sp.GetScore(id)};
        if (sp.IsUnknown(id))
            p.type = TokenType::tt_unknown;
        else if (sp.IsControl(id))
            p.type = TokenType::tt_control;
        else if (sp.IsUnused(id))
            p.type = TokenType::tt_unused;
        else if (sp.IsByte(id))
            p.type = TokenType::tt_byte;
        m.pieces.push_back(std::move(p));
    }
    if (m.pieces.empty()) fail("{}: the SentencePiece model has no pieces", name);
    m.add_dummy_prefix = dummy_prefix(sp);
    return m;
}

SpmModel read_spm_model(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path);
    std::ostringstream s;
    s << in.rdbuf();
    return spm_model_from_bytes(s.str(), path);
}

}  // namespace mox::text
