// Jinja interpreter unit tests. Expected strings are what Python's jinja2 renders for the same source
// with HF's settings (trim_blocks, lstrip_blocks, loopcontrols); tests/py/test_chat_template.py checks
// whole real templates against jinja2 itself.
#include "core/error.h"
#include "text/chat_template.h"
#include "text/jinja_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace mox::jinja {
namespace {

std::string render(std::string_view src, std::string_view context_json = "{}") {
    return Template(src).render(text::parse_json_value(context_json));
}

// The message of the mox::Error that rendering throws ("" when it does not throw).
std::string error_of(std::string_view src, std::string_view context_json = "{}") {
    try {
        render(src, context_json);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
    EXPECT_EQ(render("a  {% if true %}\n  x\n  {% endif %}\nb"), "a    x\nb");
    EXPECT_EQ(render("  {# c #}\nx"), "x");
    EXPECT_EQ(render("{%- for x in [1] -%}\n  {{ x }}  \n{%- endfor %}"), "1");
    EXPECT_EQ(render("x {#- c -#} y"), "xy");
    // `+` keeps what lstrip/trim would remove.
    EXPECT_EQ(render("{% if true %}a{% else %}b{% endif %}  \n  {%+ if true %}c{% endif +%}\nd"),
              "a  \n  c\nd");
    // Variables are never lstripped or trimmed; `-}}` strips after.
    EXPECT_EQ(render("  {{ 1 }}\n{{ 2 -}}\n\n3"), "  1\n23");
    // CRLF becomes LF and one trailing newline of the source is dropped.
    EXPECT_EQ(render("a\r\nb\n"), "a\nb");
}

TEST(JinjaWhitespace, RawBlocks) {
    EXPECT_EQ(render("{% raw %}{{ a }}{% endraw %}"), "{{ a }}");
    EXPECT_EQ(render("  {% raw %}\n{{ a }}\n  {% endraw %}\nz"), "\n{{ a }}\nz");
}

TEST(JinjaScopes, LoopsMacrosAndNamespaces) {
    // A set inside a loop body is local to one iteration.
    EXPECT_EQ(render("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i + 10 %}{% endfor %}{{ x }}"),
              "0000");
    EXPECT_EQ(render("{% for i in range(3) %}{% if i > 0 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}"),
              "");
    // if-blocks do not open scopes.
    EXPECT_EQ(render("{% if true %}{% set q = 3 %}{% endif %}{{ q }}"), "3");
    // namespace() is how state leaves a loop.
    EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% endfor "
                     "%}{{ ns.n }}"),
              "6");
    // A macro sees its defining scope as it is at call time, not the caller's loop scope.
    EXPECT_EQ(
        render("{% macro m() %}{{ v }}{% endmacro %}{% set v = 1 %}{{ m() }}{% for i in [1] %}{% set v = 2 %}"
               "{{ m() }}{% endfor %}"),
        "11");
    EXPECT_EQ(
        render("{% for i in [1] %}{% set v = 2 %}{% macro m() %}{{ v }}{% endmacro %}{{ m() }}{% endfor %}"),
        "2");
    EXPECT_EQ(
        render("{% macro m(a, b=2) %}{{ a }}-{{ b }}-{{ varargs }}-{{ kwargs }}{% endmacro %}{{ m(1) }} "
               "{{ m(1, 3, 4, k=5) }}"),
        "1-2-()-{} 1-3-(4,)-{'k': 5}");
    EXPECT_EQ(render("{{ m }}{% macro m() %}x{% endmacro %}"), "");  // not defined yet
    EXPECT_EQ(
        render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
        "54321");
}

TEST(JinjaLoops, LoopVariablesFilterElseAndControls) {
    EXPECT_EQ(render("{% for x in [1,2] %}{{ loop.previtem }},{{ loop.nextitem }},{{ loop.revindex }},"
                     "{{ loop.cycle('a','b') }};{% endfor %}"),
              ",2,2,a;1,,1,b;");
    EXPECT_EQ(
        render("{% for x in [1,2,3] if x != 2 %}{{ loop.index }}{{ loop.last }}{% else %}E{% endfor %}"),
        "1False2True");
    EXPECT_EQ(render("{% for x in [] %}a{% else %}E{% endfor %}"), "E");
    EXPECT_EQ(
        render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}"
               "{% endif %}{{ i }}{% endfor %}"),
        "02");
    EXPECT_EQ(render("{% for a, b in [[1,2],[3,4]] %}{{a}}{{b}}{% endfor %}"), "1234");
    EXPECT_EQ(render("{% for k, v in d|items %}{{k}}={{v}};{% endfor %}{% for k in d %}{{k}}{% endfor %}",
                     R"({"d": {"b": 1, "a": 2}})"),
              "b=1;a=2;ba");
}

TEST(JinjaExpressions, PythonArithmeticAndPrinting) {
    EXPECT_EQ(
        render("{{ 1.0 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.1+0.2 }} {{ 10/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} "
               "{{ 2**10 }} {{ 2**-1 }}"),
        "1.0 1e+16 1e-05 0.30000000000000004 5.0 3 -4 2 1024 0.5");
    EXPECT_EQ(
        render("{{ -0.0 }} {{ 123456789.123 }} {{ 1e22 }} {{ 0.00001234 }} {{ 1/3 }} {{ 100.0 }} {{ 1e15 }}"),
        "-0.0 123456789.123 1e+22 1.234e-05 0.3333333333333333 100.0 1000000000000000.0");
    EXPECT_EQ(
        render("{{ 10 % -3 }} {{ 10.5 % 3 }} {{ -10.5 % 3 }} {{ 7 // -2 }} {{ 7.0 // 2 }} {{ 2 ** 3 ** 2 }}"),
        "-2 1.5 1.5 -4 3.0 64");  // jinja2's ** is left-associative, unlike Python's
    EXPECT_EQ(
        render("{{ [1,'a',none,true,1.5] }} {{ {'a':1,'b':[2]} }} {{ (1,) }} {{ ('a','b') }} {{ none }} "
               "{{ undef }}|"),
        "[1, 'a', None, True, 1.5] {'a': 1, 'b': [2]} (1,) ('a', 'b') None |");
    EXPECT_EQ(render(R"({{ "it's" }} {{ ['it\'s', 'a"b', 'x\ny'] }})"), R"(it's ["it's", 'a"b', 'x\ny'])");
    // Precedence: ~ binds tighter than +, filters and tests bind to the operand.
    EXPECT_EQ(render("{{ 1 + 2 * 3 - 4 / 2 }} {{ 'a' + 'b' ~ 'c' }} {{ not true or true }} {{ 1 < 2 < 3 }} "
                     "{{ 3 > 2 > 2 }} {{ [1,2]|length - 1 }}"),
              "5.0 abc True True False 1");
    EXPECT_EQ(
        render(
            "{{ true == 1 }} {{ 1 == 1.0 }} {{ (1,2) == [1,2] }} {{ true is number }} {{ true is integer }}"),
        "True True False True False");
    EXPECT_EQ(
        render(
            "{{ 'a' if 1 else 'b' if 0 else 'c' }}|{{ 'x' if false }}|{{ 1 in [1] }} {{ 'a' not in 'abc' }}"),
        "a||True False");
}

TEST(JinjaExpressions, StringsIndexCodePoints) {
    EXPECT_EQ(
        render("{{ 'abc'[::-1] }} {{ 'héllo'|length }} {{ 'héllo'[1] }} {{ [1,2,3][-1] }} {{ [1,2][5] }}|"),
        "cba 5 é 3 |");
    EXPECT_EQ(render("{{ [1,2,3,4,5][4:0:-2] }} {{ 'hello'[1:3] }} {{ 'abc'[5:] }}|"), "[5, 3] el |");
    EXPECT_EQ(render(R"({{ '\u00e9|\U0001F600|\101|\d|\x41' }})"), "é|😀|A|\\d|A");
}

TEST(JinjaExpressions, AttributesItemsAndUndefined) {
    EXPECT_EQ(render("{{ x.y }}|{{ x.y is defined }}|{{ none.x }}|", R"({"x": {}})"), "|False||");
    EXPECT_EQ(render("{{ d['items'] }} {{ d.get('items') }}", R"({"d": {"items": 1}})"), "1 1");
    EXPECT_EQ(render("{{ x.0 }}", R"({"x": [5]})"), "5");
    EXPECT_EQ(render("{{ u is iterable }} {{ u is sequence }} {{ u|length }} {{ u ~ 'a' }} {{ 'a' in u }}"),
              "True True 0 a False");
    EXPECT_NE(error_of("{{ x.y.z }}", R"({"x": {}})").find("has no attribute 'y'"), std::string::npos);
    EXPECT_NE(error_of("{{ x + 1 }}").find("'x' is undefined"), std::string::npos);
}

TEST(JinjaFilters, CommonFilters) {
    EXPECT_EQ(
        render("{{ [1,2]|join('-') }} {{ [{'n':'a'},{'n':'b'}]|map(attribute='n')|join }} {{ [1,2]|first }} "
               "{{ 'abc'|last }}"),
        "1-2 ab 1 c");
    EXPECT_EQ(
        render(
            "{{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }}"),
        "d  d None");
    EXPECT_EQ(render("{{ 'Hello World'|upper }} {{ 'hello world'|title }} {{ 'hELLO'|capitalize }} "
                     "{{ 'a-b'|replace('-', '+') }}"),
              "HELLO WORLD Hello World Hello a+b");
    EXPECT_EQ(render("{{ {'b':1,'a':2}|dictsort }} {{ [3,1,2]|sort(reverse=true) }} {{ [1,2,3]|sum }} {{ "
                     "[1,5,2]|max }}"),
              "[('a', 2), ('b', 1)] [3, 2, 1] 6 5");
    EXPECT_EQ(render("{{ ['b','A','a']|sort }} {{ ['b','A','a']|unique|list }} {{ "
                     "['b','A','a']|sort(case_sensitive=true) }}"),
              "['A', 'a', 'b'] ['b', 'A'] ['A', 'a', 'b']");
    EXPECT_EQ(
        render("{{ 3.0|int }} {{ '42'|int }} {{ 'x'|int }} {{ '3.5'|float }} {{ 2.5|round }} {{ 3.5|round }} "
               "{{ 2.567|round(2) }}"),
        "3 42 0 3.5 2.0 4.0 2.57");
    EXPECT_EQ(render("{{ [1, 2, 3]|select('odd')|list }} {{ [{'t': 'x'}, {'t': 'y'}]|selectattr('t', "
                     "'equalto', 'y')|list }}"),
              "[1, 3] [{'t': 'y'}]");
    EXPECT_EQ(
        render(
            "{{ \"\\t  a b \\n\"|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'line1\\nline2\\n\\nline4'|indent(2) }}"),
        "a b|a|line1\n  line2\n\n  line4");
    EXPECT_EQ(render("{% filter upper %}abc {{ 'd' }}{% endfilter %}"), "ABC D");
}

TEST(JinjaFilters, ToJsonIsPythonJsonDumps) {
    const char* ctx = R"({"x": {"a": [1, 2.0, "é\n\"", null, true], "b": {}}})";
    EXPECT_EQ(render("{{ x|tojson }}", ctx), "{\"a\": [1, 2.0, \"é\\n\\\"\", null, true], \"b\": {}}");
    EXPECT_EQ(render("{{ x|tojson(indent=2) }}", R"({"x": {"a": [1, 2.0], "b": {}, "c": []}})"),
              "{\n  \"a\": [\n    1,\n    2.0\n  ],\n  \"b\": {},\n  \"c\": []\n}");
    EXPECT_EQ(render("{{ x|tojson(separators=(',', ':'), sort_keys=true) }}", R"({"x": {"b": 1, "a": [2]}})"),
              "{\"a\":[2],\"b\":1}");
    EXPECT_EQ(render("{{ 'ü'|tojson(ensure_ascii=true) }}{{ '😀'|tojson(ensure_ascii=true) }}{{ "
                     "'\\x01\\x7f'|tojson }}"),
              "\"\\u00fc\"\"\\ud83d\\ude00\"\"\\u0001\x7f\"");
}

TEST(JinjaMethods, StringAndDictMethods) {
    EXPECT_EQ(
        render(
            "{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ ' x '.strip() }}|{{ 'xxaxx'.strip('x') }}"),
        "['a', 'b', 'c'] ['a', 'b', '', 'c'] x|a");
    EXPECT_EQ(render("{{ 'abc'.startswith(('x','a')) }} {{ '  a'.lstrip() }} {{ 'a,b,c'.split(',', 1) }} "
                     "{{ 'AbC'.lower() }} {{ 'aaa'.replace('a', 'b', 2) }}"),
              "True a ['a', 'b,c'] abc bba");
    EXPECT_EQ(render("{{ {'a':1}.get('b', 5) }} {{ {'a':1}.keys()|list }} {{ {'a':1}.items()|list }}"),
              "5 ['a'] [('a', 1)]");
    // Mutating methods are unsafe in HF's sandbox, so they are undefined.
    EXPECT_EQ(render("{% set d = {'a': 1} %}{{ d.update is defined }}"), "False");
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
    EXPECT_NE(error_of("line one\n{% if %}").find("template:2:7:"), std::string::npos)
        << error_of("line one\n{% if %}");
    EXPECT_NE(error_of("{{ 'unterminated }}").find("template:1:4: unterminated string"), std::string::npos);
    EXPECT_NE(error_of("{% for x in [1] %}").find("unexpected end of template"), std::string::npos);
    EXPECT_NE(error_of("{% endfor %}").find("unknown or misplaced tag 'endfor'"), std::string::npos);
    EXPECT_NE(error_of("{{ 1 +* 2 }}").find("template:1:7:"), std::string::npos);
    EXPECT_NE(error_of("{{ a @ b }}").find("unexpected character '@'"), std::string::npos);
    EXPECT_NE(error_of("{# open comment").find("unterminated comment"), std::string::npos);
    EXPECT_NE(error_of("{% for x in xs recursive %}{% endfor %}").find("not supported"), std::string::npos);
}

TEST(JinjaErrors, RuntimeErrorsNameLineAndColumn) {
    EXPECT_NE(error_of("a\nb {{ 5 / 0 }}").find("template:2:"), std::string::npos);
    EXPECT_NE(error_of("{{ 5 / 0 }}").find("division by zero"), std::string::npos);
    EXPECT_NE(error_of("{{ raise_exception('boom') }}").find("boom"), std::string::npos);
    EXPECT_NE(error_of("{{ 'a' + 1 }}").find("can only concatenate str"), std::string::npos);
    EXPECT_NE(error_of("{{ 1 < 'a' }}").find("not supported between"), std::string::npos);
    EXPECT_NE(error_of("{{ 1|nosuchfilter }}").find("no filter named 'nosuchfilter'"), std::string::npos);
    EXPECT_NE(error_of("{{ foo() }}").find("'foo' is undefined"), std::string::npos);
    EXPECT_NE(error_of("{{ 1() }}").find("not callable"), std::string::npos);
    EXPECT_NE(error_of("{% for x in 5 %}{% endfor %}").find("not iterable"), std::string::npos);
    EXPECT_NE(error_of("{% set x = 1 %}{% set x.y = 2 %}").find("not a namespace"), std::string::npos);
    EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
}

TEST(JinjaBounds, HostileTemplatesFailCleanly) {
    EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nested deeper"),
              std::string::npos);
    EXPECT_NE(error_of("{% for x in range(100000000) %}{% endfor %}").find("too large"), std::string::npos);
    EXPECT_NE(error_of("{{ 'x' * 1000000000 }}").find("too large"), std::string::npos);
    EXPECT_NE(error_of("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(30) %}"
                       "{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                  .find("too large"),
              std::string::npos);
    EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                  .find("nested too deeply"),
              std::string::npos);
    EXPECT_NE(
        error_of("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}").find("nested too deeply"),
        std::string::npos);
    std::string deep_if;
    for (int i = 0; i < 500; ++i) deep_if += "{% if true %}";
    EXPECT_NE(error_of(deep_if).find("nested too deeply"), std::string::npos);
    // 10^8 iterations, or 2^64 macro calls: the step budget stops both.
    const char* loops =
        "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(100) %}{% endfor %}"
        "{% endfor %}{% endfor %}";
    const char* calls =
        "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}";
    for (const char* src : {loops, calls}) {
        try {
            Template(src).render(Value::dict(), 200000);
            ADD_FAILURE() << "no error for " << src;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("exceeded 200000 steps"), std::string::npos) << e.what();
        }
    }
}

// Mutated real templates and random token soup must parse/render or throw mox::Error: never crash,
// hang, or throw anything else (run under ASan/UBSan in CI).
TEST(JinjaFuzz, MutatedTemplatesNeverCrash) {
    const std::filesystem::path dir = std::filesystem::path(MOX_TEST_DATA_DIR) / "templates";
    std::vector<std::string> seeds;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".jinja") continue;
        std::ifstream f(entry.path(), std::ios::binary);
        std::ostringstream s;
        s << f.rdbuf();
        seeds.push_back(s.str());
    }
    ASSERT_GE(seeds.size(), 5u);
    const Value ctx = text::parse_json_value(R"({"messages": [{"role": "system", "content": "s"},
        {"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "reasoning_content": "r",
        "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}, {"role": "tool", "content": "t"},
        {"role": "user", "content": [{"type": "text", "text": "p"}]}], "tools": [{"type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
        "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
    static const char* const pieces[] = {
        "{{", "}}",     "{%",       "%}",   "{#",   "#}",   "-",     "(",      ")",    "[", "]", "{",
        "}",  "'",      "\"",       "if ",  "for ", " in ", "endif", "endfor", "set ", "=", ".", "|",
        ",",  "macro ", "endmacro", "not ", " is ", "loop", "\\",    "\n",     "~",    "*", "0"};
    std::mt19937 rng(12345);
    int rendered = 0, rejected = 0;
    for (int iter = 0; iter < 1500; ++iter) {
        std::string src = seeds[rng() % seeds.size()];
        const int edits = 1 + int(rng() % 4);
        for (int e = 0; e < edits && !src.empty(); ++e) {
            const size_t at = rng() % src.size();
            switch (rng() % 4) {
                case 0:
                    src.erase(at, 1 + rng() % 8);
                    break;
                case 1:
                    src.insert(at, pieces[rng() % std::size(pieces)]);
                    break;
                case 2:
                    src[at] = char(rng() % 256);
                    break;
                default:
                    src.insert(at, src.substr(rng() % src.size(), rng() % 40));
                    break;
            }
        }
        try {
            Template(src).render(ctx);
            ++rendered;
        } catch (const Error&) {
            ++rejected;
        }
    }
    for (int iter = 0; iter < 1500; ++iter) {
        std::string src;
        const int n = 1 + int(rng() % 30);
        for (int i = 0; i < n; ++i) src += pieces[rng() % std::size(pieces)];
        try {
            Template(src).render(ctx);
            ++rendered;
        } catch (const Error&) {
            ++rejected;
        }
    }
    // Both outcomes occur: the mutations are neither all harmless nor all fatal.
    EXPECT_GT(rendered, 100);
    EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace mox::jinja
