#!/bin/bash
# session 6, call 5: the planner accuracy sweep (21 configurations, grouped) with the profile of call 4
R=$PWD
mkdir -p /tmp/bin && [ -x /tmp/bin/mox ] || { xz -dc out/devcarry/cuda/mox.xz > /tmp/bin/mox; chmod +x /tmp/bin/mox; }
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
ls /tmp/q36.gguf /tmp/moxcache/ || exit 1
timeout 400 bench/cuda/plan_accuracy.sh /tmp/bin/mox /tmp/q36.gguf $OUT/a grouped > $OUT/a.log 2>&1; tail -4 $OUT/a.log
head -60 $OUT/a/accuracy.md
cd $OUT && tar czf a.tgz a a.log && rm -rf a a.log
