"""mox's reference block conversions against an independent implementation: the `gguf` PyPI package
(gguf.quants, numpy code). Dequantization must be bit-exact for every type both sides know; quantization
must produce the same bytes wherever gguf can quantize.

Every row of mox's quant registry (`quant_tool list`) is enumerated, so a type whose reference function is
missing shows up as a skip with its reason, never silently.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: E402
from gguf import quants as gq  # noqa: E402

SEED = 0x5EED


@dataclass(frozen=True)
class Row:
    id: int
    name: str
    block_elems: int
    block_bytes: int
    has_dequantize: bool
    has_quantize: bool


def _tool_path() -> Path | None:
    tool_dir = os.environ.get("MOX_TOOL_DIR")
    return Path(tool_dir) / "quant_tool" if tool_dir else None


def _registry() -> list[Row]:
    """The registry rows as `quant_tool list` prints them ([] when the tool is not available)."""
    tool = _tool_path()
    if tool is None or not tool.exists():
        return []
    out = subprocess.run([str(tool), "list"], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        i, name, blk, size, dq, q = line.split()
        rows.append(Row(int(i), name, int(blk), int(size), dq == "1", q == "1"))
    return rows


ROWS = _registry()
INTEGER_TYPES = {"I8", "I16", "I32", "I64"}
NUMERIC_ROWS = [r for r in ROWS if r.name not in INTEGER_TYPES]


def _gguf_type(name: str) -> GGMLQuantizationType:
    return GGMLQuantizationType[name]


def _gguf_can(op: str, row: Row) -> bool:
    """Whether gguf.quants implements `op` ('dequantize' / 'quantize') for this type."""
    qtype = _gguf_type(row.name)
    _, type_size = GGML_QUANT_SIZES[qtype]
    try:
        if op == "dequantize":
            gq.dequantize(np.zeros((1, type_size), dtype=np.uint8), qtype)
        else:
            gq.quantize(np.zeros((1, row.block_elems), dtype=np.float32), qtype)
    except NotImplementedError:
        return False
    return True


def _run(tool_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool_dir / "quant_tool"), *args], capture_output=True, text=True)


def _mox_dequantize(tool_dir: Path, tmp_path: Path, row: Row, blocks: np.ndarray) -> np.ndarray:
    src, dst = tmp_path / "in.bin", tmp_path / "out.f32"
    blocks.astype(np.uint8).tofile(src)
    r = _run(tool_dir, "dequant", row.name, str(src), str(dst))
    assert r.returncode == 0, r.stderr
    return np.fromfile(dst, dtype=np.float32)


def _mox_quantize(tool_dir: Path, tmp_path: Path, row: Row, values: np.ndarray) -> np.ndarray:
    src, dst = tmp_path / "in.f32", tmp_path / "out.bin"
    values.astype(np.float32).tofile(src)
    r = _run(tool_dir, "quant", row.name, str(src), str(dst))
    assert r.returncode == 0, r.stderr
    return np.fromfile(dst, dtype=np.uint8)


def _same_floats(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element: identical fp32 bits, or both NaN (NaN payloads are not part of either contract)."""
    a = a.astype(np.float32)
    b = b.astype(np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def _describe_mismatch(ok: np.ndarray, mine: np.ndarray, ref: np.ndarray, per_block: int) -> str:
    bad = np.flatnonzero(~ok)
    i = int(bad[0])
    return (f"{bad.size} of {ok.size} differ; first at element {i} (block {i // per_block}): "
            f"mox {mine[i]!r} vs gguf {ref[i]!r}")


# ----------------------------------------------------------------------------------------------------
# Random blocks for the dequantization comparison.

# Byte offsets of the fp16 scale fields (d, dmin, m, s) per type, from the block layouts (spec §3-§4).
# Random bytes there could be inf/NaN, which makes comparisons meaningless, so they are overwritten with
# finite values spanning fp16's whole range (subnormals included).
FP16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q8_1": [0, 2],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0],
    "IQ2_XXS": [0], "IQ2_XS": [0], "IQ2_S": [0], "IQ3_XXS": [0], "IQ3_S": [0], "IQ1_S": [0],
    "TQ1_0": [52], "TQ2_0": [64],
}
PLAIN_FLOATS = {"F32", "F16", "BF16", "F64"}


def _sane_fp16(rng: np.random.Generator, n: int) -> np.ndarray:
    """n finite fp16 values: random sign, magnitudes log-uniform over 2^-26 .. 2^8 (zeros, subnormals and
    normals all occur), as uint16 bits."""
    mag = np.exp2(rng.uniform(-26, 8, size=n))
    v = (mag * rng.choice([-1.0, 1.0], size=n)).astype(np.float16)
    return v.view(np.uint16)


def _set_fp16_fields(row: Row, blocks: np.ndarray, bits: np.ndarray) -> None:
    """Writes one fp16 value (bits, shape [n_blocks]) into every scale field of each block."""
    if row.name == "IQ1_M":
        # IQ1_M has no d field: its fp16 super-scale is the top nibble of each of the 4 u16 scale words
        # at bytes 48..55 (word w carries fp16 bits 4w..4w+3), spec §4.2.
        for w in range(4):
            hi = 48 + 2 * w + 1
            nib = ((bits >> (4 * w)) & 0xF).astype(np.uint8)
            blocks[:, hi] = (blocks[:, hi] & 0x0F) | (nib << 4)
        return
    for off in FP16_FIELDS.get(row.name, []):
        blocks[:, off:off + 2] = bits.astype("<u2").view(np.uint8).reshape(-1, 2)


def _dequant_blocks(row: Row, rng: np.random.Generator, n_random: int) -> np.ndarray:
    """Random blocks with sane scales, plus edge cases: all-0x00 and all-0xFF payloads, and scales of
    +0, -0, the largest fp16 (65504), the smallest subnormal and a negative one."""
    random = rng.integers(0, 256, size=(n_random, row.block_bytes), dtype=np.uint8)
    if row.name in PLAIN_FLOATS:
        # Every bit pattern is meaningful (inf and NaN included); add the specials explicitly.
        specials = np.zeros((8, row.block_bytes), dtype=np.uint8)
        specials[1] = 0xFF
        specials[2, -1] = 0x80  # -0
        return np.concatenate([random, specials])
    _set_fp16_fields(row, random, _sane_fp16(rng, n_random))
    edge_scales = np.array([0x0000, 0x8000, 0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x3C00, 0xBC00], dtype=np.uint16)
    edges = []
    for fill in (0x00, 0xFF, 0x5A):
        e = np.full((edge_scales.size, row.block_bytes), fill, dtype=np.uint8)
        _set_fp16_fields(row, e, edge_scales)
        edges.append(e)
    return np.concatenate([random, *edges])


# ----------------------------------------------------------------------------------------------------
# Registry consistency


def test_registry_is_listed():
    assert _tool_path() is not None, "MOX_TOOL_DIR is not set (run through ctest)"
    assert ROWS, f"`{_tool_path()} list` printed no rows"


# gguf-py's size table still describes an old Q8_1 (fp32 d and s: 40 bytes); ggml's block_q8_1 holds two
# fp16s (36 bytes), which is what the spec's verified table and mox use.
KNOWN_GGUF_SIZE_DIFFERENCES = {"Q8_1": ((32, 40), (32, 36))}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_registry_row_matches_gguf(row: Row):
    assert row.name in GGMLQuantizationType.__members__, f"gguf has no type named {row.name}"
    qtype = _gguf_type(row.name)
    assert qtype.value == row.id
    gguf_size = tuple(GGML_QUANT_SIZES[qtype])
    ours = (row.block_elems, row.block_bytes)
    if row.name in KNOWN_GGUF_SIZE_DIFFERENCES:
        assert (gguf_size, ours) == KNOWN_GGUF_SIZE_DIFFERENCES[row.name]
    else:
        assert gguf_size == ours


# The types whose reference dequantize and quantize this test suite requires; the other numeric rows
# (the grid i-quants) are reported as skips while their functions are missing.
REQUIRED_REFERENCES = {"F32", "F16", "BF16", "F64", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
                       "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ4_NL", "IQ4_XS", "MXFP4"}


@pytest.mark.parametrize("row", NUMERIC_ROWS, ids=lambda r: r.name)
def test_registry_row_has_reference_functions(row: Row):
    if row.name in REQUIRED_REFERENCES:
        assert row.has_dequantize and row.has_quantize, f"{row.name} lacks a reference function"
        return
    if not row.has_dequantize:
        pytest.skip(f"{row.name}: registry row has no reference dequantize yet")
    if not row.has_quantize:
        pytest.skip(f"{row.name}: no reference quantize (dequantize-only type)")


# ----------------------------------------------------------------------------------------------------
# Dequantization: bit-exact against gguf.quants.dequantize


@pytest.mark.parametrize("row", NUMERIC_ROWS, ids=lambda r: r.name)
def test_dequantize_matches_gguf(row: Row, tool_dir: Path, tmp_path: Path):
    if not _gguf_can("dequantize", row):
        pytest.skip(f"gguf cannot dequantize {row.name}")
    if not row.has_dequantize:
        pytest.skip(f"{row.name}: registry row has no reference dequantize yet")
    rng = np.random.default_rng([SEED, row.id])
    n_random = 4096 if row.block_elems == 1 else 2000
    blocks = _dequant_blocks(row, rng, n_random)
    mine = _mox_dequantize(tool_dir, tmp_path, row, blocks)
    ref = gq.dequantize(blocks.reshape(1, -1).copy(), _gguf_type(row.name)).reshape(-1).astype(np.float32)
    assert mine.shape == ref.shape
    ok = _same_floats(mine, ref)
    assert ok.all(), _describe_mismatch(ok, mine, ref, row.block_elems)


def test_f16_dequantize_all_65536_values(tool_dir: Path, tmp_path: Path):
    row = next(r for r in ROWS if r.name == "F16")
    bits = np.arange(65536, dtype=np.uint16)
    mine = _mox_dequantize(tool_dir, tmp_path, row, bits.view(np.uint8))
    ref = bits.view(np.float16).astype(np.float32)
    ok = _same_floats(mine, ref)
    assert ok.all(), _describe_mismatch(ok, mine, ref, 1)


# ----------------------------------------------------------------------------------------------------
# Quantization: identical bytes to gguf.quants.quantize


def _float_inputs(row: Row, rng: np.random.Generator) -> np.ndarray:
    """fp32 test rows for a quantizer: Gaussian blocks with per-block scales over 12 decades, plus edge
    blocks (zeros, constants, sign ties on the largest magnitude, exact integers, one outlier)."""
    blk = max(row.block_elems, 32)
    n_blocks = 1024
    scale = 10.0 ** rng.uniform(-6, 6, size=(n_blocks, 1))
    gauss = (rng.standard_normal((n_blocks, blk)) * scale).astype(np.float32)
    edges = [
        np.zeros(blk),
        np.full(blk, 0.7),
        np.full(blk, -3.25),
        np.tile([1.0, -1.0], blk // 2),                      # |max| tie, opposite signs
        np.tile([-2.0, 2.0, 0.5, -0.5], blk // 4),
        np.arange(blk) - blk / 2,                            # exact integers
        (np.arange(blk) - blk / 2) * 0.5,                    # exact halves
        np.where(np.arange(blk) == 5, 1000.0, 0.001 * np.arange(blk)),  # one outlier
        np.linspace(-1, 1, blk),
    ]
    return np.concatenate([gauss.reshape(-1), *[np.asarray(e, dtype=np.float32) for e in edges]])


# (levels, asymmetric) of the legacy types whose quantizer computes trunc(a*b + c) (spec §5).
FMA_SENSITIVE = {"Q4_0": (16, False), "Q5_0": (32, False), "Q4_1": (16, True), "Q5_1": (32, True)}


def _fma_sensitive_blocks(row: Row, rng: np.random.Generator, n_blocks: int = 16) -> np.ndarray:
    """Blocks whose quants differ depending on whether the quantizer's `x*id + offset` is evaluated as
    two fp32 roundings (ggml's C code compiled without contraction, and gguf-py) or fused into one FMA.

    The spec (§5) warns that a compiler contracting that expression changes results "in rare ties"; random
    data almost never hits them, so such elements are constructed: for each level boundary k + 0.5, the
    fp32 neighbours of the x that maps exactly onto it are tried, and the ones where the two evaluation
    orders truncate differently are kept. mox must match gguf (two roundings) on all of them."""
    levels, asym = FMA_SENSITIVE[row.name]
    f32, f64 = np.float32, np.float64
    blocks = []
    for _ in range(200 * n_blocks):  # the asymmetric case finds candidates in only a few % of attempts
        if len(blocks) == n_blocks:
            break
        lo = f32(-rng.uniform(1.0, 2.0))               # element 0: the largest magnitude (and the min)
        if asym:
            hi = f32(rng.uniform(0.5, 1.0) * -lo)      # element 1: the max
            d = f32(f32(hi - lo) / f32(levels - 1))
            base, offset = lo, f32(0.5)
        else:
            hi = None
            d = f32(lo / f32(-(levels // 2)))
            base, offset = f32(0), f32(levels // 2 + 0.5)
        inv = f32(1) / d
        k = np.arange(-(levels // 2) if not asym else 0, levels // 2 if not asym else levels - 1)
        centers = (k + 0.5) / f64(inv) + f64(base)
        steps = np.arange(-512, 513) * 2.0**-24
        x = (centers[:, None] * (1 + steps[None, :])).astype(f32).reshape(-1)
        x = x[np.abs(x) < abs(lo)]
        if asym:
            x = x[(x > lo) & (x < hi)]
        t = (x - base).astype(f32)                     # both orders round x - min first
        plain = np.trunc(((t * inv).astype(f32) + offset).astype(f32))
        fused = np.trunc((t.astype(f64) * f64(inv) + f64(offset)).astype(f32))  # exact product and sum, one rounding
        picked = x[plain != fused]
        if picked.size == 0:
            continue
        fill = 31 if not asym else 30
        vals = rng.choice(picked, size=fill)
        head = [lo] if not asym else [lo, hi]
        blocks.append(np.concatenate([np.array(head, dtype=f32), vals.astype(f32)]))
    assert blocks, f"found no FMA-sensitive inputs for {row.name}"
    return np.concatenate(blocks)


def _fp16_specials() -> np.ndarray:
    """fp32 values that probe fp32 -> fp16 rounding: every fp16 value, the exact midpoint between each pair
    of adjacent fp16 values and the fp32 neighbours of that midpoint (ties-to-even and its two sides), the
    overflow boundary (65504 .. 65520), the underflow boundary (2^-25) and inf/NaN."""
    h = np.arange(0, 0x7C00, dtype=np.uint16)  # all finite non-negative fp16
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).view(np.float16).astype(np.float64)
    mid = ((lo + hi) / 2).astype(np.float32)  # exact in fp32
    below = np.nextafter(mid, np.float32(0))
    above = np.nextafter(mid, np.float32(np.inf))
    extra = np.array([65504.0, 65519.99, 65520.0, 65536.0, 1e10, np.inf, np.nan, 2.0**-25,
                      np.nextafter(np.float32(2.0**-25), np.float32(1)), 2.0**-26, 1e-45, 2.0**-14,
                      np.nextafter(np.float32(2.0**-14), np.float32(0))], dtype=np.float32)
    pos = np.concatenate([lo.astype(np.float32), mid, below, above, extra])
    return np.concatenate([pos, -pos])


# Blocks scaled up to 1e6 overflow fp16 scales to inf on both sides (numpy warns about the cast); that is
# a legitimate edge case to compare, not an error.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("row", NUMERIC_ROWS, ids=lambda r: r.name)
def test_quantize_matches_gguf(row: Row, tool_dir: Path, tmp_path: Path):
    if not _gguf_can("quantize", row):
        pytest.skip(f"gguf cannot quantize {row.name} (compared via round-trip bounds in mox_tests instead)")
    if not row.has_quantize:
        pytest.skip(f"{row.name}: registry row has no reference quantize yet")
    rng = np.random.default_rng([SEED, 1000 + row.id])
    values = _float_inputs(row, rng)
    if row.name in ("F16", "BF16"):
        # Random fp32 bit patterns too (every exponent, inf, NaN), and the fp16 rounding probes.
        bits = rng.integers(0, 2**32, size=1 << 18, dtype=np.uint64).astype(np.uint32)
        values = np.concatenate([values, bits.view(np.float32), _fp16_specials()])
    if row.name in FMA_SENSITIVE:
        values = np.concatenate([values, _fma_sensitive_blocks(row, rng)])
    mine = _mox_quantize(tool_dir, tmp_path, row, values)
    ref = np.asarray(gq.quantize(values.reshape(1, -1), _gguf_type(row.name))).reshape(-1).view(np.uint8)
    assert mine.shape == ref.shape
    if row.name in ("F16", "BF16"):
        # Compare per element; a NaN only has to stay a NaN (ggml writes 0x7E00|sign for fp16, numpy keeps
        # payload bits).
        a = mine.view(np.uint16)
        b = ref.view(np.uint16)
        nan = (lambda u: ((u & 0x7C00) == 0x7C00) & ((u & 0x03FF) != 0)) if row.name == "F16" else \
              (lambda u: ((u & 0x7F80) == 0x7F80) & ((u & 0x007F) != 0))
        ok = (a == b) | (nan(a) & nan(b))
        assert ok.all(), _describe_mismatch(ok, a, b, 1) + f" (input {values[np.flatnonzero(~ok)[0]]!r})"
        return
    ok = mine.reshape(-1, row.block_bytes) == ref.reshape(-1, row.block_bytes)
    bad_blocks = np.flatnonzero(~ok.all(axis=1))
    assert bad_blocks.size == 0, (
        f"{bad_blocks.size} of {ok.shape[0]} blocks differ; first: block {bad_blocks[0]}\n"
        f"  input {values.reshape(-1, row.block_elems)[bad_blocks[0]]!r}\n"
        f"  mox  {mine.reshape(-1, row.block_bytes)[bad_blocks[0]].tolist()}\n"
        f"  gguf {ref.reshape(-1, row.block_bytes)[bad_blocks[0]].tolist()}")


# ----------------------------------------------------------------------------------------------------
# The tool's error handling


def test_quant_tool_rejects_bad_input(tool_dir: Path, tmp_path: Path):
    assert _run(tool_dir).returncode == 2
    assert _run(tool_dir, "dequant", "Q4_0").returncode == 2

    src = tmp_path / "odd.bin"
    src.write_bytes(b"\x00" * 19)  # not a whole Q4_0 block (18 bytes)
    r = _run(tool_dir, "dequant", "Q4_0", str(src), str(tmp_path / "out"))
    assert r.returncode == 1 and "whole number" in r.stderr

    r = _run(tool_dir, "dequant", "Q9_9", str(src), str(tmp_path / "out"))
    assert r.returncode == 1 and "unknown type" in r.stderr

    r = _run(tool_dir, "quant", "Q4_K", str(tmp_path / "missing.f32"), str(tmp_path / "out"))
    assert r.returncode == 1 and "cannot open" in r.stderr

    f32 = tmp_path / "short.f32"
    np.zeros(31, dtype=np.float32).tofile(f32)
    r = _run(tool_dir, "quant", "Q8_0", str(f32), str(tmp_path / "out"))
    assert r.returncode == 1 and "32-element" in r.stderr

    r = _run(tool_dir, "quant", "I32", str(f32), str(tmp_path / "out"))
    assert r.returncode == 1 and "no reference quantize" in r.stderr
