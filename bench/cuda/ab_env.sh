#!/usr/bin/env bash
# A/B of mox's tuning values (environment variables, `mox devices`, docs/cuda.md) or of builds on one
# GPU: every variant's `mox bench` run in turn, ROUNDS times over (alternating, so drift hits every
# variant alike), then a table of each variant's medians over all its repetitions with min..max.
#
#   bench/cuda/ab_env.sh MOX MODEL OUT "VAR=VALUE ..." ["VAR=VALUE ..." ...]
#
# Each variant is one quoted list of assignments ("" or "-" for the defaults); MOX=PATH in a variant
# runs that binary instead of MOX (builds against each other: "-" "MOX=/tmp/bin/mox_base").
# Environment: ROUNDS (3), REPS (3 per run), TESTS (the bench flags, default "-p 0 -n 128,512"),
# EXTRA (more bench flags). Writes OUT/runs.jsonl (every run's rows with its variant) and OUT/ab.md.
#
#   bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf /tmp/ab - MOX_CUDA_ATTN_SHORT_MAX=512 \
#       "MOX_CUDA_ATTN_SHORT_MAX=256 MOX_SPIN_US=50"
set -euo pipefail
if [ $# -lt 4 ]; then sed -n 2,13p "$0"; exit 2; fi
mox="$1"; model="$2"; out="$3"; shift 3
rounds="${ROUNDS:-3}"; reps="${REPS:-3}"; tests="${TESTS:--p 0 -n 128,512}"
mkdir -p "$out"
: > "$out/runs.jsonl"
corpus="$(dirname "$0")/../corpus/ruth_basic_english.txt"
for round in $(seq 1 "$rounds"); do
    for variant in "$@"; do
        [ "$variant" = "-" ] && variant=""
        bin="$mox"
        for word in $variant; do
            case "$word" in MOX=*) bin="${word#MOX=}" ;; esac
        done
        # shellcheck disable=SC2086  # tests, EXTRA and the variant are word lists
        rows=$(env $variant "$bin" bench -m "$model" -ngl 99 -r "$reps" --corpus "$corpus" $tests ${EXTRA:-} -o json)
        python3 -c 'import json, sys; print(json.dumps({"variant": sys.argv[1], "round": int(sys.argv[2]), "rows": json.loads(sys.argv[3])}))' \
            "${variant:-defaults}" "$round" "$rows" >> "$out/runs.jsonl"
        echo "round $round: ${variant:-defaults} done"
    done
done
python3 - "$out" <<'PY'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
samples = {}  # (variant, test) -> t/s of every repetition
order = []
for line in (out / "runs.jsonl").read_text().splitlines():
    run = json.loads(line)
    for r in run["rows"]:
        test = r.get("test") or f"pp{r['n_prompt']}/tg{r['n_gen']}"
        key = (run["variant"], test)
        if key not in samples:
            order.append(key)
        samples.setdefault(key, []).extend(r["samples_ts"])
tests = sorted({t for _, t in order})
variants = list(dict.fromkeys(v for v, _ in order))
lines = ["| variant | " + " | ".join(f"{t} median t/s (min..max, n)" for t in tests) + " |",
         "| :-- | " + " | ".join("--:" for _ in tests) + " |"]
for v in variants:
    cells = []
    for t in tests:
        s = samples.get((v, t), [])
        cells.append(f"{statistics.median(s):.1f} ({min(s):.1f}..{max(s):.1f}, {len(s)})" if s else "-")
    lines.append(f"| `{v}` | " + " | ".join(cells) + " |")
(out / "ab.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
