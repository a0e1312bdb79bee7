#!/usr/bin/env bash
# A planner accuracy table (plan_accuracy.sh's output directory SRC) with its speed predictions
# recomputed from another hardware profile (PROFILE): for a profile measured on a busy host, or one
# with probes added after the sweep ran. Predictions are pure arithmetic on the profile and the
# model's tensor table, so they are recomputed with `mox plan --json` (its "speed" block, the same predict_speed call as mox bench's rows) against a
# stand-in file with the same tensor table as the synthetic model (tests' plan_tool sparse-model
# q4_k_m; the VRAM predictions of both agree to the byte, checked below), and tools/plan_accuracy.py
# joins them with the source's measurements (the rows' own predicted_tps removed).
#
#   bench/cuda/repredict_accuracy.sh MOX PLAN_TOOL SRC PROFILE OUT
set -euo pipefail
mox="$1"; plan_tool="$2"; src="$(cd "$3" && pwd)"; profile="$4"; out="$5"
here="$(cd "$(dirname "$0")" && pwd)"
model="$out/q36-sparse.gguf"
rm -rf "$out/acc" && mkdir -p "$out" && cp -r "$src" "$out/acc"
"$plan_tool" sparse-model q4_k_m "$model" > /dev/null
# Each configuration's plan, as plan_accuracy.sh asked it (configs.tsv holds the flags), with prompt
# 512 as the rows' pp512.
while IFS=$'\t' read -r id _ _ flags; do
    case "$id" in
        auto.*)
            # --plan auto: the placement the source's search chose (with the source's profile, so it
            # may not be what a search with PROFILE would choose), as explicit flags.
            # shellcheck disable=SC2046  # one argument per word
            set -- $(python3 - "$src/plan/$id.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["plan"]
layers = "|".join(str(l) for l in p["host_layers"])
args = ["-c", str(p["n_ctx"]), "-ub", str(p["n_ubatch"]), "-ctk", p["k_type"].lower(), "-ctv", p["v_type"].lower(),
        "--stream-min-tokens", str(p["stream_min_tokens"])]
if layers:
    args += ["-ot", "blk\\.(%s)\\.ffn_(gate|up|down)_exps\\.weight=%s" % (layers, p["host_tier"])]
print(" ".join(args))
PY
)
            ;;
        *)
            # shellcheck disable=SC2086  # flags is a list
            set -- $flags
            ;;
    esac
    "$mox" plan -m "$model" -ngl 99 "$@" --profile "$profile" --prompt-tokens 512 --json > "$out/acc/plan/$id.json"
done < "$out/acc/configs.tsv"
# The rows keep their measurements and VRAM prediction; their speed predictions go.
python3 - "$out/acc" "$src" <<'PY'
import json, pathlib, sys
acc, src = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for f in (acc / "bench").glob("*.json"):
    try:
        rows = json.loads(f.read_text())
    except ValueError:
        continue
    for r in rows:
        r.pop("predicted_tps", None)
    f.write_text(json.dumps(rows, indent=1))
# The stand-in holds the synthetic model's tensor table: each plan's GPU bytes without the CUDA
# context (which comes from the profile) must equal the source's plan on the device. For the auto
# configurations this also checks that the search chose the same placement as the source's.
def device_bytes(j):
    p = j.get("placement", j)
    return p["gpu_total_bytes"] - p["allowance"]["counted_bytes"]
differ = []
for p in sorted((acc / "plan").glob("*.json")):
    old, new = json.loads((src / "plan" / p.name).read_text()), json.loads(p.read_text())
    if device_bytes(old) != device_bytes(new):
        differ.append(f"{p.stem}: {device_bytes(old)} B on the device (source) vs {device_bytes(new)} B (stand-in)")
print(f"plans whose device bytes differ from the source's: {len(differ)}")
for d in differ:
    print("  " + d)
PY
python3 "$here/../../tools/plan_accuracy.py" "$out/acc"
