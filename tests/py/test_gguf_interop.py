"""GGUF interop against the PyPI `gguf` package (an independent reader and writer).

(a) files mox writes (gguf_tool write-json / write-sample) read back identically by gguf.GGUFReader;
(b) files gguf.GGUFWriter writes (many value types, raw quantized tensors, splits) read identically
    by mox (via `gguf_tool dump`);
(c) every broken corpus file makes `gguf_tool dump` exit 1 with a one-line error, no signal;
(d) every valid corpus file is seen the same way by mox and by GGUFReader.
"""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType

CORPUS = Path(os.environ.get("MOX_SRC", Path(__file__).resolve().parents[2])) / "tests" / "data" / "gguf"

# mox's value type names (gguf_tool's JSON) for gguf-py's enum.
TYPE_NAME = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
             VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "string", VT.ARRAY: "array",
             VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64"}
TYPE_BY_NAME = {v: k for k, v in TYPE_NAME.items()}
NP_DTYPE = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16, "u32": np.uint32,
            "i32": np.int32, "u64": np.uint64, "i64": np.int64, "f32": np.float32, "f64": np.float64}


@pytest.fixture(scope="session")
def tool(tool_dir):
    path = tool_dir / "gguf_tool"
    assert path.exists(), f"{path} not built"
    return path


def run_tool(tool, *args, check=True):
    p = subprocess.run([str(tool), *map(str, args)], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, f"gguf_tool {args} failed ({p.returncode}): {p.stderr}"
    return p


def dump(tool, path, hexdata=True):
    args = ["dump", path] + (["--hex"] if hexdata else [])
    return json.loads(run_tool(tool, *args).stdout)


def flatten(array_json):
    """gguf-py flattens nested arrays; flatten ours the same way for comparison."""
    out = []
    for item in array_json["items"]:
        out.extend(flatten(item) if array_json["elem_type"] == "array" else [item])
    return out


def fnv1a64(data: bytes) -> str:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def assert_dump_matches_reader(d, path):
    """mox's view (dump) and GGUFReader's view of one file must agree on everything."""
    r = gguf.GGUFReader(path)
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert [m["key"] for m in d["metadata"]] == list(fields)
    assert d["version"] == int(r.fields["GGUF.version"].parts[0][0])
    for m in d["metadata"]:
        f = fields[m["key"]]
        assert TYPE_NAME[f.types[0]] == m["type"], m["key"]
        if m["type"] == "array":
            # parts after key length, key, type: element type, count (gguf-py drops the element
            # type from `types` when the array is empty, so read the raw part).
            assert TYPE_NAME[VT(int(f.parts[3][0]))] == m["value"]["elem_type"], m["key"]
            assert int(f.parts[4][0]) == len(m["value"]["items"]), m["key"]
            assert f.contents() == flatten(m["value"]), m["key"]
        else:
            assert f.contents() == m["value"], m["key"]
    assert len(r.tensors) == len(d["tensors"])
    for rt, t in zip(r.tensors, d["tensors"]):
        assert rt.name == t["name"]
        assert [int(x) for x in rt.shape] == t["ne"], t["name"]
        assert rt.tensor_type.name == t["type"]
        assert int(rt.tensor_type) == t["type_id"]
        assert rt.data_offset == t["file_offset"], t["name"]
        assert rt.n_bytes == t["n_bytes"]
        raw = rt.data.tobytes()
        assert raw == bytes.fromhex(t["data_hex"]), t["name"]
        assert fnv1a64(raw) == t["fnv1a64"]


# ---------------------------------------------------------------- (a) mox writes, gguf-py reads

SCALARS = [("u8", 0), ("u8", 255), ("i8", -128), ("i8", 127), ("u16", 65535), ("i16", -32768),
           ("u32", 2**32 - 1), ("i32", -2**31), ("u64", 2**64 - 1), ("i64", -2**63), ("i64", 2**63 - 1),
           ("f32", 0.1), ("f32", -3.4e38), ("f32", 1e-45), ("f64", 0.1), ("f64", -1e-310),
           ("bool", True), ("bool", False), ("string", ""), ("string", "ünïcødé 模型 🦙 \"q\" \\ \n\t"),
           ("string", "x" * 5000)]
# Types both mox's registry and gguf-py know (mox rejects TQ*, NVFP4, Q1_0, Q2_0). Q8_1 is left
# out: gguf-py 0.19 sizes its block as 40 bytes (fp32 d and s), ggml's block_q8_1 is 36 (two fp16);
# it is an activation type that never appears in model files.
TENSOR_TYPES = ["F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ2_S",
                "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS", "MXFP4"]


def expected_scalar(vtype, value):
    """What a reader must return for `value` stored as `vtype` (f32 rounds)."""
    return float(np.float32(value)) if vtype == "f32" else value


def random_spec(rng, alignment=None):
    metadata = []
    for i, (vt, v) in enumerate(SCALARS):
        metadata.append({"key": f"mox.scalar.{i}.{vt}", "type": vt, "value": v})
    for vt, dt in NP_DTYPE.items():
        n = int(rng.integers(1, 40))
        if vt.startswith("f"):
            vals = [float(np.float32(x)) if vt == "f32" else float(x) for x in rng.standard_normal(n) * 1e3]
        else:
            info = np.iinfo(dt)
            vals = [int(x) for x in rng.integers(int(info.min), int(info.max), size=n, dtype=dt, endpoint=True)]
        metadata.append({"key": f"mox.array.{vt}", "type": "array", "value": {"elem_type": vt, "items": vals}})
    metadata.append({"key": "mox.array.bool", "type": "array",
                     "value": {"elem_type": "bool", "items": [bool(x) for x in rng.integers(0, 2, 17)]}})
    metadata.append({"key": "tokenizer.ggml.tokens", "type": "array",
                     "value": {"elem_type": "string", "items": ["<s>", "", "▁the", "世界", "a\nb"] * 20}})
    if alignment:
        metadata.append({"key": "general.alignment", "type": "u32", "value": alignment})
    tensors = []
    for i, name in enumerate(TENSOR_TYPES):
        block, _ = gguf.GGML_QUANT_SIZES[QT[name]]
        ne = [block * int(rng.integers(1, 3))] + [int(x) for x in rng.integers(1, 4, size=int(rng.integers(0, 4)))]
        n_bytes = gguf.quant_shape_to_byte_shape(tuple(reversed(ne)), QT[name])
        size = int(np.prod(n_bytes))
        tensors.append({"name": f"blk.{i}.{name.lower()}.weight", "ne": ne, "type": name,
                        "data_hex": rng.integers(0, 256, size, dtype=np.uint8).tobytes().hex()})
    return {"metadata": metadata, "tensors": tensors}


def assert_reader_matches_spec(path, spec):
    r = gguf.GGUFReader(path)
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert list(fields) == [m["key"] for m in spec["metadata"]]
    for m in spec["metadata"]:
        f = fields[m["key"]]
        assert TYPE_NAME[f.types[0]] == m["type"], m["key"]
        if m["type"] == "array":
            et = m["value"]["elem_type"]
            assert f.types[1] == TYPE_BY_NAME[et], m["key"]
            assert f.contents() == [expected_scalar(et, v) for v in m["value"]["items"]], m["key"]
        else:
            assert f.contents() == expected_scalar(m["type"], m["value"]), m["key"]
    assert [t.name for t in r.tensors] == [t["name"] for t in spec["tensors"]]
    for rt, t in zip(r.tensors, spec["tensors"]):
        assert [int(x) for x in rt.shape] == t["ne"]
        assert rt.tensor_type.name == t["type"]
        assert rt.data.tobytes() == bytes.fromhex(t["data_hex"]), t["name"]
        assert rt.data_offset % r.alignment == 0


@pytest.mark.parametrize("seed,alignment", [(1, None), (2, 64), (3, 8)])
def test_mox_writes_gguf_py_reads(tool, tmp_path, seed, alignment):
    spec = random_spec(np.random.default_rng(seed), alignment)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = tmp_path / "m.gguf"
    run_tool(tool, "write-json", tmp_path / "spec.json", out)
    assert_reader_matches_spec(out, spec)
    d = dump(tool, out)
    assert d["alignment"] == (alignment or 32)
    assert_dump_matches_reader(d, out)


def test_sample_with_nested_arrays_reads_the_same_in_gguf_py(tool, tmp_path):
    out = tmp_path / "sample.gguf"
    run_tool(tool, "write-sample", out)
    d = dump(tool, out)
    keys = {m["key"]: m for m in d["metadata"]}
    assert keys["sample.nested_i16"]["value"]["items"][1] == {"elem_type": "i16", "items": []}
    assert keys["general.name"]["value"] == "mox sample — ünïcødé 模型 🦙"
    assert_dump_matches_reader(d, out)


def test_mox_split_shards_read_by_gguf_py(tool, tmp_path):
    run_tool(tool, "write-sample", tmp_path / "whole.gguf")
    run_tool(tool, "write-sample", tmp_path / "s.gguf", "--split", "3")
    whole = dump(tool, tmp_path / "whole.gguf")
    merged = dump(tool, tmp_path / "s-00001-of-00003.gguf")
    assert merged["n_shards"] == 3
    strip = lambda ts: [{k: v for k, v in t.items() if k in ("name", "ne", "type", "data_hex")} for t in ts]  # noqa
    assert strip(merged["tensors"]) == strip(whole["tensors"])
    names = []
    for k in range(3):
        path = tmp_path / f"s-{k + 1:05d}-of-00003.gguf"
        r = gguf.GGUFReader(path)
        assert r.fields["split.no"].contents() == k and r.fields["split.no"].types == [VT.UINT16]
        assert r.fields["split.count"].contents() == 3 and r.fields["split.count"].types == [VT.UINT16]
        assert r.fields["split.tensors.count"].contents() == len(whole["tensors"])
        assert r.fields["split.tensors.count"].types == [VT.INT32]
        assert ("general.name" in r.fields) == (k == 0)
        for rt in r.tensors:
            t = next(t for t in merged["tensors"] if t["name"] == rt.name)
            assert t["shard"] == k
            assert rt.data.tobytes() == bytes.fromhex(t["data_hex"])
            names.append(rt.name)
    assert names == [t["name"] for t in whole["tensors"]]


# ---------------------------------------------------------------- (b) gguf-py writes, mox reads

def write_with_gguf_py(path, rng, split_max_tensors=0, alignment=None):
    """Returns (expected metadata [(key, type, value)], expected tensors [(name, ne, type, bytes)])."""
    w = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    md = [("general.architecture", "string", "llama")]

    def kv(key, vtype, value, sub=None):
        w.add_key_value(key, value, vtype, sub_type=sub)
        md.append((key, TYPE_NAME[vtype], value))

    if alignment:
        w.add_custom_alignment(alignment)
        md.append(("general.alignment", "u32", alignment))
    kv("t.u8", VT.UINT8, 200)
    kv("t.i8", VT.INT8, -7)
    kv("t.u16", VT.UINT16, 60000)
    kv("t.i16", VT.INT16, -30000)
    kv("t.u32", VT.UINT32, 4_000_000_000)
    kv("t.i32", VT.INT32, -2_000_000_000)
    kv("t.u64", VT.UINT64, 2**64 - 2)
    kv("t.i64", VT.INT64, -2**62)
    kv("t.f32", VT.FLOAT32, float(np.float32(1.1)))
    kv("t.f64", VT.FLOAT64, 1.1)
    kv("t.bool", VT.BOOL, True)
    kv("t.str", VT.STRING, "héllo wörld")
    kv("t.arr.str", VT.ARRAY, ["a", "ü", ""], VT.STRING)
    kv("t.arr.i32", VT.ARRAY, [1, -2, 3], VT.INT32)
    kv("t.arr.u64", VT.ARRAY, [0, 2**64 - 1], VT.UINT64)
    kv("t.arr.f32", VT.ARRAY, [0.5, -1.25], VT.FLOAT32)
    kv("t.arr.u8", VT.ARRAY, [1, 2, 255], VT.UINT8)
    kv("t.arr.bool", VT.ARRAY, [True, False], VT.BOOL)
    kv("t.arr.f64", VT.ARRAY, [1e300, -2.5], VT.FLOAT64)
    kv("t.arr.nested", VT.ARRAY, [[1, 2], [3]])  # gguf-py infers ARRAY of ARRAY of INT32

    tensors = []

    def tensor(name, arr, raw_dtype=None, type_name=None):
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
        if raw_dtype is None:
            ne = list(reversed(arr.shape))
        else:
            ne = list(reversed(gguf.quant_shape_from_byte_shape(arr.shape, raw_dtype)))
        tensors.append((name, ne, type_name, arr.tobytes()))

    tensor("f32", rng.standard_normal((3, 5)).astype(np.float32), type_name="F32")
    tensor("f16", rng.standard_normal((2, 7)).astype(np.float16), type_name="F16")
    tensor("f64", rng.standard_normal((4,)), type_name="F64")
    tensor("i8", rng.integers(-128, 127, (2, 2, 3), dtype=np.int8), type_name="I8")
    tensor("i16", rng.integers(-999, 999, (5,), dtype=np.int16), type_name="I16")
    tensor("i32", rng.integers(-999, 999, (1, 2, 1, 3), dtype=np.int32), type_name="I32")
    tensor("i64", rng.integers(-999, 999, (3,), dtype=np.int64), type_name="I64")
    for name in ["Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ2_XXS", "IQ4_XS", "MXFP4", "BF16"]:
        qt = QT[name]
        block, size = gguf.GGML_QUANT_SIZES[qt]
        rows = int(rng.integers(1, 4))
        blocks = int(rng.integers(1, 3))
        raw = rng.integers(0, 256, (2, rows, blocks * size), dtype=np.uint8)
        tensor(f"q.{name.lower()}", raw, raw_dtype=qt, type_name=name)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return md, tensors


def assert_dump_matches_expected(d, md, tensors):
    got_md = {m["key"]: m for m in d["metadata"]}
    for key, vtype, value in md:
        m = got_md[key]
        assert m["type"] == vtype, key
        if vtype == "array":
            if isinstance(value[0], list):  # nested
                assert m["value"]["elem_type"] == "array"
                assert [it["items"] for it in m["value"]["items"]] == value
            else:
                assert m["value"]["items"] == value, key
        else:
            assert m["value"] == value, key
    assert [t["name"] for t in d["tensors"]] == [t[0] for t in tensors]
    for t, (name, ne, type_name, raw) in zip(d["tensors"], tensors):
        assert t["ne"] == ne, name
        assert t["type"] == type_name, name
        assert bytes.fromhex(t["data_hex"]) == raw, name
        assert t["fnv1a64"] == fnv1a64(raw)


@pytest.mark.parametrize("alignment", [None, 64])
def test_gguf_py_writes_mox_reads(tool, tmp_path, alignment):
    path = tmp_path / "py.gguf"
    md, tensors = write_with_gguf_py(path, np.random.default_rng(7), alignment=alignment)
    d = dump(tool, path)
    assert d["version"] == 3 and d["n_shards"] == 1
    assert d["alignment"] == (alignment or 32)
    assert_dump_matches_expected(d, md, tensors)
    assert_dump_matches_reader(d, path)


def test_gguf_py_split_files_merge_in_mox(tool, tmp_path):
    md, tensors = write_with_gguf_py(tmp_path / "sp.gguf", np.random.default_rng(9), split_max_tensors=4)
    shards = sorted(tmp_path.glob("sp-*-of-*.gguf"))
    assert len(shards) == 4  # 15 tensors, 4 per shard
    d = dump(tool, shards[0])
    assert d["n_shards"] == 4
    assert_dump_matches_expected(d, md, tensors)
    assert [t["shard"] for t in d["tensors"]] == [i // 4 for i in range(len(tensors))]
    # Opening another shard is an error that points at the first one.
    p = run_tool(tool, "dump", shards[2], check=False)
    assert p.returncode == 1
    assert "open the first shard" in p.stderr and shards[0].name in p.stderr


def test_big_endian_file_from_gguf_py_is_rejected_clearly(tool, tmp_path):
    path = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_uint32("x", 1)
    w.add_tensor("t", np.arange(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    p = run_tool(tool, "dump", path, check=False)
    assert p.returncode == 1
    assert "version at byte 4" in p.stderr and "opposite-endian" in p.stderr


# ---------------------------------------------------------------- (c) broken corpus

def broken_files():
    return sorted(p.name for p in CORPUS.glob("broken*"))


def test_corpus_is_present():
    assert len(broken_files()) > 40
    assert (CORPUS / "broken.tsv").exists()


@pytest.mark.parametrize("name", broken_files())
def test_broken_file_fails_cleanly(tool, name):
    p = run_tool(tool, "dump", CORPUS / name, check=False)
    assert p.returncode == 1, f"exit {p.returncode} (negative = signal): {p.stderr}"
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("gguf_tool: error: ") and name.split("-0000")[0] in lines[0]
    assert p.stdout == ""


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("checkdata_*")))
def test_checkdata_files_fail_only_with_check(tool, name):
    assert run_tool(tool, "dump", CORPUS / name, check=False).returncode == 0
    p = run_tool(tool, "dump", "--check-data", CORPUS / name, check=False)
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1 and "is inf or NaN" in p.stderr


# ---------------------------------------------------------------- (d) valid corpus

@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("valid_*.gguf")
                                        if "-00002-of-" not in p.name))
def test_valid_corpus_file_matches_gguf_py(tool, name):
    d = dump(tool, CORPUS / name)
    if d["n_shards"] > 1:  # the dump merges all shards; GGUFReader sees the first one
        assert {t["shard"] for t in d["tensors"]} == set(range(d["n_shards"]))
        d["tensors"] = [t for t in d["tensors"] if t["shard"] == 0]
    assert_dump_matches_reader(d, CORPUS / name)
