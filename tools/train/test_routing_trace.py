#!/usr/bin/env python3
"""routing_trace.py against the format in src/models/routing_trace.h: a hand-assembled file
byte for byte, round trips at both id widths, and the reader's refusals.
Run: python3 tools/train/test_routing_trace.py (numpy only), or under pytest."""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import routing_trace  # noqa: E402


def test_bytes_match_the_spec():
    # 2 tokens, traced layers 1 and 3, k = 2, 4 experts: every field written out by hand.
    ids = np.array([[[3, 0], [1, 2]], [[2, 3], [0, 1]]])
    want = (
        b"MOXROUTE"
        + struct.pack("<I", 1)  # version
        + struct.pack("<I", 1)  # id width: n_expert <= 256
        + struct.pack("<q", 4)  # n_expert
        + struct.pack("<q", 2)  # k
        + struct.pack("<q", 2)  # n_layers
        + struct.pack("<q", 2)  # n_tokens
        + struct.pack("<ii", 1, 3)  # trunk layer indices
        + struct.pack("<I", 9) + b"qwen35moe"
        + struct.pack("<I", 3) + b"toy"
        + bytes([3, 0, 1, 2, 2, 3, 0, 1])  # token-major, then layer, then rank
    )
    got = routing_trace.encode("qwen35moe", "toy", 4, [1, 3], ids)
    assert got == want, (got, want)
    back = routing_trace.decode(got)
    assert back["arch"] == "qwen35moe" and back["model"] == "toy" and back["layers"] == [1, 3]
    assert back["n_expert"] == 4 and back["k"] == 2
    assert np.array_equal(back["ids"], ids)


def test_round_trip_both_widths(tmp="/tmp/test_routing_trace.bin"):
    rng = np.random.default_rng(0)
    for n_expert, width in [(256, 1), (257, 2), (512, 2)]:
        ids = rng.integers(0, n_expert, size=(37, 5, 8))
        routing_trace.write(tmp, "qwen35moe", "m", n_expert, [0, 1, 2, 5, 39], ids)
        size = os.path.getsize(tmp)
        assert size == 48 + 5 * 4 + 4 + 9 + 4 + 1 + ids.size * width, size
        back = routing_trace.read(tmp)
        assert back["ids"].dtype == np.uint16 and np.array_equal(back["ids"], ids)
    os.remove(tmp)


def test_refusals():
    good = routing_trace.encode("a", "b", 4, [0], np.zeros((2, 1, 2), dtype=int))
    bad = {
        "truncated": good[:-1],
        "trailing": good + b"\0",
        "magic": b"MOXROUTX" + good[8:],
        "version": good[:8] + struct.pack("<I", 2) + good[12:],
        "width": good[:12] + struct.pack("<I", 2) + good[16:],
        "id range": good[:-1] + bytes([4]),
    }
    for name, data in bad.items():
        try:
            routing_trace.decode(data, name)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{name}: accepted")
    for args in [(4, [1, 1], np.zeros((1, 2, 2), dtype=int)), (4, [0], np.full((1, 1, 2), 4))]:
        try:
            routing_trace.encode("a", "b", *args)
        except ValueError:
            pass
        else:
            raise AssertionError(f"encode accepted {args}")


if __name__ == "__main__":
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    for t in tests:
        t()
    print(f"{len(tests)} passed, 0 failed")
