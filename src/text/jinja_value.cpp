#include "text/jinja_value.h"
#include "text/stable_sort.h"

#include "core/error.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace mox::jinja {

// --- construction and access ------------------------------------------------------------------

Value Value::list(std::vector<Value> items, bool tuple) {
    Value v;
    v.v_ = std::make_shared<List>(List{std::move(items), tuple});
    return v;
}

Value Value::dict() {
    Value v;
    v.v_ = std::make_shared<Dict>();
    return v;
}

Value Value::ns() {
    Value v = dict();
    v.dict_mut().is_namespace = true;
    return v;
}

Value Value::function(std::string name, Function fn) {
    Value v;
    v.v_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}

double Value::to_double() const {
    switch (kind()) {
        case Kind::boolean:
            return as_bool() ? 1.0 : 0.0;
        case Kind::integer:
            return double(as_int());
        case Kind::floating:
            return as_float();
        default:
            fail("expected a number, got {}", type_name(*this));
    }
}

int64_t Value::to_int() const {
    if (is_bool()) return as_bool() ? 1 : 0;
    if (is_int()) return as_int();
    fail("expected an integer, got {}", type_name(*this));
}

bool Value::same_object(const Value& other) const {
    if (kind() != other.kind()) return false;
    switch (kind()) {
        case Kind::list:
            return std::get<std::shared_ptr<List>>(v_) == std::get<std::shared_ptr<List>>(other.v_);
        case Kind::dict:
            return std::get<std::shared_ptr<Dict>>(v_) == std::get<std::shared_ptr<Dict>>(other.v_);
        case Kind::function:
            return std::get<std::shared_ptr<Callable>>(v_) == std::get<std::shared_ptr<Callable>>(other.v_);
        default:
            return false;
    }
}

namespace {
// Python raises TypeError for unhashable keys; chat data only ever uses strings and numbers.
void check_hashable(const Value& key) {
    if (key.is_list() && !key.is_tuple()) fail("unhashable type: 'list'");
    if (key.kind() == Value::Kind::dict) fail("unhashable type: 'dict'");
}
}  // namespace

const Value* Dict::find(const Value& key) const {
    check_hashable(key);
    for (const auto& [k, v] : items)
        if (equal(k, key)) return &v;
    return nullptr;
}

Value* Dict::find(const Value& key) {
    return const_cast<Value*>(static_cast<const Dict*>(this)->find(key));
}

void Dict::set(Value key, Value value) {
    if (Value* slot = find(key)) {
        *slot = std::move(value);
        return;
    }
    items.emplace_back(std::move(key), std::move(value));
}

// --- UTF-8 --------------------------------------------------------------------------------------

std::u32string utf8_decode(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        bool ok = len > 0 && i + size_t(len) <= s.size();
        for (int k = 1; ok && k < len; ++k) {
            const unsigned char cc = static_cast<unsigned char>(s[i + size_t(k)]);
            if ((cc >> 6) != 2) ok = false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if (!ok) {
            out.push_back(0xFFFD);
            ++i;
            continue;
        }
        out.push_back(cp);
        i += size_t(len);
    }
    return out;
}

std::string utf8_encode(std::u32string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : s) {
        if (c < 0x80) {
            out.push_back(char(c));
        } else if (c < 0x800) {
            out.push_back(char(0xC0 | (c >> 6)));
            out.push_back(char(0x80 | (c & 0x3F)));
        } else if (c < 0x10000) {
            out.push_back(char(0xE0 | (c >> 12)));
            out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
            out.push_back(char(0x80 | (c & 0x3F)));
        } else {
            out.push_back(char(0xF0 | (c >> 18)));
            out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
            out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
            out.push_back(char(0x80 | (c & 0x3F)));
        }
    }
    return out;
}

size_t utf8_length(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
}

// --- printing -----------------------------------------------------------------------------------

std::string format_float(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    // Shortest round-trip digits, then Python's layout: positional for 1e-4 <= |x| < 1e16 (always
    // with a fractional part), otherwise d.ddde+XX with at least two exponent digits.
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    const size_t e = sci.find('e');
    std::string mant = sci.substr(0, e);
    const int exp = std::stoi(sci.substr(e + 1));
    std::string sign;
    if (mant[0] == '-') {
        sign = "-";
        mant.erase(0, 1);
    }
    std::string digits;
    for (char c : mant)
        if (c != '.') digits.push_back(c);
    if (exp >= -4 && exp < 16) {
        std::string s;
        if (exp < 0) {
            s = "0." + std::string(size_t(-exp - 1), '0') + digits;
        } else {
            const size_t int_len = size_t(exp) + 1;
            if (digits.size() <= int_len) {
                s = digits + std::string(int_len - digits.size(), '0') + ".0";
            } else {
                s = digits.substr(0, int_len) + "." + digits.substr(int_len);
            }
        }
        return sign + s;
    }
    std::string s = digits.substr(0, 1);
    if (digits.size() > 1) s += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return sign + s + ebuf;
}

namespace {

std::string repr_string(const std::string& s) {
    const bool has_single = s.find('\'') != std::string::npos;
    const bool has_double = s.find('"') != std::string::npos;
    const char quote = has_single && !has_double ? '"' : '\'';
    std::string out(1, quote);
    for (char32_t c : utf8_decode(s)) {
        if (c == char32_t(quote) || c == U'\\') {
            out.push_back('\\');
            out.push_back(char(c));
        } else if (c == U'\n') {
            out += "\\n";
        } else if (c == U'\r') {
            out += "\\r";
        } else if (c == U'\t') {
            out += "\\t";
        } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
            char b[8];
            std::snprintf(b, sizeof b, "\\x%02x", unsigned(c));
            out += b;
        } else {
            out += utf8_encode(std::u32string_view(&c, 1));
        }
    }
    out.push_back(quote);
    return out;
}

}  // namespace

std::string repr(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::string:
            return repr_string(v.as_string());
        case Value::Kind::list: {
            const bool tuple = v.is_tuple();
            std::string out = tuple ? "(" : "[";
            const auto& items = v.items();
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += ", ";
                out += repr(items[i]);
            }
            if (tuple && items.size() == 1) out += ",";
            out += tuple ? ")" : "]";
            return out;
        }
        case Value::Kind::dict: {
            std::string out = v.is_namespace() ? "<Namespace {" : "{";
            bool first = true;
            for (const auto& [k, val] : v.as_dict().items) {
                if (!first) out += ", ";
                first = false;
                out += repr(k) + ": " + repr(val);
            }
            out += v.is_namespace() ? "}>" : "}";
            return out;
        }
        case Value::Kind::undefined:
            return "Undefined";  // jinja2's Undefined.__repr__
        default:
            return to_str(v);
    }
}

std::string to_str(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::undefined:
            return "";
        case Value::Kind::none:
            return "None";
        case Value::Kind::boolean:
            return v.as_bool() ? "True" : "False";
        case Value::Kind::integer:
            return std::to_string(v.as_int());
        case Value::Kind::floating:
            return format_float(v.as_float());
        case Value::Kind::string:
            return v.as_string();
        case Value::Kind::function:
            return "<function " + v.as_function().name + ">";
        default:
            return repr(v);
    }
}

std::string type_name(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::undefined:
            return "undefined";
        case Value::Kind::none:
            return "NoneType";
        case Value::Kind::boolean:
            return "bool";
        case Value::Kind::integer:
            return "int";
        case Value::Kind::floating:
            return "float";
        case Value::Kind::string:
            return "str";
        case Value::Kind::list:
            return v.is_tuple() ? "tuple" : "list";
        case Value::Kind::dict:
            return v.is_namespace() ? "Namespace" : "dict";
        case Value::Kind::function:
            return "function";
    }
    return "?";
}

// --- truth, equality, order -----------------------------------------------------------------------

bool truthy(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::undefined:
        case Value::Kind::none:
            return false;
        case Value::Kind::boolean:
            return v.as_bool();
        case Value::Kind::integer:
            return v.as_int() != 0;
        case Value::Kind::floating:
            return v.as_float() != 0.0;
        case Value::Kind::string:
            return !v.as_string().empty();
        case Value::Kind::list:
            return !v.items().empty();
        case Value::Kind::dict:
            return v.is_namespace() || !v.as_dict().items.empty();
        case Value::Kind::function:
            return true;
    }
    return false;
}

bool equal(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
        return a.to_int() == b.to_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::undefined:
        case Value::Kind::none:
            return true;
        case Value::Kind::string:
            return a.as_string() == b.as_string();
        case Value::Kind::list: {
            if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
            for (size_t i = 0; i < a.items().size(); ++i)
                if (!equal(a.items()[i], b.items()[i])) return false;
            return true;
        }
        case Value::Kind::dict: {
            if (a.is_namespace() || b.is_namespace()) return a.same_object(b);
            const Dict& da = a.as_dict();
            const Dict& db = b.as_dict();
            if (da.items.size() != db.items.size()) return false;
            for (const auto& [k, v] : da.items) {
                const Value* other = db.find(k);
                if (!other || !equal(v, *other)) return false;
            }
            return true;
        }
        default:
            return a.same_object(b);
    }
}

int compare(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            const double x = a.to_double(), y = b.to_double();
            return x < y ? -1 : x > y ? 1 : 0;
        }
        const int64_t x = a.to_int(), y = b.to_int();
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {
        // Byte order of UTF-8 is code point order, which is how Python orders str.
        const int c = a.as_string().compare(b.as_string());
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        const auto& x = a.items();
        const auto& y = b.items();
        for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
            if (!equal(x[i], y[i])) return compare(x[i], y[i]);
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    if (a.is_undefined() || b.is_undefined())
        fail("{}", a.is_undefined() ? a.undefined_why() : b.undefined_why());
    fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind()) {
        case Value::Kind::string:
            if (!item.is_string())
                fail("'in <string>' requires string as left operand, not {}", type_name(item));
            return container.as_string().find(item.as_string()) != std::string::npos;
        case Value::Kind::list:
            for (const Value& x : container.items())
                if (equal(x, item)) return true;
            return false;
        case Value::Kind::dict:
            if (container.is_namespace()) fail("argument of type 'Namespace' is not iterable");
            return container.as_dict().find(item) != nullptr;
        case Value::Kind::undefined:
            return false;  // jinja2's Undefined iterates as empty
        default:
            fail("argument of type '{}' is not iterable", type_name(container));
    }
}

// --- json.dumps -------------------------------------------------------------------------------------

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out.push_back('"');
    for (char32_t c : utf8_decode(s)) {
        switch (c) {
            case U'"':
                out += "\\\"";
                break;
            case U'\\':
                out += "\\\\";
                break;
            case U'\n':
                out += "\\n";
                break;
            case U'\r':
                out += "\\r";
                break;
            case U'\t':
                out += "\\t";
                break;
            case U'\b':
                out += "\\b";
                break;
            case U'\f':
                out += "\\f";
                break;
            default: {
                char b[16];
                if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
                    if (c >= 0x10000) {  // a surrogate pair, as Python writes astral characters
                        const char32_t v = c - 0x10000;
                        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", unsigned(0xD800 + (v >> 10)),
                                      unsigned(0xDC00 + (v & 0x3FF)));
                    } else {
                        std::snprintf(b, sizeof b, "\\u%04x", unsigned(c));
                    }
                    out += b;
                } else {
                    out += utf8_encode(std::u32string_view(&c, 1));
                }
            }
        }
    }
    out.push_back('"');
}

std::string json_key(const Value& k) {
    switch (k.kind()) {
        case Value::Kind::string:
            return k.as_string();
        case Value::Kind::none:
            return "null";
        case Value::Kind::boolean:
            return k.as_bool() ? "true" : "false";
        case Value::Kind::integer:
            return std::to_string(k.as_int());
        case Value::Kind::floating:
            return format_float(k.as_float());
        default:
            fail("keys must be str, int, float, bool or None, not {}", type_name(k));
    }
}

struct JsonWriter {
    const JsonOptions& opt;
    std::string unit, item_sep, key_sep;
    bool pretty;
    std::string out;

    void newline(int depth) {
        out.push_back('\n');
        for (int i = 0; i < depth; ++i) out += unit;
    }

    void write(const Value& v, int depth) {
        if (depth > 512) fail("tojson: value nested too deeply");
        switch (v.kind()) {
            case Value::Kind::none:
                out += "null";
                return;
            case Value::Kind::boolean:
                out += v.as_bool() ? "true" : "false";
                return;
            case Value::Kind::integer:
                out += std::to_string(v.as_int());
                return;
            case Value::Kind::floating: {
                const double x = v.as_float();
                out += std::isnan(x)   ? "NaN"
                       : std::isinf(x) ? (x > 0 ? "Infinity" : "-Infinity")
                                       : format_float(x);
                return;
            }
            case Value::Kind::string:
                json_string(out, v.as_string(), opt.ensure_ascii);
                return;
            case Value::Kind::list: {
                const auto& items = v.items();
                if (items.empty()) {
                    out += "[]";
                    return;
                }
                out.push_back('[');
                for (size_t i = 0; i < items.size(); ++i) {
                    if (i) out += item_sep;
                    if (pretty) newline(depth + 1);
                    write(items[i], depth + 1);
                }
                if (pretty) newline(depth);
                out.push_back(']');
                return;
            }
            case Value::Kind::dict: {
                if (v.is_namespace()) fail("Object of type Namespace is not JSON serializable");
                std::vector<const std::pair<Value, Value>*> entries;
                for (const auto& kv : v.as_dict().items) entries.push_back(&kv);
                if (entries.empty()) {
                    out += "{}";
                    return;
                }
                if (opt.sort_keys)
                    text::stable_sort_by_index(entries, [](const auto* a, const auto* b) {
                        return compare(a->first, b->first) < 0;
                    });
                out.push_back('{');
                for (size_t i = 0; i < entries.size(); ++i) {
                    if (i) out += item_sep;
                    if (pretty) newline(depth + 1);
                    json_string(out, json_key(entries[i]->first), opt.ensure_ascii);
                    out += key_sep;
                    write(entries[i]->second, depth + 1);
                }
                if (pretty) newline(depth);
                out.push_back('}');
                return;
            }
            case Value::Kind::undefined:
                fail("Object of type Undefined is not JSON serializable");
            case Value::Kind::function:
                fail("Object of type function is not JSON serializable");
        }
    }
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opt) {
    JsonWriter w{opt, {}, {}, {}, false, {}};
    w.pretty = opt.indent >= 0 || !opt.indent_str.empty();
    w.unit = !opt.indent_str.empty() ? opt.indent_str : std::string(size_t(std::max(opt.indent, 0)), ' ');
    // Python's defaults: (', ', ': ') on one line, (',', ': ') when indenting.
    w.item_sep = !opt.item_sep.empty() ? opt.item_sep : w.pretty ? "," : ", ";
    w.key_sep = !opt.key_sep.empty() ? opt.key_sep : ": ";
    w.write(v, 0);
    return std::move(w.out);
}

}  // namespace mox::jinja
