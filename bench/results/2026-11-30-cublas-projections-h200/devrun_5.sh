#!/bin/bash
# session 14, call 5 (the last ~4 device minutes): CUDA's lazy module loading (mox no longer sets
# CUDA_MODULE_LOADING=EAGER) against eager, at the 24 GiB plan and the 8 GiB plan: the driver's VRAM
# (nvidia-smi peak minus idle) against the memory model's prediction, and the speed.
. bench/cuda/device_env.sh
start_synth; wait_synth; echo "synth done t=$(el)"
run() {  # NAME VAR=VALUE ARGS...: one mox bench with nvidia-smi polling
  local name=$1 var=$2; shift 2
  local idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $O/$name.vram.csv & local p=$!
  env "$var" timeout 60 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 --plan auto -c 32768 -ub 4096 -b 4096 -r 2 $C "$@" -o json > $O/$name.json 2> $O/$name.log
  echo "rc $? $name t=$(el)"; sleep 0.3; kill $p
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); peak=max(int(x) for x in open(sys.argv[2]) if x.strip()); print(sys.argv[3], 'idle', sys.argv[4], 'peak MiB', peak, [(r['test'], [round(x,1) for x in r['samples_ts']], round(r['vram_bytes']/2**20), round(r['predicted_vram_bytes']/2**20), round(r['predicted_tps'],1)) for r in d])" $O/$name.json $O/$name.vram.csv $name $idle
}
run lazy24 MOX_X=1 --vram-budget 24GiB -p 4096 -n 128
run eager24 CUDA_MODULE_LOADING=EAGER --vram-budget 24GiB -p 4096 -n 128
run lazy8 MOX_X=1 --vram-budget 8GiB -p 0 -n 128
head -3 $O/lazy24.log $O/lazy8.log
cd $OUT && tar czf r.tgz r && rm -rf r
