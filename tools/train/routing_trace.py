"""mox's routing trace format (src/models/routing_trace.h), written and read from Python.

Little-endian, version 1:
  8 bytes "MOXROUTE", u32 version, u32 id width in bytes (1 when n_expert <= 256, else 2),
  i64 n_expert, i64 k, i64 n_layers (traced MoE layers), i64 n_tokens,
  n_layers x i32 trunk layer index (strictly ascending),
  two strings (u32 length, bytes): the architecture, then the model's name,
  the ids token-major [n_tokens][n_layers][k] in the router's order (most probable first).
Nothing may follow.
"""
import struct

import numpy as np

MAGIC = b"MOXROUTE"
VERSION = 1
_HEAD = struct.Struct("<8sII4q")


def _id_width(n_expert):
    return 1 if n_expert <= 256 else 2


def encode(arch, model, n_expert, layers, ids):
    """Bytes of a trace. ids: integer array [n_tokens, len(layers), k], each in [0, n_expert)."""
    ids = np.asarray(ids)
    layers = [int(l) for l in layers]
    if ids.ndim != 3 or ids.shape[1] != len(layers):
        raise ValueError(f"ids shape {ids.shape} is not [n_tokens, {len(layers)} layers, k]")
    if n_expert < 1 or n_expert > 65536:
        raise ValueError(f"n_expert {n_expert} out of range")
    if ids.size and (ids.min() < 0 or ids.max() >= n_expert):
        raise ValueError(f"an id is outside [0, {n_expert})")
    if any(b <= a for a, b in zip(layers, layers[1:])) or (layers and layers[0] < 0):
        raise ValueError(f"layer indices {layers} are not strictly ascending from >= 0")
    width = _id_width(n_expert)
    n_tokens, n_layers, k = ids.shape
    out = [_HEAD.pack(MAGIC, VERSION, width, n_expert, k, n_layers, n_tokens)]
    out.append(struct.pack(f"<{n_layers}i", *layers))
    for s in (arch, model):
        b = s.encode("utf-8")
        out.append(struct.pack("<I", len(b)) + b)
    out.append(ids.astype("<u1" if width == 1 else "<u2").tobytes())
    return b"".join(out)


def write(path, arch, model, n_expert, layers, ids):
    with open(path, "wb") as f:
        f.write(encode(arch, model, n_expert, layers, ids))


def decode(data, what="trace"):
    """dict(arch, model, n_expert, k, layers, ids [n_tokens, n_layers, k] uint16); raises
    ValueError naming `what` and the problem, as the C++ reader does."""

    def need(off, n):
        if off + n > len(data):
            raise ValueError(f"{what}: truncated at byte {off} (need {n} more, have {len(data) - off})")

    need(0, _HEAD.size)
    magic, version, width, n_expert, k, n_layers, n_tokens = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError(f"{what}: bad magic {magic!r}")
    if version != VERSION:
        raise ValueError(f"{what}: version {version}, expected {VERSION}")
    if n_expert < 1 or n_expert > 65536 or width != _id_width(n_expert):
        raise ValueError(f"{what}: id width {width} does not fit n_expert {n_expert}")
    if k < 1 or n_layers < 0 or n_tokens < 0 or k > n_expert:
        raise ValueError(f"{what}: bad sizes k={k} n_layers={n_layers} n_tokens={n_tokens}")
    off = _HEAD.size
    need(off, 4 * n_layers)
    layers = list(struct.unpack_from(f"<{n_layers}i", data, off))
    off += 4 * n_layers
    if any(b <= a for a, b in zip(layers, layers[1:])) or (layers and layers[0] < 0):
        raise ValueError(f"{what}: layer indices {layers} are not strictly ascending")
    strings = []
    for _ in range(2):
        need(off, 4)
        (n,) = struct.unpack_from("<I", data, off)
        off += 4
        need(off, n)
        strings.append(bytes(data[off : off + n]).decode("utf-8"))
        off += n
    count = n_tokens * n_layers * k
    need(off, count * width)
    ids = np.frombuffer(data, dtype="<u1" if width == 1 else "<u2", count=count, offset=off).astype(np.uint16)
    off += count * width
    if off != len(data):
        raise ValueError(f"{what}: {len(data) - off} trailing bytes")
    if ids.size and ids.max() >= n_expert:
        raise ValueError(f"{what}: id {int(ids.max())} >= n_expert {n_expert}")
    return {
        "arch": strings[0],
        "model": strings[1],
        "n_expert": n_expert,
        "k": k,
        "layers": layers,
        "ids": ids.reshape(n_tokens, n_layers, k),
    }


def read(path):
    with open(path, "rb") as f:
        return decode(f.read(), path)
