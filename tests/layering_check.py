#!/usr/bin/env python3
"""Fails when a layer under src/ includes a header of a layer above it (DESIGN.md: arrows point down).

Order, bottom to top. quant sits below gguf: the container's validation needs the block formats'
sizes, while the formats know nothing of the container. text (tokenizer, chat templates) reads its
vocabulary from GGUF metadata and is used by models/engine.
"""
import re
import sys
from pathlib import Path

LAYERS = ["core", "quant", "gguf", "text", "ops", "models", "place", "plan", "engine", "server"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/', re.M)


def main(src: Path) -> int:
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in {".h", ".cpp", ".cu", ".cuh", ".inc"}:
            continue
        layer = path.relative_to(src).parts[0]
        if layer not in rank:
            bad.append(f"{path}: folder '{layer}' is not a known layer {LAYERS}")
            continue
        for target in INCLUDE.findall(path.read_text(errors="replace")):
            if target in rank and rank[target] > rank[layer]:
                bad.append(f"{path}: layer '{layer}' includes higher layer '{target}'")
    for line in bad:
        print(line)
    print(f"layering: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
