#include "gguf/value.h"

#include <fmt/format.h>

#include <limits>

namespace mox::gguf {

std::string_view value_type_name(ValueType t) {
    switch (t) {
        case ValueType::u8:
            return "u8";
        case ValueType::i8:
            return "i8";
        case ValueType::u16:
            return "u16";
        case ValueType::i16:
            return "i16";
        case ValueType::u32:
            return "u32";
        case ValueType::i32:
            return "i32";
        case ValueType::f32:
            return "f32";
        case ValueType::boolean:
            return "bool";
        case ValueType::string:
            return "string";
        case ValueType::array:
            return "array";
        case ValueType::u64:
            return "u64";
        case ValueType::i64:
            return "i64";
        case ValueType::f64:
            return "f64";
    }
    return "invalid";
}

Value Value::string_array(const std::vector<std::string>& v) {
    Array a{ValueType::string, {}};
    a.items.reserve(v.size());
    for (const std::string& s : v) a.items.push_back(Value::string(s));
    return Value::array(std::move(a));
}

Value Value::i32_array(const std::vector<int32_t>& v) {
    Array a{ValueType::i32, {}};
    a.items.reserve(v.size());
    for (int32_t x : v) a.items.push_back(Value::i32(x));
    return Value::array(std::move(a));
}

Value Value::f32_array(const std::vector<float>& v) {
    Array a{ValueType::f32, {}};
    a.items.reserve(v.size());
    for (float x : v) a.items.push_back(Value::f32(x));
    return Value::array(std::move(a));
}

bool Value::is_integer() const {
    switch (type_) {
        case ValueType::u8:
        case ValueType::i8:
        case ValueType::u16:
        case ValueType::i16:
        case ValueType::u32:
        case ValueType::i32:
        case ValueType::u64:
        case ValueType::i64:
            return true;
        default:
            return false;
    }
}

std::optional<uint64_t> Value::as_uint() const {
    if (!is_integer()) return std::nullopt;
    if (const auto* u = std::get_if<uint64_t>(&storage_)) return *u;
    const int64_t s = std::get<int64_t>(storage_);
    if (s < 0) return std::nullopt;
    return static_cast<uint64_t>(s);
}

std::optional<int64_t> Value::as_int() const {
    if (!is_integer()) return std::nullopt;
    if (const auto* s = std::get_if<int64_t>(&storage_)) return *s;
    const uint64_t u = std::get<uint64_t>(storage_);
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
}

std::optional<double> Value::as_float() const {
    if (is_float()) return std::get<double>(storage_);
    if (!is_integer()) return std::nullopt;
    if (const auto* u = std::get_if<uint64_t>(&storage_)) return static_cast<double>(*u);
    return static_cast<double>(std::get<int64_t>(storage_));
}

std::optional<bool> Value::as_bool() const {
    if (type_ != ValueType::boolean) return std::nullopt;
    return std::get<bool>(storage_);
}

const std::string* Value::as_string() const {
    return type_ == ValueType::string ? std::get_if<std::string>(&storage_) : nullptr;
}

const Array* Value::as_array() const {
    return type_ == ValueType::array ? std::get_if<Array>(&storage_) : nullptr;
}

namespace {

// Quotes a string for one-line display: control bytes and quotes escaped, UTF-8 passed through.
std::string quote(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
        } else {
            out += static_cast<char>(c);
        }
    }
    out += '"';
    return out;
}

}  // namespace

std::string Value::to_display(size_t max_items) const {
    switch (type_) {
        case ValueType::boolean:
            return std::get<bool>(storage_) ? "true" : "false";
        case ValueType::string:
            return quote(std::get<std::string>(storage_));
        case ValueType::f32:
            return fmt::format("{}", static_cast<float>(std::get<double>(storage_)));
        case ValueType::f64:
            return fmt::format("{}", std::get<double>(storage_));
        case ValueType::array: {
            const Array& a = std::get<Array>(storage_);
            std::string out = fmt::format("[{} x {}", a.items.size(), value_type_name(a.elem_type));
            for (size_t i = 0; i < a.items.size() && i < max_items; ++i)
                out += (i == 0 ? ": " : ", ") + a.items[i].to_display(max_items);
            if (a.items.size() > max_items) out += ", ...";
            return out + "]";
        }
        default:
            if (const auto* u = std::get_if<uint64_t>(&storage_)) return fmt::format("{}", *u);
            return fmt::format("{}", std::get<int64_t>(storage_));
    }
}

}  // namespace mox::gguf
