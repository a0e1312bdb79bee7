#!/usr/bin/env python3
"""Writes tests/data/quant_oracle/: fp32 test rows and the blocks llama.cpp's own quantizer makes of them,
the independent oracle that tests/quant/quant_oracle_test.cpp holds mox's quantizers to.

Checked in; rerun only to change the rows or to move to another llama.cpp. Needs numpy, a C compiler and
a llama.cpp source tree with a CPU build of its ggml-base library (nothing of llama.cpp is committed: the
script builds tools/quant_oracle/quantize_with_ggml.c against it, runs it for every type, and keeps only
the bytes it writes).

Regenerate:

  1. A llama.cpp source tree, e.g. the one vendored in the llama-cpp-python 0.3.36 sdist on PyPI
     (llama_cpp_python-0.3.36/vendor/llama.cpp).
  2. A CPU build of its ggml-base library, made with llama.cpp's own CMake and GGML_NATIVE=OFF: the x86-64
     baseline has no FMA, so no a*b+c is contracted, which is the evaluation order mox's quantizers
     reproduce (an FMA build changes rare quants). The script refuses a GGML_NATIVE=ON build directory.
  3. tools/quant_oracle/make_quant_oracle.py --llama-src SRC --llama-build BUILD
     (BUILD holds ggml/src/libggml-base.a), then run tests/quant/quant_oracle_test.cpp and commit.

Output (OUT_DIR, default tests/data/quant_oracle):

  rows.f32       every row back to back, little-endian fp32
  <TYPE>.bin     ggml's blocks of every row back to back, in row order, one file per type
  oracle.json    the rows (name, elements, offset), the types (block size and bytes, file, sha256), and
                 where the bytes came from: llama.cpp/ggml version and commit, compiler, build settings,
                 the command lines
  README.md      the same, in words

No importance matrix anywhere: llama-quantize without --imatrix calls ggml_quantize_chunk(..., imatrix =
NULL) for every tensor, and mox convert has no imatrix either.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# Every type mox can quantize to apart from the plain floats (F16/BF16 are compared bit for bit against
# gguf-py over all fp16 rounding cases in tests/py/test_quant_interop.py; F32/F64 are copies).
# (name, block elements, block bytes)
TYPES = [
    ("Q4_0", 32, 18), ("Q4_1", 32, 20), ("Q5_0", 32, 22), ("Q5_1", 32, 24), ("Q8_0", 32, 34), ("Q8_1", 32, 36),
    ("Q2_K", 256, 84), ("Q3_K", 256, 110), ("Q4_K", 256, 144), ("Q5_K", 256, 176), ("Q6_K", 256, 210),
    ("Q8_K", 256, 292), ("IQ4_NL", 32, 18), ("IQ4_XS", 256, 136), ("MXFP4", 32, 17),
]

SEED = 0x0AC1E


def make_rows(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """The test rows: (name, fp32 values), each a whole number of 256-element super-blocks."""
    f32 = np.float32
    rows: list[tuple[str, np.ndarray]] = []

    def add(name: str, values) -> None:
        v = np.asarray(values, dtype=f32)
        assert v.ndim == 1 and v.size % 256 == 0, name
        rows.append((name, v))

    # Plain Gaussian rows over five decades of scale.
    for i in range(16):
        add(f"gauss_{i}", rng.standard_normal(256) * 10.0 ** rng.uniform(-3, 2))
    for i in range(2):
        add(f"gauss_long_{i}", rng.standard_normal(1024))

    # Heavy tails: Student t with 3 degrees of freedom, and Gaussian rows with a few large outliers.
    for i in range(12):
        add(f"student_t3_{i}", rng.standard_t(3, 256) * 0.02)
    for i in range(12):
        v = rng.standard_normal(256) * 0.02
        idx = rng.choice(256, size=int(rng.integers(1, 5)), replace=False)
        v[idx] = rng.choice([-1.0, 1.0], size=idx.size) * rng.uniform(0.2, 2.0, size=idx.size)
        add(f"outliers_{i}", v)

    # Constant rows (every block all-equal), and zeros of both signs.
    for i, c in enumerate([0.7, -3.25, 1e-3, 1.0, -1.0, 1000.0]):
        add(f"constant_{i}", np.full(256, c))
    add("zeros", np.zeros(256))
    add("negative_zeros", np.full(256, -0.0))

    # Tiny magnitudes: squares that underflow fp32, values below and just above ggml's GROUP_MAX_EPS
    # (1e-15, under which a group counts as zero), fp32 subnormals, and a mix of tiny and normal blocks.
    for i, s in enumerate([1e-12, 1e-14, 3e-15, 1e-16, 1e-20, 1e-30, 1e-39]):
        add(f"tiny_{i}", rng.standard_normal(256) * s)
    v = rng.standard_normal(256)
    v[:128] *= 1e-17
    add("tiny_half", v)

    # Rows like real weights: N(0, sigma) with per-column gains shared by all rows (channel outliers), a
    # small per-row mean, some Laplace rows; the long ones span every row length up to 4096.
    for n, count in [(256, 16), (512, 2), (1024, 2), (2048, 1), (4096, 1)]:
        gains = np.exp(rng.standard_normal(n) * 0.3)
        gains[rng.choice(n, size=max(1, n // 128), replace=False)] *= 8.0
        for i in range(count):
            sigma = rng.uniform(0.005, 0.05)
            base = rng.laplace(0, sigma, n) if i % 3 == 2 else rng.normal(0, sigma, n)
            add(f"weights_{n}_{i}", base * gains + rng.normal(0, sigma * 0.05))

    # Blocks at very different scales inside one super-block, with whole 16- and 32-element groups of
    # zeros (the K-quants' per-group scales and the zero-group paths).
    for i in range(8):
        v = rng.standard_normal(256)
        v *= np.repeat(10.0 ** rng.uniform(-6, 3, size=16), 16)
        zero_groups = rng.choice(16, size=int(rng.integers(1, 6)), replace=False)
        for g in zero_groups:
            v[16 * g:16 * g + 16] = 0
        add(f"mixed_scales_{i}", v)

    # Sparse rows: 90% zeros.
    for i in range(4):
        v = rng.standard_normal(256) * 0.1
        v[rng.random(256) < 0.9] = 0
        add(f"sparse_{i}", v)

    # One-signed rows (the asymmetric formats' min and offset paths).
    add("uniform_pos", rng.uniform(0, 1, 256))
    add("uniform_neg", rng.uniform(-1, 0, 256))
    add("exponential", rng.exponential(0.1, 256))
    add("uniform_offset", rng.uniform(5, 6, 256))
    add("uniform_sym", rng.uniform(-1, 1, 256))
    add("lognormal", rng.lognormal(0, 1, 256) * 0.01)

    # Values on exact ties: integers, halves, alternating signs of one magnitude, ramps.
    add("integers", np.arange(256) - 128)
    add("halves", (np.arange(256) - 128) * 0.5)
    add("alternating", np.tile([1.0, -1.0], 128))
    add("alternating_4", np.tile([-2.0, 2.0, 0.5, -0.5], 64))
    add("ramp", np.linspace(-1, 1, 256))
    add("ramp_pos", np.linspace(0, 3, 256))

    # Large magnitudes (fp16 scales stay finite).
    for i in range(2):
        add(f"large_{i}", rng.standard_normal(256) * 1e4)
    return rows


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def cmake_cache(build: Path) -> dict[str, str]:
    cache = {}
    path = build / "CMakeCache.txt"
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            m = re.match(r"^([A-Za-z_0-9]+):[A-Z]+=(.*)$", line)
            if m:
                cache[m.group(1)] = m.group(2)
    return cache


def llama_cpp_python_version(src: Path) -> str | None:
    """The llama-cpp-python version when src is the llama.cpp vendored in its sdist."""
    init = src.parent.parent / "llama_cpp" / "__init__.py"
    if init.exists():
        m = re.search(r'__version__\s*=\s*"([^"]+)"', init.read_text())
        if m:
            return m.group(1)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-src", type=Path, required=True, help="llama.cpp source tree")
    ap.add_argument("--llama-build", type=Path, required=True,
                    help="its CMake build directory, holding ggml/src/libggml-base.a")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "quant_oracle")
    ap.add_argument("--allow-native", action="store_true",
                    help="accept a build made with GGML_NATIVE=ON (its FMA contraction can change quants)")
    args = ap.parse_args()

    src, build = args.llama_src.resolve(), args.llama_build.resolve()
    lib = build / "ggml" / "src" / "libggml-base.a"
    if not lib.exists():
        sys.exit(f"{lib}: not found (build the ggml-base target first)")
    cache = cmake_cache(build)
    if cache.get("GGML_NATIVE", "OFF").upper() in ("ON", "TRUE", "1") and not args.allow_native:
        sys.exit(f"{build} was configured with GGML_NATIVE=ON; reconfigure with -DGGML_NATIVE=OFF")

    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        exe = tmp / "quantize_with_ggml"
        compile_cmd = [cc, "-O1", "-std=c11", f"-I{src / 'ggml' / 'include'}", f"-I{src / 'ggml' / 'src'}",
                       str(HERE / "quantize_with_ggml.c"), str(lib), "-lm", "-lpthread", "-lstdc++", "-fopenmp",
                       "-o", str(exe)]
        run(compile_cmd)
        ggml_version = run([str(exe), "--version"], capture_output=True, text=True).stdout.strip()

        rows = make_rows(np.random.default_rng(SEED))
        values = np.concatenate([v for _, v in rows]).astype("<f4")
        args.out.mkdir(parents=True, exist_ok=True)
        for old in args.out.glob("*.bin"):
            old.unlink()
        rows_path = args.out / "rows.f32"
        values.tofile(rows_path)
        lengths = tmp / "lengths.txt"
        lengths.write_text("".join(f"{v.size}\n" for _, v in rows))

        types = []
        for name, blk, size in TYPES:
            out = args.out / f"{name}.bin"
            run([str(exe), name, str(rows_path), str(lengths), str(out)])
            data = out.read_bytes()
            assert len(data) == values.size // blk * size, (name, len(data))
            types.append({"name": name, "block_elems": blk, "block_bytes": size, "file": out.name,
                          "sha256": hashlib.sha256(data).hexdigest()})

    row_table, offset = [], 0
    for name, v in rows:
        row_table.append({"name": name, "n": int(v.size), "offset": offset})
        offset += int(v.size)
    # The compiler that built ggml-base (its CMake cache names it), which is what decides the bytes.
    lib_cc = cache.get("CMAKE_C_COMPILER") or cc
    compiler = subprocess.run([lib_cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    git = shutil.which("git")
    llama_commit = None
    if git and (src / ".git").exists():
        r = subprocess.run([git, "-C", str(src), "log", "-1", "--format=%H %s"], capture_output=True, text=True)
        llama_commit = r.stdout.strip() or None
    source = {
        "llama_cpp_python": llama_cpp_python_version(src),
        "ggml_version_commit": ggml_version,
        "llama_cpp_commit": llama_commit,
        "ggml_base_build": {k: cache.get(k) for k in ("CMAKE_BUILD_TYPE", "GGML_NATIVE", "CMAKE_C_COMPILER",
                                                      "CMAKE_C_FLAGS")},
        "compiler": compiler,
        "machine": platform.machine(),
        "quantize_call": "ggml_quantize_chunk(type, row, dst, 0, 1, n, NULL) per row; Q8_1 and Q8_K: "
                         "quantize_row_q8_1_ref / quantize_row_q8_K_ref",
        "generator": "tools/quant_oracle/make_quant_oracle.py --llama-src SRC --llama-build BUILD",
        "compile": "cc -O1 -std=c11 -ISRC/ggml/include -ISRC/ggml/src tools/quant_oracle/quantize_with_ggml.c "
                   "BUILD/ggml/src/libggml-base.a -lm -lpthread -lstdc++ -fopenmp",
        "seed": SEED,
    }
    manifest = {"source": source, "rows_file": rows_path.name,
                "rows_sha256": hashlib.sha256(rows_path.read_bytes()).hexdigest(),
                "n_values": int(values.size), "rows": row_table, "types": types}
    (args.out / "oracle.json").write_text(json.dumps(manifest, indent=1) + "\n")

    lcp = source["llama_cpp_python"]
    origin = (f"the llama.cpp vendored in llama-cpp-python {lcp} (PyPI sdist)" if lcp else "llama.cpp")
    (args.out / "README.md").write_text(f"""# Quantizer oracle: llama.cpp's bytes for fixed rows

Written by `tools/quant_oracle/make_quant_oracle.py` (its docstring says how to regenerate); read by
`tests/quant/quant_oracle_test.cpp`, which quantizes the same rows with mox and compares.

- `rows.f32`: {len(rows)} rows, {values.size} fp32 values (Gaussian, heavy-tailed and outliers, constant,
  zero, tiny, weight-like up to 4096 wide, mixed block scales, sparse, one-signed, exact ties, large).
  Their names and lengths are in `oracle.json`.
- `<TYPE>.bin`: what {origin} writes for each row (ggml {ggml_version}):
  per row `ggml_quantize_chunk(type, row, dst, 0, 1, n, NULL)` (no importance matrix, as llama-quantize
  without `--imatrix` and as mox convert); Q8_1 and Q8_K, which that function does not take, through
  `quantize_row_q8_1_ref` / `quantize_row_q8_K_ref`.
- ggml-base built with CMAKE_BUILD_TYPE={cache.get('CMAKE_BUILD_TYPE')}, GGML_NATIVE={cache.get('GGML_NATIVE')},
  {compiler}, {platform.machine()} (no FMA contraction).

Types: {', '.join(t['name'] for t in types)}.
""")
    print(f"wrote {args.out}: {len(rows)} rows, {values.size} values, {len(types)} types", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
