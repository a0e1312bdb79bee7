"""mox's dense Qwen3.5/3.6 (llama.cpp `qwen35`) against transformers (tests/data/goldens/qwen35, made by
tools/goldens/make_qwen35_goldens.py): `mox convert` checked against llama.cpp's tensor list for the
architecture and the safetensors values of the tensors that are copied (the DeltaNet transforms are
qwen35moe's, checked value by value by its own golden test), then `mox logits` against the logits
transformers computed. Bounds are max|mox - ref| / max|ref| unless stated; each comment gives the
measured value."""
import subprocess

import gguf
import numpy as np
import pytest

from goldens_util import GOLDENS, ON_GPU, argmax_agreement, read_safetensors, rel_err
from goldens_util import meta as golden_meta

GOLDEN = GOLDENS / "qwen35"


def meta():
    return golden_meta(GOLDEN)


def test_conversion_has_llama_cpp_names_keys_and_values(converted):
    cfg = meta()["config"]
    L, F, d = cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["hidden_size"]
    reader = gguf.GGUFReader(str(converted["f32"]))
    fields = {f.name: f for f in reader.fields.values()}
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "qwen35"
    for key, want in [("block_count", L), ("feed_forward_length", F), ("embedding_length", d),
                      ("attention.head_count", cfg["num_attention_heads"]), ("full_attention_interval", 4),
                      ("ssm.group_count", cfg["linear_num_key_heads"]),
                      ("ssm.time_step_rank", cfg["linear_num_value_heads"])]:
        assert int(fields[f"qwen35.{key}"].parts[-1][0]) == want, key
    assert not any(k.startswith("qwen35.expert") for k in fields)  # a dense file has no expert keys
    # Every tensor is one gguf lists for llama.cpp's QWEN35 architecture, and every layer has its FFN.
    known = set()
    for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.QWEN35]:
        name = gguf.TENSOR_NAMES[t]
        for n in ([name.format(bid=i) for i in range(L)] if "{bid}" in name else [name]):
            known |= {n, n + ".weight", n + ".bias"}
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) <= known
    assert len(tensors) == 3 + 14 * (L * 3 // 4) + 11 * (L // 4)  # archs.md §3.2's count at this depth
    hf = read_safetensors(GOLDEN / "hf" / "model.safetensors")
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        for gguf_name, hf_name in [("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                                   ("ffn_down", "mlp.down_proj")]:
            want = hf[f"{p}{hf_name}.weight"]
            got = np.asarray(tensors[f"{b}{gguf_name}.weight"].data, dtype=np.float64).reshape(want.shape)
            assert np.array_equal(got, want), gguf_name
        # Zero-centred HF norms: the converter bakes in the +1.
        for gguf_name, hf_name in [("attn_norm", "input_layernorm"), ("post_attention_norm", "post_attention_layernorm")]:
            want = 1.0 + hf[f"{p}{hf_name}.weight"]
            got = np.asarray(tensors[f"{b}{gguf_name}.weight"].data, dtype=np.float64)
            assert np.allclose(got, want, rtol=0, atol=1e-6), gguf_name
    assert list(tensors["blk.0.ffn_down.weight"].shape) == [F, d]


def test_f32_prefill_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    assert got.shape == ref.shape
    assert rel_err(got, ref) < 5e-5  # measured 1.6e-5 (CPU), 1.9e-5 (GPU: precise F32 products)
    assert argmax_agreement(got, ref) == 1.0


def test_f32_incremental_decode_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits):
    k = meta()["decode_prefill"]
    prefill = np.load(GOLDEN / "logits_prefill.npy")
    decode = np.load(GOLDEN / "logits_decode.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "--incremental", str(k),
                     "-ctk", "f32", "-ctv", "f32")
    assert rel_err(got[:k], prefill[:k]) < 5e-5  # measured 1.6e-5 (CPU), 1.9e-5 (GPU)
    # Through the KV cache and the DeltaNet state: measured 4.5e-6 (CPU), 7.5e-6 (GPU).
    assert rel_err(got[k:], decode) < 2e-5
    assert argmax_agreement(got[k:], decode) == 1.0


# Quantized KV caches: the error is the cache's rounding (measured: f16 4.3e-4 (CPU), 4.6e-4 (GPU); q8_0
# 6.0e-3 on both; argmax 1.0 for both).
@pytest.mark.parametrize("kv,max_err,agree", [("f16", 2e-3, 0.98), ("q8_0", 2e-2, 0.95)])
def test_quantized_kv_cache_within_bounds(mox_bin, converted, ids_file, tmp_path, run_logits, kv, max_err, agree):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "-ctk", kv, "-ctv", kv)
    assert rel_err(got, ref) < max_err
    assert argmax_agreement(got, ref) >= agree


def test_q8_0_weights_stated_bound(mox_bin, converted, ids_file, tmp_path, run_logits):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["q8_0"], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    rms = float(np.sqrt(((got - ref) ** 2).mean() / (ref ** 2).mean()))
    print(f"measured rms {rms:.3e}")
    assert rms < 0.2  # measured 7.9e-2 (CPU), 6.9e-2 (GPU)
    assert argmax_agreement(got, ref) >= 0.75  # measured 0.88 (CPU), 0.91 (GPU)


# Hybrid: some layers' FFNs in host memory, computed by the CPU at decode (the hand-off inside the
# captured graph) and streamed to the GPU for prefill. GPU machine only.
@pytest.mark.skipif(not ON_GPU, reason="needs a GPU (MOX_TEST_DEVICE=cuda)")
@pytest.mark.parametrize("flags", [["-ot", r"blk\.[01]\.ffn_=CPU", "--stream-min-tokens", "2"],
                                   ["-ot", "ffn_=CPU", "-ub", "64"]])
def test_hybrid_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits, flags):
    k = meta()["decode_prefill"]
    prefill = np.load(GOLDEN / "logits_prefill.npy")
    decode = np.load(GOLDEN / "logits_decode.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "--incremental", str(k),
                     "-ctk", "f32", "-ctv", "f32", *flags)
    assert rel_err(got[:k], prefill[:k]) < 5e-5  # measured 1.9e-5 for both placements
    assert rel_err(got[k:], decode) < 2e-5  # measured 5.2e-6
    assert argmax_agreement(got[k:], decode) == 1.0


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU (MOX_TEST_DEVICE=cuda)")
def test_expert_flags_are_refused(mox_bin, converted, ids_file, tmp_path, device_args):
    """A dense model has no routed experts: --n-cpu-moe is an error that says so, never ignored."""
    r = subprocess.run([str(mox_bin), "logits", "-m", str(converted["f32"]), "--tokens", f"@{ids_file}",
                        "-o", str(tmp_path / "l.npy"), *device_args, "--n-cpu-moe", "2"],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "dense" in r.stderr, r.stderr
