#!/bin/bash
# session 8, call 5: `mox calibrate` alone (call 4 ran it while the synthetic model was being written
# with 16 threads: its CPU expert rates and host round trip were measured on a busy host).
R=$PWD; mkdir -p /tmp/bin $OUT/r && xz -dc out/devcarry/cuda/mox.xz > /tmp/bin/mox && chmod +x /tmp/bin/mox
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
timeout 100 /tmp/bin/mox calibrate > $OUT/r/calibrate.txt 2>&1; echo "rc $?"; cp /tmp/moxcache/hardware-*.json $OUT/r/
grep -iE "DRAM|round trip|launch gap|DeltaNet" $OUT/r/calibrate.txt; grep -E "^    (Q4_K|Q6_K|Q8_0) " $OUT/r/calibrate.txt
cd $OUT && tar czf r.tgz r && rm -rf r
