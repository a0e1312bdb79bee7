#!/usr/bin/env python3
"""Plots `mox bench -o json` results: tokens/s (median, bars from min to max) and memory against the
swept option, one panel per test, one line per other configuration, mox and llama.cpp (--compare)
both. `mox bench --plot out.svg` runs this; it can also be run by hand on a saved JSON file.

    bench_plot.py RESULTS.json OUT.svg [OUT.png ...] [--x FIELD]
    bench_plot.py --check          # exits 0 when matplotlib can be imported
"""
import argparse
import json
import os
import sys

# Options a sweep can vary, in the order the x axis is picked from (the first one that varies).
SWEEPABLE = ["n_cpu_moe", "vram_budget", "n_depth", "n_threads", "n_ubatch", "n_batch", "n_gpu_layers",
             "n_prompt", "n_gen", "type_k", "type_v", "flash_attn", "plan", "model_filename"]
TEST_FIELDS = ("n_prompt", "n_gen", "n_depth")


def test_kind(row):
    if row["n_gen"] == 0:
        return "pp"
    return "tg" if row["n_prompt"] == 0 else "pp+tg"


def panel_key(row, x):
    """Rows of one panel run the same kind of test; test sizes not on the x axis split panels."""
    return (test_kind(row),) + tuple(row[f] if f != x else None for f in TEST_FIELDS)


def panel_title(key):
    kind, n_prompt, n_gen, n_depth = key
    parts = []
    if kind in ("pp", "pp+tg"):
        parts.append(f"pp{'' if n_prompt is None else n_prompt}")
    if kind in ("tg", "pp+tg"):
        parts.append(f"tg{'' if n_gen is None else n_gen}")
    title = "+".join(parts)
    if n_depth:
        title += f" @ d{n_depth}"
    return title


def x_label_of(field, value):
    if field == "vram_budget":
        return "none" if value == 0 else f"{value / 2**30:g} GiB"
    if field == "model_filename":
        return os.path.basename(value)
    return str(value)


def series_label(row, others):
    return ", ".join(f"{f}={x_label_of(f, row.get(f))}" for f in others)


def build_plot(rows, x=None):
    """Returns (figure, list of series labels). Imports matplotlib lazily (for --check)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text stays text in SVG (searchable, testable)
    swept = [f for f in SWEEPABLE if len({json.dumps(r.get(f)) for r in rows}) > 1]
    if x is None:
        x = swept[0] if swept else "n_threads"
    if x not in rows[0]:
        raise SystemExit(f"bench_plot: --x {x}: no such field in the results")
    others = [f for f in swept if f != x and f not in TEST_FIELDS]

    panels = {}
    for r in rows:
        panels.setdefault(panel_key(r, x), []).append(r)
    x_values = list(dict.fromkeys(r[x] for r in rows))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x_values)
    if numeric:
        x_values.sort()
    position = {v: (v if numeric else i) for i, v in enumerate(x_values)}

    compare = any(r.get("llama_median_ts") is not None for r in rows)
    has_vram = any(r.get("vram_bytes") is not None for r in rows)
    n = len(panels)
    fig, axes = plt.subplots(2, n, figsize=(4.2 * n + 1.5, 7.5), squeeze=False, sharex="col")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels = []
    for col, (key, prow) in enumerate(panels.items()):
        ax_ts, ax_mem = axes[0][col], axes[1][col]
        groups = {}
        for r in prow:
            groups.setdefault(series_label(r, others), []).append(r)
        for i, (name, grows) in enumerate(groups.items()):
            grows = sorted(grows, key=lambda r: position[r[x]])
            xs = [position[r[x]] for r in grows]
            color = colors[i % len(colors)]
            engines = [("mox", "", "-", "o")]
            if compare:
                engines.append(("llama.cpp", "llama_", "--", "s"))
            for engine, prefix, style, marker in engines:
                pts = [r for r in grows if r.get(prefix + "median_ts") is not None]
                if not pts:
                    continue
                med = [r[prefix + "median_ts"] for r in pts]
                err = [[m - r[prefix + "min_ts"] for m, r in zip(med, pts)],
                       [r[prefix + "max_ts"] - m for m, r in zip(med, pts)]]
                label = f"{engine} {name}".strip()
                ax_ts.errorbar([position[r[x]] for r in pts], med, yerr=err, color=color, linestyle=style,
                               marker=marker, capsize=3, label=label)
                if label not in labels:
                    labels.append(label)
            ax_mem.plot(xs, [r["host_rss_bytes"] / 2**20 for r in grows], color=color, marker="o",
                        label=f"mox RSS {name}".strip())
            if has_vram:
                vram = [(position[r[x]], r["vram_bytes"] / 2**20) for r in grows if r.get("vram_bytes") is not None]
                if vram:
                    ax_mem.plot(*zip(*vram), color=color, linestyle=":", marker="^",
                                label=f"mox VRAM {name}".strip())
        ax_ts.set_title(panel_title(key))
        ax_ts.set_ylabel("tokens/s (median, bars min..max)")
        ax_ts.set_ylim(bottom=0)
        ax_ts.grid(alpha=0.3)
        ax_mem.set_ylabel("MiB (host RSS" + (", VRAM dotted)" if has_vram else ")"))
        ax_mem.set_ylim(bottom=0)
        ax_mem.margins(y=0.15)
        ax_mem.set_xlabel(x)
        ax_mem.grid(alpha=0.3)
        ax_mem.set_xticks([position[v] for v in x_values])
        ax_mem.set_xticklabels([x_label_of(x, v) for v in x_values])
    axes[0][0].legend(fontsize="small")
    axes[1][0].legend(fontsize="small")

    first = rows[0]
    reps = first.get("repetitions", len(first["samples_ts"]))
    footer = (f"mox {first['build_commit']} | {first['cpu_info']} ({first.get('cpu_cores', '?')} CPUs) | "
              f"{os.path.basename(first['model_filename'])} sha256 {first.get('model_sha256', '')[:12]} | "
              f"{reps} repetitions, interleaved | {first['test_time']}")
    if compare:
        footer += f" | llama.cpp {first.get('llama_build_commit', '')}"
    fig.suptitle(f"mox bench: {first['model_type']}", fontsize="large")
    fig.text(0.5, 0.005, footer, ha="center", va="bottom", fontsize="x-small")
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    return fig, labels


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check that matplotlib is importable")
    ap.add_argument("--x", help="field on the x axis (default: the first swept option)")
    ap.add_argument("results", nargs="?", help="mox bench -o json output")
    ap.add_argument("outputs", nargs="*", help=".svg / .png files to write")
    args = ap.parse_args(argv)
    if args.check:
        import matplotlib  # noqa: F401

        return 0
    if not args.results or not args.outputs:
        ap.error("need RESULTS.json and at least one output file")
    for out in args.outputs:  # before matplotlib is imported: a bad name fails fast
        if os.path.splitext(out)[1].lower() not in (".svg", ".png"):
            raise SystemExit(f"bench_plot: '{out}': expected .svg or .png")
    with open(args.results) as f:
        rows = json.load(f)
    if not rows:
        raise SystemExit("bench_plot: no result rows")
    fig, labels = build_plot(rows, args.x)
    for out in args.outputs:
        ext = os.path.splitext(out)[1].lower()
        if ext == ".png":
            # The series names ride along as PNG text, so a reader (or a test) can tell what is drawn.
            fig.savefig(out, dpi=120, metadata={"Description": "series: " + "; ".join(labels)})
        else:
            fig.savefig(out, metadata={"Description": "series: " + "; ".join(labels)})
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
