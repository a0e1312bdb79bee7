#!/bin/bash
# session 13, call 5 (c442c3a, the code of 88622ca): issue 5's f16 and q8_0 rows (bench/cuda/qwen36_h200.sh's
# first two commands; the depth rows left out for the device time) with this session's chunked delta rule,
# mox against llama.cpp's CUDA build in the same run.
. bench/cuda/device_env.sh
start_synth; wait_synth; echo "synth done t=$(el)"
mkdir -p $O/qwen36; cp $O/machine.txt $O/qwen36/
for spec in "f16|-p 512,2048 -n 128,512" "q8|-p 2048 -n 128 -ctk q8_0 -ctv q8_0"; do
  name=${spec%%|*}; args=${spec#*|}
  echo "/tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -r 3 $C --compare /tmp/bin/llama-bench $args -o md / -o json" >> $O/qwen36/commands.txt
  timeout $(( 250 - $(el) )) /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -r 3 $C --compare /tmp/bin/llama-bench $args -o md -oe json 2> $O/qwen36/$name.json | tee $O/qwen36/$name.md
  echo "rc $? t=$(el)"
done
cd $OUT && tar czf r.tgz r && rm -rf r
