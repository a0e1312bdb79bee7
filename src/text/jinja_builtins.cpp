#include "text/jinja_builtins.h"
#include "text/stable_sort.h"

#include "core/error.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <map>
#include <optional>

namespace mox::jinja {
namespace {

[[noreturn]] void undefined_error(const Value& v) {
    fail("{}", v.undefined_why());
}

void check_size(size_t bytes) {
    if (bytes > kMaxStringBytes) fail("result too large ({} bytes)", bytes);
}

// --- arguments ------------------------------------------------------------------------------------

// Binds a call's arguments to a Python-style parameter list (names after the subject).
class Args {
  public:
    Args(std::string_view fn, CallArgs& a, std::initializer_list<std::string_view> names)
        : a_(a), names_(names) {
        if (a.pos.size() > names_.size())
            fail("{}() takes at most {} arguments ({} given)", fn, names_.size(), a.pos.size());
        for (const auto& [k, v] : a.kw) {
            const auto it = std::find(names_.begin(), names_.end(), k);
            if (it == names_.end()) fail("{}() got an unexpected keyword argument '{}'", fn, k);
            if (size_t(it - names_.begin()) < a.pos.size())
                fail("{}() got multiple values for argument '{}'", fn, k);
        }
    }
    const Value* get(size_t i) const {
        if (i < a_.pos.size()) return &a_.pos[i];
        for (const auto& [k, v] : a_.kw)
            if (k == names_[i]) return &v;
        return nullptr;
    }
    Value get_or(size_t i, Value def) const {
        const Value* v = get(i);
        return v ? *v : std::move(def);
    }
    bool flag(size_t i, bool def) const {
        const Value* v = get(i);
        return v ? truthy(*v) : def;
    }

  private:
    CallArgs& a_;
    std::vector<std::string_view> names_;
};

// --- Python str helpers ---------------------------------------------------------------------------

bool is_py_space(char32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

// Case mapping is ASCII-only: chat templates lower/upper role names and type names, never prose.
std::string ascii_lower(std::string s) {
    for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return s;
}
std::string ascii_upper(std::string s) {
    for (char& c : s)
        if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
    return s;
}
bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
    const std::u32string u = utf8_decode(s);
    std::u32string set;
    const bool custom = chars && !chars->is_none();
    if (custom) {
        if (!chars->is_string()) fail("strip arg must be None or str");
        set = utf8_decode(chars->as_string());
    }
    auto strip_it = [&](char32_t c) { return custom ? set.find(c) != std::u32string::npos : is_py_space(c); };
    size_t b = 0, e = u.size();
    if (left)
        while (b < e && strip_it(u[b])) ++b;
    if (right)
        while (e > b && strip_it(u[e - 1])) --e;
    return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<Value> py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
    std::vector<Value> out;
    if (!sep || sep->is_none()) {  // runs of whitespace, no empty strings
        const std::u32string u = utf8_decode(s);
        size_t i = 0;
        while (i < u.size()) {
            while (i < u.size() && is_py_space(u[i])) ++i;
            if (i >= u.size()) break;
            if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
                size_t e = u.size();
                while (e > i && is_py_space(u[e - 1])) --e;
                out.emplace_back(utf8_encode(std::u32string_view(u).substr(i, e - i)));
                break;
            }
            size_t j = i;
            while (j < u.size() && !is_py_space(u[j])) ++j;
            out.emplace_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
            i = j;
        }
        return out;
    }
    if (!sep->is_string()) fail("must be str or None, not {}", type_name(*sep));
    const std::string& d = sep->as_string();
    if (d.empty()) fail("empty separator");
    size_t start = 0;
    for (;;) {
        if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) break;
        const size_t at = s.find(d, start);
        if (at == std::string::npos) break;
        out.emplace_back(s.substr(start, at - start));
        start = at + d.size();
    }
    out.emplace_back(s.substr(start));
    return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    std::string out;
    if (from.empty()) {  // Python inserts `to` between every character (and at both ends)
        const std::u32string u = utf8_decode(s);
        int64_t n = 0;
        for (char32_t c : u) {
            if (count < 0 || n < count) out += to, ++n;
            out += utf8_encode(std::u32string_view(&c, 1));
        }
        if (count < 0 || n < count) out += to;
        check_size(out.size());
        return out;
    }
    size_t start = 0;
    int64_t n = 0;
    for (;;) {
        const size_t at = (count >= 0 && n >= count) ? std::string::npos : s.find(from, start);
        if (at == std::string::npos) break;
        out.append(s, start, at - start);
        out += to;
        check_size(out.size());
        start = at + from.size();
        ++n;
    }
    out.append(s, start);
    return out;
}

std::string capitalize(const std::string& s) {
    std::string out = ascii_lower(s);
    if (!out.empty()) out[0] = ascii_upper(out.substr(0, 1))[0];
    return out;
}

// jinja2's title filter: capitalise each piece between runs of - whitespace ( { [ <.
std::string title_filter(const std::string& s) {
    std::string out;
    bool start = true;
    for (char c : s) {
        const bool sep =
            c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' || (c >= 9 && c <= 13);
        if (sep) {
            out.push_back(c);
            start = true;
        } else {
            out.push_back(start ? ascii_upper(std::string(1, c))[0] : ascii_lower(std::string(1, c))[0]);
            start = false;
        }
    }
    return out;
}

// Python's str.title(): a letter after a non-letter starts a word.
std::string title_method(const std::string& s) {
    std::string out;
    bool prev_alpha = false;
    for (char c : s) {
        out.push_back(
            is_alpha(c) ? (prev_alpha ? ascii_lower(std::string(1, c))[0] : ascii_upper(std::string(1, c))[0])
                        : c);
        prev_alpha = is_alpha(c);
    }
    return out;
}

const std::string& need_string(const Value& v, std::string_view what) {
    if (v.is_undefined()) undefined_error(v);
    if (!v.is_string()) fail("{} expects a string, got {}", what, type_name(v));
    return v.as_string();
}

// Python's ints are unbounded; int64 is enough for chat templates, and overflow is an error.
Value int_pow(int64_t base, int64_t exp) {
    int64_t result = 1;
    for (int64_t i = 0; i < exp; ++i) {
        if (__builtin_mul_overflow(result, base, &result)) fail("integer overflow");
        if (result == 0 || result == 1) break;
    }
    return Value(result);
}

// Sort key comparison for sort/unique/dictsort/min/max: case-insensitive on strings by default.
Value sort_key(const Value& v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return Value(ascii_lower(v.as_string()));
    return v;
}

Value attr_path(const Value& v, const Value& attribute) {
    // jinja2 accepts "a.b" paths and integer indexes for attribute=.
    if (attribute.is_int()) return get_item(v, attribute);
    Value cur = v;
    const std::string path = to_str(attribute);
    size_t start = 0;
    for (;;) {
        const size_t dot = path.find('.', start);
        const std::string piece =
            path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        cur = get_item(cur, Value(piece));
        if (dot == std::string::npos) return cur;
        start = dot + 1;
    }
}

// --- filters --------------------------------------------------------------------------------------

using FilterFn = Value (*)(const Value&, CallArgs&);

Value f_length(const Value& v, CallArgs& a) {
    Args(std::string_view("length"), a, {});
    switch (v.kind()) {
        case Value::Kind::undefined:
            return Value(0);
        case Value::Kind::string:
            return Value(int64_t(utf8_length(v.as_string())));
        case Value::Kind::list:
            return Value(int64_t(v.items().size()));
        case Value::Kind::dict:
            if (!v.is_namespace()) return Value(int64_t(v.as_dict().items.size()));
            [[fallthrough]];
        default:
            fail("object of type '{}' has no len()", type_name(v));
    }
}

Value f_default(const Value& v, CallArgs& a) {
    Args args("default", a, {"default_value", "boolean"});
    const bool boolean = args.flag(1, false);
    if (v.is_undefined() || (boolean && !truthy(v))) return args.get_or(0, Value(""));
    return v;
}

Value f_trim(const Value& v, CallArgs& a) {
    Args args("trim", a, {"chars"});
    return Value(py_strip(to_str(v), args.get(0), true, true));
}

Value f_tojson(const Value& v, CallArgs& a) {
    // HF's override of jinja2's tojson: json.dumps(x, ensure_ascii=False, indent=None,
    // separators=None, sort_keys=False) with those keywords exposed.
    Args args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions opt;
    opt.ensure_ascii = args.flag(0, false);
    if (const Value* ind = args.get(1); ind && !ind->is_none()) {
        if (ind->is_string()) {
            opt.indent_str = ind->as_string();
            if (opt.indent_str.empty()) opt.indent = 0;
        } else {
            opt.indent = int(std::clamp<int64_t>(ind->to_int(), 0, 64));
        }
    }
    if (const Value* sep = args.get(2); sep && !sep->is_none()) {
        if (!sep->is_list() || sep->items().size() != 2 || !sep->items()[0].is_string() ||
            !sep->items()[1].is_string())
            fail("tojson: separators must be a pair of strings");
        opt.item_sep = sep->items()[0].as_string();
        opt.key_sep = sep->items()[1].as_string();
        if (opt.item_sep.empty() || opt.key_sep.empty()) fail("tojson: empty separators are not supported");
    }
    opt.sort_keys = args.flag(3, false);
    return Value(to_json(v, opt));
}

Value f_string(const Value& v, CallArgs& a) {
    Args("string", a, {});
    return Value(to_str(v));
}

Value f_upper(const Value& v, CallArgs& a) {
    Args("upper", a, {});
    return Value(ascii_upper(to_str(v)));
}

Value f_lower(const Value& v, CallArgs& a) {
    Args("lower", a, {});
    return Value(ascii_lower(to_str(v)));
}

Value f_capitalize(const Value& v, CallArgs& a) {
    Args("capitalize", a, {});
    return Value(capitalize(to_str(v)));
}

Value f_title(const Value& v, CallArgs& a) {
    Args("title", a, {});
    return Value(title_filter(to_str(v)));
}

Value f_replace(const Value& v, CallArgs& a) {
    Args args("replace", a, {"old", "new", "count"});
    const Value* old_s = args.get(0);
    const Value* new_s = args.get(1);
    if (!old_s || !new_s) fail("replace() needs old and new");
    const Value cnt = args.get_or(2, Value::none());
    return Value(py_replace(to_str(v), to_str(*old_s), to_str(*new_s), cnt.is_none() ? -1 : cnt.to_int()));
}

Value f_join(const Value& v, CallArgs& a) {
    Args args("join", a, {"d", "attribute"});
    const std::string sep = to_str(args.get_or(0, Value("")));
    const Value attribute = args.get_or(1, Value::none());
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(attribute.is_none() ? item : attr_path(item, attribute));
        check_size(out.size());
    }
    return Value(std::move(out));
}

Value f_first(const Value& v, CallArgs& a) {
    Args("first", a, {});
    const auto items = iterate(v);
    return items.empty() ? Value::undefined("first(): sequence is empty") : items.front();
}

Value f_last(const Value& v, CallArgs& a) {
    Args("last", a, {});
    const auto items = iterate(v);
    return items.empty() ? Value::undefined("last(): sequence is empty") : items.back();
}

Value f_list(const Value& v, CallArgs& a) {
    Args("list", a, {});
    return Value::list(iterate(v));
}

Value f_items(const Value& v, CallArgs& a) {
    Args("items", a, {});
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::list({k, val}, true));
    return Value::list(std::move(out));
}

Value f_reverse(const Value& v, CallArgs& a) {
    Args("reverse", a, {});
    if (v.is_string()) {
        std::u32string u = utf8_decode(v.as_string());
        std::reverse(u.begin(), u.end());
        return Value(utf8_encode(u));
    }
    auto items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
}

Value f_sort(const Value& v, CallArgs& a) {
    Args args("sort", a, {"reverse", "case_sensitive", "attribute"});
    const bool rev = args.flag(0, false), cs = args.flag(1, false);
    const Value attribute = args.get_or(2, Value::none());
    auto items = iterate(v);
    auto key = [&](const Value& x) {
        return sort_key(attribute.is_none() ? x : attr_path(x, attribute), cs);
    };
    text::stable_sort_by_index(items, [&](const Value& x, const Value& y) {
        return rev ? compare(key(y), key(x)) < 0 : compare(key(x), key(y)) < 0;
    });
    return Value::list(std::move(items));
}

Value f_dictsort(const Value& v, CallArgs& a) {
    Args args("dictsort", a, {"case_sensitive", "by", "reverse"});
    const bool cs = args.flag(0, false), rev = args.flag(2, false);
    const std::string by = to_str(args.get_or(1, Value("key")));
    if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'");
    CallArgs none;
    std::vector<Value> pairs = f_items(v, none).items();
    const size_t idx = by == "key" ? 0 : 1;
    text::stable_sort_by_index(pairs, [&](const Value& x, const Value& y) {
        const int c = compare(sort_key(x.items()[idx], cs), sort_key(y.items()[idx], cs));
        return rev ? c > 0 : c < 0;
    });
    return Value::list(std::move(pairs));
}

Value f_unique(const Value& v, CallArgs& a) {
    Args args("unique", a, {"case_sensitive", "attribute"});
    const bool cs = args.flag(0, false);
    const Value attribute = args.get_or(1, Value::none());
    std::vector<Value> out, seen;
    for (const Value& x : iterate(v)) {
        const Value k = sort_key(attribute.is_none() ? x : attr_path(x, attribute), cs);
        if (k.kind() == Value::Kind::dict || (k.is_list() && !k.is_tuple()))
            fail("unhashable type: '{}'", type_name(k));  // jinja2 collects keys in a set
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
            seen.push_back(k);
            out.push_back(x);
        }
    }
    return Value::list(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, bool want_max) {
    Args args(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
    const bool cs = args.flag(0, false);
    const Value attribute = args.get_or(1, Value::none());
    const auto items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    auto key = [&](const Value& x) {
        return sort_key(attribute.is_none() ? x : attr_path(x, attribute), cs);
    };
    const Value* best = &items[0];
    for (const Value& x : items) {
        const int c = compare(key(x), key(*best));
        if (want_max ? c > 0 : c < 0) best = &x;
    }
    return *best;
}
Value f_max(const Value& v, CallArgs& a) {
    return min_max(v, a, true);
}
Value f_min(const Value& v, CallArgs& a) {
    return min_max(v, a, false);
}

Value f_sum(const Value& v, CallArgs& a) {
    Args args("sum", a, {"attribute", "start"});
    const Value attribute = args.get_or(0, Value::none());
    Value total = args.get_or(1, Value(0));
    for (const Value& x : iterate(v))
        total = binary_op("+", total, attribute.is_none() ? x : attr_path(x, attribute));
    return total;
}

Value f_int(const Value& v, CallArgs& a) {
    Args args("int", a, {"default", "base"});
    const Value def = args.get_or(0, Value(0));
    if (v.is_int()) return v;
    if (v.is_bool()) return Value(v.to_int());
    if (v.is_float())
        return std::isfinite(v.as_float()) && std::fabs(v.as_float()) < 9.2e18 ? Value(int64_t(v.as_float()))
                                                                               : def;
    if (v.is_string()) {
        const std::string s = py_strip(v.as_string(), nullptr, true, true);
        char* end = nullptr;
        errno = 0;
        const long long i = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end && *end == 0 && errno == 0) return Value(int64_t(i));
        const double d = std::strtod(s.c_str(), &end);  // jinja2 falls back to int(float(s))
        if (!s.empty() && end && *end == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18)
            return Value(int64_t(d));
    }
    return def;
}

Value f_float(const Value& v, CallArgs& a) {
    Args args("float", a, {"default"});
    if (v.is_number()) return Value(v.to_double());
    if (v.is_string()) {
        const std::string s = py_strip(v.as_string(), nullptr, true, true);
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == 0) return Value(d);
    }
    return args.get_or(0, Value(0.0));
}

Value f_abs(const Value& v, CallArgs& a) {
    Args("abs", a, {});
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    const int64_t i = v.to_int();
    if (i == INT64_MIN) fail("integer overflow");
    return Value(i < 0 ? -i : i);
}

Value f_round(const Value& v, CallArgs& a) {
    Args args("round", a, {"precision", "method"});
    const int64_t prec = args.get_or(0, Value(0)).to_int();
    const std::string method = to_str(args.get_or(1, Value("common")));
    if (method == "common" && (v.is_int() || v.is_bool()) && prec >= 0)
        return Value(v.to_int());  // round(int) is an int
    const double scale = std::pow(10.0, double(std::clamp<int64_t>(prec, -300, 300)));
    const double x = v.to_double() * scale;
    double r;
    if (method == "common")
        r = std::nearbyint(x);  // Python's round(): ties to even
    else if (method == "ceil")
        r = std::ceil(x);
    else if (method == "floor")
        r = std::floor(x);
    else
        fail("method must be common, ceil or floor");
    return Value(r / scale);
}

Value f_indent(const Value& v, CallArgs& a) {
    Args args("indent", a, {"width", "first", "blank"});
    const Value w = args.get_or(0, Value(4));
    const std::string pad =
        w.is_string() ? w.as_string() : std::string(size_t(std::clamp<int64_t>(w.to_int(), 0, 1024)), ' ');
    const bool first = args.flag(1, false), blank = args.flag(2, false);
    const std::string s = to_str(v);
    std::string out;
    size_t start = 0;
    bool is_first = true;
    for (;;) {
        const size_t nl = s.find('\n', start);
        const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        if ((!is_first || first) && (blank || !line.empty())) out += pad;
        out += line;
        check_size(out.size());
        if (nl == std::string::npos) break;
        out += '\n';
        start = nl + 1;
        is_first = false;
    }
    return Value(std::move(out));
}

Value f_escape(const Value& v, CallArgs& a) {
    Args("escape", a, {});
    std::string out;
    for (char c : to_str(v)) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out.push_back(c);
        }
    }
    return Value(std::move(out));
}

Value f_safe(const Value& v, CallArgs& a) {
    // Markup only matters with autoescaping, which HF leaves off.
    Args("safe", a, {});
    return v.is_string() ? v : Value(to_str(v));
}

Value f_attr(const Value& v, CallArgs& a) {
    Args args("attr", a, {"name"});
    return get_attribute(v, to_str(args.get_or(0, Value(""))));
}

Value f_map(const Value& v, CallArgs& a) {
    std::vector<Value> out;
    if (!truthy(v)) return Value::list();  // jinja2's map starts with `if value:`
    const Value* attribute = nullptr;
    const Value* def = nullptr;
    for (const auto& [k, val] : a.kw) {
        if (k == "attribute")
            attribute = &val;
        else if (k == "default")
            def = &val;
        else if (attribute || a.pos.empty())
            fail("map() got an unexpected keyword argument '{}'", k);
    }
    if (attribute) {
        for (const Value& x : iterate(v)) {
            Value r = attr_path(x, *attribute);
            out.push_back(r.is_undefined() && def ? *def : r);
        }
        return Value::list(std::move(out));
    }
    if (a.pos.empty()) fail("map() requires a filter name or attribute=");
    const std::string name = to_str(a.pos[0]);
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value& x : iterate(v)) {
        CallArgs copy = rest;
        out.push_back(apply_filter(name, x, copy));
    }
    return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr: pos[0] (attr variants: pos[1]) names a test, the rest are its
// arguments; no test means truthiness.
Value select_impl(const Value& v, CallArgs& a, bool by_attr, bool want) {
    if (!truthy(v)) return Value::list();  // like jinja2's select_or_reject: `if value:` first
    size_t next = 0;
    Value attribute;
    if (by_attr) {
        if (a.pos.empty()) fail("selectattr/rejectattr need an attribute name");
        attribute = a.pos[next++];
    }
    std::string test;
    if (next < a.pos.size()) test = to_str(a.pos[next++]);
    CallArgs targs;
    targs.pos.assign(a.pos.begin() + ptrdiff_t(next), a.pos.end());
    targs.kw = a.kw;
    std::vector<Value> out;
    for (const Value& x : iterate(v)) {
        const Value subject = by_attr ? attr_path(x, attribute) : x;
        CallArgs copy = targs;
        const bool ok = test.empty() ? truthy(subject) : apply_test(test, subject, copy);
        if (ok == want) out.push_back(x);
    }
    return Value::list(std::move(out));
}
Value f_select(const Value& v, CallArgs& a) {
    return select_impl(v, a, false, true);
}
Value f_reject(const Value& v, CallArgs& a) {
    return select_impl(v, a, false, false);
}
Value f_selectattr(const Value& v, CallArgs& a) {
    return select_impl(v, a, true, true);
}
Value f_rejectattr(const Value& v, CallArgs& a) {
    return select_impl(v, a, true, false);
}

Value f_wordcount(const Value& v, CallArgs& a) {
    Args("wordcount", a, {});
    int64_t n = 0;
    bool in_word = false;
    for (char c : to_str(v)) {
        const bool w =
            std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (static_cast<unsigned char>(c) & 0x80);
        if (w && !in_word) ++n;
        in_word = w;
    }
    return Value(n);
}

const std::map<std::string_view, FilterFn>& filters() {
    static const std::map<std::string_view, FilterFn> table = {
        {"abs", f_abs},           {"attr", f_attr},       {"capitalize", f_capitalize},
        {"count", f_length},      {"d", f_default},       {"default", f_default},
        {"dictsort", f_dictsort}, {"e", f_escape},        {"escape", f_escape},
        {"first", f_first},       {"float", f_float},     {"indent", f_indent},
        {"int", f_int},           {"items", f_items},     {"join", f_join},
        {"last", f_last},         {"length", f_length},   {"list", f_list},
        {"lower", f_lower},       {"map", f_map},         {"max", f_max},
        {"min", f_min},           {"reject", f_reject},   {"rejectattr", f_rejectattr},
        {"replace", f_replace},   {"reverse", f_reverse}, {"round", f_round},
        {"safe", f_safe},         {"select", f_select},   {"selectattr", f_selectattr},
        {"sort", f_sort},         {"string", f_string},   {"sum", f_sum},
        {"title", f_title},       {"tojson", f_tojson},   {"trim", f_trim},
        {"unique", f_unique},     {"upper", f_upper},     {"wordcount", f_wordcount},
    };
    return table;
}

// --- tests ----------------------------------------------------------------------------------------

bool t_compare(const Value& v, CallArgs& a, std::string_view op) {
    if (a.pos.size() != 1 || !a.kw.empty()) fail("test '{}' takes one argument", op);
    const Value& o = a.pos[0];
    if (op == "eq") return equal(v, o);
    if (op == "ne") return !equal(v, o);
    const int c = compare(v, o);
    return op == "lt" ? c < 0 : op == "le" ? c <= 0 : op == "gt" ? c > 0 : c >= 0;
}

const std::map<std::string_view, std::string_view>& test_aliases() {
    static const std::map<std::string_view, std::string_view> t = {
        {"==", "eq"}, {"equalto", "eq"}, {"!=", "ne"},          {"<", "lt"}, {"lessthan", "lt"},
        {"<=", "le"}, {">", "gt"},       {"greaterthan", "gt"}, {">=", "ge"}};
    return t;
}

const std::vector<std::string_view>& test_names() {
    static const std::vector<std::string_view> names = {
        "defined",     "undefined", "none",    "boolean",  "true",     "false",    "integer", "float",
        "number",      "string",    "mapping", "iterable", "sequence", "callable", "sameas",  "eq",
        "ne",          "lt",        "le",      "gt",       "ge",       "in",       "odd",     "even",
        "divisibleby", "lower",     "upper",   "escaped",  "filter",   "test"};
    return names;
}

// --- methods --------------------------------------------------------------------------------------

Value method(const Value& self, const std::string& name, Value (*fn)(const Value&, CallArgs&)) {
    return Value::function(name, [self, fn](CallArgs& a) { return fn(self, a); });
}

Value m_startswith(const Value& s, CallArgs& a, bool ends) {
    Args args(ends ? "endswith" : "startswith", a, {"prefix"});
    const Value* p = args.get(0);
    if (!p) fail("startswith/endswith need an argument");
    const std::string& str = s.as_string();
    auto one = [&](const Value& x) {
        const std::string& q = need_string(x, "startswith/endswith");
        if (q.size() > str.size()) return false;
        return ends ? str.compare(str.size() - q.size(), q.size(), q) == 0 : str.compare(0, q.size(), q) == 0;
    };
    if (p->is_tuple()) return Value(std::any_of(p->items().begin(), p->items().end(), one));
    return Value(one(*p));
}

Value str_method(const Value& s, const std::string& name) {
    using F = Value (*)(const Value&, CallArgs&);
    static const std::map<std::string_view, F> table = {
        {"startswith", [](const Value& s, CallArgs& a) { return m_startswith(s, a, false); }},
        {"endswith", [](const Value& s, CallArgs& a) { return m_startswith(s, a, true); }},
        {"strip",
         [](const Value& s, CallArgs& a) {
             return Value(py_strip(s.as_string(), Args("strip", a, {"chars"}).get(0), true, true));
         }},
        {"lstrip",
         [](const Value& s, CallArgs& a) {
             return Value(py_strip(s.as_string(), Args("lstrip", a, {"chars"}).get(0), true, false));
         }},
        {"rstrip",
         [](const Value& s, CallArgs& a) {
             return Value(py_strip(s.as_string(), Args("rstrip", a, {"chars"}).get(0), false, true));
         }},
        {"split",
         [](const Value& s, CallArgs& a) {
             Args args("split", a, {"sep", "maxsplit"});
             return Value::list(py_split(s.as_string(), args.get(0), args.get_or(1, Value(-1)).to_int()));
         }},
        {"rsplit",
         [](const Value& s, CallArgs& a) {
             Args args("rsplit", a, {"sep", "maxsplit"});
             const int64_t maxsplit = args.get_or(1, Value(-1)).to_int();
             if (maxsplit >= 0) fail("rsplit with maxsplit is not supported");
             return Value::list(py_split(s.as_string(), args.get(0), -1));
         }},
        {"upper",
         [](const Value& s, CallArgs& a) { return Args("upper", a, {}), Value(ascii_upper(s.as_string())); }},
        {"lower",
         [](const Value& s, CallArgs& a) { return Args("lower", a, {}), Value(ascii_lower(s.as_string())); }},
        {"title", [](const Value& s,
                     CallArgs& a) { return Args("title", a, {}), Value(title_method(s.as_string())); }},
        {"capitalize",
         [](const Value& s, CallArgs& a) {
             return Args("capitalize", a, {}), Value(capitalize(s.as_string()));
         }},
        {"replace",
         [](const Value& s, CallArgs& a) {
             Args args("replace", a, {"old", "new", "count"});
             if (!args.get(0) || !args.get(1)) fail("replace() needs old and new");
             return Value(py_replace(s.as_string(), need_string(*args.get(0), "replace"),
                                     need_string(*args.get(1), "replace"),
                                     args.get_or(2, Value(-1)).to_int()));
         }},
        {"find",
         [](const Value& s, CallArgs& a) {
             Args args("find", a, {"sub"});
             if (!args.get(0)) fail("find() needs an argument");
             const size_t at = s.as_string().find(need_string(*args.get(0), "find"));
             return Value(at == std::string::npos ? int64_t(-1)
                                                  : int64_t(utf8_length(s.as_string().substr(0, at))));
         }},
        {"count",
         [](const Value& s, CallArgs& a) {
             Args args("count", a, {"sub"});
             if (!args.get(0)) fail("count() needs an argument");
             const std::string& sub = need_string(*args.get(0), "count");
             if (sub.empty()) return Value(int64_t(utf8_length(s.as_string()) + 1));
             int64_t n = 0;
             for (size_t at = s.as_string().find(sub); at != std::string::npos;
                  at = s.as_string().find(sub, at + sub.size()))
                 ++n;
             return Value(n);
         }},
        {"join",
         [](const Value& s, CallArgs& a) {
             Args args("join", a, {"iterable"});
             if (!args.get(0)) fail("join() needs an argument");
             std::string out;
             bool first = true;
             for (const Value& x : iterate(*args.get(0))) {
                 if (!first) out += s.as_string();
                 first = false;
                 out += need_string(x, "join");
                 check_size(out.size());
             }
             return Value(std::move(out));
         }},
        {"isdigit",
         [](const Value& s, CallArgs& a) {
             Args("isdigit", a, {});
             const std::string& t = s.as_string();
             return Value(!t.empty() &&
                          std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }));
         }},
        {"isalpha",
         [](const Value& s, CallArgs& a) {
             Args("isalpha", a, {});
             const std::string& t = s.as_string();
             return Value(!t.empty() && std::all_of(t.begin(), t.end(), is_alpha));
         }},
        {"isspace",
         [](const Value& s, CallArgs& a) {
             Args("isspace", a, {});
             const std::u32string u = utf8_decode(s.as_string());
             return Value(!u.empty() && std::all_of(u.begin(), u.end(), is_py_space));
         }},
        {"islower",
         [](const Value& s, CallArgs& a) {
             Args("islower", a, {});
             const std::string& t = s.as_string();
             return Value(std::any_of(t.begin(), t.end(), is_alpha) && ascii_lower(t) == t);
         }},
        {"isupper",
         [](const Value& s, CallArgs& a) {
             Args("isupper", a, {});
             const std::string& t = s.as_string();
             return Value(std::any_of(t.begin(), t.end(), is_alpha) && ascii_upper(t) == t);
         }},
    };
    const auto it = table.find(name);
    if (it == table.end()) return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
    return method(s, name, it->second);
}

Value dict_method(const Value& d, const std::string& name) {
    if (name == "items") return method(d, name, [](const Value& s, CallArgs& a) { return f_items(s, a); });
    if (name == "keys")
        return method(d, name, [](const Value& s, CallArgs& a) {
            Args("keys", a, {});
            return Value::list(iterate(s));
        });
    if (name == "values")
        return method(d, name, [](const Value& s, CallArgs& a) {
            Args("values", a, {});
            std::vector<Value> out;
            for (const auto& [k, v] : s.as_dict().items) out.push_back(v);
            return Value::list(std::move(out));
        });
    if (name == "get")
        return method(d, name, [](const Value& s, CallArgs& a) {
            Args args("get", a, {"key", "default"});
            if (!args.get(0)) fail("get() needs a key");
            const Value* v = s.as_dict().find(*args.get(0));
            return v ? *v : args.get_or(1, Value::none());
        });
    if (name == "copy")
        return method(d, name, [](const Value& s, CallArgs& a) {
            Args("copy", a, {});
            Value c = Value::dict();
            c.dict_mut().items = s.as_dict().items;
            return c;
        });
    return Value::undefined();
}

// list and tuple: the read-only methods (append, pop, ... are unsafe in HF's sandbox).
Value list_method(const Value& l, const std::string& name) {
    if (name == "count")
        return method(l, name, [](const Value& s, CallArgs& a) {
            Args args("count", a, {"value"});
            if (!args.get(0)) fail("count() takes exactly one argument");
            return Value(int64_t(std::count_if(s.items().begin(), s.items().end(),
                                               [&](const Value& x) { return equal(x, *args.get(0)); })));
        });
    if (name == "index")
        return method(l, name, [](const Value& s, CallArgs& a) {
            Args args("index", a, {"value"});
            if (!args.get(0)) fail("index() takes exactly one argument");
            for (size_t i = 0; i < s.items().size(); ++i)
                if (equal(s.items()[i], *args.get(0))) return Value(int64_t(i));
            fail("{} is not in list", repr(*args.get(0)));
        });
    return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(l), name));
}

bool is_unsafe_dict_attr(const std::string& name) {
    return name == "pop" || name == "popitem" || name == "update" || name == "clear" ||
           name == "setdefault" || name == "fromkeys";
}

}  // namespace

// --- operators ------------------------------------------------------------------------------------

Value binary_op(std::string_view op, const Value& a, const Value& b) {
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    auto type_error = [&]() -> Value {
        fail("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
    };
    if (a.is_number() && b.is_number()) {
        const bool flt = a.is_float() || b.is_float();
        if (op == "/") {
            if (b.to_double() == 0.0) fail("division by zero");
            return Value(a.to_double() / b.to_double());
        }
        if (flt) {
            const double x = a.to_double(), y = b.to_double();
            if (op == "+") return Value(x + y);
            if (op == "-") return Value(x - y);
            if (op == "*") return Value(x * y);
            if (op == "**") return Value(std::pow(x, y));
            if (y == 0.0) fail("float division by zero");
            if (op == "//") return Value(std::floor(x / y));
            if (op == "%") {
                double m = std::fmod(x, y);
                if (m != 0.0 && ((m < 0) != (y < 0))) m += y;  // Python: the sign of the divisor
                return Value(m);
            }
            return type_error();
        }
        const int64_t x = a.to_int(), y = b.to_int();
        int64_t r = 0;
        bool overflow = false;
        if (op == "+")
            overflow = __builtin_add_overflow(x, y, &r);
        else if (op == "-")
            overflow = __builtin_sub_overflow(x, y, &r);
        else if (op == "*")
            overflow = __builtin_mul_overflow(x, y, &r);
        if (overflow) fail("integer overflow");
        if (op == "+" || op == "-" || op == "*") return Value(r);
        if (op == "**") return y < 0 ? Value(std::pow(double(x), double(y))) : int_pow(x, y);
        if (y == 0) fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail("integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward -inf
            q -= 1;
            m += y;
        }
        if (op == "//") return Value(q);
        if (op == "%") return Value(m);
        return type_error();
    }
    if (op == "+") {
        if (a.is_string() && b.is_string()) {
            check_size(a.as_string().size() + b.as_string().size());
            return Value(a.as_string() + b.as_string());
        }
        if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
            std::vector<Value> items = a.items();
            items.insert(items.end(), b.items().begin(), b.items().end());
            return Value::list(std::move(items), a.is_tuple());
        }
        if (a.is_string() || b.is_string())
            fail("can only concatenate str (not \"{}\") to str", type_name(a.is_string() ? b : a));
    }
    // Python repeats sequences by ints, and bool is an int.
    const bool a_count = a.is_int() || a.is_bool(), b_count = b.is_int() || b.is_bool();
    if (op == "*" && (a_count || b_count)) {
        const Value& seq = a_count ? b : a;
        const int64_t n = std::max<int64_t>(0, (a_count ? a : b).to_int());
        if (seq.is_string()) {
            check_size(seq.as_string().size() * size_t(std::min<int64_t>(n, int64_t(kMaxStringBytes) + 1)));
            std::string out;
            for (int64_t i = 0; i < n; ++i) out += seq.as_string();
            return Value(std::move(out));
        }
        if (seq.is_list()) {
            if (double(seq.items().size()) * double(n) > 1e6) fail("result too large");
            std::vector<Value> out;
            for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
            return Value::list(std::move(out), seq.is_tuple());
        }
    }
    if (op == "%" && a.is_string()) fail("printf-style '%' string formatting is not supported");
    return type_error();
}

Value unary_op(std::string_view op, const Value& a) {
    if (a.is_undefined()) undefined_error(a);
    if (!a.is_number()) fail("bad operand type for unary {}: '{}'", op, type_name(a));
    if (op == "+") return a.is_bool() ? Value(a.to_int()) : a;
    if (a.is_float()) return Value(-a.as_float());
    if (a.to_int() == INT64_MIN) fail("integer overflow");
    return Value(-a.to_int());
}

// --- lookup and iteration ---------------------------------------------------------------------------

Value get_attribute(const Value& obj, const std::string& name) {
    switch (obj.kind()) {
        case Value::Kind::undefined:
            undefined_error(obj);
        case Value::Kind::string:
            return str_method(obj, name);
        case Value::Kind::list:
            return list_method(obj, name);
        case Value::Kind::dict: {
            if (obj.is_namespace()) {
                const Value* v = obj.as_dict().find(Value(name));
                return v ? *v
                         : Value::undefined(fmt::format("'Namespace' object has no attribute '{}'", name));
            }
            // jinja2 tries Python attributes (the dict's methods) before keys.
            Value m = dict_method(obj, name);
            if (m.is_function()) return m;
            if (is_unsafe_dict_attr(name))
                return Value::undefined(fmt::format("access to '{}' is unsafe", name));
            const Value* v = obj.as_dict().find(Value(name));
            return v ? *v : Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
        }
        default:
            return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
    }
}

Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.is_dict()) {
        if (key.is_list() && !key.is_tuple()) return Value::undefined("unhashable key");
        if (const Value* v = obj.as_dict().find(key)) return *v;
        if (key.is_string()) {  // jinja2 falls back to attributes (methods)
            Value m = dict_method(obj, key.as_string());
            if (m.is_function()) return m;
        }
        return Value::undefined(fmt::format("'dict object' has no attribute '{}'", to_str(key)));
    }
    if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
        int64_t i = key.to_int();
        if (obj.is_list()) {
            const int64_t n = int64_t(obj.items().size());
            if (i < 0) i += n;
            if (i < 0 || i >= n)
                return Value::undefined(fmt::format("{} index out of range", type_name(obj)));
            return obj.items()[size_t(i)];
        }
        const std::u32string u = utf8_decode(obj.as_string());
        const int64_t n = int64_t(u.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("string index out of range");
        return Value(utf8_encode(std::u32string_view(&u[size_t(i)], 1)));
    }
    if (key.is_string()) return get_attribute(obj, key.as_string());
    return Value::undefined(fmt::format("'{} object' has no item {}", type_name(obj), repr(key)));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
    // jinja2 compiles slices to a plain Python subscript (no sandbox getitem fallback), so slicing
    // anything but a sequence raises.
    if (obj.is_undefined()) undefined_error(obj);
    if (!obj.is_list() && !obj.is_string()) fail("'{}' object is not subscriptable", type_name(obj));
    auto bound = [](const Value& v) -> std::optional<int64_t> {
        if (v.is_none() || v.is_undefined()) return std::nullopt;
        if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None");
        return v.to_int();
    };
    const std::u32string u = obj.is_string() ? utf8_decode(obj.as_string()) : std::u32string();
    const int64_t n = obj.is_string() ? int64_t(u.size()) : int64_t(obj.items().size());
    const int64_t st = bound(step).value_or(1);
    if (st == 0) fail("slice step cannot be zero");
    // Python's slice.indices(): clamp into range according to the direction of the step.
    auto clamp = [&](std::optional<int64_t> v, int64_t def) {
        if (!v) return def;
        int64_t x = *v;
        if (x < 0) x += n;
        if (st > 0) return std::clamp<int64_t>(x, 0, n);
        return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = clamp(bound(start), st > 0 ? 0 : n - 1);
    const int64_t e = clamp(bound(stop), st > 0 ? n : -1);
    std::vector<int64_t> idx;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
    if (obj.is_string()) {
        std::u32string out;
        for (int64_t i : idx) out.push_back(u[size_t(i)]);
        return Value(utf8_encode(out));
    }
    std::vector<Value> out;
    for (int64_t i : idx) out.push_back(obj.items()[size_t(i)]);
    return Value::list(std::move(out), obj.is_tuple());
}

std::vector<Value> iterate(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::undefined:
            return {};  // jinja2's Undefined iterates as empty
        case Value::Kind::list:
            return v.items();
        case Value::Kind::dict: {
            if (v.is_namespace()) fail("'Namespace' object is not iterable");
            std::vector<Value> keys;
            for (const auto& [k, val] : v.as_dict().items) keys.push_back(k);
            return keys;
        }
        case Value::Kind::string: {
            std::vector<Value> out;
            for (char32_t c : utf8_decode(v.as_string()))
                out.emplace_back(utf8_encode(std::u32string_view(&c, 1)));
            return out;
        }
        default:
            fail("'{}' object is not iterable", type_name(v));
    }
}

// --- registries -----------------------------------------------------------------------------------

bool has_filter(std::string_view name) {
    return filters().count(name) > 0;
}

Value apply_filter(std::string_view name, const Value& subject, CallArgs& args) {
    const auto it = filters().find(name);
    if (it == filters().end()) fail("no filter named '{}'", name);
    // Filters that read the value (rather than test for it) fail on undefined, as jinja2's do.
    static const std::string_view tolerant[] = {
        "default",    "d",      "length",  "count",      "string",     "trim",    "items",  "list",
        "first",      "last",   "join",    "upper",      "lower",      "safe",    "escape", "e",
        "capitalize", "title",  "replace", "indent",     "wordcount",  "reverse", "unique", "sort",
        "map",        "select", "reject",  "selectattr", "rejectattr", "min",     "max",    "sum"};
    if (subject.is_undefined() &&
        std::find(std::begin(tolerant), std::end(tolerant), name) == std::end(tolerant))
        undefined_error(subject);
    return it->second(subject, args);
}

bool has_test(std::string_view name) {
    return test_aliases().count(name) > 0 ||
           std::find(test_names().begin(), test_names().end(), name) != test_names().end();
}

bool apply_test(std::string_view name, const Value& v, CallArgs& a) {
    if (const auto al = test_aliases().find(name); al != test_aliases().end()) name = al->second;
    auto no_args = [&] {
        if (!a.pos.empty() || !a.kw.empty()) fail("test '{}' takes no arguments", name);
    };
    if (name == "eq" || name == "ne" || name == "lt" || name == "le" || name == "gt" || name == "ge")
        return t_compare(v, a, name);
    if (name == "sameas" || name == "in" || name == "divisibleby") {
        if (a.pos.size() != 1 || !a.kw.empty()) fail("test '{}' takes one argument", name);
        const Value& o = a.pos[0];
        if (name == "in") return contains(o, v);
        if (name == "divisibleby") return equal(binary_op("%", v, o), Value(0));
        // `is` identity: singletons compare by value, containers by object.
        if (v.kind() != o.kind()) return false;
        if (v.is_none() || v.is_undefined()) return true;
        if (v.is_bool()) return v.as_bool() == o.as_bool();
        if (v.is_int() || v.is_float() || v.is_string()) return equal(v, o);
        return v.same_object(o);
    }
    no_args();
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict();
    // jinja2's Undefined can be iterated and has __len__/__getitem__, so both tests accept it.
    if (name == "iterable") return v.is_undefined() || v.is_list() || v.is_dict() || v.is_string();
    if (name == "sequence") return v.is_undefined() || v.is_list() || v.is_dict() || v.is_string();
    if (name == "callable") return v.is_function() || v.is_undefined();  // Undefined defines __call__
    if (name == "odd") return equal(binary_op("%", v, Value(2)), Value(1));
    if (name == "even") return equal(binary_op("%", v, Value(2)), Value(0));
    // str.islower()/isupper(): at least one cased character, and no character of the other case.
    if (name == "lower" || name == "upper") {
        const std::string s = to_str(v);
        const bool cased = std::any_of(s.begin(), s.end(), is_alpha);
        return cased && (name == "lower" ? ascii_lower(s) == s : ascii_upper(s) == s);
    }
    if (name == "escaped") return false;
    if (name == "filter") return v.is_string() && has_filter(v.as_string());
    if (name == "test") return v.is_string() && has_test(v.as_string());
    fail("no test named '{}'", name);
}

Value global_function(const std::string& name) {
    if (name == "range")
        return Value::function("range", [](CallArgs& a) {
            if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3)
                fail("range() takes 1 to 3 integer arguments");
            int64_t start = 0, stop, step = 1;
            if (a.pos.size() == 1) {
                stop = a.pos[0].to_int();
            } else {
                start = a.pos[0].to_int();
                stop = a.pos[1].to_int();
                if (a.pos.size() == 3) step = a.pos[2].to_int();
            }
            if (step == 0) fail("range() arg 3 must not be zero");
            const double count = std::ceil((double(stop) - double(start)) / double(step));
            if (count > 1e6) fail("range() too large");
            std::vector<Value> out;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
            return Value::list(std::move(out));
        });
    if (name == "namespace" || name == "dict")
        return Value::function(name, [ns = name == "namespace"](CallArgs& a) {
            Value d = ns ? Value::ns() : Value::dict();
            for (const Value& p : a.pos) {  // namespace({'a': 1}) / dict(other) copy a mapping
                if (!p.is_dict())
                    fail("{}() positional argument must be a mapping", ns ? "namespace" : "dict");
                for (const auto& [k, v] : p.as_dict().items) d.dict_mut().set(k, v);
            }
            for (const auto& [k, v] : a.kw) d.dict_mut().set(Value(k), v);
            return d;
        });
    if (name == "raise_exception")
        return Value::function(name, [](CallArgs& a) -> Value {
            fail("{}", a.pos.empty() ? std::string("raise_exception()") : to_str(a.pos[0]));
        });
    if (name == "joiner")
        return Value::function(name, [](CallArgs& a) {
            const std::string sep = a.pos.empty() ? ", " : to_str(a.pos[0]);
            auto used = std::make_shared<bool>(false);
            return Value::function("joiner", [sep, used](CallArgs&) {
                if (!*used) {
                    *used = true;
                    return Value("");
                }
                return Value(sep);
            });
        });
    return Value::undefined(fmt::format("'{}' is undefined", name));
}

}  // namespace mox::jinja
