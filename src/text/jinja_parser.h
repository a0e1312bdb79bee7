// Jinja parser: tokens -> statement tree. Expression precedence is jinja2's, loosest first:
//   `a if c else b` < or < and < not < comparisons (== != < > <= >= in, not in; chained) < + - < ~
//   < * / // % < ** < unary - + < postfix (.attr [index] [a:b:c] (call)) with |filter and `is test`
// binding to the postfix expression (so `x|length - 1` is `(x|length) - 1`).
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (name, tuple, ns.attr,
// block form), macro, break/continue, filter blocks, and HF's generation blocks.
#pragma once

#include "text/jinja_value.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mox::jinja {

enum class ExprKind {
    literal,  // value
    name,     // name
    list,     // args = items
    tuple,    // args = items
    dict,     // args = key, value, key, value, ...
    attr,     // args[0].name
    item,     // args[0][args[1]]
    slice,    // args[0][args[1]:args[2]:args[3]] (null parts are omitted bounds)
    call,     // args[0](args[1..], kwargs)
    filter,   // args[0] | name(args[1..], kwargs)
    test,     // args[0] is [not] name(args[1..], kwargs)
    unary,    // name in {"-", "+"} applied to args[0]
    binary,   // args[0] name args[1], name in {+ - * / // % ** ~}
    compare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    and_,
    or_,
    not_,
    cond,  // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    ExprKind kind;
    int line = 0, col = 0;
    Value value;
    std::string name;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;
    bool negated = false;
};

enum class StmtKind {
    text,       // text
    output,     // {{ expr }}
    if_,        // expr; body; else_body (elif nests an if_ in else_body)
    for_,       // names in expr [if filter]; body; else_body
    set,        // names = expr, or names[0].attr = expr
    set_block,  // {% set names[0] %}body{% endset %}
    macro,      // text = name; names = params; defaults (null when none); body
    filter,     // {% filter expr %}: expr is a filter chain over an empty literal; body
    block,      // body rendered as is (HF's {% generation %})
    break_,
    continue_,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Stmt {
    StmtKind kind;
    int line = 0, col = 0;
    std::string text;
    ExprPtr expr, filter;
    std::vector<std::string> names;
    std::string attr;
    std::vector<ExprPtr> defaults;
    std::vector<StmtPtr> body, else_body;
};

// Throws mox::Error "template:LINE:COL: ..." on syntax errors.
std::vector<StmtPtr> parse_template(std::string_view source);

}  // namespace mox::jinja
