#!/usr/bin/env python3
"""Writes the GGUF test corpus in tests/data/gguf/ (checked in; rerun only to change it).

Files are assembled byte by byte with `struct`, straight from the layout in
shared/spec/gguf-and-quants.md section 1, independently of mox's writer:

  valid_*.gguf      well-formed files (fuzzer seeds, reader tests, GGUFReader cross-checks)
  broken_*.gguf     each breaks one rule; broken.tsv lists the error text the reader must give,
                    including the byte offset of the bad field, computed here while building
  checkdata_*.gguf  well-formed, but with inf/NaN data: rejected only with check_tensor_data
                    (listed in broken.tsv with the prefix "check:")

Usage: tools/make_gguf_corpus.py [OUT_DIR]   (default tests/data/gguf)
"""

import struct
import sys
from pathlib import Path

# GGUF value type ids (spec 1.2) and the ggml type ids used here (spec 2).
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
T_F32, T_F16, T_Q8_0, T_Q4_K, T_F64, T_MXFP4, T_IQ1_M = 0, 1, 8, 12, 28, 39, 29
SCALAR_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B",
              U64: "Q", I64: "q", F64: "d"}
TYPE_SIZE = {T_F32: (1, 4), T_F16: (1, 2), T_Q8_0: (32, 34), T_Q4_K: (256, 144), T_F64: (1, 8),
             T_MXFP4: (32, 17), T_IQ1_M: (256, 56)}


class Gguf:
    """Builds a GGUF image; `marks` records where named fields start (absolute offsets)."""

    def __init__(self, version=3, endian="<", alignment=32):
        self.version = version
        self.e = endian
        self.alignment = alignment
        self.kvs = []      # (key, type, value, extra) ; value already encoded when type is None
        self.tensors = []  # dicts: name, ne, type, data, offset (None = contiguous)
        self.marks = {}
        self.tensor_count = None  # overrides
        self.kv_count = None
        self.data_override = None

    def kv(self, key, vtype, value, elem=None):
        self.kvs.append((key, vtype, value, elem))
        return self

    def raw_kv(self, raw):
        self.kvs.append((None, None, raw, None))
        return self

    def tensor(self, name, ne, ttype, data=None, offset=None, n_dims=None):
        if data is None:
            blk, size = TYPE_SIZE.get(ttype, (1, 4))  # unknown ids: any few bytes will do
            n = 1
            for d in ne:
                n *= d
            nbytes = max(n // blk * size, 0)
            data = bytes((i * 7 + len(self.tensors)) & 0xFF for i in range(nbytes))
        self.tensors.append(dict(name=name, ne=ne, type=ttype, data=data, offset=offset,
                                 n_dims=len(ne) if n_dims is None else n_dims))
        return self

    # --- encoding ---
    def p(self, fmt, *v):
        return struct.pack(self.e + fmt, *v)

    def string(self, s):
        b = s.encode() if isinstance(s, str) else s
        return self.p("Q", len(b)) + b

    def value(self, vtype, v):
        if vtype == STRING:
            return self.string(v)
        if vtype == ARRAY:
            etype, items = v  # nested arrays: items are (etype, items) again
            out = self.p("I", etype) + self.p("Q", len(items))
            for it in items:
                out += self.value(etype, it)
            return out
        return self.p(SCALAR_FMT[vtype], v)

    def build(self):
        out = bytearray(b"GGUF")
        self.marks["version"] = len(out)
        out += self.p("I", self.version)
        self.marks["tensor_count"] = len(out)
        out += self.p("Q", len(self.tensors) if self.tensor_count is None else self.tensor_count)
        self.marks["kv_count"] = len(out)
        out += self.p("Q", len(self.kvs) if self.kv_count is None else self.kv_count)
        for i, (key, vtype, value, _) in enumerate(self.kvs):
            self.marks[f"kv{i}"] = len(out)
            if key is None:
                out += value
                continue
            out += self.string(key)
            self.marks[f"kv{i}.type"] = len(out)
            out += self.p("I", vtype)
            self.marks[f"kv{i}.value"] = len(out)
            out += self.value(vtype, value)
        # Contiguous offsets unless given. Absurd offsets (broken files) get no data in the blob.
        def placed(t):
            return t["offset"] < 2**32

        offset = 0
        for t in self.tensors:
            if t["offset"] is None:
                t["offset"] = offset
            if placed(t):
                offset = max(offset, t["offset"] + len(t["data"]))
                offset = (offset + self.alignment - 1) // self.alignment * self.alignment
        for i, t in enumerate(self.tensors):
            self.marks[f"t{i}"] = len(out)
            out += self.string(t["name"])
            self.marks[f"t{i}.n_dims"] = len(out)
            out += self.p("I", t["n_dims"])
            for j, d in enumerate(t["ne"]):
                self.marks[f"t{i}.ne{j}"] = len(out)
                out += self.p("q", d)
            self.marks[f"t{i}.type"] = len(out)
            out += self.p("I", t["type"])
            self.marks[f"t{i}.offset"] = len(out)
            out += self.p("Q", t["offset"])
        self.marks["infos_end"] = len(out)
        if self.tensors:
            out += bytes(-len(out) % self.alignment)
            data_start = len(out)
            self.marks["data"] = data_start
            end = data_start + max((t["offset"] + len(t["data"]) for t in self.tensors if placed(t)), default=0)
            end += -end % self.alignment
            blob = bytearray(end - data_start)
            for t in filter(placed, self.tensors):
                blob[t["offset"]:t["offset"] + len(t["data"])] = t["data"]
            out += blob
        return bytes(out)


def base(**kw):
    """A small valid file: metadata of several types and three tensors."""
    g = Gguf(**kw)
    g.kv("general.architecture", STRING, "test")
    g.kv("general.name", STRING, "corpus base")
    g.kv("test.block_count", U32, 2)
    g.kv("test.tokens", ARRAY, (STRING, ["a", "bc", "def"]))
    g.tensor("a.weight", [8], T_F32)
    g.tensor("b.weight", [32, 2], T_Q8_0)
    g.tensor("c.weight", [4, 2], T_F16)
    return g


def f16_data(values_bits):
    return b"".join(struct.pack("<H", v) for v in values_bits)


def main():
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "tests/data/gguf"
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in list(out_dir.glob("*.gguf")) + list(out_dir.glob("*.tsv")):
        old.unlink()
    manifest = []

    def put(name, data):
        (out_dir / name).write_bytes(data)

    def broken(name, data, expect):
        put(name, data)
        manifest.append((name, expect))

    # ---------------- valid ----------------
    put("valid_basic.gguf", base().build())
    put("valid_v2.gguf", base(version=2).build())
    g = Gguf()
    g.kv("general.architecture", STRING, "meta-only").kv("x.f64", F64, 0.5)
    put("valid_no_tensors.gguf", g.build())  # ends right after the KVs, no padding
    # Alignment 64 and a non-contiguous, out-of-order layout with gaps (the spec allows it).
    g = Gguf(alignment=64)
    g.kv("general.alignment", U32, 64)
    g.tensor("late", [16], T_F32, offset=256)
    g.tensor("early", [8], T_F32, offset=0)
    g.tensor("middle", [256], T_Q4_K, offset=64)  # 144 bytes: [64, 208), then a gap
    put("valid_alignment64.gguf", g.build())
    # Every value type, arrays of arrays, unicode, bool bytes.
    g = Gguf()
    for vt, v in [(U8, 255), (I8, -128), (U16, 65535), (I16, -32768), (U32, 2**32 - 1), (I32, -2**31),
                  (F32, 1.5), (BOOL, 1), (STRING, "ünï 模型"), (U64, 2**64 - 1), (I64, -2**63), (F64, -0.25)]:
        g.kv(f"all.type{vt}", vt, v)
    g.kv("all.nested", ARRAY, (ARRAY, [(U8, [1, 2]), (U8, []), (U8, [3])]))
    g.kv("all.nested_str", ARRAY, (ARRAY, [(STRING, ["x", "y"]), (STRING, ["z"])]))
    g.kv("all.empty", ARRAY, (F32, []))
    g.tensor("t", [32], T_Q8_0)
    put("valid_nested.gguf", g.build())
    # n_dims = 0 (a scalar, 1 element) and a tensor with a zero dimension (0 bytes).
    g = Gguf()
    g.tensor("scalar", [], T_F32, data=struct.pack("<f", 2.0))
    g.tensor("empty", [0, 3], T_F32)
    g.tensor("after", [4], T_F32)
    put("valid_zero_dims.gguf", g.build())
    # Every float and block type whose scales check_tensor_data inspects, with finite data.
    g = Gguf()
    g.tensor("f32", [4], T_F32, data=struct.pack("<4f", 1, -2, 0.5, 1e30))
    g.tensor("f16", [2], T_F16, data=f16_data([0x3C00, 0xFBFF]))  # 1.0, -65504
    g.tensor("q4k", [256], T_Q4_K, data=f16_data([0x3C00, 0x3800]) + bytes(140))
    g.tensor("mxfp4", [32], T_MXFP4, data=b"\xfe" + bytes(16))
    put("valid_finite.gguf", g.build())
    # A two-shard split written by hand: shard 1 has the metadata, shard 2 only split keys.
    for k in range(2):
        g = Gguf()
        if k == 0:
            g.kv("general.architecture", STRING, "split")
        g.kv("split.no", U16, k).kv("split.count", U16, 2).kv("split.tensors.count", I32, 3)
        if k == 0:
            g.tensor("s0.a", [8], T_F32).tensor("s0.b", [4], T_F16)
        else:
            g.tensor("s1.a", [32], T_Q8_0)
        put(f"valid_split-{k + 1:05d}-of-00002.gguf", g.build())
    # Written by gguf-py's GGUFWriter (an independent writer), when the package is available.
    try:
        import numpy as np
        import gguf
        w = gguf.GGUFWriter(str(out_dir / "valid_gguf_py.gguf"), "llama")
        w.add_uint32("llama.block_count", 1)
        w.add_float32("llama.rope.freq_base", 10000.0)
        w.add_token_list(["<s>", "hi"])
        w.add_tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4))
        w.add_tensor("q", np.arange(68, dtype=np.uint8).reshape(2, 34), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    except ImportError:
        print("gguf package missing: valid_gguf_py.gguf not written", file=sys.stderr)

    # ---------------- broken: header ----------------
    broken("broken_empty.gguf", b"", "magic at byte 0: the file is 0 bytes long")
    broken("broken_magic.gguf", b"GGUG" + base().build()[4:], "magic at byte 0: expected \"GGUF\"")
    for v, msg in [(0, "0 is not a supported GGUF version"), (1, "GGUF v1 is obsolete"),
                   (4, "4 is not a supported GGUF version")]:
        broken(f"broken_version{v}.gguf", base(version=v).build(), f"version at byte 4: {msg}")
    broken("broken_big_endian.gguf", base(endian=">").build(), "version at byte 4: 0x03000000 looks byte-swapped")
    broken("broken_truncated_header.gguf", base().build()[:12], "tensor_count at byte 8: needs 8 bytes")
    g = base()
    g.kv_count = 2**62
    broken("broken_kv_count_huge.gguf", g.build(), "kv_count at byte 16: 4611686018427387904 key-value records")
    g = base()
    g.tensor_count = 2**62
    broken("broken_tensor_count_huge.gguf", g.build(), "tensor_count at byte 8: 4611686018427387904 tensor infos")
    g = base()
    g.kv_count = 2**63 + 5
    broken("broken_kv_count_negative.gguf", g.build(), "kv_count at byte 16: 9223372036854775813 is negative")
    g = base()
    g.kv_count = 5  # one more than present: the tensor infos get parsed as a KV
    data = g.build()
    # KV 4 reads tensor 0's name as its key, n_dims = 1 as type i8 and one byte of ne[0] = 8 as
    # its value; tensor 0's name length is then the other 7 (zero) bytes of ne[0] and a 0 type byte.
    broken("broken_kv_count_plus1.gguf", data, f"tensor 0 name at byte {g.marks['t0.ne0'] + 1}: the name is empty")

    # ---------------- broken: KVs ----------------
    g = base()
    g.kv("", U8, 1)
    data = g.build()
    broken("broken_key_empty.gguf", data, f"kv 4 key at byte {g.marks['kv4']}: the key is empty")
    g = base()
    g.kv("general.name", STRING, "again")
    data = g.build()
    broken("broken_key_duplicate.gguf", data,
           f"kv 4 'general.name' key at byte {g.marks['kv4']}: duplicate key (first defined by kv 1)")
    g = base()
    g.raw_kv(struct.pack("<Q", 70000) + b"k" * 16 + struct.pack("<I", U8) + b"\x01")  # the cap comes first
    data = g.build()
    broken("broken_key_too_long.gguf", data,
           f"kv 4 key length at byte {g.marks['kv4']}: string length 70000 exceeds the limit of 65535")
    g = base()
    g.raw_kv(g.string("bad.type") + struct.pack("<I", 13) + b"\0" * 8)
    data = g.build()
    broken("broken_value_type.gguf", data,
           f"kv 4 'bad.type' value type at byte {g.marks['kv4'] + 16}: 13 is not a GGUF value type")
    g = base()
    g.raw_kv(g.string("bad.str") + struct.pack("<I", STRING) + struct.pack("<Q", 100000) + b"abc")
    data = g.build()
    broken("broken_string_past_end.gguf", data,
           f"kv 4 'bad.str' string length at byte {g.marks['kv4'] + 19}: string length 100000 runs past the end")
    g = base()
    g.raw_kv(g.string("bad.arr") + struct.pack("<IIQ", ARRAY, U32, 2**40))
    data = g.build()
    broken("broken_array_count_huge.gguf", data,
           f"kv 4 'bad.arr' array count at byte {g.marks['kv4'] + 23}: 1099511627776 exceeds the limit")
    g = base()
    g.raw_kv(g.string("bad.arr") + struct.pack("<IIQ", ARRAY, STRING, 1000) + g.string("x"))
    data = g.build()
    broken("broken_string_array_count.gguf", data,
           f"kv 4 'bad.arr' array count at byte {g.marks['kv4'] + 23}: 1000 elements of type string need at least 8")
    g = base()
    g.raw_kv(g.string("bad.arr") + struct.pack("<IIQ", ARRAY, 99, 1))
    data = g.build()
    broken("broken_array_elem_type.gguf", data,
           f"kv 4 'bad.arr' array element type at byte {g.marks['kv4'] + 19}: 99 is not a GGUF value type")
    g = base()
    g.raw_kv(g.string("deep") + struct.pack("<I", ARRAY) + struct.pack("<IQ", ARRAY, 1) * 8 +
             struct.pack("<IQ", U8, 0))
    data = g.build()
    broken("broken_array_too_deep.gguf", data,
           f"kv 4 'deep' element 0 element 0 element 0 element 0 element 0 element 0 element 0 array element type "
           f"at byte {g.marks['kv4'] + 16 + 12 * 7}: arrays nested more than 8 deep")
    g = Gguf()  # the file ends inside the second inner array
    g.raw_kv(g.string("inner") + struct.pack("<IIQ", ARRAY, ARRAY, 2) + struct.pack("<IQ", U16, 1) + b"\1\0" +
             struct.pack("<IQ", U16, 2) + b"\1\0")
    data = g.build()
    broken("broken_nested_truncated.gguf", data,
           f"kv 0 'inner' element 1 array count at byte {len(data) - 10}: 2 elements of type u16 need at least 2 "
           f"bytes each, but only 2 remain")
    g = Gguf()
    g.kv("general.alignment", U64, 64)
    data = g.build()
    broken("broken_alignment_type.gguf", data,
           f"kv 0 'general.alignment' value type at byte {g.marks['kv0.type']}: must be u32, found u64")
    for a in (0, 48):
        g = Gguf()
        g.kv("general.alignment", U32, a)
        data = g.build()
        broken(f"broken_alignment_{a}.gguf", data,
               f"kv 0 'general.alignment' value at byte {g.marks['kv0.value']}: {a} is not a non-zero power of two")

    # ---------------- broken: tensor infos ----------------
    def tensor_case(name, mutate, expect):
        g = base()
        mutate(g)
        data = g.build()
        broken(name, data, expect(g.marks))

    tensor_case("broken_tensor_name_long.gguf", lambda g: g.tensor("n" * 64, [4], T_F32),
                lambda m: f"tensor 3 name length at byte {m['t3']}: string length 64 exceeds the limit of 63")
    tensor_case("broken_tensor_name_empty.gguf", lambda g: g.tensor("", [4], T_F32),
                lambda m: f"tensor 3 name at byte {m['t3']}: the name is empty")
    tensor_case("broken_tensor_name_duplicate.gguf", lambda g: g.tensor("b.weight", [4], T_F32),
                lambda m: f"tensor 3 'b.weight' name at byte {m['t3']}: duplicate tensor name (first used by tensor 1)")
    tensor_case("broken_n_dims.gguf", lambda g: g.tensor("x", [1, 1, 1, 1, 4], T_F32),
                lambda m: f"tensor 3 'x' n_dims at byte {m['t3.n_dims']}: 5 exceeds the maximum of 4")
    tensor_case("broken_ne_negative.gguf", lambda g: g.tensor("x", [4, -1], T_F32, data=b""),
                lambda m: f"tensor 3 'x' ne[1] at byte {m['t3.ne1']}: -1 is negative")
    tensor_case("broken_ne_overflow.gguf", lambda g: g.tensor("x", [2**32, 2**32], T_F32, data=b""),
                lambda m: f"tensor 3 'x' shape at byte {m['t3.n_dims']}: the element count of [4294967296, "
                          f"4294967296, 1, 1] overflows int64")
    tensor_case("broken_bytes_overflow.gguf", lambda g: g.tensor("x", [2**62], T_F64, data=b""),
                lambda m: f"tensor 3 'x' type at byte {m['t3.type']}: 4611686018427387904 blocks of F64 overflow")
    tensor_case("broken_type_unknown.gguf", lambda g: g.tensor("x", [4], 99),
                lambda m: f"tensor 3 'x' type at byte {m['t3.type']}: 99 is not a supported ggml type id")
    tensor_case("broken_type_removed.gguf", lambda g: g.tensor("x", [4], 4),
                lambda m: f"tensor 3 'x' type at byte {m['t3.type']}: 4 is not a supported ggml type id")
    tensor_case("broken_ne0_block.gguf", lambda g: g.tensor("x", [33, 1], T_Q8_0, data=bytes(34)),
                lambda m: f"tensor 3 'x' type at byte {m['t3.type']}: ne[0] = 33 is not a multiple of the Q8_0 "
                          f"block size 32")
    tensor_case("broken_offset_unaligned.gguf", lambda g: g.tensor("x", [4], T_F32, offset=200),
                lambda m: f"tensor 3 'x' offset at byte {m['t3.offset']}: 200 is not a multiple of the alignment 32")
    tensor_case("broken_overlap.gguf", lambda g: g.tensor("x", [8], T_F32, offset=0),
                lambda m: f"tensor 3 'x' offset at byte {m['t3.offset']}: data [0, 32) overlaps tensor 0 'a.weight'")
    g = base()
    data = g.build()
    c = g.tensors[2]
    broken("broken_data_truncated.gguf", data[:g.marks["data"] + c["offset"] + len(c["data"]) - 1],
           f"tensor 2 'c.weight' offset at byte {g.marks['t2.offset']}: 16 bytes at data offset {c['offset']}")
    g = base()
    g.build()
    g.tensors[1]["offset"] = 1 << 40
    data = g.build()
    broken("broken_offset_past_end.gguf", data,
           f"tensor 1 'b.weight' offset at byte {g.marks['t1.offset']}: 68 bytes at data offset 1099511627776")
    data = base().build()
    g = base()
    g.build()
    broken("broken_infos_truncated.gguf", data[:g.marks["t1.ne1"] + 3],
           f"tensor 1 'b.weight' ne[1] at byte {g.marks['t1.ne1']}: needs 8 bytes but the file ends 3 bytes later")

    # ---------------- broken: split keys and shards ----------------
    g = base()
    g.kv("split.no", U16, 2).kv("split.count", U16, 2)
    data = g.build()
    broken("broken_split_no.gguf", data,
           f"split.no at byte {g.marks['kv4.value']}: 2 is not below split.count = 2")
    g = base()
    g.kv("split.count", U16, 0)
    data = g.build()
    broken("broken_split_count_zero.gguf", data, f"split.count at byte {g.marks['kv4.value']}: must be at least 1")
    g = base()
    g.kv("split.count", STRING, "2")
    data = g.build()
    broken("broken_split_count_type.gguf", data,
           f"kv 4 'split.count' value type at byte {g.marks['kv4.type']}: must be an integer, found string")
    g = base()
    g.kv("split.tensors.count", I32, 5)
    data = g.build()
    broken("broken_split_tensors_count.gguf", data,
           f"split.tensors.count at byte {g.marks['kv4.value']}: 5, but the file holds 3 tensors")
    g = base()
    g.kv("split.no", U16, 1).kv("split.count", U16, 2)
    data = g.build()
    broken("broken_not_first_shard.gguf", data,
           f"split.no at byte {g.marks['kv4.value']}: this is shard 2 of 2 (split.no = 1); open the first shard")
    g = base()
    g.kv("split.no", U16, 0).kv("split.count", U16, 2)
    data = g.build()
    broken("broken_split_unnamed.gguf", data,
           f"split.count at byte {g.marks['kv5.value']}: 2 shards, but the file name does not end in "
           f"-00001-of-00002.gguf")
    broken("broken_split_nokeys-00001-of-00002.gguf", base().build(),
           "the file name says 2 shards but split.count is absent")
    g = base()
    g.kv("split.no", U16, 0).kv("split.count", U16, 2)
    broken("broken_split_missing-00001-of-00002.gguf", g.build(), "cannot open")
    for k in range(2):  # a tensor name in both shards; shard 2 alone is a non-first shard
        g = Gguf()
        g.kv("split.no", U16, k).kv("split.count", U16, 2)
        g.tensor("same", [4], T_F32)
        data = g.build()
        broken(f"broken_split_dup-{k + 1:05d}-of-00002.gguf", data,
               f"broken_split_dup-00002-of-00002.gguf: tensor 0 'same' name at byte {g.marks['t0']}: also in shard 1"
               if k == 0 else f"split.no at byte {g.marks['kv0.value']}: this is shard 2 of 2 (split.no = 1)")

    # ---------------- check_tensor_data ----------------
    def check_case(name, ttype, ne, data, expect):
        g = Gguf()
        g.tensor("ok", [4], T_F32, data=struct.pack("<4f", 0, 1, 2, 3))
        g.tensor("bad", ne, ttype, data=data)
        built = g.build()
        at = g.marks["data"] + g.tensors[1]["offset"]
        put(name, built)
        manifest.append((name, "check:" + expect(at)))

    check_case("checkdata_f32_nan.gguf", T_F32, [4], struct.pack("<3fI", 1, 2, 3, 0x7FC00000),
               lambda at: f"tensor 1 'bad' data at byte {at + 12}: F32 element 3 is inf or NaN")
    check_case("checkdata_f16_inf.gguf", T_F16, [4], f16_data([0, 0x7C00, 0, 0]),
               lambda at: f"tensor 1 'bad' data at byte {at + 2}: F16 element 1 is inf or NaN")
    check_case("checkdata_q4k_dmin.gguf", T_Q4_K, [512], (f16_data([0x3C00, 0x3C00]) + bytes(140)) +
               (f16_data([0x3C00, 0xFE00]) + bytes(140)),
               lambda at: f"tensor 1 'bad' data at byte {at + 144 + 2}: Q4_K block 1 field dmin is inf or NaN")
    check_case("checkdata_mxfp4_e.gguf", T_MXFP4, [32], b"\xff" + bytes(16),
               lambda at: f"tensor 1 'bad' data at byte {at}: MXFP4 block 0 field e is inf or NaN")
    # IQ1_M's fp16 scale lives in the top nibbles of 4 u16 words at byte 48: 0x7C00 = inf.
    scales = struct.pack("<4H", 0x0000, 0x0000, 0xC000, 0x7000)
    check_case("checkdata_iq1m_scale.gguf", T_IQ1_M, [256], bytes(48) + scales,
               lambda at: f"tensor 1 'bad' data at byte {at + 48}: IQ1_M block 0 field scales")

    manifest.sort()
    with open(out_dir / "broken.tsv", "w") as f:
        f.write("# file\texpected error substring (check: = only with ReadOptions::check_tensor_data)\n")
        for name, expect in manifest:
            assert "\t" not in expect and "\n" not in expect
            f.write(f"{name}\t{expect}\n")
    print(f"wrote {len(list(out_dir.glob('*.gguf')))} files and {len(manifest)} expectations to {out_dir}")


if __name__ == "__main__":
    main()
