#!/usr/bin/env python3
"""Tables of one decode step's kernels from Nsight Compute's CSV output.

    tools/ncu_decode_table.py steps RAW.csv      # ncu --metrics gpu__time_duration.sum --csv --page raw
                                                 #   [,dram__bytes_read.sum,dram__bytes_write.sum]
    tools/ncu_decode_table.py details DETAILS.csv  # ncu --section ... --csv --page details

`steps`: the run must hold whole forward passes of the GPU backend (e.g. `mox run -p Hello -n 5`).
A pass starts at every 81st add_rms_norm launch (40 layers x 2 + the output norm of Qwen3.6-35B-A3B;
--norms-per-pass for another depth); with fewer norm launches than that (part of a step, or a
prefill's micro-batch) the file is one pass. Prints each pass's kernel count and summed duration, then the
last pass's kernels grouped by (name, grid): count, total, mean, min and max microseconds; with the DRAM
byte counters also the megabytes each group moved (read + written) and their rate over its durations.

`details`: one line per profiled kernel (use MOX_CUDA_PROFILE_STEP=N with --profile-from-start off
so they are one decode step's): duration, SM frequency, DRAM and SM throughput, achieved occupancy,
registers per thread, cycles per issued instruction, and (from the SchedulerStats,
ComputeWorkloadAnalysis and MemoryWorkloadAnalysis sections, "-" without them) the share of cycles
with no eligible warp, issue slots and memory pipes busy, and the L2 hit rate.

Durations are ncu's gpu__time_duration of each kernel alone (ncu serializes launches): they include
each launch's ramp, which a replayed graph may partly overlap, so their sum need not equal a step.
"""
import argparse
import collections
import csv
import io
import re
import sys


def read_rows(path):
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no CSV header (\"ID\",...) found: is it ncu --csv output?")
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def short_name(name):
    """'void mox::cuda::<unnamed>::matvec_kernel<mox::cuda::seg::Q4_K, 1>(const unsigned char *, ...)'
    -> 'matvec_kernel<Q4_K, 1>': namespaces first (one is spelled with parentheses), then arguments."""
    for junk in ("void ", "mox::cuda::", "(anonymous namespace)::", "<unnamed>::", "unnamed>::", "seg::", "mm::"):
        name = name.replace(junk, "")
    return re.sub(r"\(.*", "", name)[:44]


def number(text):
    """A metric value as float; None for empty cells and the raw page's units row ("ns")."""
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


BYTE_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
BYTE_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def steps(path, norms_per_pass):
    rows = read_rows(path)
    units = next((r for r in rows if not r.get("ID")), {})  # the raw page's units row
    with_bytes = all(m in (rows[0] if rows else {}) for m in BYTE_METRICS)
    data = []  # (name, ns, grid, DRAM bytes or None)
    for r in rows:
        ns = number(r.get("gpu__time_duration.sum", ""))
        if ns is None:
            continue
        moved = None
        if with_bytes:
            parts = [number(r.get(m, "")) for m in BYTE_METRICS]
            if None not in parts:
                moved = sum(v * BYTE_UNITS.get(units.get(m, "byte"), 1) for v, m in zip(parts, BYTE_METRICS))
        data.append((short_name(r["Kernel Name"]), ns, r["Grid Size"], moved))
    if not data:
        sys.exit("no kernel durations: not ncu --metrics gpu__time_duration.sum output")
    norms = [i for i, d in enumerate(data) if d[0].startswith("add_rms_norm")]
    # Fewer norms than one pass holds (part of a step, a prefill's micro-batch): one pass.
    starts = norms[::norms_per_pass] if len(norms) >= norms_per_pass else [0]
    bounds = starts + [len(data)]
    have_bytes = any(d[3] is not None for d in data)

    def moved_cells(ns_total, moved):  # MB and GB/s (bytes per ns)
        return f" {moved / 1e6:.2f} | {moved / ns_total:.0f} |" if ns_total > 0 else " - | - |"

    head = "| pass | kernels | sum of kernel durations (us) |"
    print(head + (" DRAM MB | GB/s |\n|---:|---:|---:|---:|---:|" if have_bytes else "\n|---:|---:|---:|"))
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        ns = sum(d[1] for d in data[a:b])
        line = f"| {k} | {b - a} | {ns / 1000:.1f} |"
        if have_bytes:
            line += moved_cells(ns, sum(d[3] or 0 for d in data[a:b]))
        print(line)
    last = data[bounds[-2]:bounds[-1]]
    groups = collections.OrderedDict()
    for name, ns, grid, moved in last:
        groups.setdefault((name, grid), []).append((ns / 1000, moved or 0))
    print("\nLast pass, by kernel and grid:\n")
    head = "| kernel | grid | launches | total us | mean us | min | max |"
    print(head + (" DRAM MB | GB/s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|" if have_bytes
                  else "\n|---|---|---:|---:|---:|---:|---:|"))
    for (name, grid), v in sorted(groups.items(), key=lambda kv: -sum(us for us, _ in kv[1])):
        us = [u for u, _ in v]
        line = f"| {name} | {grid} | {len(v)} | {sum(us):.1f} | {sum(us) / len(us):.2f} | {min(us):.1f} | {max(us):.1f} |"
        if have_bytes:
            line += moved_cells(sum(us) * 1000, sum(m for _, m in v))
        print(line)


def details(path):
    rows = read_rows(path)
    kernels = collections.OrderedDict()
    for r in rows:
        key = (r["ID"], short_name(r["Kernel Name"]), r["Grid Size"], r["Block Size"])
        kernels.setdefault(key, {})[r["Metric Name"]] = (r["Metric Value"], r["Metric Unit"])
    want = [("Duration", "us"), ("SM Frequency", "GHz"), ("DRAM Throughput", "%"),
            ("Compute (SM) Throughput", "%"), ("Achieved Occupancy", "%"), ("Registers Per Thread", ""),
            ("Warp Cycles Per Issued Instruction", ""), ("No Eligible", "%"), ("Issue Slots Busy", "%"),
            ("Mem Pipes Busy", "%"), ("L2 Hit Rate", "%")]
    print("| # | kernel | grid | block | " + " | ".join(f"{w} {u}".strip() for w, u in want) + " |")
    print("|---:|---|---|---|" + "---:|" * len(want))
    for (kid, name, grid, block), m in kernels.items():
        cells = []
        for metric, unit in want:
            value, got_unit = m.get(metric, ("", ""))
            v = number(value)
            if v is None:
                cells.append("-")
                continue
            if metric == "Duration":
                v = v / 1000 if got_unit == "ns" else v * 1000 if got_unit == "ms" else v
            if metric == "SM Frequency":
                v = v / 1e9 if got_unit == "hz" else v
            cells.append(f"{v:.2f}" if v < 100 else f"{v:.0f}")
        print(f"| {kid} | {name} | {grid} | {block} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("steps")
    s.add_argument("csv")
    s.add_argument("--norms-per-pass", type=int, default=81)
    d = sub.add_parser("details")
    d.add_argument("csv")
    a = ap.parse_args()
    if a.cmd == "steps":
        steps(a.csv, a.norms_per_pass)
    else:
        details(a.csv)


if __name__ == "__main__":
    main()
