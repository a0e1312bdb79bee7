"""Helpers of the architecture golden tests (test_goldens_qwen3moe.py, test_goldens_mixtral.py):
the error measures they print and assert, a numpy-only safetensors reader, and the conversion and
`mox logits` runs they share."""
import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np

GOLDENS = Path(__file__).resolve().parents[1] / "data" / "goldens"
ON_GPU = os.environ.get("MOX_TEST_DEVICE", "") == "cuda"


def meta(golden: Path) -> dict:
    return json.loads((golden / "goldens.json").read_text())


def bound(cpu, gpu):
    """The bound of the device under test (MOX_TEST_DEVICE=cuda: the GPU's)."""
    return gpu if ON_GPU else cpu


def rel_err(a, ref):
    e = float(np.abs(a - ref).max() / np.abs(ref).max())
    print(f"measured rel err {e:.3e}")
    return e


def argmax_agreement(a, ref):
    agree = float((a.argmax(-1) == ref.argmax(-1)).mean())
    print(f"measured argmax agreement {agree:.4f}")
    return agree


NP_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read_safetensors(path: Path) -> dict:
    """name -> float32 array (BF16, F16 and F64 converted; bf16 and f16 values exactly), with numpy
    alone (8-byte LE header length, JSON header, data buffer)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        data = raw[8 + n + a:8 + n + b]
        if h["dtype"] == "BF16":
            values = (np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(data, NP_DTYPES[h["dtype"]]).astype(np.float32)
        out[name] = values.reshape(h["shape"])
    return out


def convert_all(mox_bin, golden: Path, out: Path, outtypes) -> dict:
    files = {}
    for outtype in outtypes:
        path = out / f"{golden.name}-{outtype}.gguf"
        subprocess.run([str(mox_bin), "convert", str(golden / "hf"), "-o", str(path), "--outtype", outtype],
                       check=True, capture_output=True)
        files[outtype] = path
    return files


def logits(mox_bin, model, ids_file, out, device_args, *extra):
    subprocess.run([str(mox_bin), "logits", "-m", str(model), "--tokens", f"@{ids_file}", "-o", str(out),
                    *device_args, *extra], check=True, capture_output=True)
    return np.load(out)


def expert_stack(hf: dict, prefix: str, which: str, n_experts: int):
    """[E, rows, cols] of one expert matrix (gate, up or down) from whichever layout the checkpoint
    has: fused 3-D parameters, per-expert *_proj weights, or Mixtral's per-expert w1/w3/w2."""
    fused = {"gate": "gate_up_proj", "up": "gate_up_proj", "down": "down_proj"}[which]
    if prefix + "experts." + fused in hf:
        t = hf[prefix + "experts." + fused]
        if which == "down":
            return t
        half = t.shape[1] // 2
        return t[:, :half] if which == "gate" else t[:, half:]
    for name in (f"{which}_proj", {"gate": "w1", "up": "w3", "down": "w2"}[which]):
        key = f"{prefix}experts.0.{name}.weight"
        if key in hf:
            return np.stack([hf[f"{prefix}experts.{e}.{name}.weight"] for e in range(n_experts)])
    raise AssertionError(f"no {which} experts under {prefix}")
