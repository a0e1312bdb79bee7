// Values of the Jinja subset that chat templates use, with Python's semantics (HF renders chat
// templates with Python's jinja2, so str(), ==, <, truthiness and json.dumps must match Python's to
// produce byte-identical prompts).
//
// Kinds: undefined (a failed lookup; prints as "" and is falsy, like jinja2's default Undefined),
// none, bool, int (int64; Python's bigints are out of scope), float, string (UTF-8), list (also
// tuples: same storage, a flag for how they print and compare), dict (insertion-ordered; also
// jinja2's namespace(), a dict whose attributes can be assigned), function (builtins, bound
// methods and macros).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace mox::jinja {

class Value;

// Arguments of a call: positional, then keyword (in call order).
struct CallArgs {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};
using Function = std::function<Value(CallArgs&)>;

struct Undefined {
    std::string why;  // the message an operation on it fails with, e.g. "'x' is undefined"
};
struct None {};
struct List {
    std::vector<Value> items;
    bool tuple = false;
};
struct Dict {
    std::vector<std::pair<Value, Value>> items;
    bool is_namespace = false;
    const Value* find(const Value& key) const;
    Value* find(const Value& key);
    void set(Value key, Value value);
};
struct Callable {
    std::string name;
    Function fn;
};

class Value {
  public:
    enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, function };

    Value() : v_(Undefined{}) {}
    Value(bool b) : v_(b) {}
    Value(int i) : v_(int64_t(i)) {}
    Value(int64_t i) : v_(i) {}
    Value(double f) : v_(f) {}
    Value(std::string s) : v_(std::move(s)) {}
    Value(std::string_view s) : v_(std::string(s)) {}
    Value(const char* s) : v_(std::string(s)) {}

    static Value undefined(std::string why = "value is undefined") {
        return Value(Undefined{std::move(why)});
    }
    static Value none() { return Value(None{}); }
    static Value list(std::vector<Value> items = {}, bool tuple = false);
    static Value dict();
    static Value ns();  // jinja2 namespace()
    static Value function(std::string name, Function fn);

    Kind kind() const { return Kind(v_.index()); }
    bool is_undefined() const { return kind() == Kind::undefined; }
    bool is_none() const { return kind() == Kind::none; }
    bool is_bool() const { return kind() == Kind::boolean; }
    bool is_int() const { return kind() == Kind::integer; }
    bool is_float() const { return kind() == Kind::floating; }
    bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python: bool is an int
    bool is_string() const { return kind() == Kind::string; }
    bool is_list() const { return kind() == Kind::list; }
    bool is_tuple() const { return is_list() && std::get<std::shared_ptr<List>>(v_)->tuple; }
    bool is_dict() const { return kind() == Kind::dict && !as_dict().is_namespace; }
    bool is_namespace() const { return kind() == Kind::dict && as_dict().is_namespace; }
    bool is_function() const { return kind() == Kind::function; }

    bool as_bool() const { return std::get<bool>(v_); }
    int64_t as_int() const { return std::get<int64_t>(v_); }
    double as_float() const { return std::get<double>(v_); }
    double to_double() const;  // any number kind
    int64_t to_int() const;    // bool or int
    const std::string& as_string() const { return std::get<std::string>(v_); }
    const std::vector<Value>& items() const { return std::get<std::shared_ptr<List>>(v_)->items; }
    std::vector<Value>& items_mut() { return std::get<std::shared_ptr<List>>(v_)->items; }
    const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
    Dict& dict_mut() { return *std::get<std::shared_ptr<Dict>>(v_); }
    const Callable& as_function() const { return *std::get<std::shared_ptr<Callable>>(v_); }
    const std::string& undefined_why() const { return std::get<Undefined>(v_).why; }
    bool same_object(const Value& other) const;  // identity of lists, dicts and functions

  private:
    explicit Value(Undefined u) : v_(std::move(u)) {}
    explicit Value(None n) : v_(n) {}
    std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>,
                 std::shared_ptr<Dict>, std::shared_ptr<Callable>>
        v_;
};

// --- Python semantics -------------------------------------------------------------------------
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(v); undefined -> ""
std::string repr(const Value& v);    // repr(v), as lists and dicts print their items
std::string type_name(const Value& v);
std::string format_float(double x);  // repr(float): shortest round-trip, Python's layout
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);               // <0, 0, >0; throws mox::Error where Python raises
bool contains(const Value& container, const Value& item);  // Python `item in container`

struct JsonOptions {
    int indent = -1;                // < 0: None (one line)
    std::string indent_str;         // used when set (json.dumps(indent="\t")); overrides indent
    std::string item_sep, key_sep;  // empty: Python's defaults for the indent mode
    bool sort_keys = false;
    bool ensure_ascii = false;  // HF's tojson passes ensure_ascii=False
};
std::string to_json(const Value& v, const JsonOptions& opt = {});  // json.dumps

// --- UTF-8 (Python strings index code points) ----------------------------------------------------
std::u32string utf8_decode(std::string_view s);  // invalid bytes -> U+FFFD
std::string utf8_encode(std::u32string_view s);
size_t utf8_length(std::string_view s);

}  // namespace mox::jinja
