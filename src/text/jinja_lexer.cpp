#include "text/jinja_lexer.h"

#include "core/error.h"
#include "text/jinja_value.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace mox::jinja {
namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

std::string rstrip_ws(std::string_view s) {
    size_t n = s.size();
    while (n > 0 && is_space(s[n - 1])) --n;
    return std::string(s.substr(0, n));
}

class Lexer {
  public:
    explicit Lexer(std::string_view source) {
        // jinja2 splits on \r\n, \r and \n and joins with \n, dropping one trailing newline.
        src_.reserve(source.size());
        for (size_t i = 0; i < source.size(); ++i) {
            if (source[i] == '\r') {
                src_.push_back('\n');
                if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
            } else {
                src_.push_back(source[i]);
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
        line_starts_.push_back(0);
        for (size_t i = 0; i < src_.size(); ++i)
            if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }

    std::vector<Token> run() {
        size_t pos = 0;
        bool line_starting = true;
        while (pos < src_.size()) {
            size_t open = find_open(pos);
            std::string_view text(src_.data() + pos, (open == std::string::npos ? src_.size() : open) - pos);
            if (open == std::string::npos) {
                emit_text(std::string(text), pos);
                break;
            }
            const char kind = src_[open + 1];
            const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+')
                                  ? src_[open + 2]
                                  : 0;
            std::string kept(text);
            if (sign == '-') {
                kept = rstrip_ws(text);
            } else if (sign != '+' && kind != '{') {
                kept = lstrip_line(text, line_starting);
            }
            emit_text(std::move(kept), pos);
            size_t p = open + 2 + (sign ? 1 : 0);
            if (kind == '#') {
                const size_t close = src_.find("#}", p);
                if (close == std::string::npos) error(open, "unterminated comment");
                const char end_sign =
                    close > p && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
                pos = after_close(close + 2, end_sign, /*trim=*/true);
            } else if (kind == '%' && is_raw(p)) {
                pos = lex_raw(open, p);
            } else {
                pos = lex_tag(open, p, kind == '{');
            }
            line_starting = pos > 0 && src_[pos - 1] == '\n';
        }
        tokens_.push_back(Token{TokenType::eof, {}, 0, 0.0, 0, 0});
        set_pos(tokens_.back(), src_.size());
        return std::move(tokens_);
    }

  private:
    [[noreturn]] void error(size_t offset, const std::string& msg) {
        Token t{};
        set_pos(t, offset);
        fail("template:{}:{}: {}", t.line, t.col, msg);
    }

    void set_pos(Token& t, size_t offset) {
        const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
        const size_t line = size_t(it - line_starts_.begin());
        t.line = int(line);
        t.col = int(offset - line_starts_[line - 1]) + 1;
    }

    size_t find_open(size_t from) const {
        for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
            if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
                return i;
        return std::string::npos;
    }

    // lstrip_blocks: drop the spaces/tabs between the last line start and the tag, when nothing else
    // stands there. `line_starting` says whether the text itself begins at a line start.
    static std::string lstrip_line(std::string_view text, bool line_starting) {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos == 0 && !line_starting) return std::string(text);
        const std::string_view tail = text.substr(l_pos);
        if (tail.empty() || !std::all_of(tail.begin(), tail.end(), is_space)) return std::string(text);
        return std::string(text.substr(0, l_pos));
    }

    // After a closing delimiter ending at `p`: `-` eats all whitespace, `+` nothing, otherwise
    // trim_blocks eats one newline (block and comment tags only).
    size_t after_close(size_t p, char end_sign, bool trim) const {
        if (end_sign == '-') {
            while (p < src_.size() && is_space(src_[p])) ++p;
        } else if (end_sign != '+' && trim && p < src_.size() && src_[p] == '\n') {
            ++p;
        }
        return p;
    }

    void emit_text(std::string text, size_t offset) {
        if (text.empty()) return;
        Token t{TokenType::text, std::move(text), 0, 0.0, 0, 0};
        set_pos(t, offset);
        tokens_.push_back(std::move(t));
    }

    size_t skip_ws(size_t p) const {
        while (p < src_.size() && is_space(src_[p])) ++p;
        return p;
    }

    bool word_at(size_t p, std::string_view w) const {
        return src_.compare(p, w.size(), w) == 0 &&
               (p + w.size() >= src_.size() || !is_name_char(src_[p + w.size()]));
    }

    bool is_raw(size_t p) const { return word_at(skip_ws(p), "raw"); }

    // `{% raw %}` body: text up to `{% endraw %}`, nothing inside is interpreted.
    size_t lex_raw(size_t open, size_t p) {
        p = skip_ws(p) + 3;
        p = skip_ws(p);
        char sign = 0;
        if (p < src_.size() && src_[p] == '-') sign = src_[p++];
        if (src_.compare(p, 2, "%}") != 0) error(p, "expected '%}' after 'raw'");
        const size_t body = sign == '-' ? skip_ws(p + 2) : p + 2;
        for (size_t q = src_.find("{%", body); q != std::string::npos; q = src_.find("{%", q + 2)) {
            size_t r = q + 2;
            char open_sign = 0;
            if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) open_sign = src_[r++];
            r = skip_ws(r);
            if (!word_at(r, "endraw")) continue;
            r = skip_ws(r + 6);
            char end_sign = 0;
            if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_sign = src_[r++];
            if (src_.compare(r, 2, "%}") != 0) error(r, "expected '%}' after 'endraw'");
            std::string_view text(src_.data() + body, q - body);
            std::string kept = open_sign == '-'   ? rstrip_ws(text)
                               : open_sign == '+' ? std::string(text)
                                                  : lstrip_line(text, body > 0 && src_[body - 1] == '\n');
            emit_text(std::move(kept), body);
            return after_close(r + 2, end_sign, /*trim=*/true);
        }
        error(open, "unterminated raw block");
    }

    // One `{{ ... }}` or `{% ... %}`: delimiters plus the expression tokens between them.
    size_t lex_tag(size_t open, size_t p, bool is_var) {
        Token begin{
            is_var ? TokenType::var_begin : TokenType::block_begin, is_var ? "{{" : "{%", 0, 0.0, 0, 0};
        set_pos(begin, open);
        tokens_.push_back(std::move(begin));
        int depth = 0;  // brackets: a `}}` inside `{ {...}}` closes braces, not the tag
        for (;;) {
            p = skip_ws(p);
            if (p >= src_.size()) error(open, is_var ? "unterminated '{{'" : "unterminated '{%'");
            if (depth == 0) {
                const std::string_view close = is_var ? "}}" : "%}";
                char end_sign = 0;
                size_t q = p;
                if ((src_[q] == '-' || (!is_var && src_[q] == '+')) && src_.compare(q + 1, 2, close) == 0)
                    end_sign = src_[q++];
                if (src_.compare(q, 2, close) == 0) {
                    Token end{
                        is_var ? TokenType::var_end : TokenType::block_end, std::string(close), 0, 0.0, 0, 0};
                    set_pos(end, p);
                    tokens_.push_back(std::move(end));
                    return after_close(q + 2, end_sign, /*trim=*/!is_var);
                }
            }
            p = lex_token(p, depth);
        }
    }

    size_t lex_token(size_t p, int& depth) {
        Token t{};
        set_pos(t, p);
        const char c = src_[p];
        if (is_name_start(c)) {
            size_t q = p;
            while (q < src_.size() && is_name_char(src_[q])) ++q;
            t.type = TokenType::name;
            t.text = src_.substr(p, q - p);
            tokens_.push_back(std::move(t));
            return q;
        }
        if (is_digit(c)) return lex_number(p, std::move(t));
        if (c == '\'' || c == '"') return lex_string(p, std::move(t));
        static const char* const two[] = {"**", "//", "==", "!=", "<=", ">="};
        for (const char* op : two) {
            if (src_.compare(p, 2, op) == 0) {
                t.type = TokenType::op;
                t.text = op;
                tokens_.push_back(std::move(t));
                return p + 2;
            }
        }
        if (std::string_view("+-*/%~<>=.,:|()[]{}").find(c) != std::string_view::npos) {
            if (c == '(' || c == '[' || c == '{') ++depth;
            if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
            t.type = TokenType::op;
            t.text = std::string(1, c);
            tokens_.push_back(std::move(t));
            return p + 1;
        }
        error(p, fmt::format("unexpected character '{}'", c));
    }

    size_t lex_number(size_t p, Token t) {
        auto digits = [&](size_t q) {
            while (q < src_.size() &&
                   (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1]))))
                ++q;
            return q;
        };
        size_t q = digits(p);
        bool is_float = false;
        // A float never follows a '.', so `x.0.1` is two integer subscripts (jinja2's rule).
        const bool after_dot = p > 0 && src_[p - 1] == '.';
        if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
            q = digits(q + 1);
            is_float = true;
        }
        if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
            size_t r = q + 1;
            if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
            if (r < src_.size() && is_digit(src_[r])) {
                q = digits(r);
                is_float = true;
            }
        }
        std::string text;
        for (size_t i = p; i < q; ++i)
            if (src_[i] != '_') text.push_back(src_[i]);
        if (is_float) {
            t.type = TokenType::floating;
            t.fval = std::strtod(text.c_str(), nullptr);
        } else {
            t.type = TokenType::integer;
            const auto r = std::from_chars(text.data(), text.data() + text.size(), t.ival);
            if (r.ec != std::errc()) error(p, "integer literal out of range");
        }
        t.text = std::move(text);
        tokens_.push_back(std::move(t));
        return q;
    }

    // String literals decode Python's escapes: \n \t \r \\ \' \" \a \b \f \v, octal, \xHH, \uHHHH,
    // \UHHHHHHHH, and backslash-newline; an unknown escape keeps its backslash.
    size_t lex_string(size_t p, Token t) {
        const char quote = src_[p];
        std::u32string out;
        size_t q = p + 1;
        auto hex = [&](size_t at, int n) -> char32_t {
            char32_t v = 0;
            for (int i = 0; i < n; ++i) {
                if (at + size_t(i) >= src_.size() ||
                    !std::isxdigit(static_cast<unsigned char>(src_[at + size_t(i)])))
                    error(at, "truncated escape in string literal");
                const char h = src_[at + size_t(i)];
                v = v * 16 + char32_t(is_digit(h) ? h - '0' : std::tolower(h) - 'a' + 10);
            }
            return v;
        };
        size_t chunk = q;
        auto flush = [&](size_t until) {
            const std::u32string s = utf8_decode(std::string_view(src_.data() + chunk, until - chunk));
            out += s;
        };
        for (;;) {
            if (q >= src_.size()) error(p, "unterminated string literal");
            const char c = src_[q];
            if (c == quote) break;
            if (c != '\\') {
                ++q;
                continue;
            }
            flush(q);
            if (q + 1 >= src_.size()) error(p, "unterminated string literal");
            const char e = src_[q + 1];
            q += 2;
            switch (e) {
                case 'n':
                    out.push_back(U'\n');
                    break;
                case 't':
                    out.push_back(U'\t');
                    break;
                case 'r':
                    out.push_back(U'\r');
                    break;
                case 'a':
                    out.push_back(7);
                    break;
                case 'b':
                    out.push_back(8);
                    break;
                case 'f':
                    out.push_back(12);
                    break;
                case 'v':
                    out.push_back(11);
                    break;
                case '\\':
                    out.push_back(U'\\');
                    break;
                case '\'':
                    out.push_back(U'\'');
                    break;
                case '"':
                    out.push_back(U'"');
                    break;
                case '\n':
                    break;  // line continuation
                case 'x':
                    out.push_back(hex(q, 2)), q += 2;
                    break;
                case 'u':
                    out.push_back(hex(q, 4)), q += 4;
                    break;
                case 'U': {
                    const char32_t v = hex(q, 8);
                    if (v > 0x10FFFF) error(q, "invalid \\U escape");
                    out.push_back(v);
                    q += 8;
                    break;
                }
                default:
                    if (e >= '0' && e <= '7') {
                        char32_t v = char32_t(e - '0');
                        for (int i = 0; i < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7';
                             ++i, ++q)
                            v = v * 8 + char32_t(src_[q] - '0');
                        out.push_back(v);
                    } else {
                        out.push_back(U'\\');
                        q -= 1;  // the character after the backslash is kept as written
                    }
            }
            chunk = q;
        }
        flush(q);
        t.type = TokenType::string;
        t.text = utf8_encode(out);
        tokens_.push_back(std::move(t));
        return q + 1;
    }

    std::string src_;
    std::vector<size_t> line_starts_;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
    return Lexer(source).run();
}

}  // namespace mox::jinja
