#include "text/jinja_template.h"

#include "core/error.h"
#include "text/jinja_builtins.h"

#include <algorithm>
#include <memory>

namespace mox::jinja {
namespace {

// An error that already names its template position; outer nodes pass it through unchanged.
class LocatedError : public Error {
  public:
    using Error::Error;
};

template <typename F>
auto at_position(int line, int col, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const LocatedError&) {
        throw;
    } catch (const Error& e) {
        throw LocatedError(fmt::format("template:{}:{}: {}", line, col, e.what()));
    }
}

struct Scope {
    std::shared_ptr<Scope> parent;
    std::vector<std::pair<std::string, Value>> vars;

    const Value* find(std::string_view name) const {
        for (const Scope* s = this; s; s = s->parent.get())
            for (const auto& [k, v] : s->vars)
                if (k == name) return &v;
        return nullptr;
    }
    void set(const std::string& name, Value v) {
        for (auto& [k, x] : vars) {
            if (k == name) {
                x = std::move(v);
                return;
            }
        }
        vars.emplace_back(name, std::move(v));
    }
};

class Renderer {
  public:
    Renderer(const Value& context, uint64_t max_steps)
        : scope_(std::make_shared<Scope>()), out_(&result_), max_steps_(max_steps) {
        if (context.is_dict())
            for (const auto& [k, v] : context.as_dict().items)
                if (k.is_string()) scope_->set(k.as_string(), v);
    }

    std::string run(const std::vector<StmtPtr>& body) {
        if (exec_body(body) != Flow::normal) fail("template: 'break' or 'continue' outside of a loop");
        return std::move(result_);
    }

  private:
    enum class Flow { normal, break_, continue_ };

    // Swaps the current scope and output buffer for a nested render, restoring them on exit.
    struct Redirect {
        Renderer& r;
        std::shared_ptr<Scope> saved_scope;
        std::string* saved_out;
        Redirect(Renderer& renderer, std::shared_ptr<Scope> scope, std::string* out)
            : r(renderer), saved_scope(std::move(renderer.scope_)), saved_out(renderer.out_) {
            r.scope_ = std::move(scope);
            if (out) r.out_ = out;
        }
        ~Redirect() {
            r.scope_ = std::move(saved_scope);
            r.out_ = saved_out;
        }
    };

    void tick() {
        if (++steps_ > max_steps_) fail("rendering exceeded {} steps", max_steps_);
    }

    void emit(const std::string& s) {
        out_->append(s);
        if (out_->size() > kMaxStringBytes) fail("template output exceeds {} bytes", kMaxStringBytes);
    }

    std::shared_ptr<Scope> child_scope() {
        auto s = std::make_shared<Scope>();
        s->parent = scope_;
        return s;
    }

    // --- statements ---

    Flow exec_body(const std::vector<StmtPtr>& body) {
        for (const StmtPtr& s : body) {
            const Flow f = exec(*s);
            if (f != Flow::normal) return f;
        }
        return Flow::normal;
    }

    Flow exec(const Stmt& s) {
        tick();
        return at_position(s.line, s.col, [&] { return exec_inner(s); });
    }

    Flow exec_inner(const Stmt& s) {
        switch (s.kind) {
            case StmtKind::text:
                emit(s.text);
                return Flow::normal;
            case StmtKind::output:
                emit(to_str(eval(*s.expr)));
                return Flow::normal;
            case StmtKind::if_:
                return exec_body(truthy(eval(*s.expr)) ? s.body : s.else_body);
            case StmtKind::for_:
                return exec_for(s);
            case StmtKind::set: {
                Value v = eval(*s.expr);
                if (!s.attr.empty()) {
                    const Value* target = scope_->find(s.names[0]);
                    if (!target || !target->is_namespace())
                        fail("cannot assign attribute '{}' on '{}': not a namespace", s.attr, s.names[0]);
                    Value ns = *target;  // shares the namespace object
                    ns.dict_mut().set(Value(s.attr), std::move(v));
                } else {
                    assign(s.names, std::move(v));
                }
                return Flow::normal;
            }
            case StmtKind::set_block: {
                std::string buf;
                {
                    Redirect r(*this, scope_, &buf);
                    if (exec_body(s.body) != Flow::normal) fail("'break' or 'continue' outside of a loop");
                }
                scope_->set(s.names[0], Value(std::move(buf)));
                return Flow::normal;
            }
            case StmtKind::macro:
                scope_->set(s.text, make_macro(s));
                return Flow::normal;
            case StmtKind::filter: {
                std::string buf;
                {
                    Redirect r(*this, scope_, &buf);
                    if (exec_body(s.body) != Flow::normal) fail("'break' or 'continue' outside of a loop");
                }
                emit(to_str(eval_filter_chain(*s.expr, Value(std::move(buf)))));
                return Flow::normal;
            }
            case StmtKind::block:
                return exec_body(s.body);
            case StmtKind::break_:
                return Flow::break_;
            case StmtKind::continue_:
                return Flow::continue_;
        }
        return Flow::normal;
    }

    // `a, b = value` unpacks a sequence of exactly that length, as Python does.
    void assign(const std::vector<std::string>& names, Value v) {
        if (names.size() == 1) {
            scope_->set(names[0], std::move(v));
            return;
        }
        const std::vector<Value> items = iterate(v);
        if (items.size() != names.size())
            fail("cannot unpack {} values into {} names", items.size(), names.size());
        for (size_t i = 0; i < names.size(); ++i) scope_->set(names[i], items[i]);
    }

    Flow exec_for(const Stmt& s) {
        std::vector<Value> items = iterate(eval(*s.expr));
        if (s.filter) {  // `for x in xs if cond`: loop.* counts only the items that pass
            std::vector<Value> kept;
            for (Value& item : items) {
                Redirect r(*this, child_scope(), nullptr);
                assign(s.names, item);
                if (truthy(eval(*s.filter))) kept.push_back(std::move(item));
            }
            items = std::move(kept);
        }
        if (items.empty()) {
            Redirect r(*this, child_scope(), nullptr);
            return exec_body(s.else_body) == Flow::normal ? Flow::normal : fail_flow();
        }
        const int64_t n = int64_t(items.size());
        for (int64_t i = 0; i < n; ++i) {
            tick();
            Redirect r(*this, child_scope(), nullptr);
            assign(s.names, items[size_t(i)]);
            Value loop = Value::dict();
            auto& d = loop.dict_mut().items;  // fresh keys: append without lookups
            d.reserve(12);
            d.emplace_back(Value("index0"), Value(i));
            d.emplace_back(Value("index"), Value(i + 1));
            d.emplace_back(Value("revindex0"), Value(n - i - 1));
            d.emplace_back(Value("revindex"), Value(n - i));
            d.emplace_back(Value("first"), Value(i == 0));
            d.emplace_back(Value("last"), Value(i == n - 1));
            d.emplace_back(Value("length"), Value(n));
            d.emplace_back(Value("depth"), Value(1));
            d.emplace_back(Value("depth0"), Value(0));
            d.emplace_back(Value("previtem"),
                           i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item"));
            d.emplace_back(Value("nextitem"),
                           i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item"));
            d.emplace_back(Value("cycle"), Value::function("cycle", [i](CallArgs& a) {
                               if (a.pos.empty()) fail("no items for cycling given");
                               return a.pos[size_t(i) % a.pos.size()];
                           }));
            scope_->set("loop", std::move(loop));
            if (exec_body(s.body) == Flow::break_) break;
        }
        return Flow::normal;
    }

    static Flow fail_flow() { fail("'break' or 'continue' outside of a loop"); }

    Value make_macro(const Stmt& m) {
        // A weak reference: the macro is stored in that very scope, and a strong one would make a
        // cycle (scope -> macro -> scope) that is never freed.
        std::weak_ptr<Scope> defined_in = scope_;
        return Value::function(
            m.text, [this, &m, defined_in](CallArgs& args) { return call_macro(m, defined_in, args); });
    }

    Value call_macro(const Stmt& m, const std::weak_ptr<Scope>& defined_in, CallArgs& args) {
        if (call_depth_ >= kMaxCallDepth)
            fail("macro '{}': calls nested deeper than {}", m.text, kMaxCallDepth);
        auto frame = std::make_shared<Scope>();
        frame->parent = defined_in.lock();
        if (!frame->parent) fail("macro '{}' called after the block that defined it ended", m.text);
        std::vector<bool> bound(m.names.size(), false);
        std::vector<Value> extra;
        for (size_t i = 0; i < args.pos.size(); ++i) {
            if (i < m.names.size()) {
                frame->set(m.names[i], args.pos[i]);
                bound[i] = true;
            } else {
                extra.push_back(args.pos[i]);
            }
        }
        Value kwargs = Value::dict();
        for (auto& [k, v] : args.kw) {
            const auto it = std::find(m.names.begin(), m.names.end(), k);
            if (it == m.names.end()) {
                kwargs.dict_mut().set(Value(k), v);
                continue;
            }
            const size_t idx = size_t(it - m.names.begin());
            if (bound[idx]) fail("macro '{}' got multiple values for argument '{}'", m.text, k);
            frame->set(k, v);
            bound[idx] = true;
        }
        frame->set("varargs", Value::list(std::move(extra), true));
        frame->set("kwargs", std::move(kwargs));
        std::string buf;
        Redirect r(*this, frame, &buf);
        ++call_depth_;
        struct DepthRestore {
            int& d;
            ~DepthRestore() { --d; }
        } restore{call_depth_};
        // Defaults are evaluated at call time inside the macro's scope, like jinja2's.
        for (size_t i = 0; i < m.names.size(); ++i)
            if (!bound[i])
                frame->set(m.names[i], m.defaults[i]
                                           ? eval(*m.defaults[i])
                                           : Value::undefined(fmt::format("'{}' is undefined", m.names[i])));
        if (exec_body(m.body) != Flow::normal) fail("'break' or 'continue' outside of a loop");
        return Value(std::move(buf));
    }

    // --- expressions ---

    Value eval(const Expr& e) {
        tick();
        return at_position(e.line, e.col, [&] { return eval_inner(e); });
    }

    CallArgs eval_args(const Expr& e, size_t first) {
        CallArgs a;
        for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
        for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v));
        return a;
    }

    Value lookup(const std::string& name) {
        if (const Value* v = scope_->find(name)) return *v;
        return global_function(name);
    }

    Value eval_filter_chain(const Expr& e, const Value& body) {
        if (e.kind != ExprKind::filter) return body;
        Value subject = eval_filter_chain(*e.args[0], body);
        CallArgs a = eval_args(e, 1);
        return apply_filter(e.name, subject, a);
    }

    Value eval_inner(const Expr& e) {
        switch (e.kind) {
            case ExprKind::literal:
                return e.value;
            case ExprKind::name:
                return lookup(e.name);
            case ExprKind::list:
            case ExprKind::tuple: {
                std::vector<Value> items;
                for (const auto& a : e.args) items.push_back(eval(*a));
                return Value::list(std::move(items), e.kind == ExprKind::tuple);
            }
            case ExprKind::dict: {
                Value d = Value::dict();
                for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                    Value k = eval(*e.args[i]);
                    d.dict_mut().set(std::move(k), eval(*e.args[i + 1]));
                }
                return d;
            }
            case ExprKind::attr:
                return get_attribute(eval(*e.args[0]), e.name);
            case ExprKind::item: {
                Value obj = eval(*e.args[0]);
                return get_item(obj, eval(*e.args[1]));
            }
            case ExprKind::slice: {
                Value obj = eval(*e.args[0]);
                Value parts[3];
                for (int i = 0; i < 3; ++i)
                    parts[i] = e.args[size_t(i) + 1] ? eval(*e.args[size_t(i) + 1]) : Value::none();
                return get_slice(obj, parts[0], parts[1], parts[2]);
            }
            case ExprKind::call: {
                Value callee = eval(*e.args[0]);
                CallArgs a = eval_args(e, 1);
                if (callee.is_undefined()) fail("{}", callee.undefined_why());
                if (!callee.is_function()) fail("'{}' object is not callable", type_name(callee));
                return callee.as_function().fn(a);
            }
            case ExprKind::filter: {
                Value subject = eval(*e.args[0]);
                CallArgs a = eval_args(e, 1);
                return apply_filter(e.name, subject, a);
            }
            case ExprKind::test: {
                Value subject = eval(*e.args[0]);
                CallArgs a = eval_args(e, 1);
                return Value(apply_test(e.name, subject, a) != e.negated);
            }
            case ExprKind::unary:
                return unary_op(e.name, eval(*e.args[0]));
            case ExprKind::binary: {
                Value a = eval(*e.args[0]);
                Value b = eval(*e.args[1]);
                if (e.name == "~") {
                    std::string s = to_str(a) + to_str(b);
                    if (s.size() > kMaxStringBytes) fail("result too large");
                    return Value(std::move(s));
                }
                return binary_op(e.name, a, b);
            }
            case ExprKind::compare: {
                Value left = eval(*e.args[0]);
                for (size_t i = 0; i < e.ops.size(); ++i) {
                    Value right = eval(*e.args[i + 1]);
                    const std::string& op = e.ops[i];
                    bool ok;
                    if (op == "==")
                        ok = equal(left, right);
                    else if (op == "!=")
                        ok = !equal(left, right);
                    else if (op == "in")
                        ok = contains(right, left);
                    else if (op == "not in")
                        ok = !contains(right, left);
                    else {
                        const int c = compare(left, right);
                        ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
                    }
                    if (!ok) return Value(false);
                    left = std::move(right);
                }
                return Value(true);
            }
            case ExprKind::and_: {
                Value a = eval(*e.args[0]);
                return truthy(a) ? eval(*e.args[1]) : a;
            }
            case ExprKind::or_: {
                Value a = eval(*e.args[0]);
                return truthy(a) ? a : eval(*e.args[1]);
            }
            case ExprKind::not_:
                return Value(!truthy(eval(*e.args[0])));
            case ExprKind::cond:
                if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
                return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if had no else branch");
        }
        return Value::undefined();
    }

    std::shared_ptr<Scope> scope_;
    std::string result_;
    std::string* out_;
    uint64_t max_steps_;
    uint64_t steps_ = 0;
    int call_depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source) : body_(parse_template(source)) {}

std::string Template::render(const Value& context, uint64_t max_steps) const {
    return Renderer(context, max_steps).run(body_);
}

}  // namespace mox::jinja
