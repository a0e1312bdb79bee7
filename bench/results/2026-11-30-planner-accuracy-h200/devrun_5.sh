#!/bin/bash
# session 16, call 5 (cca7103): mox serve on the GPU: the synthetic Qwen3.6-35B-A3B behind the API at
# a 16 GiB budget (host expert layers, so the hand-off runs from the server's connection threads),
# chat, streaming, a continued prompt, two concurrent clients, SIGTERM.
. bench/cuda/device_env.sh
ldd /tmp/bin/mox | grep "not found"
start_synth; wait_synth; echo "synth done t=$(el)"
/tmp/bin/mox serve -m /tmp/q36.gguf -ngl 99 --vram-budget 16GiB -c 8192 --port 0 --temp 0 2> $O/serve.err &
sp=$!
for i in $(seq 1 90); do grep -q "serving" $O/serve.err && break; sleep 1; done
echo "serving t=$(el)"; grep -E "plan:|serving|error" $O/serve.err
PORT=$(grep -o "127.0.0.1:[0-9]*" $O/serve.err | cut -d: -f2)
python3 - "$PORT" > $O/client.txt 2>&1 <<'PY'
import json, sys, threading, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
def call(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return r.read().decode()
msgs = [{"role": "user", "content": "Write a long story about the sea."}]
a = json.loads(call("/v1/chat/completions", {"messages": msgs, "max_tokens": 256}))
print("chat", a["usage"], {k: round(v, 1) for k, v in a["timings"].items()})
s = call("/v1/chat/completions", {"messages": msgs, "max_tokens": 256, "stream": True, "stream_options": {"include_usage": True}})
ev = [json.loads(l[6:]) for l in s.split("\n\n") if l.startswith("data: ") and l != "data: [DONE]"]
text = "".join(e["choices"][0]["delta"].get("content", "") for e in ev if e["choices"])
print("stream", len(ev), "events; same text as the whole answer:", text == a["choices"][0]["message"]["content"], s.rstrip().endswith("data: [DONE]"))
msgs2 = msgs + [{"role": "assistant", "content": a["choices"][0]["message"]["content"]}, {"role": "user", "content": "Go on."}]
b = json.loads(call("/v1/chat/completions", {"messages": msgs2, "max_tokens": 128}))
print("next turn", b["usage"], {k: round(v, 1) for k, v in b["timings"].items()})
c = json.loads(call("/v1/completions", {"prompt": "The sea", "max_tokens": 512}))
print("completion 512", c["usage"], {k: round(v, 1) for k, v in c["timings"].items()})
res = []
th = [threading.Thread(target=lambda i=i: res.append(json.loads(call("/v1/completions", {"prompt": f"Ship {i}", "max_tokens": 64}))["usage"]["completion_tokens"])) for i in range(2)]
[t.start() for t in th]; [t.join() for t in th]
print("concurrent", res)
PY
cat $O/client.txt
kill -TERM $sp; wait $sp; echo "serve exit $? t=$(el)"
tail -8 $O/serve.err
cd $OUT && tar czf r.tgz r && rm -rf r
