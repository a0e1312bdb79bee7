"""`mox convert` against shared/spec/qwen35moe.md, read back with the gguf package's GGUFReader.

The committed golden checkpoint (tests/data/goldens/qwen35moe/hf, made by
tools/goldens/make_qwen35moe_goldens.py) is converted at several output types. Expected names, shapes,
types and metadata are written out here from the spec's tables; expected values are computed here in
numpy from the safetensors file (read by the small reader below) with the spec's transforms, in a
formulation of their own (the value-head re-order as a reshape/transpose). Quantized tensors are
compared with the gguf package's numpy quantizers/dequantizers.
"""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import GGUFReader  # noqa: E402

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "goldens" / "qwen35moe"
HF = GOLDEN / "hf"

# ------------------------------------------------------------------------------------------------
# A minimal safetensors reader/writer (8-byte LE header length, JSON header, data buffer).

from goldens_util import NP_DTYPES  # noqa: E402
from goldens_util import read_safetensors as st_read  # noqa: E402


def st_write(path: Path, tensors: dict, dtype: str = "F32", raw: dict | None = None) -> None:
    """Writes float arrays as `dtype`; `raw` adds entries name -> (dtype string, shape, bytes) verbatim."""
    header, blobs, offset = {}, [], 0
    items = [(k, v) for k, v in tensors.items()]
    for name, a in items:
        if dtype == "BF16":
            b = (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
        else:
            b = np.ascontiguousarray(a, NP_DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    for name, (dt, shape, b) in (raw or {}).items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


# ------------------------------------------------------------------------------------------------
# The spec, written out for the golden's config.


def text_config() -> dict:
    return json.loads((HF / "config.json").read_text())


def use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def expected_layout(c: dict) -> dict:
    """GGUF name -> ne (spec §2.2-2.5)."""
    d, V = c["hidden_size"], c["vocab_size"]
    hk, hv, dk = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"]
    conv = 2 * hk * dk + hv * dk
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    E, F, Fs = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    t = {"token_embd.weight": (d, V), "output_norm.weight": (d,), "output.weight": (d, V)}
    for i, kind in enumerate(c["layer_types"]):
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = (d,)
        t[b + "post_attention_norm.weight"] = (d,)
        if kind == "linear_attention":
            t[b + "attn_qkv.weight"] = (d, conv)
            t[b + "attn_gate.weight"] = (d, hv * dk)
            t[b + "ssm_beta.weight"] = (d, hv)
            t[b + "ssm_alpha.weight"] = (d, hv)
            t[b + "ssm_conv1d.weight"] = (c["linear_conv_kernel_dim"], conv)
            t[b + "ssm_dt.bias"] = (hv,)
            t[b + "ssm_a"] = (hv,)
            t[b + "ssm_norm.weight"] = (dk,)
            t[b + "ssm_out.weight"] = (hv * dk, d)
        else:
            t[b + "attn_q.weight"] = (d, 2 * nh * hd)
            t[b + "attn_k.weight"] = (d, nkv * hd)
            t[b + "attn_v.weight"] = (d, nkv * hd)
            t[b + "attn_q_norm.weight"] = (hd,)
            t[b + "attn_k_norm.weight"] = (hd,)
            t[b + "attn_output.weight"] = (nh * hd, d)
        t[b + "ffn_gate_inp.weight"] = (d, E)
        t[b + "ffn_gate_exps.weight"] = (d, F, E)
        t[b + "ffn_up_exps.weight"] = (d, F, E)
        t[b + "ffn_down_exps.weight"] = (F, d, E)
        t[b + "ffn_gate_inp_shexp.weight"] = (d,)
        t[b + "ffn_gate_shexp.weight"] = (d, Fs)
        t[b + "ffn_up_shexp.weight"] = (d, Fs)
        t[b + "ffn_down_shexp.weight"] = (Fs, d)
    return t


def forced_f32(name: str, ne: tuple) -> bool:
    """Spec §2.6 item 6 and §6: never quantized."""
    return (len(ne) == 1 or not name.endswith(".weight") or name.endswith("_norm.weight")
            or "ffn_gate_inp" in name or "ssm_conv1d" in name)


BLOCK = {Q.Q8_0: 32, Q.Q5_0: 32, Q.Q4_K: 256, Q.Q6_K: 256}


def with_fallback(t: Q, ne0: int) -> Q:
    """llama-quantize's replacement when a row is not a whole number of blocks."""
    if ne0 % BLOCK[t] == 0:
        return t
    f = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}.get(t, Q.F16)
    return f if f == Q.F16 or ne0 % BLOCK[f] == 0 else Q.F16


def expected_type(name: str, ne: tuple, outtype: str, n_layer: int) -> Q:
    if forced_f32(name, ne):
        return Q.F32
    if outtype in ("f32", "f16", "bf16"):
        return {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16}[outtype]
    if outtype == "q8_0":
        return with_fallback(Q.Q8_0, ne[0])
    assert outtype == "q4_k_m"
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    t = Q.Q4_K
    if name == "output.weight":
        t = Q.Q6_K
    elif ("attn_v.weight" in name or "attn_qkv.weight" in name or "ffn_down" in name) and use_more_bits(layer, n_layer):
        t = Q.Q6_K
    return with_fallback(t, ne[0])


def expected_metadata(c: dict) -> dict:
    rope = c["rope_parameters"]
    a = "qwen35moe."
    return {
        "general.architecture": "qwen35moe",
        a + "block_count": c["num_hidden_layers"],
        a + "context_length": c["max_position_embeddings"],
        a + "embedding_length": c["hidden_size"],
        a + "attention.head_count": c["num_attention_heads"],
        a + "attention.head_count_kv": c["num_key_value_heads"],
        a + "attention.key_length": c["head_dim"],
        a + "attention.value_length": c["head_dim"],
        a + "attention.layer_norm_rms_epsilon": c["rms_norm_eps"],
        a + "rope.freq_base": rope["rope_theta"],
        a + "rope.dimension_count": int(c["head_dim"] * rope["partial_rotary_factor"]),
        a + "rope.dimension_sections": list(rope["mrope_section"]) + [0] * (4 - len(rope["mrope_section"])),
        a + "expert_count": c["num_experts"],
        a + "expert_used_count": c["num_experts_per_tok"],
        a + "expert_feed_forward_length": c["moe_intermediate_size"],
        a + "expert_shared_feed_forward_length": c["shared_expert_intermediate_size"],
        a + "ssm.conv_kernel": c["linear_conv_kernel_dim"],
        a + "ssm.inner_size": c["linear_num_value_heads"] * c["linear_value_head_dim"],
        a + "ssm.state_size": c["linear_key_head_dim"],
        a + "ssm.time_step_rank": c["linear_num_value_heads"],
        a + "ssm.group_count": c["linear_num_key_heads"],
        a + "full_attention_interval": c["layer_types"].index("full_attention") + 1,
    }


def tiled(a: np.ndarray, hk: int, hv: int, axis: int) -> np.ndarray:
    """Re-orders value heads along `axis` (hv * head_dim long) from HF's grouped order [hk, hv/hk] to
    llama.cpp's tiled order [hv/hk, hk]."""
    a = np.moveaxis(a, axis, 0)
    rest = a.shape[1:]
    a = a.reshape(hk, hv // hk, -1, *rest).transpose(1, 0, *range(2, a.ndim + 2)).reshape(-1, *rest)
    return np.moveaxis(a, 0, axis)


def expected_values(hf: dict, c: dict) -> dict:
    """GGUF name -> float32 array in numpy order (reversed ne), from HF tensors (spec §2.6)."""
    hk, hv, dk = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"]
    kd = hk * dk
    E = c["num_experts"]
    out = {"token_embd.weight": hf["model.embed_tokens.weight"], "output_norm.weight": 1 + hf["model.norm.weight"],
           "output.weight": hf["lm_head.weight"]}
    for i, kind in enumerate(c["layer_types"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        out[b + "attn_norm.weight"] = 1 + hf[p + "input_layernorm.weight"]
        out[b + "post_attention_norm.weight"] = 1 + hf[p + "post_attention_layernorm.weight"]
        if kind == "linear_attention":
            la = p + "linear_attn."
            qkv = hf[la + "in_proj_qkv.weight"]
            out[b + "attn_qkv.weight"] = np.concatenate([qkv[:2 * kd], tiled(qkv[2 * kd:], hk, hv, 0)])
            out[b + "attn_gate.weight"] = tiled(hf[la + "in_proj_z.weight"], hk, hv, 0)
            out[b + "ssm_beta.weight"] = tiled(hf[la + "in_proj_b.weight"], hk, hv, 0)
            out[b + "ssm_alpha.weight"] = tiled(hf[la + "in_proj_a.weight"], hk, hv, 0)
            conv = hf[la + "conv1d.weight"].squeeze(1)
            out[b + "ssm_conv1d.weight"] = np.concatenate([conv[:2 * kd], tiled(conv[2 * kd:], hk, hv, 0)])
            out[b + "ssm_dt.bias"] = tiled(hf[la + "dt_bias"], hk, hv, 0)
            out[b + "ssm_a"] = tiled(-np.exp(hf[la + "A_log"].astype(np.float64)), hk, hv, 0).astype(np.float32)
            out[b + "ssm_norm.weight"] = hf[la + "norm.weight"]
            out[b + "ssm_out.weight"] = tiled(hf[la + "out_proj.weight"], hk, hv, 1)
        else:
            sa = p + "self_attn."
            out[b + "attn_q.weight"] = hf[sa + "q_proj.weight"]
            out[b + "attn_k.weight"] = hf[sa + "k_proj.weight"]
            out[b + "attn_v.weight"] = hf[sa + "v_proj.weight"]
            out[b + "attn_q_norm.weight"] = 1 + hf[sa + "q_norm.weight"]
            out[b + "attn_k_norm.weight"] = 1 + hf[sa + "k_norm.weight"]
            out[b + "attn_output.weight"] = hf[sa + "o_proj.weight"]
        m = p + "mlp."
        out[b + "ffn_gate_inp.weight"] = hf[m + "gate.weight"]
        for g, h in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
            out[b + f"ffn_{g}_exps.weight"] = np.stack([hf[f"{m}experts.{e}.{h}.weight"] for e in range(E)])
            out[b + f"ffn_{g}_shexp.weight"] = hf[f"{m}shared_expert.{h}.weight"]
        out[b + "ffn_gate_inp_shexp.weight"] = hf[m + "shared_expert_gate.weight"].reshape(-1)
    return {k: v.astype(np.float32) for k, v in out.items()}


# ------------------------------------------------------------------------------------------------
# Helpers


def convert(mox_bin: Path, hf_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(mox_bin), "convert", str(hf_dir), "-o", str(out), "-t", "2", *extra],
                          capture_output=True, text=True, timeout=300)


def raw_bytes(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8).reshape(-1)


def field_value(reader: GGUFReader, key: str):
    f = reader.fields[key]
    return f.contents()


def tensors_of(reader: GGUFReader) -> dict:
    return {t.name: t for t in reader.tensors}


def as_float(t) -> np.ndarray:
    """A GGUF tensor as float32 in numpy order (reversed ne)."""
    shape = tuple(int(x) for x in reversed(t.shape))
    if t.tensor_type in (Q.F32, Q.F16):
        return np.asarray(t.data, dtype=np.float32).reshape(shape)
    return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)


@pytest.fixture(scope="module")
def hf_tensors() -> dict:
    return st_read(HF / "model.safetensors")


@pytest.fixture(scope="module")
def converted(mox_bin, tmp_path_factory):
    """outtype -> GGUFReader of the golden converted at that type (converted once per module)."""
    cache = {}
    folder = tmp_path_factory.mktemp("converted")

    def get(outtype: str) -> GGUFReader:
        if outtype not in cache:
            out = folder / f"golden-{outtype}.gguf"
            r = convert(mox_bin, HF, out, "--outtype", outtype)
            assert r.returncode == 0, r.stderr
            cache[outtype] = GGUFReader(str(out))
        return cache[outtype]

    return get


# ------------------------------------------------------------------------------------------------
# Layout, types, metadata


@pytest.mark.parametrize("outtype", ["f32", "f16", "bf16", "q8_0", "q4_k_m"])
def test_names_shapes_types(converted, outtype):
    c = text_config()
    reader = converted(outtype)
    want = expected_layout(c)
    got = tensors_of(reader)
    assert sorted(got) == sorted(want)
    assert len(got) == 3 + 6 * 19 + 2 * 16  # spec §2.5 counts for 6 DeltaNet + 2 attention layers
    for name, t in got.items():
        assert tuple(int(x) for x in t.shape) == want[name], name
        assert t.tensor_type == expected_type(name, want[name], outtype, c["num_hidden_layers"]), name


def test_q4_k_m_uses_k_quants_where_rows_allow(converted):
    # attn_output rows are 256 wide: the one place in this tiny model where Q4_K itself applies.
    types = {n: t.tensor_type for n, t in tensors_of(converted("q4_k_m")).items()}
    assert types["blk.3.attn_output.weight"] == Q.Q4_K
    assert types["blk.0.attn_qkv.weight"] == Q.Q8_0   # Q6_K (layer 0 gets more bits) -> row fallback
    assert types["blk.1.attn_qkv.weight"] == Q.Q5_0   # Q4_K -> row fallback
    assert types["output.weight"] == Q.Q8_0


@pytest.mark.parametrize("outtype,ftype", [("f32", 0), ("f16", 1), ("q8_0", 7), ("q4_k_m", 15), ("bf16", 32)])
def test_metadata(converted, outtype, ftype):
    c = text_config()
    reader = converted(outtype)
    for key, value in expected_metadata(c).items():
        got = field_value(reader, key)
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-6), key
        else:
            assert got == value, key
    assert field_value(reader, "general.file_type") == ftype
    assert "qwen35moe.nextn_predict_layers" not in reader.fields  # mtp.* is not converted
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == c["vocab_size"]
    assert field_value(reader, "tokenizer.ggml.model") == "gpt2"


# ------------------------------------------------------------------------------------------------
# Values


def test_f32_values_follow_the_spec_transforms(converted, hf_tensors):
    want = expected_values(hf_tensors, text_config())
    for name, t in tensors_of(converted("f32")).items():
        got = as_float(t)
        if name.endswith("ssm_a"):  # -exp: allow one rounding step between libm and numpy
            np.testing.assert_allclose(got, want[name], rtol=2e-7, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want[name].reshape(got.shape), err_msg=name)


def test_value_head_reorder_is_tiled(converted, hf_tensors):
    # GGUF value head h = r * Hk + g must hold HF head g * (Hv / Hk) + r (spec §2.6 item 5), spelled
    # out head by head for layer 0.
    c = text_config()
    hk, hv, dv = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_value_head_dim"]
    t = tensors_of(converted("f32"))
    a_log = hf_tensors["model.layers.0.linear_attn.A_log"]
    z = hf_tensors["model.layers.0.linear_attn.in_proj_z.weight"]
    ssm_a = as_float(t["blk.0.ssm_a"])
    gate = as_float(t["blk.0.attn_gate.weight"])
    for h in range(hv):
        r, g = divmod(h, hk)
        src = g * (hv // hk) + r
        assert ssm_a[h] == pytest.approx(-np.exp(float(a_log[src])), rel=2e-7)
        np.testing.assert_array_equal(gate[h * dv:(h + 1) * dv], z[src * dv:(src + 1) * dv])


@pytest.mark.parametrize("outtype", ["f16", "bf16", "q8_0"])
def test_float_and_q8_0_bytes_match_gguf_py(converted, outtype):
    f32 = {n: as_float(t) for n, t in tensors_of(converted("f32")).items()}
    for name, t in tensors_of(converted(outtype)).items():
        if t.tensor_type == Q.F32:
            np.testing.assert_array_equal(as_float(t), f32[name], err_msg=name)
            continue
        if t.tensor_type == Q.F16:
            np.testing.assert_array_equal(np.asarray(t.data), f32[name].astype(np.float16), err_msg=name)
            continue
        want = gguf.quants.quantize(f32[name], t.tensor_type)
        np.testing.assert_array_equal(raw_bytes(t.data), raw_bytes(want), err_msg=name)


def test_q4_k_m_values_close(converted):
    f32 = {n: as_float(t) for n, t in tensors_of(converted("f32")).items()}
    # Worst case relative to the tensor's largest magnitude: half a step, or one step for the
    # asymmetric 5/6-bit grids that clip the largest value of the opposite sign (1/16, 1/32).
    tolerance = {Q.F32: 0, Q.Q8_0: 0.01, Q.Q6_K: 0.04, Q.Q5_0: 0.07, Q.Q4_K: 0.1}
    for name, t in tensors_of(converted("q4_k_m")).items():
        err = np.abs(as_float(t) - f32[name]).max()
        assert err <= tolerance[t.tensor_type] * np.abs(f32[name]).max(), (name, t.tensor_type, err)


def test_committed_transform_golden_agrees(converted):
    # transforms.json was computed by the golden script in torch/float64 from the HF model in memory
    # (fused experts), independently of both converters here.
    golden = json.loads((GOLDEN / "transforms.json").read_text())["tensors"]
    t = tensors_of(converted("f32"))
    for name, entry in golden.items():
        a = as_float(t[name]).astype(np.float64)
        assert list(int(x) for x in t[name].shape) == entry["ne"], name
        rows = a.reshape(-1, a.shape[-1])
        sums = rows @ np.arange(1, rows.shape[1] + 1, dtype=np.float64)
        rtol = 1e-6 if name.endswith("ssm_a") else 1e-9  # -exp rounded to fp32 here, fp64 in the golden
        np.testing.assert_allclose(sums, entry["row_checksums"], rtol=rtol, atol=1e-9, err_msg=name)
        if "values" in entry:
            np.testing.assert_allclose(a.reshape(-1), entry["values"], rtol=2e-7, err_msg=name)


# ------------------------------------------------------------------------------------------------
# Other checkpoint layouts convert to the same file


def per_expert_to_fused(hf: dict, c: dict) -> dict:
    E = c["num_experts"]
    out = {}
    for k, v in hf.items():
        if ".mlp.experts." not in k:
            out[k] = v
    for i in range(c["num_hidden_layers"]):
        m = f"model.layers.{i}.mlp.experts."
        out[m + "gate_up_proj"] = np.stack(
            [np.concatenate([hf[f"{m}{e}.gate_proj.weight"], hf[f"{m}{e}.up_proj.weight"]]) for e in range(E)])
        out[m + "down_proj"] = np.stack([hf[f"{m}{e}.down_proj.weight"] for e in range(E)])
    return out


def write_variant(tmp: Path, tensors: dict, config: dict, dtype: str = "BF16", shards: int = 1) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text(json.dumps(config))
    if shards == 1:
        st_write(tmp / "model.safetensors", tensors, dtype)
        return tmp
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        st_write(tmp / fname, part, dtype)
        weight_map.update({n: fname for n in part})
    (tmp / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return tmp


def assert_same_tensors(a: GGUFReader, b: GGUFReader) -> None:
    ta, tb = tensors_of(a), tensors_of(b)
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name].tensor_type == tb[name].tensor_type, name
        np.testing.assert_array_equal(np.asarray(ta[name].data), np.asarray(tb[name].data), err_msg=name)


def test_multimodal_layout_fused_experts_and_shards(mox_bin, converted, hf_tensors, tmp_path):
    """model.language_model.* names, a nested text_config, vision and MTP tensors to skip, fused
    3-D experts, F32 storage and three shards: the same GGUF as the committed layout."""
    c = text_config()
    fused = per_expert_to_fused(hf_tensors, c)
    renamed = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v
               for k, v in fused.items()}
    renamed["model.visual.patch_embed.proj.weight"] = np.ones((4, 3), np.float32)
    renamed["mtp.fc.weight"] = np.ones((4, 4), np.float32)
    config = json.loads((GOLDEN / "hf_multimodal_config.json").read_text())
    d = write_variant(tmp_path / "mm", renamed, config, dtype="F32", shards=3)
    out = tmp_path / "mm.gguf"
    r = convert(mox_bin, d, out, "--outtype", "f32")
    assert r.returncode == 0, r.stderr
    assert_same_tensors(GGUFReader(str(out)), converted("f32"))


def test_f16_source(mox_bin, hf_tensors, tmp_path):
    c = text_config()
    d = write_variant(tmp_path / "f16", hf_tensors, c, dtype="F16")
    out = tmp_path / "f16.gguf"
    r = convert(mox_bin, d, out)  # default outtype follows the source: F16
    assert r.returncode == 0, r.stderr
    reader = GGUFReader(str(out))
    assert field_value(reader, "general.file_type") == 1
    want = expected_values({k: v.astype(np.float16).astype(np.float32) for k, v in hf_tensors.items()}, c)
    for name, t in tensors_of(reader).items():
        got = as_float(t)
        assert t.tensor_type == (Q.F32 if forced_f32(name, tuple(t.shape)) else Q.F16), name
        np.testing.assert_allclose(got, want[name].reshape(got.shape), rtol=2e-7, err_msg=name)


def test_default_outtype_of_bf16_checkpoint_is_bf16(mox_bin, tmp_path):
    out = tmp_path / "auto.gguf"
    r = convert(mox_bin, HF, out)
    assert r.returncode == 0, r.stderr
    assert field_value(GGUFReader(str(out)), "general.file_type") == 32


# ------------------------------------------------------------------------------------------------
# Bad inputs: one line on stderr, exit code 1, no output file left behind


def copy_golden(tmp: Path) -> Path:
    d = tmp / "hf"
    shutil.copytree(HF, d)
    return d


def expect_failure(mox_bin: Path, d: Path, out: Path, *needles: str, extra=()) -> None:
    r = convert(mox_bin, d, out, *extra)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mox: error: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert not out.exists()


def test_missing_config(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    (d / "config.json").unlink()
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "no config.json")


def test_config_of_another_model(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    c = text_config()
    c["model_type"] = "qwen3_next"
    (d / "config.json").write_text(json.dumps(c))
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "qwen3_next")


def test_config_missing_key(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    c = text_config()
    del c["num_experts"]
    (d / "config.json").write_text(json.dumps(c))
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "num_experts")


def test_layer_pattern_not_expressible(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    c = text_config()
    c["layer_types"][5] = "full_attention"
    (d / "config.json").write_text(json.dumps(c))
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "layer_types")


def test_config_not_json(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    (d / "config.json").write_text("{ not json")
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "config.json", "not valid JSON")


def test_wrong_shape(mox_bin, hf_tensors, tmp_path):
    t = dict(hf_tensors)
    t["model.layers.0.linear_attn.in_proj_a.weight"] = np.zeros((5, 128), np.float32)
    d = write_variant(tmp_path / "bad", t, text_config())
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "in_proj_a.weight", "[5, 128]", "[4, 128]")


def test_missing_tensor(mox_bin, hf_tensors, tmp_path):
    t = {k: v for k, v in hf_tensors.items() if k != "model.layers.3.self_attn.k_norm.weight"}
    d = write_variant(tmp_path / "bad", t, text_config())
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "model.layers.3.self_attn.k_norm.weight")


def test_unexpected_tensor(mox_bin, hf_tensors, tmp_path):
    t = dict(hf_tensors)
    t["model.layers.0.linear_attn.out_proj.bias"] = np.zeros(128, np.float32)
    d = write_variant(tmp_path / "bad", t, text_config())
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "out_proj.bias")


def test_truncated_safetensors(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    st = d / "model.safetensors"
    data = st.read_bytes()
    st.write_bytes(data[:-1000])
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "truncated")


def test_header_longer_than_file(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    st = d / "model.safetensors"
    st.write_bytes(st.read_bytes()[:100])
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "truncated")


def test_unknown_dtype(mox_bin, hf_tensors, tmp_path):
    t = {k: v for k, v in hf_tensors.items() if k != "model.norm.weight"}
    d = write_variant(tmp_path / "bad", {}, text_config())
    st_write(d / "model.safetensors", t, "BF16", raw={"model.norm.weight": ("F7", (128,), bytes(128))})
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "unknown dtype", "F7")


def test_unsupported_dtype(mox_bin, hf_tensors, tmp_path):
    t = {k: v for k, v in hf_tensors.items() if k != "model.norm.weight"}
    d = write_variant(tmp_path / "bad", {}, text_config())
    st_write(d / "model.safetensors", t, "BF16", raw={"model.norm.weight": ("I32", (128,), bytes(512))})
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "model.norm.weight", "I32")


def test_offsets_out_of_bounds(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    st = d / "model.safetensors"
    raw = st.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    e = header["model.norm.weight"]
    size = e["data_offsets"][1] - e["data_offsets"][0]
    data_len = len(raw) - 8 - n
    e["data_offsets"] = [data_len - size + 2, data_len + 2]
    h = json.dumps(header).encode()
    st.write_bytes(len(h).to_bytes(8, "little") + h + raw[8 + n:])
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "model.norm.weight")


def test_no_checkpoint_files(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    (d / "model.safetensors").unlink()
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "model.safetensors")


def test_broken_tokenizer_is_an_error_unless_placeholder(mox_bin, tmp_path):
    d = copy_golden(tmp_path)
    (d / "tokenizer.json").write_text("{}")
    expect_failure(mox_bin, d, tmp_path / "o.gguf", "tokenizer.json")
    r = convert(mox_bin, d, tmp_path / "ok.gguf", "--placeholder-vocab", "--outtype", "f32")
    assert r.returncode == 0, r.stderr
    assert len(field_value(GGUFReader(str(tmp_path / "ok.gguf")), "tokenizer.ggml.tokens")) == 512


def test_real_tokenizer_is_converted_and_padded(mox_bin, tmp_path):
    """A checkpoint's tokenizer.json becomes tokenizer.ggml.*, padded with unused rows to vocab_size."""
    d = copy_golden(tmp_path)
    mox_tiny = Path(__file__).resolve().parents[2] / "assets" / "mox-tiny" / "tokenizer.json"
    tok = json.loads(mox_tiny.read_text())
    # Keep the byte tokens and the first merges so the vocabulary fits the golden's 512 rows.
    vocab = tok["model"]["vocab"]
    keep = {k: v for k, v in vocab.items() if v < 500}
    merges = [m for m in tok["model"]["merges"]
              if all(p in keep for p in (m.split(" ") if isinstance(m, str) else m))
              and ("".join(m.split(" ")) if isinstance(m, str) else "".join(m)) in keep]
    tok["model"]["vocab"], tok["model"]["merges"] = keep, merges
    tok["added_tokens"] = [dict(a, id=500 + i) for i, a in enumerate(tok["added_tokens"])]
    (d / "tokenizer.json").write_text(json.dumps(tok))
    r = convert(mox_bin, d, tmp_path / "real.gguf", "--outtype", "f32")
    assert r.returncode == 0, r.stderr
    reader = GGUFReader(str(tmp_path / "real.gguf"))
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == 512
    assert tokens[500] == tok["added_tokens"][0]["content"]
    assert tokens[511].startswith("[PAD")
    assert field_value(reader, "tokenizer.ggml.pre") == "qwen35"  # the Qwen3.5 split regex is recognised


def test_unknown_outtype(mox_bin, tmp_path):
    expect_failure(mox_bin, HF, tmp_path / "o.gguf", "q3_k_xl", extra=("--outtype", "q3_k_xl"))


# ------------------------------------------------------------------------------------------------
# Function: the converted tensors, used the way spec §3 says llama.cpp uses them, reproduce the
# layer outputs transformers recorded (activations.npz). This is what the value-head re-order is for:
# GGUF value head h reads key head h mod Hk.


def silu(x):
    return x / (1.0 + np.exp(-x))


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def gated_delta_net(u, w: dict, c: dict) -> np.ndarray:
    """Spec §3a on GGUF-layout float64 tensors; u [T, d] -> [T, d]."""
    hk, hv, dk = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"]
    T = u.shape[0]
    m = u @ w["attn_qkv.weight"].T                      # [T, conv]
    z = (u @ w["attn_gate.weight"].T).reshape(T, hv, dk)
    beta = 1.0 / (1.0 + np.exp(-(u @ w["ssm_beta.weight"].T)))
    a = u @ w["ssm_alpha.weight"].T + w["ssm_dt.bias"]
    g = w["ssm_a"] * np.logaddexp(0.0, a)                # [T, hv], log-decay <= 0
    conv = w["ssm_conv1d.weight"]                        # [channels, K]; tap K-1 is the current token
    K = conv.shape[1]
    padded = np.concatenate([np.zeros((K - 1, m.shape[1])), m])
    m = silu(sum(conv[:, k] * padded[k:k + T] for k in range(K)))
    q = m[:, :hk * dk].reshape(T, hk, dk)
    k_ = m[:, hk * dk:2 * hk * dk].reshape(T, hk, dk)
    v = m[:, 2 * hk * dk:].reshape(T, hv, dk)
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(dk)
    k_ = k_ / np.sqrt((k_ * k_).sum(-1, keepdims=True) + 1e-6)
    S = np.zeros((hv, dk, dk))
    o = np.zeros((T, hv, dk))
    for t in range(T):
        for h in range(hv):
            kh, qh = k_[t, h % hk], q[t, h % hk]
            S[h] *= np.exp(g[t, h])
            delta = beta[t, h] * (v[t, h] - S[h].T @ kh)
            S[h] += np.outer(kh, delta)
            o[t, h] = S[h].T @ qh
    y = rms_norm(o, w["ssm_norm.weight"], c["rms_norm_eps"]) * silu(z)
    return y.reshape(T, hv * dk) @ w["ssm_out.weight"].T


def moe(u, w: dict, c: dict) -> np.ndarray:
    """Spec §3c; u [T, d] -> [T, d]."""
    logits = u @ w["ffn_gate_inp.weight"].T
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    top = np.argsort(-p, axis=-1)[:, :c["num_experts_per_tok"]]
    out = np.zeros_like(u)
    for t in range(u.shape[0]):
        weights = p[t, top[t]] / p[t, top[t]].sum()
        for e, we in zip(top[t], weights):
            hidden = silu(w["ffn_gate_exps.weight"][e] @ u[t]) * (w["ffn_up_exps.weight"][e] @ u[t])
            out[t] += we * (w["ffn_down_exps.weight"][e] @ hidden)
        shared = w["ffn_down_shexp.weight"] @ (silu(w["ffn_gate_shexp.weight"] @ u[t]) * (w["ffn_up_shexp.weight"] @ u[t]))
        out[t] += shared / (1.0 + np.exp(-(w["ffn_gate_inp_shexp.weight"] @ u[t])))
    return out


def layer_tensors(reader: GGUFReader, layer: int) -> dict:
    prefix = f"blk.{layer}."
    return {n[len(prefix):]: as_float(t).astype(np.float64) for n, t in tensors_of(reader).items()
            if n.startswith(prefix)}


def test_converted_deltanet_reproduces_transformers(converted):
    c = text_config()
    act = np.load(GOLDEN / "activations.npz")
    got = gated_delta_net(act["l0_mixer_in"].astype(np.float64), layer_tensors(converted("f32"), 0), c)
    want = act["l0_mixer_out"]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


@pytest.mark.parametrize("layer", [0, 3])
def test_converted_moe_reproduces_transformers(converted, layer):
    c = text_config()
    act = np.load(GOLDEN / "activations.npz")
    got = moe(act[f"l{layer}_moe_in"].astype(np.float64), layer_tensors(converted("f32"), layer), c)
    want = act[f"l{layer}_moe_out"]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_hf_order_would_not_reproduce_transformers(converted, hf_tensors):
    # The same DeltaNet on HF-ordered (untiled) value heads must fail the comparison above, or the
    # test could not tell the two orders apart.
    c = text_config()
    act = np.load(GOLDEN / "activations.npz")
    w = layer_tensors(converted("f32"), 0)
    la = "model.layers.0.linear_attn."
    w["attn_qkv.weight"] = hf_tensors[la + "in_proj_qkv.weight"].astype(np.float64)
    w["attn_gate.weight"] = hf_tensors[la + "in_proj_z.weight"].astype(np.float64)
    w["ssm_beta.weight"] = hf_tensors[la + "in_proj_b.weight"].astype(np.float64)
    w["ssm_alpha.weight"] = hf_tensors[la + "in_proj_a.weight"].astype(np.float64)
    w["ssm_conv1d.weight"] = hf_tensors[la + "conv1d.weight"][:, 0, :].astype(np.float64)
    w["ssm_dt.bias"] = hf_tensors[la + "dt_bias"].astype(np.float64)
    w["ssm_a"] = -np.exp(hf_tensors[la + "A_log"].astype(np.float64))
    w["ssm_out.weight"] = hf_tensors[la + "out_proj.weight"].astype(np.float64)
    got = gated_delta_net(act["l0_mixer_in"].astype(np.float64), w, c)
    want = act["l0_mixer_out"]
    assert np.abs(got - want).max() > 1e-2 * np.abs(want).max()
