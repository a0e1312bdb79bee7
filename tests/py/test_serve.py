"""mox serve as an OpenAI client meets it: the embedded mox-tiny behind the API on a free port,
answers checked against `mox run` (the same greedy text), streaming against the whole answer, the
prefix reuse of a continued prompt, stop strings, cancellation, concurrent clients, and clear
errors for bad requests."""
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

TINY_MODEL = Path(__file__).resolve().parents[2] / "assets" / "mox-tiny" / "mox-tiny-f16.gguf"


def start_server(mox_bin, *args):
    proc = subprocess.Popen([str(mox_bin), "serve", "-m", str(TINY_MODEL), "--port", "0", "-t", "2", *map(str, args)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.time() + 120
    log = []
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        if m:
            # Keep draining stderr so the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, int(m.group(1))
    proc.kill()
    raise AssertionError("mox serve did not start: " + "".join(log))


@pytest.fixture(scope="module")
def server(mox_bin):
    proc, port = start_server(mox_bin, "-c", "512")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    assert proc.wait(timeout=30) == 0  # SIGTERM stops it cleanly


def call(base, path, body=None, headers=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def events(text):
    out = [line[len("data: "):] for line in text.split("\n\n") if line.startswith("data: ")]
    assert out[-1] == "[DONE]"
    return [json.loads(e) for e in out[:-1]]


def chat(content, **kw):
    return {"messages": [{"role": "user", "content": content}], "temperature": 0, **kw}


def test_health_and_models(server):
    assert call(server, "/health") == (200, '{"status":"ok"}')
    status, body = call(server, "/v1/models")
    assert status == 200
    model = json.loads(body)["data"][0]
    assert model["id"] == "mox-tiny-f16.gguf" and model["meta"]["n_ctx"] == 512


def test_chat_answers_as_mox_run_does(server, mox_bin):
    status, body = call(server, "/v1/chat/completions", chat("Who was Ruth?", max_tokens=24))
    assert status == 200, body
    r = json.loads(body)
    assert r["object"] == "chat.completion" and r["choices"][0]["message"]["role"] == "assistant"
    ref = subprocess.run([str(mox_bin), "run", "--chat", "-p", "Who was Ruth?", "-n", "24", "--temp", "0", "-t", "2"],
                         capture_output=True, text=True, check=True).stdout
    assert r["choices"][0]["message"]["content"] == ref
    u = r["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["completion_tokens"] <= 24


def test_stream_equals_the_whole_answer(server):
    body = chat("Tell me about Naomi.", max_tokens=20)
    _, whole = call(server, "/v1/chat/completions", body)
    whole = json.loads(whole)
    status, text = call(server, "/v1/chat/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200
    ev = events(text)
    assert ev[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in ev if e["choices"])
    assert content == whole["choices"][0]["message"]["content"]
    finals = [e for e in ev if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]


def test_a_continued_prompt_reuses_the_state(server):
    first = {"prompt": "And Naomi said unto her daughters in law,", "max_tokens": 8, "temperature": 0}
    _, a = call(server, "/v1/completions", first)
    a = json.loads(a)
    assert a["object"] == "text_completion"
    # The next prompt continues everything the state holds: only the new tokens are processed, and
    # the answer is the one a fresh sequence gives (checked after an unrelated request reset it).
    follow = {"prompt": first["prompt"] + a["choices"][0]["text"] + " and", "max_tokens": 8, "temperature": 0}
    _, b = call(server, "/v1/completions", follow)
    b = json.loads(b)
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    call(server, "/v1/completions", {"prompt": "Unrelated.", "max_tokens": 2})
    _, c = call(server, "/v1/completions", follow)
    c = json.loads(c)
    assert c["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert c["choices"][0]["text"] == b["choices"][0]["text"]


def test_stop_strings(server):
    _, full = call(server, "/v1/completions", {"prompt": "And Naomi said", "max_tokens": 16, "temperature": 0})
    text = json.loads(full)["choices"][0]["text"]
    words = text.split()
    assert len(words) >= 3, text
    stop = words[2]
    _, cut = call(server, "/v1/completions",
                  {"prompt": "And Naomi said", "max_tokens": 16, "temperature": 0, "stop": [stop]})
    cut = json.loads(cut)
    assert cut["choices"][0]["text"] == text[:text.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_bad_requests_get_openai_errors(server):
    cases = [
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/chat/completions", chat("x", temperature=-1), "temperature"),
        ("/v1/chat/completions", chat("x", n=2), "n"),
        ("/v1/completions", {"prompt": 3}, "prompt"),
        ("/v1/completions", {"prompt": "word " * 600}, "prompt"),  # longer than the context
    ]
    for path, body, param in cases:
        status, text = call(server, path, body)
        assert status == 400, text
        err = json.loads(text)["error"]
        assert err["param"] == param and err["message"]
    status, text = call(server, "/v1/completions", raw=b"{not json")
    assert status == 400 and "not valid JSON" in json.loads(text)["error"]["message"]
    status, text = call(server, "/v1/nothing")
    assert status == 404 and "no such endpoint" in json.loads(text)["error"]["message"]
    # The server is still fine afterwards.
    assert call(server, "/v1/completions", {"prompt": "And", "max_tokens": 2})[0] == 200


def test_concurrent_clients_and_a_dropped_stream(server):
    # A client that goes away mid-stream cancels its generation; clients queued behind it are served.
    req = urllib.request.Request(server + "/v1/completions", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"prompt": "And", "max_tokens": 400, "stream": True}).encode())
    r = urllib.request.urlopen(req, timeout=120)
    r.read(200)
    r.close()
    results = []

    def one(i):
        results.append(call(server, "/v1/completions", {"prompt": f"And {i}", "max_tokens": 4, "temperature": 0}))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [s for s, _ in results] == [200] * 4


def test_api_key(mox_bin):
    proc, port = start_server(mox_bin, "-c", "256", "--api-key", "sekrit")
    try:
        base = f"http://127.0.0.1:{port}"
        status, text = call(base, "/v1/completions", {"prompt": "And", "max_tokens": 2})
        assert status == 401 and json.loads(text)["error"]["type"] == "authentication_error"
        status, _ = call(base, "/v1/completions", {"prompt": "And", "max_tokens": 2},
                         headers={"Authorization": "Bearer sekrit"})
        assert status == 200
        assert call(base, "/health")[0] == 200  # health needs no key
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_reasoning_goes_to_its_own_field(mox_bin, tmp_path):
    # A template whose generation prompt opens a think block, as Qwen3.6's does: mox-tiny never
    # closes it, so its whole answer is reasoning (deepseek format) or content (none).
    tmpl = tmp_path / "think.jinja"
    tmpl.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                    "<|im_start|>assistant\n<think>\n")
    answers = {}
    for fmt in ("deepseek", "none"):
        proc, port = start_server(mox_bin, "-c", "256", "--chat-template-file", tmpl, "--reasoning-format", fmt)
        try:
            base = f"http://127.0.0.1:{port}"
            _, body = call(base, "/v1/chat/completions", chat("Who was Ruth?", max_tokens=12))
            answers[fmt] = json.loads(body)["choices"][0]["message"]
            _, text = call(base, "/v1/chat/completions", chat("Who was Ruth?", max_tokens=12, stream=True))
            ev = events(text)
            streamed = "".join(e["choices"][0]["delta"].get("reasoning_content", "") for e in ev if e["choices"])
            if fmt == "deepseek":
                assert streamed == answers[fmt]["reasoning_content"]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert answers["deepseek"]["content"] == ""
    assert answers["deepseek"]["reasoning_content"] == answers["none"]["content"] != ""
    assert "reasoning_content" not in answers["none"]
