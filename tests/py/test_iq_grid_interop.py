"""Grid i-quant dequantization (IQ2_XXS ... IQ1_M) against the PyPI gguf package's numpy reference.

Random blocks: every byte random, except that the fp16 super-scale is forced to a finite value (inf
or NaN scales are outside what these formats produce). The outputs must match bit for bit.
"""
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize

N_BLOCKS = 2000

GRID_TYPES = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]


def random_finite_halves(rng: np.random.Generator, count: int) -> np.ndarray:
    """fp16 bit patterns covering normals, subnormals and both zeros, never inf/NaN."""
    bits = rng.integers(0, 1 << 16, size=count, dtype=np.uint32).astype(np.uint16)
    exponent = (bits >> 10) & 0x1F
    bits = np.where(exponent == 0x1F, bits & np.uint16(0xBFFF), bits).astype(np.uint16)  # exp 31 -> 15
    bits[:4] = [0x0000, 0x8000, 0x0001, 0x83FF]  # +0, -0, smallest subnormal, negative subnormal
    bits[4:6] = [0x7BFF, 0xFBFF]  # largest finite magnitudes
    return bits


def random_blocks(type_name: str, seed: int) -> np.ndarray:
    """[N_BLOCKS, type_size] uint8 blocks with a finite fp16 scale."""
    qtype = Q[type_name]
    _, type_size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(N_BLOCKS, type_size), dtype=np.uint16).astype(np.uint8)
    d = random_finite_halves(rng, N_BLOCKS)
    if qtype == Q.IQ1_M:
        # d is split over the top nibbles of the four u16 scale words at bytes 48..55: word w carries
        # fp16 bits 4w..4w+3 in its bits 12..15.
        words = blocks[:, 48:56].copy().view("<u2")
        for w in range(4):
            nibble = (d >> np.uint16(4 * w)) & np.uint16(0xF)
            words[:, w] = (words[:, w] & np.uint16(0x0FFF)) | (nibble << np.uint16(12))
        blocks[:, 48:56] = words.view(np.uint8)
    else:
        blocks[:, 0:2] = d.astype("<u2").reshape(-1, 1).view(np.uint8)
    return blocks


def run_tool(tool_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool_dir / "iq_tool"), *args], capture_output=True, text=True)


@pytest.mark.parametrize("type_name", GRID_TYPES)
def test_dequant_matches_gguf_bit_exact(type_name: str, tool_dir: Path, tmp_path: Path) -> None:
    blocks = random_blocks(type_name, seed=GRID_TYPES.index(type_name) + 1)
    block_size, _ = GGML_QUANT_SIZES[Q[type_name]]
    src = tmp_path / "in.bin"
    dst = tmp_path / "out.f32"
    src.write_bytes(blocks.tobytes())

    result = run_tool(tool_dir, "dequant", type_name, str(src), str(dst))
    assert result.returncode == 0, result.stderr

    ours = np.fromfile(dst, dtype="<f4")
    expected = dequantize(blocks, Q[type_name]).astype(np.float32).reshape(-1)
    assert ours.shape == (N_BLOCKS * block_size,)
    assert np.all(np.isfinite(expected))
    mismatch = np.flatnonzero(ours.view(np.uint32) != expected.view(np.uint32))
    assert mismatch.size == 0, (
        f"{mismatch.size} mismatches; first at element {mismatch[0]} "
        f"(block {mismatch[0] // block_size}): ours {ours[mismatch[0]]!r}, gguf {expected[mismatch[0]]!r}"
    )
    # The data must exercise the formats: plenty of nonzero values of both signs.
    assert np.count_nonzero(ours > 0) > ours.size // 10
    assert np.count_nonzero(ours < 0) > ours.size // 10


def test_tool_accepts_lower_case_type(tool_dir: Path, tmp_path: Path) -> None:
    blocks = random_blocks("IQ3_S", seed=99)[:3]
    src = tmp_path / "in.bin"
    dst = tmp_path / "out.f32"
    src.write_bytes(blocks.tobytes())
    result = run_tool(tool_dir, "dequant", "iq3_s", str(src), str(dst))
    assert result.returncode == 0, result.stderr
    expected = dequantize(blocks, Q.IQ3_S).astype(np.float32).reshape(-1)
    assert np.array_equal(np.fromfile(dst, dtype="<f4").view(np.uint32), expected.view(np.uint32))


def test_tool_rejects_bad_arguments(tool_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    dst = tmp_path / "out.f32"
    src.write_bytes(bytes(66 * 2))

    usage = run_tool(tool_dir, "dequant", "IQ2_XXS", str(src))
    assert usage.returncode == 2 and "usage" in usage.stderr

    wrong_verb = run_tool(tool_dir, "quant", "IQ2_XXS", str(src), str(dst))
    assert wrong_verb.returncode == 2 and "usage" in wrong_verb.stderr

    unknown = run_tool(tool_dir, "dequant", "IQ9_Z", str(src), str(dst))
    assert unknown.returncode == 1 and "unknown type 'IQ9_Z'" in unknown.stderr

    missing = run_tool(tool_dir, "dequant", "IQ2_XXS", str(tmp_path / "nope.bin"), str(dst))
    assert missing.returncode == 1 and "cannot open" in missing.stderr

    src.write_bytes(bytes(67))
    ragged = run_tool(tool_dir, "dequant", "IQ2_XXS", str(src), str(dst))
    assert ragged.returncode == 1 and "not a whole number of 66-byte IQ2_XXS blocks" in ragged.stderr
