"""Chat templates rendered by mox's Jinja interpreter (tests/tool/tmpl_tool) must equal, byte for byte,
what Python's jinja2 renders with HF transformers' settings: ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, raise_exception and strftime_now globals,
and tojson overridden by json.dumps(ensure_ascii=False). When jinja2 raises (a template rejecting a
conversation), mox must fail too.

The templates in tests/data/templates/ are the models' real ones; tests/data/templates/SOURCES.md
says where each came from.
"""
import itertools
import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")
from jinja2.ext import loopcontrols  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

TEMPLATES = Path(__file__).resolve().parent.parent / "data" / "templates"
NOW = 1767225600  # 2026-01-01T00:00:00Z, for templates that print the date

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a timezone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    },
}

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello! What is 2+2?"}],
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Tell me a joke."},
    ],
    "multi_turn_reasoning": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris.", "reasoning_content": "The user asks about France. Capital is Paris."},
        {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "Rome.", "reasoning_content": "\nItaly's capital is Rome.\n"},
        {"role": "user", "content": "Thanks!"},
    ],
    "think_in_content": [
        {"role": "user", "content": "Compute 3*7."},
        {"role": "assistant", "content": "<think>\n3 times 7 is 21.\n</think>\n\n21"},
        {"role": "user", "content": "Now 4*5?"},
    ],
    "ends_with_assistant": [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi!", "reasoning_content": "Greeting.", "thinking": "Greeting."},
    ],
    "tool_calls": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris and the time in Tokyo?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "Two lookups needed.",
            "tool_calls": [
                {
                    "id": "call12345",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "unit": "celsius"}},
                },
                {"id": "call67890", "type": "function", "function": {"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}},
            ],
        },
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 18.5, \"sky\": \"cloudy\"}"},
        {"role": "tool", "tool_call_id": "call67890", "name": "get_time", "content": "21:04"},
        {"role": "assistant", "content": "Paris: 18.5°C and cloudy. Tokyo: 21:04."},
        {"role": "user", "content": "Great, and Rome?"},
    ],
    "single_tool_call_null_content": [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "abcDEF123",
                    "type": "function",
                    # OpenAI sends arguments as a JSON string; mox (like the harness below) parses it.
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"nested\": {\"a\": [1, 2.5, null, true]}}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "abcDEF123", "content": "-3 and snowing"},
    ],
    "unicode_and_escapes": [
        {"role": "system", "content": "  Réponds en français.  \n"},
        {"role": "user", "content": "héllo 😀 \"quotes\" 'single' \\ back\\slash\ttab\r\nCRLF {{ not_a_tag }} {% nope %}"},
    ],
    "content_parts": [
        {"role": "user", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]},
    ],
}

OPTION_SETS = [
    {"add_generation_prompt": True},
    {"add_generation_prompt": False},
    {"add_generation_prompt": True, "enable_thinking": False},
    {"add_generation_prompt": True, "enable_thinking": True},
    {"add_generation_prompt": True, "preserve_thinking": True},
    {"add_generation_prompt": True, "enable_thinking": False, "preserve_thinking": True},
    {"add_generation_prompt": True, "extra": {"reasoning_effort": "high", "builtin_tools": ["browser", "python"]}},
]


def hf_render(template: str, request: dict) -> str:
    """What transformers' apply_chat_template(tokenize=False) renders (see the module docstring)."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(request["now"], tz=timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    kwargs = dict(request.get("extra", {}))
    for key in ("enable_thinking", "preserve_thinking"):
        if key in request:
            kwargs[key] = request[key]
    return env.from_string(template).render(
        messages=normalize_messages(request["messages"]),
        tools=request.get("tools"),
        documents=None,
        add_generation_prompt=request.get("add_generation_prompt", False),
        bos_token=request.get("bos_token", ""),
        eos_token=request.get("eos_token", ""),
        **kwargs,
    )


def normalize_messages(messages):
    """mox's documented input rule: string tool-call arguments that parse to an object become it."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls") or []:
            holder = call.get("function", call)
            args = holder.get("arguments")
            if isinstance(args, str):
                try:
                    parsed = json.loads(args)
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    holder["arguments"] = parsed
    return out


def requests_for(template_name: str):
    for (conv_name, messages), options in itertools.product(CONVERSATIONS.items(), OPTION_SETS):
        req = {"messages": messages, "bos_token": "<s>", "eos_token": "</s>", "now": NOW, **options}
        # Tool-use templates (Hermes) iterate `tools` unconditionally; give them tools everywhere.
        if conv_name.startswith("tool") or conv_name.startswith("single_tool") or "tool_use" in template_name:
            req["tools"] = [WEATHER_TOOL, TIME_TOOL]
        yield f"{conv_name}/{json.dumps(options, sort_keys=True)}", req


def run_tool(tool_dir: Path, template_path: Path, request: dict, tmp_path: Path):
    req_path = tmp_path / "request.json"
    req_path.write_text(json.dumps(request, ensure_ascii=False), encoding="utf-8")
    proc = subprocess.run([str(tool_dir / "tmpl_tool"), str(template_path), str(req_path)], capture_output=True)
    return proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace")


TEMPLATE_FILES = sorted(p.name for p in TEMPLATES.glob("*.jinja"))


@pytest.mark.parametrize("template_name", TEMPLATE_FILES)
def test_template_matches_jinja2(template_name, tool_dir, tmp_path):
    path = TEMPLATES / template_name
    source = path.read_text(encoding="utf-8")
    rendered = 0
    failures = []
    for case, req in requests_for(template_name):
        try:
            want = hf_render(source, req).encode("utf-8")
        except Exception as e:  # noqa: BLE001 - any jinja2 failure: mox must fail as well
            want = e
        rc, got, err = run_tool(tool_dir, path, req, tmp_path)
        if isinstance(want, Exception):
            # mox must fail the way bad input fails: a one-line error and exit 1 (never a crash).
            if rc != 1:
                failures.append(f"{case}: jinja2 raised {want!r}, mox exited {rc} with {got[:200]!r} {err[:200]!r}")
        elif rc != 0:
            failures.append(f"{case}: mox failed: {err.strip()}")
        elif got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            failures.append(f"{case}: differs at byte {at}: mox {got[max(0, at - 40):at + 40]!r} "
                            f"jinja2 {want[max(0, at - 40):at + 40]!r}")
        else:
            rendered += 1
    assert not failures, "\n".join(failures[:10])
    # Every template must render most conversations (a test where both sides only fail proves little).
    total = len(CONVERSATIONS) * len(OPTION_SETS)
    assert rendered >= total // 3, f"only {rendered}/{total} conversations rendered"


def test_qwen36_thinking_switches(tool_dir, tmp_path):
    """The Qwen3.6 behaviours the engine relies on, spelled out (docs/sampling.md, spec §4)."""
    path = TEMPLATES / "Qwen-Qwen3.6-35B-A3B.jinja"
    msgs = CONVERSATIONS["multi_turn_reasoning"]

    def render(**opts):
        rc, out, err = run_tool(tool_dir, path, {"messages": msgs, "now": NOW, "add_generation_prompt": True, **opts},
                                tmp_path)
        assert rc == 0, err
        return out.decode("utf-8")

    default = render()
    assert default.endswith("<|im_start|>assistant\n<think>\n")  # thinking on by default
    assert render(enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # Past reasoning is dropped before the last user query unless preserve_thinking is set.
    assert "The user asks about France" not in default
    preserved = render(preserve_thinking=True)
    assert "<think>\nThe user asks about France. Capital is Paris.\n</think>\n\nParis." in preserved
    assert "<think>\nItaly's capital is Rome.\n</think>\n\nRome." in preserved


# --- random expressions: mox vs jinja2 ----------------------------------------------------------------

VALUES = [0, 1, 2, 7, -3, 20, 0.5, 2.25, -1.5, 1e3, "ab", "Hé", "", "a b", " x ", None, True, False, [1, 2, 3],
          ["b", "a"], [], {"k": 1, "j": [2]}, "ABC", "20"]
# Atoms are template variables, not literals: jinja2 constant-folds literal subexpressions at compile
# time, and its folding differs from its own runtime in corner cases (e.g. slicing a bool literal).
ATOMS = [f"v{i}" for i in range(len(VALUES))] + ["x", "u"]
FILTERS = ["length", "string", "upper", "lower", "tojson", "first", "last", "join", "join('-')", "sort", "reverse|list",
           "list", "trim", "default('d')", "int", "float", "abs", "round", "unique|list", "capitalize", "title", "sum",
           "min", "max", "count", "tojson(indent=1)", "replace('a', 'z')", "map('string')|list", "select|list",
           "reject|list", "dictsort", "wordcount", "items|list"]
TESTS = ["defined", "none", "string", "number", "integer", "float", "mapping", "sequence", "iterable", "odd", "even",
         "true", "false", "boolean", "lower", "upper", "divisibleby 2", "in [1, 'ab']", "sameas none", "callable"]
METHODS = [".upper()", ".split()", ".strip()", ".startswith('a')", ".replace('a', 'b')", ".lower()", ".title()",
           ".split('a')", ".endswith(('b', 'x'))", ".count('a')", ".find('b')", ".isdigit()", ".lstrip()", "|length"]


def random_expression(rng, depth=0):
    if depth > 3 or rng.random() < 0.25:
        return rng.choice(ATOMS)
    kind = rng.randrange(11)
    a = random_expression(rng, depth + 1)
    b = lambda: random_expression(rng, depth + 1)  # noqa: E731
    if kind == 0:
        return f"({a} {rng.choice(['+', '-', '*', '/', '//', '~'])} {b()})"
    if kind == 1:
        return f"({a} {rng.choice(['==', '!=', '<', '>', '<=', '>=', 'in', 'not in'])} {b()})"
    if kind == 2:
        return f"(not {a})"
    if kind == 3:
        return f"({a} {rng.choice(['and', 'or'])} {b()})"
    if kind == 4:
        return f"({a}|{rng.choice(FILTERS)})"
    if kind == 5:
        return f"({a} if {b()} else {b()})"
    if kind == 6:
        return f"({a})[{rng.choice(['0', '1', '-1', '5', ':2', '1:', '::-1', '::2'])}]"
    if kind == 7:
        return f"[{a}, {b()}]"
    if kind == 8:
        return f"({a} is {rng.choice(['', 'not '])}{rng.choice(TESTS)})"
    if kind == 9:
        return f"({a}){rng.choice(METHODS)}"
    return f"({a})." + rng.choice(["k", "j", "0", 'get("k")'])


def test_random_expressions_match_jinja2(tool_dir, tmp_path):
    """Python semantics (truthiness, ==, <, str(), repr, json.dumps, filters, tests, methods, undefined
    handling) on random nested expressions: same output, or both fail."""
    import random

    rng = random.Random(20240611)
    template_path = tmp_path / "expr.jinja"
    context = {"x": {"a": [1, "é", None]}, **{f"v{i}": v for i, v in enumerate(VALUES)}}
    failures, rendered = [], 0
    for _ in range(250):
        source = "{{ " + random_expression(rng) + " }}"
        request = {"messages": [], "now": NOW, "extra": context}
        try:
            want = hf_render(source, request).encode("utf-8")
        except Exception as e:  # noqa: BLE001
            want = e
        template_path.write_text(source, encoding="utf-8")
        rc, got, err = run_tool(tool_dir, template_path, request, tmp_path)
        if isinstance(want, Exception):
            if rc != 1:
                failures.append(f"{source}: jinja2 raised {want!r}, mox exited {rc} with {got!r} {err[:200]!r}")
        elif rc != 0:
            failures.append(f"{source}: mox failed: {err.strip()} (jinja2: {want!r})")
        elif got != want:
            failures.append(f"{source}: mox {got!r} jinja2 {want!r}")
        else:
            rendered += 1
    assert not failures, "\n".join(failures[:10])
    assert rendered > 100
