"""mox's qwen35moe forward against transformers' logits (tests/data/goldens/qwen35moe, made by
tools/goldens/make_qwen35moe_goldens.py). Each test converts the HF checkpoint with `mox convert`,
runs `mox logits` and compares. Bounds are max|mox - ref| / max|ref| unless stated."""
import json
import os
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "goldens" / "qwen35moe"


def meta():
    return json.loads((GOLDEN / "goldens.json").read_text())


@pytest.fixture(scope="module")
def ids_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ids") / "ids.txt"
    path.write_text(",".join(map(str, meta()["prompt_ids"])))
    return path


@pytest.fixture(scope="module")
def converted(mox_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("conv")
    files = {}
    for outtype in ["f32", "f16", "q8_0", "q4_k_m"]:
        path = out / f"golden-{outtype}.gguf"
        subprocess.run([str(mox_bin), "convert", str(GOLDEN / "hf"), "-o", str(path), "--outtype", outtype],
                       check=True, capture_output=True)
        files[outtype] = path
    return files


@pytest.fixture(scope="module")
def run_logits(mox_bin, device_args):
    """`mox logits` on the device under test (MOX_TEST_DEVICE; the CPU by default)."""
    def run(_mox_bin, model, ids_file, out, *extra):
        subprocess.run([str(mox_bin), "logits", "-m", str(model), "--tokens", f"@{ids_file}", "-o", str(out),
                        *device_args, *extra], check=True, capture_output=True)
        return np.load(out)
    return run


# On the GPU (MOX_TEST_DEVICE=cuda) batches of more than 8 tokens go through the tensor-core matmuls
# with fp16 operands (activations and dequantized weights rounded to 11 significant bits, fp32
# accumulation), and on this random model that rounding also flips near-tied expert choices; single
# tokens (decode) stay fp32. So the GPU gets its own, looser bounds (the 200-token prompt is a prefill).
ON_GPU = os.environ.get("MOX_TEST_DEVICE", "") == "cuda"


def bound(cpu, gpu):
    return gpu if ON_GPU else cpu


def rel_err(a, ref):
    e = float(np.abs(a - ref).max() / np.abs(ref).max())
    print(f"measured rel err {e:.3e}")  # shown with pytest -s (scripts/gpu_check.sh)
    return e


def argmax_agreement(a, ref):
    agree = float((a.argmax(-1) == ref.argmax(-1)).mean())
    print(f"measured argmax agreement {agree:.4f}")
    return agree


def test_f32_prefill_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    assert got.shape == ref.shape
    # GPU: F32 weights keep their precision in the batched products (precise mode).
    assert rel_err(got, ref) < bound(8e-5, 1e-4)  # measured 1.7e-5 (CPU), 1.9e-5 (GPU)
    assert argmax_agreement(got, ref) == 1.0


def test_f32_incremental_decode_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits):
    m = meta()
    k = m["decode_prefill"]
    prefill = np.load(GOLDEN / "logits_prefill.npy")
    decode = np.load(GOLDEN / "logits_decode.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "--incremental", str(k),
                     "-ctk", "f32", "-ctv", "f32")
    assert rel_err(got[:k], prefill[:k]) < bound(8e-5, 1e-4)  # measured 1.7e-5 (CPU), 1.4e-5 (GPU)
    # Decode through the caches: measured 4.8e-6 (CPU), 7.6e-6 (GPU).
    assert rel_err(got[k:], decode) < bound(2.4e-5, 4e-5)
    assert argmax_agreement(got[k:], decode) == 1.0


# Quantized KV caches: the error is the cache's rounding (measured, the CPU and the GPU alike: f16 8.3e-3,
# bf16 8.2e-3, q8_0 8.2e-3, q4_0 0.11).
@pytest.mark.parametrize("kv,max_err,agree", [("f16", 2e-2, 0.99), ("bf16", 4e-2, 0.97), ("q8_0", 2e-2, 0.98),
                                              ("q4_0", 0.25, 0.9)])
def test_quantized_kv_cache_within_bounds(mox_bin, converted, ids_file, tmp_path, run_logits, kv, max_err, agree):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "-ctk", kv, "-ctv", kv)
    assert rel_err(got, ref) < max_err
    assert argmax_agreement(got, ref) >= agree


def test_f16_weights_match_transformers(mox_bin, converted, ids_file, tmp_path, run_logits):
    # The golden weights are bf16-exact and small, so f16 holds them almost exactly (measured 1.4e-5).
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["f16"], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    # GPU: F16 weights take the fp16 tensor-core products with activations rounded to fp16, as
    # llama.cpp's do (only F32 weights run in precise mode).
    assert rel_err(got, ref) < bound(9e-5, 5e-2)  # measured 1.8e-5 (CPU), 2.7e-2 (GPU)


# Quantized weights change the function: on this random model a weight error of 0.5% (Q8_0) flips
# near-tied top-4 expert choices, so logits move far more than the weights do. The bounds are the
# measured values with margin (Q8_0: rms 0.129, argmax 0.83; Q4_K_M: rms 0.52, argmax 0.41); the exact
# test of the quantized path is the next one.
@pytest.mark.parametrize("outtype,rms_bound,agree", [("q8_0", 0.2, 0.75), ("q4_k_m", 0.7, 0.3)])
def test_quantized_weights_stated_bounds(mox_bin, converted, ids_file, tmp_path, run_logits, outtype, rms_bound, agree):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted[outtype], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    rms = float(np.sqrt(((got - ref) ** 2).mean() / (ref ** 2).mean()))
    assert rms < rms_bound
    assert argmax_agreement(got, ref) >= agree


def dequantized_copy(src: Path, dst: Path):
    """Writes `src` with every tensor dequantized to F32 by the gguf package (an independent decoder)."""
    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dst), arch=None)
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):  # header fields, not metadata
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub)
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, values.reshape([int(x) for x in reversed(t.shape)]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("outtype", ["q8_0", "q4_k_m"])
def test_quantized_file_equals_its_dequantized_f32_copy(mox_bin, converted, ids_file, tmp_path, run_logits, outtype):
    """The reference path on quantized weights computes exactly the function of its dequantized weights.
    (The SIMD kernels quantize activations to 8 bits, and on this random model that flips routing, so
    they are checked op by op against the reference in tests/quant and tests/ops instead.)"""
    copy = tmp_path / "deq.gguf"
    dequantized_copy(converted[outtype], copy)
    ref = ("-ctk", "f32", "-ctv", "f32", "--isa", "scalar")
    a = run_logits(mox_bin, converted[outtype], ids_file, tmp_path / "a.npy", *ref)
    b = run_logits(mox_bin, copy, ids_file, tmp_path / "b.npy", *ref)
    # GPU: the quantized weights' batched products round both operands to fp16, the F32 copy's keep
    # them (precise mode): measured 5.5e-2 for q8_0 on the H200.
    assert rel_err(a, b) < bound(1e-7, 0.1)  # measured 0 (CPU: the same function exactly)


def test_prompt_longer_than_context_is_a_clear_error(mox_bin, converted, ids_file, tmp_path):
    r = subprocess.run([str(mox_bin), "logits", "-m", str(converted["f32"]), "--tokens", f"@{ids_file}",
                        "-o", str(tmp_path / "x.npy"), "-c", "64"], capture_output=True, text=True)
    assert r.returncode == 1
    assert "do not fit the context size 64" in r.stderr
    assert not (tmp_path / "x.npy").exists()


@pytest.mark.skipif(ON_GPU, reason="activations are dumped on the CPU path only")
def test_dumped_activations_match_transformers(mox_bin, converted, ids_file, tmp_path):
    """`mox logits --dump-activations` against the layer inputs and outputs transformers recorded
    (activations.npz: a DeltaNet and an attention layer's mixer and MoE, first tokens of the prompt)."""
    dump = tmp_path / "act"
    dump.mkdir()
    subprocess.run([str(mox_bin), "logits", "-m", str(converted["f32"]), "--tokens", f"@{ids_file}", "-o",
                    str(tmp_path / "l.npy"), "-ctk", "f32", "-ctv", "f32", "--dump-activations", str(dump)],
                   check=True, capture_output=True)
    ref = np.load(GOLDEN / "activations.npz")
    checked = 0
    for key in ref.files:  # e.g. l3_mixer_in: the normed input of layer 3's attention
        want = ref[key]
        got = np.load(dump / f"{key}.npy")[: want.shape[0]]
        assert got.shape == want.shape, key
        assert rel_err(got, want) < 2e-5, key  # measured 1.3e-7 .. 4.1e-6
        checked += 1
    assert checked == 8
