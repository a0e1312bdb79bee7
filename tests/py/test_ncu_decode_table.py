"""tools/ncu_decode_table.py on small CSV files shaped as Nsight Compute writes them (a warning preamble,
the raw page's units row, thousands separators), built here row by row."""
import csv
import io
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "ncu_decode_table.py"


def write_csv(path, header, rows, preamble=("==PROF== Connected to process 1 (/tmp/bin/mox)",)):
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(header)
    for r in rows:
        w.writerow(r)
    path.write_text("\n".join(preamble) + "\n" + buf.getvalue())


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, check=True).stdout


def test_steps_splits_passes_at_the_norms_and_groups_the_last(tmp_path):
    header = ["ID", "Kernel Name", "Grid Size", "gpu__time_duration.sum"]
    rows = [["", "", "", "ns"]]  # the raw page's units row
    kid = 0

    def add(name, grid, ns):
        nonlocal kid
        rows.append([str(kid), name, grid, f"{ns:,}"])
        kid += 1

    # Two passes of a 2-norm model (--norms-per-pass 2): norm, matvec, norm, matvec.
    for p in range(2):
        add("(anonymous namespace)::add_rms_norm_kernel(float *)", "(1, 1, 1)", 3000)
        add("void (anonymous namespace)::matvec_kernel<seg::Q4_K, 1>(const unsigned char *)", "(528, 1, 1)", 14000 + p)
        add("(anonymous namespace)::add_rms_norm_kernel(float *)", "(1, 1, 1)", 4000)
        add("void (anonymous namespace)::matvec_kernel<seg::Q4_K, 1>(const unsigned char *)", "(528, 1, 1)", 16000 + p)
    f = tmp_path / "raw.csv"
    write_csv(f, header, rows)
    out = run("steps", str(f), "--norms-per-pass", "2")
    assert "| 0 | 4 | 37.0 |" in out
    assert "| 1 | 4 | 37.0 |" in out  # 3 + 14.001 + 4 + 16.001 us, rounded
    # The last pass: the two matvecs grouped (total 30.002 us, mean 15.001), then the norms (7 us).
    lines = [l for l in out.splitlines() if l.startswith("| matvec") or l.startswith("| add_rms")]
    assert lines[0].startswith("| matvec_kernel<Q4_K, 1> | (528, 1, 1) | 2 | 30.0 | 15.00 | 14.0 | 16.0 |")
    assert lines[1].startswith("| add_rms_norm_kernel | (1, 1, 1) | 2 | 7.0 | 3.50 | 3.0 | 4.0 |")


def test_steps_with_dram_bytes_reports_megabytes_and_rate(tmp_path):
    header = ["ID", "Kernel Name", "Grid Size", "dram__bytes_read.sum", "dram__bytes_write.sum",
              "gpu__time_duration.sum"]
    rows = [["", "", "", "Mbyte", "Kbyte", "ns"]]
    # One kernel twice: 2 us moving 10 MB, 8 us moving 2.5 MB + 500 KB: 13 MB in 10 us = 1300 GB/s.
    rows.append(["0", "void (anonymous namespace)::gate_up_kernel<seg::Q4_K, 1>(GateUpArgs)", "(288, 1, 1)",
                 "10.00", "0.00", "2,000"])
    rows.append(["1", "void (anonymous namespace)::gate_up_kernel<seg::Q4_K, 1>(GateUpArgs)", "(288, 1, 1)",
                 "2.50", "500.00", "8,000"])
    f = tmp_path / "raw.csv"
    write_csv(f, header, rows)
    out = run("steps", str(f))
    assert "| 0 | 2 | 10.0 | 13.00 | 1300 |" in out
    line = next(l for l in out.splitlines() if l.startswith("| gate_up"))
    assert line == "| gate_up_kernel<Q4_K, 1> | (288, 1, 1) | 2 | 10.0 | 5.00 | 2.0 | 8.0 | 13.00 | 1300 |"


def test_details_one_line_per_kernel_with_units_converted(tmp_path):
    header = ["ID", "Kernel Name", "Grid Size", "Block Size", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
    k = "void (anonymous namespace)::gate_up_kernel<seg::Q4_K>(GateUpArgs)"
    rows = [
        ["0", k, "(264, 1, 1)", "(256, 1, 1)", "GPU Speed Of Light Throughput", "Duration", "ns", "28,864"],
        ["0", k, "(264, 1, 1)", "(256, 1, 1)", "GPU Speed Of Light Throughput", "SM Frequency", "hz", "1,968,061,426.00"],
        ["0", k, "(264, 1, 1)", "(256, 1, 1)", "GPU Speed Of Light Throughput", "DRAM Throughput", "%", "13.00"],
        ["0", k, "(264, 1, 1)", "(256, 1, 1)", "Launch Statistics", "Registers Per Thread", "register/thread", "111"],
    ]
    f = tmp_path / "details.csv"
    write_csv(f, header, rows)
    out = run("details", str(f))
    line = next(l for l in out.splitlines() if l.startswith("| 0 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "gate_up_kernel<Q4_K>"
    assert cells[4] == "28.86"  # us
    assert cells[5] == "1.97"  # GHz
    assert cells[6] == "13.00"
    assert cells[9] == "111"
    assert cells[7] == "-"  # not in the file


def test_a_file_without_a_header_is_refused(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("not ncu output\n")
    r = subprocess.run([sys.executable, str(TOOL), "steps", str(f)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "no CSV header" in r.stderr

def test_steps_reads_a_file_with_fewer_norms_than_a_pass_as_one_pass(tmp_path):
    # A file with a single norm launch, not 81 (part of a step, a prefill's micro-batch).
    header = ["ID", "Kernel Name", "Grid Size", "gpu__time_duration.sum"]
    rows = [["", "", "", "ns"],
            ["0", "void (anonymous namespace)::embed_kernel(const int *)", "(1, 1, 1)", "2,000"],
            ["1", "(anonymous namespace)::add_rms_norm_kernel(float *)", "(1, 1, 1)", "3,000"],
            ["2", "void (anonymous namespace)::matvec_kernel<seg::Q4_K, 1>(const unsigned char *)", "(528, 1, 1)", "14,000"]]
    f = tmp_path / "raw.csv"
    write_csv(f, header, rows)
    out = run("steps", str(f))
    assert "| 0 | 3 | 19.0 |" in out
    assert "| embed_kernel | (1, 1, 1) | 1 | 2.0 |" in out
