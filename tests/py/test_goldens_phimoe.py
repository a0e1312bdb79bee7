"""mox's phimoe (Phi-3.5-MoE) against transformers (tests/data/goldens/phimoe, made by
tools/goldens/make_phimoe_goldens.py): `mox convert` checked tensor by tensor against the
safetensors values and the config's rope factors, then `mox logits` against the logits transformers
computed: LayerNorm with biases, q/k/v/o and lm-head biases, sparsemixer routing and longrope rotary.

The rotary factor sets: mox (as llama.cpp) takes the long set when a sequence's context exceeds the
original context (64 tokens in the golden config). transformers 5.17 computed every golden with the
short set, the 150-token ones too (measured: mox's long-set logits are 1.04 relative off, the same
file with the short factors in the long slot 3.4e-6). So the 150-token comparisons run a copy of the
converted file whose long slot holds the short factors (`as_transformers`), the 48-token one the file
as converted (short by mox's own rule), and one test checks that a context past 64 does switch sets.
Bounds are max|mox - ref| / max|ref| unless stated; each comment gives the measured value."""
import shutil
import subprocess

import gguf
import numpy as np
import pytest

from goldens_util import (GOLDENS, ON_GPU, argmax_agreement, expert_stack, read_safetensors,
                          rel_err)
from goldens_util import meta as golden_meta

GOLDEN = GOLDENS / "phimoe"


def meta():
    return golden_meta(GOLDEN)


def rope_section(cfg):
    return cfg.get("rope_parameters") or cfg["rope_scaling"]


@pytest.fixture(scope="module")
def as_transformers(converted, tmp_path_factory):
    """The converted files with the short factors copied into the long slot: the rotary transformers
    5.17 computed at every length."""
    out = {}
    for outtype, path in converted.items():
        copy = tmp_path_factory.mktemp("short") / path.name
        shutil.copy(path, copy)
        reader = gguf.GGUFReader(str(copy), "r+")
        tensors = {t.name: t for t in reader.tensors}
        tensors["rope_factors_long.weight"].data[:] = tensors["rope_factors_short.weight"].data
        reader.data.flush()
        out[outtype] = copy
    return out


def test_conversion_has_llama_cpp_names_keys_and_values(converted):
    """llama.cpp's phimoe layout (shared/spec/archs.md §5.2): biases beside the norms and the attention
    projections, the lm head's bias, the rope factor tensors from the config, experts stacked."""
    cfg = meta()["config"]
    L, E, F = cfg["num_hidden_layers"], cfg["num_local_experts"], cfg["intermediate_size"]
    rope = rope_section(cfg)
    reader = gguf.GGUFReader(str(converted["f32"]))
    fields = {f.name: f for f in reader.fields.values()}
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "phimoe"
    for key, want in [("block_count", L), ("expert_count", E), ("expert_used_count", cfg["num_experts_per_tok"]),
                      ("feed_forward_length", F), ("attention.head_count", cfg["num_attention_heads"]),
                      ("attention.head_count_kv", cfg["num_key_value_heads"]),
                      ("rope.scaling.original_context_length", rope["original_max_position_embeddings"])]:
        assert int(fields[f"phimoe.{key}"].parts[-1][0]) == want, key
    attn_factor = float(fields["phimoe.rope.scaling.attn_factor"].parts[-1][0])
    assert attn_factor == pytest.approx(rope["short_mscale"], rel=1e-6)
    # Every tensor is one gguf lists for llama.cpp's PHIMOE architecture.
    known = set()
    for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.PHIMOE]:
        name = gguf.TENSOR_NAMES[t]
        names = [name.format(bid=i) for i in range(L)] if "{bid}" in name else [name]
        known |= {n + suffix for n in names for suffix in (".weight", ".bias")}
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) <= known, set(tensors) - known
    hf = read_safetensors(GOLDEN / "hf" / "model.safetensors")
    expect = {"token_embd.weight": hf["model.embed_tokens.weight"],
              "output_norm.weight": hf["model.norm.weight"], "output_norm.bias": hf["model.norm.bias"],
              "output.weight": hf["lm_head.weight"], "output.bias": hf["lm_head.bias"],
              "rope_factors_short.weight": np.array(rope["short_factor"], dtype=np.float32),
              "rope_factors_long.weight": np.array(rope["long_factor"], dtype=np.float32)}
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        moe = p + ("block_sparse_moe." if p + "block_sparse_moe.gate.weight" in hf else "mlp.")
        for gguf_name, hf_name in [("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm"),
                                   ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                                   ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj")]:
            for suffix in ("weight", "bias"):
                expect[f"{b}{gguf_name}.{suffix}"] = hf[f"{p}{hf_name}.{suffix}"]
        expect[b + "ffn_gate_inp.weight"] = hf[moe + ("router.weight" if moe + "router.weight" in hf else "gate.weight")]
        for which in ["gate", "up", "down"]:
            expect[f"{b}ffn_{which}_exps.weight"] = expert_stack(hf, moe, which, E)
    assert set(expect) == set(tensors)
    for name, want in expect.items():
        got = np.asarray(tensors[name].data, dtype=np.float64).reshape(want.shape)
        assert np.array_equal(got, want.astype(np.float64)), name


def test_f32_prefill_matches_transformers(mox_bin, as_transformers, ids_file, tmp_path, run_logits):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, as_transformers["f32"], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    assert got.shape == ref.shape
    # GPU: F32 weights keep their precision in the batched products (precise mode), so no router logit
    # crosses sparsemixer's 2% margin that transformers' did not.
    assert rel_err(got, ref) < 1.5e-5  # measured 3.4e-6 (CPU), 3.1e-6 (GPU)
    assert argmax_agreement(got, ref) == 1.0


def test_f32_short_context_uses_the_short_factors(mox_bin, converted, tmp_path, run_logits):
    ref = np.load(GOLDEN / "logits_short.npy")
    ids = tmp_path / "short.txt"
    ids.write_text(",".join(map(str, meta()["prompt_ids"][:ref.shape[0]])))
    got = run_logits(mox_bin, converted["f32"], ids, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    assert got.shape == ref.shape
    assert rel_err(got, ref) < 7.5e-6  # measured 1.6e-6 (CPU), 1.4e-6 (GPU)
    assert argmax_agreement(got, ref) == 1.0
    # The same tokens in a context past the original 64 take the long factors: far from the reference,
    # and exactly what the file with the short set in the long slot gives back.
    other = run_logits(mox_bin, converted["f32"], ids, tmp_path / "m.npy", "-c", "128", "-ctk", "f32", "-ctv", "f32")
    assert rel_err(other, ref) > 0.1  # measured 0.99


def test_f32_incremental_decode_matches_transformers(mox_bin, as_transformers, ids_file, tmp_path, run_logits):
    k = meta()["decode_prefill"]
    prefill = np.load(GOLDEN / "logits_prefill.npy")
    decode = np.load(GOLDEN / "logits_decode.npy")
    got = run_logits(mox_bin, as_transformers["f32"], ids_file, tmp_path / "l.npy", "--incremental", str(k),
                     "-ctk", "f32", "-ctv", "f32")
    assert rel_err(got[:k], prefill[:k]) < 6e-6  # measured 1.3e-6 (CPU and GPU)
    assert rel_err(got[k:], decode) < 2e-5  # measured 4.2e-6 (CPU), 3.9e-6 (GPU): through the cache
    assert argmax_agreement(got[k:], decode) == 1.0


# Quantized KV caches and weights: sparsemixer's weights jump where a logit crosses its 2% margin,
# so the rounding of a cache or of the weights moves these logits ten times more than qwen3moe's
# continuous softmax routing does (measured, the CPU and the GPU alike: f16 KV 5.3e-4, argmax 1.0; q8_0
# KV 0.61, argmax 0.847; Q8_0 weights rms 0.31 (CPU), 0.27 (GPU); qwen3moe's q8_0 KV 3.3e-2).
@pytest.mark.parametrize("kv,max_err,agree", [("f16", 2.5e-3, 0.97), ("q8_0", 1.0, 0.8)])
def test_quantized_kv_cache_within_bounds(mox_bin, as_transformers, ids_file, tmp_path, run_logits, kv, max_err,
                                          agree):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, as_transformers["f32"], ids_file, tmp_path / "l.npy", "-ctk", kv, "-ctv", kv)
    assert rel_err(got, ref) < max_err
    assert argmax_agreement(got, ref) >= agree


def test_q8_0_weights_stated_bound(mox_bin, as_transformers, ids_file, tmp_path, run_logits):
    ref = np.load(GOLDEN / "logits_prefill.npy")
    got = run_logits(mox_bin, as_transformers["q8_0"], ids_file, tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    rms = float(np.sqrt(((got - ref) ** 2).mean() / (ref ** 2).mean()))
    print(f"measured rms {rms:.3e}")
    assert rms < 0.5  # measured 0.31 (CPU), 0.27 (GPU)
    assert argmax_agreement(got, ref) >= 0.65  # measured 0.713 (CPU), 0.78 (GPU)


# Hybrid: some layers' experts in host memory, computed by the CPU at decode (the hand-off inside the
# captured graph, routed by the GPU's sparsemixer) and streamed to the GPU for prefill.
@pytest.mark.skipif(not ON_GPU, reason="needs a GPU (MOX_TEST_DEVICE=cuda)")
@pytest.mark.parametrize("flags", [["--n-cpu-moe", "2", "--stream-min-tokens", "2"], ["--cpu-moe", "-ub", "64"]])
def test_hybrid_matches_transformers(mox_bin, as_transformers, ids_file, tmp_path, run_logits, flags):
    k = meta()["decode_prefill"]
    prefill = np.load(GOLDEN / "logits_prefill.npy")
    decode = np.load(GOLDEN / "logits_decode.npy")
    got = run_logits(mox_bin, as_transformers["f32"], ids_file, tmp_path / "l.npy", "--incremental", str(k),
                     "-ctk", "f32", "-ctv", "f32", *flags)
    assert rel_err(got[:k], prefill[:k]) < 6e-6  # measured 1.3e-6 for both placements
    assert rel_err(got[k:], decode) < 2e-5  # measured 4.1e-6
    assert argmax_agreement(got[k:], decode) == 1.0


def test_llama_cpp_style_file_loads_and_routes_by_sparsemixer(mox_bin, tmp_path):
    """A file as llama.cpp's converter writes it (no mox-only key): mox synth's phimoe-tiny runs."""
    model = tmp_path / "phimoe-tiny.gguf"
    subprocess.run([str(mox_bin), "synth", "--preset", "phimoe-tiny", "-o", str(model), "--mix", "q8_0"],
                   check=True, capture_output=True)
    r = subprocess.run([str(mox_bin), "run", "-m", str(model), "-p", "hello", "-n", "4"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
