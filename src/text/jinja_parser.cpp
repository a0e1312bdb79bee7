#include "text/jinja_parser.h"

#include "core/error.h"
#include "text/jinja_lexer.h"

#include <initializer_list>

namespace mox::jinja {
namespace {

// Nesting bound for brackets, unary chains and blocks: deep enough for any real template, shallow
// enough that hostile input cannot overflow the stack (also under ASan).
constexpr int kMaxDepth = 100;

class Parser {
  public:
    explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

    std::vector<StmtPtr> parse() {
        std::string end;
        auto body = parse_body({}, end);
        return body;
    }

  private:
    // --- token helpers ---
    const Token& cur() const { return toks_[pos_]; }
    const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
    bool is_op(std::string_view op) const { return cur().type == TokenType::op && cur().text == op; }
    bool is_name(std::string_view n) const { return cur().type == TokenType::name && cur().text == n; }
    bool accept_op(std::string_view op) {
        if (!is_op(op)) return false;
        ++pos_;
        return true;
    }
    bool accept_name(std::string_view n) {
        if (!is_name(n)) return false;
        ++pos_;
        return true;
    }
    [[noreturn]] void error(const std::string& msg) const {
        fail("template:{}:{}: {}", cur().line, cur().col, msg);
    }
    static std::string describe(const Token& t) {
        switch (t.type) {
            case TokenType::eof:
                return "end of template";
            case TokenType::var_end:
                return "'}}'";
            case TokenType::block_end:
                return "'%}'";
            case TokenType::text:
                return "text";
            default:
                return "'" + t.text + "'";
        }
    }
    void expect_op(std::string_view op) {
        if (!accept_op(op)) error(fmt::format("expected '{}', got {}", op, describe(cur())));
    }
    std::string expect_name() {
        if (cur().type != TokenType::name) error(fmt::format("expected a name, got {}", describe(cur())));
        return toks_[pos_++].text;
    }
    void expect_block_end() {
        if (cur().type != TokenType::block_end) error(fmt::format("expected '%}}', got {}", describe(cur())));
        ++pos_;
    }

    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxDepth) p.error("template nested too deeply");
        }
        ~DepthGuard() { --p.depth_; }
    };

    ExprPtr node(ExprKind kind, const Token& at) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = at.line;
        e->col = at.col;
        return e;
    }

    // --- statements ---

    // Parses statements until a block tag named in `ends` (returned in `end`, the tag consumed up to
    // its name) or, when `ends` is empty, the end of the template.
    std::vector<StmtPtr> parse_body(std::initializer_list<std::string_view> ends, std::string& end) {
        DepthGuard guard(*this);
        std::vector<StmtPtr> out;
        for (;;) {
            const Token& t = cur();
            if (t.type == TokenType::eof) {
                if (ends.size() == 0) return out;
                std::string want;
                for (auto e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
                error(fmt::format("unexpected end of template, expected {}", want));
            }
            if (t.type == TokenType::text) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::text;
                s->text = t.text;
                s->line = t.line;
                s->col = t.col;
                out.push_back(std::move(s));
                ++pos_;
            } else if (t.type == TokenType::var_begin) {
                ++pos_;
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::output;
                s->line = t.line;
                s->col = t.col;
                s->expr = parse_tuple(true);
                if (cur().type != TokenType::var_end)
                    error(fmt::format("expected '}}}}', got {}", describe(cur())));
                ++pos_;
                out.push_back(std::move(s));
            } else if (t.type == TokenType::block_begin) {
                const Token& tag = peek();
                if (tag.type != TokenType::name) {
                    ++pos_;
                    error("expected a tag name after '{%'");
                }
                for (auto e : ends) {
                    if (tag.text == e) {
                        pos_ += 2;
                        end = tag.text;
                        return out;
                    }
                }
                ++pos_;
                out.push_back(parse_statement());
            } else {
                error(fmt::format("unexpected {}", describe(t)));
            }
        }
    }

    StmtPtr parse_statement() {
        const Token& tag = cur();
        auto s = std::make_unique<Stmt>();
        s->line = tag.line;
        s->col = tag.col;
        const std::string name = tag.text;
        ++pos_;
        std::string end;
        if (name == "if") {
            parse_if(*s);
        } else if (name == "for") {
            s->kind = StmtKind::for_;
            do {
                if (accept_op("(")) {
                    do s->names.push_back(expect_name());
                    while (accept_op(","));
                    expect_op(")");
                } else {
                    s->names.push_back(expect_name());
                }
            } while (accept_op(","));
            if (!accept_name("in")) error("expected 'in' in for loop");
            s->expr = parse_tuple(false);
            if (accept_name("if")) s->filter = parse_expression(true);
            if (is_name("recursive")) error("recursive for loops are not supported");
            expect_block_end();
            s->body = parse_body({"endfor", "else"}, end);
            if (end == "else") {
                expect_block_end();
                s->else_body = parse_body({"endfor"}, end);
            }
            expect_block_end();
        } else if (name == "set") {
            s->names.push_back(expect_name());
            if (accept_op(".")) {
                s->attr = expect_name();
            } else {
                while (accept_op(",")) s->names.push_back(expect_name());
            }
            if (accept_op("=")) {
                s->kind = StmtKind::set;
                s->expr = parse_tuple(true);
                expect_block_end();
            } else {
                if (s->names.size() != 1 || !s->attr.empty()) error("a block set assigns a single name");
                s->kind = StmtKind::set_block;
                expect_block_end();
                s->body = parse_body({"endset"}, end);
                expect_block_end();
            }
        } else if (name == "macro") {
            s->kind = StmtKind::macro;
            s->text = expect_name();
            expect_op("(");
            while (!is_op(")")) {
                s->names.push_back(expect_name());
                s->defaults.push_back(accept_op("=") ? parse_expression(true) : nullptr);
                if (!accept_op(",")) break;
            }
            expect_op(")");
            expect_block_end();
            s->body = parse_body({"endmacro"}, end);
            if (cur().type == TokenType::name && cur().text == s->text) ++pos_;
            expect_block_end();
        } else if (name == "filter") {
            s->kind = StmtKind::filter;
            ExprPtr chain = node(ExprKind::literal, cur());
            do chain = parse_filter(std::move(chain));
            while (accept_op("|"));
            s->expr = std::move(chain);
            expect_block_end();
            s->body = parse_body({"endfilter"}, end);
            expect_block_end();
        } else if (name == "generation") {
            s->kind = StmtKind::block;
            expect_block_end();
            s->body = parse_body({"endgeneration"}, end);
            expect_block_end();
        } else if (name == "break" || name == "continue") {
            s->kind = name == "break" ? StmtKind::break_ : StmtKind::continue_;
            expect_block_end();
        } else {
            --pos_;
            error(fmt::format("unknown or misplaced tag '{}'", name));
        }
        return s;
    }

    void parse_if(Stmt& s) {
        s.kind = StmtKind::if_;
        s.expr = parse_tuple(true);
        expect_block_end();
        std::string end;
        s.body = parse_body({"elif", "else", "endif"}, end);
        if (end == "elif") {
            auto inner = std::make_unique<Stmt>();
            inner->line = toks_[pos_ - 1].line;
            inner->col = toks_[pos_ - 1].col;
            parse_if(*inner);  // consumes through the shared endif
            s.else_body.push_back(std::move(inner));
            return;
        }
        if (end == "else") {
            expect_block_end();
            s.else_body = parse_body({"endif"}, end);
        }
        expect_block_end();
    }

    // --- expressions ---

    // An expression, or an implicit tuple `a, b` where jinja2 allows one.
    ExprPtr parse_tuple(bool with_condexpr) {
        const Token& start = cur();
        ExprPtr first = parse_expression(with_condexpr);
        if (!is_op(",")) return first;
        auto t = node(ExprKind::tuple, start);
        t->args.push_back(std::move(first));
        while (accept_op(",")) {
            if (cur().type == TokenType::block_end || cur().type == TokenType::var_end) break;
            t->args.push_back(parse_expression(with_condexpr));
        }
        return t;
    }

    ExprPtr parse_expression(bool with_condexpr) {
        DepthGuard guard(*this);
        if (!with_condexpr) return parse_or();
        ExprPtr expr = parse_or();
        while (is_name("if")) {
            const Token& at = cur();
            ++pos_;
            auto c = node(ExprKind::cond, at);
            ExprPtr test = parse_or();
            ExprPtr otherwise = accept_name("else") ? parse_expression(true) : nullptr;
            c->args.push_back(std::move(expr));
            c->args.push_back(std::move(test));
            c->args.push_back(std::move(otherwise));
            expr = std::move(c);
        }
        return expr;
    }

    ExprPtr parse_or() {
        ExprPtr left = parse_and();
        while (is_name("or")) {
            auto n = node(ExprKind::or_, cur());
            ++pos_;
            n->args.push_back(std::move(left));
            n->args.push_back(parse_and());
            left = std::move(n);
        }
        return left;
    }

    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        while (is_name("and")) {
            auto n = node(ExprKind::and_, cur());
            ++pos_;
            n->args.push_back(std::move(left));
            n->args.push_back(parse_not());
            left = std::move(n);
        }
        return left;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            DepthGuard guard(*this);
            auto n = node(ExprKind::not_, cur());
            ++pos_;
            n->args.push_back(parse_not());
            return n;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const Token& start = cur();
        ExprPtr first = parse_math1();
        ExprPtr cmp;
        for (;;) {
            std::string op;
            if (cur().type == TokenType::op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
                 cur().text == "<=" || cur().text == ">=")) {
                op = cur().text;
                ++pos_;
            } else if (is_name("in")) {
                op = "in";
                ++pos_;
            } else if (is_name("not") && peek().type == TokenType::name && peek().text == "in") {
                op = "not in";
                pos_ += 2;
            } else {
                break;
            }
            if (!cmp) {
                cmp = node(ExprKind::compare, start);
                cmp->args.push_back(std::move(first));
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(first);
    }

    ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, const Token& at) {
        auto n = node(ExprKind::binary, at);
        n->name = std::move(op);
        n->args.push_back(std::move(a));
        n->args.push_back(std::move(b));
        return n;
    }

    ExprPtr parse_math1() {
        ExprPtr left = parse_concat();
        while (is_op("+") || is_op("-")) {
            const Token at = cur();
            ++pos_;
            left = binary(at.text, std::move(left), parse_concat(), at);
        }
        return left;
    }

    ExprPtr parse_concat() {
        ExprPtr left = parse_math2();
        while (is_op("~")) {
            const Token at = cur();
            ++pos_;
            left = binary("~", std::move(left), parse_math2(), at);
        }
        return left;
    }

    ExprPtr parse_math2() {
        ExprPtr left = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token at = cur();
            ++pos_;
            left = binary(at.text, std::move(left), parse_pow(), at);
        }
        return left;
    }

    ExprPtr parse_pow() {
        ExprPtr left = parse_unary(true);
        while (is_op("**")) {
            const Token at = cur();
            ++pos_;
            left = binary("**", std::move(left), parse_unary(true), at);
        }
        return left;
    }

    ExprPtr parse_unary(bool with_filter) {
        DepthGuard guard(*this);
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            e = node(ExprKind::unary, cur());
            e->name = cur().text;
            ++pos_;
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        switch (t.type) {
            case TokenType::name: {
                ++pos_;
                if (t.text == "true" || t.text == "True") return literal(Value(true), t);
                if (t.text == "false" || t.text == "False") return literal(Value(false), t);
                if (t.text == "none" || t.text == "None") return literal(Value::none(), t);
                auto n = node(ExprKind::name, t);
                n->name = t.text;
                return n;
            }
            case TokenType::string: {
                std::string s;
                while (cur().type == TokenType::string) s += toks_[pos_++].text;  // 'a' 'b' == 'ab'
                return literal(Value(std::move(s)), t);
            }
            case TokenType::integer:
                ++pos_;
                return literal(Value(t.ival), t);
            case TokenType::floating:
                ++pos_;
                return literal(Value(t.fval), t);
            case TokenType::op:
                if (t.text == "(") {
                    ++pos_;
                    if (accept_op(")")) return node(ExprKind::tuple, t);
                    ExprPtr first = parse_expression(true);
                    if (!is_op(",")) {
                        expect_op(")");
                        return first;
                    }
                    auto tup = node(ExprKind::tuple, t);
                    tup->args.push_back(std::move(first));
                    while (accept_op(",")) {
                        if (is_op(")")) break;
                        tup->args.push_back(parse_expression(true));
                    }
                    expect_op(")");
                    return tup;
                }
                if (t.text == "[") {
                    ++pos_;
                    auto l = node(ExprKind::list, t);
                    while (!is_op("]")) {
                        l->args.push_back(parse_expression(true));
                        if (!accept_op(",")) break;
                    }
                    expect_op("]");
                    return l;
                }
                if (t.text == "{") {
                    ++pos_;
                    auto d = node(ExprKind::dict, t);
                    while (!is_op("}")) {
                        d->args.push_back(parse_expression(true));
                        expect_op(":");
                        d->args.push_back(parse_expression(true));
                        if (!accept_op(",")) break;
                    }
                    expect_op("}");
                    return d;
                }
                break;
            default:
                break;
        }
        error(fmt::format("unexpected {}", describe(t)));
    }

    ExprPtr literal(Value v, const Token& at) {
        auto n = node(ExprKind::literal, at);
        n->value = std::move(v);
        return n;
    }

    ExprPtr parse_postfix(ExprPtr e) {
        for (;;) {
            const Token& t = cur();
            if (is_op(".")) {
                ++pos_;
                if (cur().type == TokenType::name) {
                    auto a = node(ExprKind::attr, t);
                    a->name = toks_[pos_++].text;
                    a->args.push_back(std::move(e));
                    e = std::move(a);
                } else if (cur().type == TokenType::integer) {
                    auto it = node(ExprKind::item, t);
                    it->args.push_back(std::move(e));
                    it->args.push_back(literal(Value(cur().ival), cur()));
                    ++pos_;
                    e = std::move(it);
                } else {
                    error("expected a name or number after '.'");
                }
            } else if (is_op("[")) {
                ++pos_;
                e = parse_subscript(std::move(e), t);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr obj, const Token& at) {
        DepthGuard guard(*this);
        ExprPtr parts[3];
        int colons = 0;
        if (!is_op(":")) parts[0] = parse_expression(true);
        while (colons < 2 && accept_op(":")) {
            ++colons;
            if (!is_op(":") && !is_op("]")) parts[colons] = parse_expression(true);
        }
        expect_op("]");
        if (colons == 0) {
            auto it = node(ExprKind::item, at);
            it->args.push_back(std::move(obj));
            it->args.push_back(std::move(parts[0]));
            return it;
        }
        auto s = node(ExprKind::slice, at);
        s->args.push_back(std::move(obj));
        for (auto& p : parts) s->args.push_back(std::move(p));
        return s;
    }

    // `(a, b, k=v)` into n->args (after whatever is already there) and n->kwargs.
    void parse_args(Expr& n) {
        expect_op("(");
        while (!is_op(")")) {
            if (cur().type == TokenType::name && peek().type == TokenType::op && peek().text == "=") {
                std::string key = toks_[pos_].text;
                pos_ += 2;
                n.kwargs.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (!n.kwargs.empty()) error("positional argument after keyword argument");
                n.args.push_back(parse_expression(true));
            }
            if (!accept_op(",")) break;
        }
        expect_op(")");
    }

    ExprPtr parse_call(ExprPtr callee) {
        DepthGuard guard(*this);
        auto c = node(ExprKind::call, cur());
        c->args.push_back(std::move(callee));
        parse_args(*c);
        return c;
    }

    ExprPtr parse_filter(ExprPtr subject) {
        auto f = node(ExprKind::filter, cur());
        f->name = expect_name();
        while (accept_op(".")) f->name += "." + expect_name();
        f->args.push_back(std::move(subject));
        if (is_op("(")) parse_args(*f);
        return f;
    }

    ExprPtr parse_filter_expr(ExprPtr e) {
        for (;;) {
            if (accept_op("|")) {
                e = parse_filter(std::move(e));
            } else if (is_name("is")) {
                auto t = node(ExprKind::test, cur());
                ++pos_;
                t->negated = accept_name("not");
                t->name = expect_name();
                t->args.push_back(std::move(e));
                const Token& n = cur();
                if (is_op("(")) {
                    parse_args(*t);
                } else if ((n.type == TokenType::name && n.text != "else" && n.text != "or" &&
                            n.text != "and") ||
                           n.type == TokenType::string || n.type == TokenType::integer ||
                           n.type == TokenType::floating || is_op("[") || is_op("{")) {
                    // jinja2 takes one bare argument: `x is divisibleby 3`, `x is sameas false`.
                    if (is_name("is")) error("tests cannot be chained with 'is'");
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    std::vector<Token> toks_;
    size_t pos_ = 0;
    int depth_ = 0;
};

}  // namespace

std::vector<StmtPtr> parse_template(std::string_view source) {
    return Parser(tokenize(source)).parse();
}

}  // namespace mox::jinja
