// Jinja lexer: template source -> a flat token stream (text, tag delimiters, expression tokens).
//
// Whitespace handling follows jinja2 as HF configures it (trim_blocks=True, lstrip_blocks=True):
//  - newlines are normalised to "\n" and one trailing newline of the source is dropped;
//  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all whitespace after;
//  - lstrip_blocks: spaces/tabs between a line start and a `{%` or `{#` tag are removed (not before `{{`,
//    not with `{%+`);
//  - trim_blocks: the first newline after `%}` or `#}` is removed (not after `+%}`);
//  - comments vanish; `{% raw %}...{% endraw %}` becomes text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mox::jinja {

enum class TokenType {
    text,
    var_begin,
    var_end,
    block_begin,
    block_end,
    name,
    string,
    integer,
    floating,
    op,
    eof
};

struct Token {
    TokenType type;
    std::string text;  // text/name/op spelling, or the decoded string literal
    int64_t ival = 0;
    double fval = 0.0;
    int line = 0, col = 0;  // 1-based position in the (normalised) source
};

// Throws mox::Error "template:LINE:COL: ..." on unterminated tags, comments or strings and on
// characters that start no token.
std::vector<Token> tokenize(std::string_view source);

}  // namespace mox::jinja
