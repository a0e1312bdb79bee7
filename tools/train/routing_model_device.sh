#!/usr/bin/env bash
# Train the routing model on one CUDA GPU and record its routing over the evaluation texts.
#
#   bash tools/train/routing_model_device.sh DATA OUT [MODEL_DIR] [train.py options...]
#
# DATA: the folder of prepare_routing_data.py + train_tokenizer.py (tokenizer.json, train.npy,
# val.npy, eval_*.npy; out/routing-data here). OUT receives the small results: train_log.csv,
# summary.json, run.log, config.json, tokenizer.json, traces/*.moxroute, traces/routing_summary.json.
# MODEL_DIR (default OUT/mox-routing) receives the checkpoint (config.json, tokenizer.json, a
# ~1 GB bf16 model.safetensors) that `mox convert` reads; its folder name is the model name in
# the traces, as it is in the GGUF `mox convert` writes. Needs python3 with torch,
# transformers 5.17, tokenizers, safetensors, numpy. About 7 minutes on an H200.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="${1:?usage: $0 DATA OUT [MODEL_DIR] [train.py options...]}"
out="${2:?usage: $0 DATA OUT [MODEL_DIR] [train.py options...]}"
model="${3:-$out/mox-routing}"
shift $(( $# < 3 ? $# : 3 ))
mkdir -p "$out" "$model"
export PYTHONUNBUFFERED=1
py="${PYTHON:-python3}"  # the interpreter with torch (PYTHON=... to choose another)

"$py" "$here/train.py" --preset routing --data "$data" --out "$model" "$@"
"$py" "$here/record_routing.py" --model "$model" --data "$data" --out "$out/traces" 2>&1 | tee "$out/record_routing.log"
if [ "$(cd "$model" && pwd)" != "$(mkdir -p "$out/run" && cd "$out/run" && pwd)" ]; then
    for f in config.json tokenizer.json train_log.csv summary.json run.log; do cp "$model/$f" "$out/run/"; done
fi
cp "$data/data_manifest.json" "$data/tokenizer_stats.json" "$out/run/" 2>/dev/null || true
ls -la "$out" "$out/run" "$out/traces"
