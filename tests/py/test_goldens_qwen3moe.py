"""mox's qwen3moe (Qwen3-MoE) against transformers (tests/data/goldens/qwen3moe, made by
tools/goldens/make_qwen3moe_goldens.py): `mox convert` of the HF checkpoint checked tensor by tensor
against the safetensors values (read here with numpy alone), then `mox logits` against the logits
transformers computed. Bounds are max|mox - ref| / max|ref| unless stated; each comment gives the
measured value."""
import gguf
import numpy as np
import pytest

from goldens_util import (GOLDENS, ON_GPU, argmax_agreement, bound, expert_stack,
                          read_safetensors, rel_err)
from goldens_util import meta as golden_meta

GOLDEN = GOLDENS / "qwen3moe"


def meta():
    return golden_meta(GOLDEN)


def test_conversion_has_llama_cpp_names_keys_and_values(converted):
    """llama.cpp's qwen3moe layout (shared/spec/archs.md §2.2): 3 + 12 tensors per layer, norms copied
    as they are (no +1, unlike Qwen3.5), experts stacked {n_embd, n_ff, E}."""
    cfg = meta()["config"]
    L, F, d = cfg["num_hidden_layers"], cfg["moe_intermediate_size"], cfg["hidden_size"]
    E = cfg.get("num_experts", cfg.get("num_local_experts"))
    reader = gguf.GGUFReader(str(converted["f32"]))
    fields = {f.name: f for f in reader.fields.values()}
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "qwen3moe"
    for key, want in [("block_count", L), ("expert_count", E), ("expert_used_count", cfg["num_experts_per_tok"]),
                      ("expert_feed_forward_length", F), ("attention.key_length", cfg["head_dim"]),
                      ("attention.head_count_kv", cfg["num_key_value_heads"]), ("rope.dimension_count", cfg["head_dim"])]:
        assert int(fields[f"qwen3moe.{key}"].parts[-1][0]) == want, key
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 3 + 12 * L
    hf = read_safetensors(GOLDEN / "hf" / "model.safetensors")
    expect = {"token_embd.weight": hf["model.embed_tokens.weight"], "output_norm.weight": hf["model.norm.weight"],
              "output.weight": hf["lm_head.weight"]}
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        for gguf_name, hf_name in [("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm"),
                                   ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                                   ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                                   ("attn_q_norm", "self_attn.q_norm"), ("attn_k_norm", "self_attn.k_norm"),
                                   ("ffn_gate_inp", "mlp.gate")]:
            expect[f"{b}{gguf_name}.weight"] = hf[f"{p}{hf_name}.weight"]
        for which in ["gate", "up", "down"]:
            expect[f"{b}ffn_{which}_exps.weight"] = expert_stack(hf, f"{p}mlp.", which, E)
    assert set(expect) == set(tensors)
    for name, want in expect.items():
        got = np.asarray(tensors[name].data, dtype=np.float64).reshape(want.shape)
        assert np.array_equal(got, want), name
    assert list(tensors["blk.0.ffn_gate_exps.weight"].shape) == [d, F, E]


def test_f32_prefill_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    assert got.shape == ref.shape
    assert rel_err(got, ref) < bound(1e-5, 1.5e-5)  # measured 2.9e-6 (CPU), 3.2e-6 (GPU: precise F32 products)
    assert argmax_agreement(got, ref) == 1.0


def test_f32_incremental_decode_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits):
    k = meta()["decode_prefill"]
    prefill = np.load(GOLDEN / "logits_prefill.npy")
    decode = np.load(GOLDEN / "logits_decode.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "--incremental", str(k),
                     "-ctk", "f32", "-ctv", "f32")
    assert rel_err(got[:k], prefill[:k]) < 6e-6  # measured 1.2e-6 (CPU), 1.5e-6 (GPU)
    assert rel_err(got[k:], decode) < 1e-5  # measured 2.0e-6 (CPU), 1.5e-6 (GPU): through the cache
    assert argmax_agreement(got[k:], decode) == 1.0


# Quantized KV caches: the error is the cache's rounding (measured, the CPU and the GPU alike: f16 4.3e-4,
# argmax 1.0; q8_0 3.3e-2, 0.97; q4_0 0.24, 0.83).
@pytest.mark.parametrize("kv,max_err,agree", [("f16", 2e-3, 0.99), ("q8_0", 0.1, 0.94), ("q4_0", 0.5, 0.75)])
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
    assert rms < 0.1  # measured 3.2e-2 (CPU), 2.2e-2 (GPU)
    assert argmax_agreement(got, ref) >= 0.9  # measured 0.94 (CPU), 0.97 (GPU)


# Hybrid: some layers' experts in host memory, computed by the CPU at decode (the hand-off inside the
# captured graph) and streamed to the GPU for prefill. GPU machine only.
@pytest.mark.skipif(not ON_GPU, reason="needs a GPU (MOX_TEST_DEVICE=cuda)")
@pytest.mark.parametrize("flags", [["--n-cpu-moe", "2", "--stream-min-tokens", "2"], ["--cpu-moe", "-ub", "64"]])
def test_hybrid_matches_transformers(mox_bin, converted, ids_file, tmp_path, run_logits, flags):
    k = meta()["decode_prefill"]
    prefill = np.load(GOLDEN / "logits_prefill.npy")
    decode = np.load(GOLDEN / "logits_decode.npy")
    got = run_logits(mox_bin, converted["f32"], ids_file, tmp_path / "l.npy", "--incremental", str(k),
                     "-ctk", "f32", "-ctv", "f32", *flags)
    assert rel_err(got[:k], prefill[:k]) < 6e-6  # measured 1.5e-6 for both placements
    assert rel_err(got[k:], decode) < 1e-5  # measured 1.7e-6
    assert argmax_agreement(got[k:], decode) == 1.0
