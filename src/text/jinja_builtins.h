// What the Jinja evaluator calls into: operators, attribute/item lookup, iteration, filters, tests,
// str/dict/list methods and global functions, each with the semantics of jinja2 under HF's
// ImmutableSandboxedEnvironment (mutating methods such as list.append or dict.update are unsafe there,
// so they are undefined here too). HF's own globals (raise_exception, strftime_now) and its tojson
// override live here too (strftime_now comes from the caller: it reads a clock).
#pragma once

#include "text/jinja_value.h"

#include <string>
#include <string_view>
#include <vector>

namespace mox::jinja {

// Operators. `op` is one of + - * / // % ** (binary) or - + (unary). Throws mox::Error where Python
// raises TypeError/ZeroDivisionError, and on results too large to hold (int64 overflow, huge strings).
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value unary_op(std::string_view op, const Value& a);

Value get_attribute(const Value& obj, const std::string& name);  // obj.name
Value get_item(const Value& obj, const Value& key);              // obj[key]
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
std::vector<Value> iterate(const Value& v);  // what `for x in v` visits

bool has_filter(std::string_view name);
Value apply_filter(std::string_view name, const Value& subject, CallArgs& args);
bool has_test(std::string_view name);
bool apply_test(std::string_view name, const Value& subject, CallArgs& args);

// range, namespace, dict, joiner, cycler, raise_exception; undefined when `name` is none of them.
// strftime_now is supplied by the caller (it depends on the clock) through the context.
Value global_function(const std::string& name);

// Longest string any operation may build (bounds hostile templates such as 'x' * 10**12).
inline constexpr size_t kMaxStringBytes = size_t(64) << 20;

}  // namespace mox::jinja
