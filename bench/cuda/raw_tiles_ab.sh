#!/usr/bin/env bash
# The prefill tiles' two weight paths compared per type on one GPU: `mox calibrate` with raw staging
# (the default where the device fits it) and with MOX_CUDA_MM_RAW=0 (each thread loads its weight
# segments directly), ROUNDS times in alternation, each run into its own cache directory; then a table
# of the prefill rates the profiles hold per type (gpu.matmul_tflops: a dense 512-token product;
# gpu.moe_prefill_tflops: Qwen3.6's routed experts at 512 tokens; gpu.moe_prefill_large_tflops: at
# 4096), the median over rounds of each path and raw / direct.
#
#   bench/cuda/raw_tiles_ab.sh MOX OUT
#
# Environment: ROUNDS (2). Writes OUT/{raw,direct}/ROUND/hardware-*.json and OUT/raw_tiles.md.
set -euo pipefail
if [ $# -ne 2 ]; then sed -n 2,11p "$0"; exit 2; fi
mox="$1"; out="$2"; rounds="${ROUNDS:-2}"
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
    for path in raw direct; do
        dir="$out/$path/$round"
        rm -rf "$dir" && mkdir -p "$dir"
        if [ "$path" = direct ]; then
            MOX_CACHE_DIR="$dir" MOX_CUDA_MM_RAW=0 "$mox" calibrate > "$dir/calibrate.txt" 2>&1
        else
            MOX_CACHE_DIR="$dir" "$mox" calibrate > "$dir/calibrate.txt" 2>&1
        fi
        echo "round $round: $path done"
    done
done
python3 - "$out" <<'PY'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
keys = ["matmul_tflops", "moe_prefill_tflops", "moe_prefill_large_tflops"]
rates = {}  # (path, key, type) -> values over rounds
for path in ("raw", "direct"):
    for f in sorted((out / path).glob("*/hardware-*.json")):
        gpu = json.loads(f.read_text()).get("gpu", {})
        for key in keys:
            for t, v in (gpu.get(key) or {}).items():
                rates.setdefault((path, key, t), []).append(v)
types = sorted({t for (_, _, t) in rates})
lines = ["| type | " + " | ".join(f"{k} raw / direct (ratio)" for k in keys) + " |",
         "| :-- |" + " --: |" * len(keys)]
for t in types:
    cells = []
    for key in keys:
        r, d = rates.get(("raw", key, t)), rates.get(("direct", key, t))
        if not r or not d:
            cells.append("-")
            continue
        mr, md = statistics.median(r), statistics.median(d)
        cells.append(f"{mr:.1f} / {md:.1f} ({mr / md:.2f})")
    lines.append(f"| {t} | " + " | ".join(cells) + " |")
(out / "raw_tiles.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
