"""mox's llama-with-experts (Mixtral) against transformers (tests/data/goldens/mixtral, made by
tools/goldens/make_mixtral_goldens.py): `mox convert` checked tensor by tensor against the
safetensors values, q and k rows permuted for NORM rotary as llama.cpp's converter does, then
`mox logits` against the logits transformers computed. Bounds are max|mox - ref| / max|ref| unless
stated; each comment gives the measured value."""
import subprocess

import gguf
import numpy as np
import pytest

from goldens_util import (GOLDENS, ON_GPU, argmax_agreement, expert_stack, read_safetensors,
                          rel_err)
from goldens_util import meta as golden_meta

GOLDEN = GOLDENS / "mixtral"


def meta():
    return golden_meta(GOLDEN)


def permute_for_norm_rope(w, n_heads):
    """llama.cpp's q/k permute (archs.md §4.2): within each head of d rows, GGUF row 2i + s is HF row
    s * d/2 + i."""
    d = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, d // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def test_conversion_has_llama_cpp_names_keys_and_values(converted):
    cfg = meta()["config"]
    L, E, F = cfg["num_hidden_layers"], cfg["num_local_experts"], cfg["intermediate_size"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    reader = gguf.GGUFReader(str(converted["f32"]))
    fields = {f.name: f for f in reader.fields.values()}
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "llama"
    for key, want in [("block_count", L), ("expert_count", E), ("expert_used_count", cfg["num_experts_per_tok"]),
                      ("feed_forward_length", F), ("attention.head_count", H), ("attention.head_count_kv", Hkv),
                      ("rope.dimension_count", cfg["hidden_size"] // H)]:
        assert int(fields[f"llama.{key}"].parts[-1][0]) == want, key
    # Every tensor is one gguf lists for llama.cpp's LLAMA architecture.
    arch = gguf.MODEL_ARCH.LLAMA
    known = set()
    for t in gguf.MODEL_TENSORS[arch]:
        name = gguf.TENSOR_NAMES[t]
        known |= {name.format(bid=i) + ".weight" for i in range(L)} if "{bid}" in name else {name + ".weight"}
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) <= known
    hf = read_safetensors(GOLDEN / "hf" / "model.safetensors")
    expect = {"token_embd.weight": hf["model.embed_tokens.weight"], "output_norm.weight": hf["model.norm.weight"],
              "output.weight": hf["lm_head.weight"]}
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        moe = p + ("block_sparse_moe." if p + "block_sparse_moe.gate.weight" in hf else "mlp.")
        expect[b + "attn_norm.weight"] = hf[p + "input_layernorm.weight"]
        expect[b + "ffn_norm.weight"] = hf[p + "post_attention_layernorm.weight"]
        expect[b + "attn_q.weight"] = permute_for_norm_rope(hf[p + "self_attn.q_proj.weight"], H)
        expect[b + "attn_k.weight"] = permute_for_norm_rope(hf[p + "self_attn.k_proj.weight"], Hkv)
        expect[b + "attn_v.weight"] = hf[p + "self_attn.v_proj.weight"]
        expect[b + "attn_output.weight"] = hf[p + "self_attn.o_proj.weight"]
        expect[b + "ffn_gate_inp.weight"] = hf[moe + "gate.weight"]
        for which in ["gate", "up", "down"]:
            expect[f"{b}ffn_{which}_exps.weight"] = expert_stack(hf, moe, which, E)
    assert set(expect) == set(tensors)
    for name, want in expect.items():
        got = np.asarray(tensors[name].data, dtype=np.float64).reshape(want.shape)
        assert np.array_equal(got, want), name


def test_f32_prefill_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    assert got.shape == ref.shape
    assert rel_err(got, ref) < 7.5e-6  # measured 1.3e-6 (CPU), 1.4e-6 (GPU)
    assert argmax_agreement(got, ref) == 1.0


def test_f32_incremental_decode_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits):
    k = meta()["decode_prefill"]
    prefill = np.load(GOLDEN / "logits_prefill.npy")
    decode = np.load(GOLDEN / "logits_decode.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "--incremental", str(k),
                     "-ctk", "f32", "-ctv", "f32")
    assert rel_err(got[:k], prefill[:k]) < 5.4e-6  # measured 1.1e-6 (CPU), 1.2e-6 (GPU)
    assert rel_err(got[k:], decode) < 4.7e-6  # measured 8.8e-7 (CPU), 1.2e-6 (GPU): decode through the cache
    assert argmax_agreement(got[k:], decode) == 1.0


# Quantized KV caches: the cache's rounding (measured, the CPU and the GPU alike: f16 3.9e-4, argmax 1.0;
# q8_0 2.1e-2, 0.993).
@pytest.mark.parametrize("kv,max_err", [("f16", 2e-3), ("q8_0", 0.1)])
def test_quantized_kv_cache_within_bounds(mox_bin, converted, ids_file, tmp_path, run_logits, kv, max_err):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "-ctk", kv, "-ctv", kv)
    assert rel_err(got, ref) < max_err
    assert argmax_agreement(got, ref) >= 0.98


def test_q8_0_weights_stated_bound(mox_bin, converted, ids_file, tmp_path, run_logits):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["q8_0"], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    rms = float(np.sqrt(((got - ref) ** 2).mean() / (ref ** 2).mean()))
    print(f"measured rms {rms:.3e}")
    assert rms < 0.1  # measured 5.9e-2 (CPU), 5.2e-2 (GPU)
    assert argmax_agreement(got, ref) >= 0.9  # measured 0.947 (CPU), 0.96 (GPU)


def with_heads_of_32(src, dst):
    """The converted golden as a model of 4 query / 2 key-value heads of 32: the same tensors (4 x 32 =
    2 x 64 rows), other head keys. Mixtral's CUDA attention has no kernel for heads of 32."""
    reader = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), "llama")
    heads = {"llama.attention.head_count": 4, "llama.attention.head_count_kv": 2, "llama.rope.dimension_count": 32,
             "llama.attention.key_length": 32, "llama.attention.value_length": 32}
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name in heads:
            continue
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_array(f.name, f.contents())
        else:
            w.add_key_value(f.name, f.contents(), f.types[0])
    for k, v in heads.items():
        w.add_uint32(k, v)
    for t in reader.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed([int(x) for x in t.shape])),
                     raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU (MOX_TEST_DEVICE=cuda)")
def test_gpu_refuses_a_head_width_it_has_no_kernel_for(mox_bin, converted, ids_file, tmp_path):
    narrow = tmp_path / "heads32.gguf"
    with_heads_of_32(converted["f32"], narrow)
    cpu = subprocess.run([str(mox_bin), "logits", "-m", str(narrow), "--tokens", f"@{ids_file}", "-o",
                          str(tmp_path / "l.npy"), "--device", "cpu"], capture_output=True, text=True)
    assert cpu.returncode == 0, cpu.stderr  # the file is a valid model with heads of 32
    r = subprocess.run([str(mox_bin), "logits", "-m", str(narrow), "--tokens", f"@{ids_file}", "-o",
                        str(tmp_path / "l.npy"), "--device", "cuda"], capture_output=True, text=True)
    assert r.returncode == 1
    assert "head dim 32 has no CUDA kernel" in r.stderr
