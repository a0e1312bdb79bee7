#!/usr/bin/env bash
# The files listed in scripts/format_clean.txt must be exactly as clang-format (.clang-format) writes
# them. A file joins the list when it is written or reworked; the list only grows.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(grep -v '^\s*\(#\|$\)' scripts/format_clean.txt)
clang-format --dry-run -Werror "${files[@]}"
echo "clang-format: ${#files[@]} files clean"
