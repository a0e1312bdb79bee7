#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs them: the GGUF reader for N seconds (default 60),
# seeded with the checked-in corpus of valid and broken files, and mox serve's request parser for
# half of that, seeded with tests/data/openai (bodies, the first byte choosing chat or completion), and
# the routing trace reader for a quarter, seeded with tests/data/routing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMOX_FUZZ=ON -DMOX_TESTS=OFF >/dev/null
cmake --build build-fuzz --target gguf_fuzz openai_fuzz routing_trace_fuzz -j "$(nproc)"
work=$(mktemp -d)
cp tests/data/gguf/*.gguf "$work/" 2>/dev/null || true
build-fuzz/fuzz/gguf_fuzz -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
    -print_final_stats=1 "$work" 2>&1 | tail -n 15
rm -rf "$work"
work=$(mktemp -d)
cp tests/data/openai/* "$work/"
build-fuzz/fuzz/openai_fuzz -max_total_time="$(( (seconds + 1) / 2 ))" -max_len=4096 -rss_limit_mb=2048 \
    -print_final_stats=1 "$work" 2>&1 | tail -n 15
rm -rf "$work"
work=$(mktemp -d)
cp tests/data/routing/*.trace "$work/"
build-fuzz/fuzz/routing_trace_fuzz -max_total_time="$(( (seconds + 3) / 4 ))" -max_len=4096 -rss_limit_mb=2048 \
    -print_final_stats=1 "$work" 2>&1 | tail -n 15
rm -rf "$work"
