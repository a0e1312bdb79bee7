"""tools/bench_plot.py (what `mox bench --plot` runs) on a small hand-made result set: the files it
writes are valid SVG/PNG and name the series a reader expects (mox and llama.cpp per configuration)."""
import importlib.util
import json
import struct
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="scripts/deps.sh installs matplotlib for the plots")
SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "bench_plot.py"
# In-process (one matplotlib import for all tests); `mox bench --plot` runs it as a program, which
# test_bench_compare.py covers.
_spec = importlib.util.spec_from_file_location("bench_plot", SCRIPT)
bench_plot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_plot)


def row(threads, type_k, n_prompt, n_gen, ts, llama_ts):
    base = {"build_commit": "abc1234", "cpu_info": "Test CPU", "cpu_cores": 2, "model_filename": "/m/tiny.gguf",
            "model_type": "qwen35moe 14.55M F16", "model_sha256": "ab" * 32, "n_batch": 2048, "n_ubatch": 512,
            "n_threads": threads, "type_k": type_k, "type_v": "f16", "n_gpu_layers": 0, "n_cpu_moe": 0,
            "flash_attn": -1, "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": 0, "test_time": "2026-11-29T00:00:00Z",
            "samples_ts": [ts * 0.9, ts, ts * 1.1], "repetitions": 3, "median_ts": ts, "min_ts": ts * 0.9,
            "max_ts": ts * 1.1, "host_rss_bytes": (100 + threads) << 20, "vram_budget": 0, "plan": "manual",
            "vram_bytes": None, "llama_build_commit": "0c1e570"}
    base.update({"llama_median_ts": llama_ts, "llama_min_ts": llama_ts * 0.95, "llama_max_ts": llama_ts * 1.05})
    return base


def results(tmp_path):
    rows = [row(t, k, p, g, ts=100.0 * t + (0 if k == "f16" else 7) + p, llama_ts=90.0 * t + g)
            for k in ("f16", "q8_0") for t in (1, 2) for p, g in ((64, 0), (0, 16))]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rows))
    return path


def png_text_chunks(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks, header = 8, {}, None
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        crc = struct.unpack(">I", data[at + 8 + length:at + 12 + length])[0]
        assert zlib.crc32(kind + body) == crc, kind
        if kind == b"IHDR":
            header = struct.unpack(">II", body[:8])
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            chunks[key.decode()] = value.decode("latin-1")
        at += 12 + length
    return header, chunks


def test_svg_and_png_name_every_series(tmp_path):
    svg, png = tmp_path / "p.svg", tmp_path / "p.png"
    assert bench_plot.main([str(results(tmp_path)), str(svg), str(png)]) == 0
    want = ["mox type_k=f16", "mox type_k=q8_0", "llama.cpp type_k=f16", "llama.cpp type_k=q8_0"]

    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    text = " ".join(t.strip() for t in root.itertext())
    for label in want + ["n_threads", "pp64", "tg16", "abc1234", "Test CPU"]:
        assert label in text, label

    (width, height), chunks = png_text_chunks(png.read_bytes())
    assert width > 200 and height > 200
    for label in want:
        assert label in chunks["Description"], label


def test_x_axis_can_be_chosen_and_check_mode(tmp_path):
    svg = tmp_path / "k.svg"
    assert bench_plot.main([str(results(tmp_path)), str(svg), "--x", "type_k"]) == 0
    text = " ".join(ET.parse(svg).getroot().itertext())
    assert "mox n_threads=1" in text and "llama.cpp n_threads=2" in text
    assert bench_plot.main(["--check"]) == 0
    with pytest.raises(SystemExit, match=r"\.svg or \.png"):
        bench_plot.main([str(results(tmp_path)), str(tmp_path / "x.pdf")])
