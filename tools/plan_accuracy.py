#!/usr/bin/env python3
"""The planner accuracy table: what `mox plan` / the planner predicted for each configuration
against what `mox bench` measured (bench/cuda/plan_accuracy.sh runs them, this joins them).

    tools/plan_accuracy.py OUT_DIR        # writes OUT_DIR/accuracy.md and accuracy.json

OUT_DIR layout (written by plan_accuracy.sh):
  configs.tsv              one configuration a line: id <TAB> group <TAB> index in group <TAB> flags
  plan/<id>.json           `mox plan ... --json` for that configuration (may be missing: plan failed)
  bench/<group>.json       `mox bench -o json` of the group: one invocation sweeping the group's values,
                           its rows in configuration order, the tests (pp, tg) innermost
  bench/<group>.rc         its exit code; bench/<group>.err its stderr
  bench/<group>.vram.csv   nvidia-smi memory.used samples (MiB) during it; bench/<group>.idle the
                           MiB in use before it

Predicted numbers come from the bench row (`predicted_vram_bytes`, `predicted_tps`) when it has them,
else from the plan's JSON (a few likely key names, the one used is recorded). Measured VRAM is the
row's `vram_bytes` (the driver's number mox reports for that configuration); when a group holds one
configuration the poller's peak minus the idle baseline is shown too. Targets: VRAM within
max(2%, 256 MiB); decode within 10%; no OOM.
"""
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402

VRAM_REL, VRAM_ABS, TG_REL = 0.02, 256 * bc.MIB, 0.10
PRED_VRAM_KEYS = ["predicted_vram_bytes", "gpu_total_bytes", "predicted_gpu_bytes"]
PRED_TG_KEYS = ["predicted_tg_tps", "predicted_decode_tps", "decode_tps", "tg_tps", "predicted_tps"]
PRED_PP_KEYS = ["predicted_pp_tps", "predicted_prefill_tps", "prefill_tps", "pp_tps"]


def read_configs(out):
    configs = []
    for line in (Path(out) / "configs.tsv").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cid, group, index, flags = (line.split("\t") + ["", "", "", ""])[:4]
        configs.append({"id": cid, "group": group, "index": int(index), "flags": flags})
    return configs


def flag_value(flags, *names):
    """The value after the last of `names` in a flag string, or None."""
    words = shlex.split(flags)
    value = None
    for i, w in enumerate(words[:-1]):
        if w in names:
            value = words[i + 1]
    return value


def read_int(path):
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def poll_peak_mib(path):
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    vals = []
    for line in lines:
        try:
            vals.append(int(float(line.split(",")[-1])))
        except ValueError:
            continue
    return max(vals, default=None)


def split_rows(rows, n_configs):
    """The group's rows cut into one list per configuration (rows come in configuration order with the
    tests innermost); None when the count does not divide (a run that stopped part way)."""
    tests = []
    for r in rows:
        t = bc.row_test(r)
        if t in tests:
            break
        tests.append(t)
    per = len(tests)
    if per == 0 or len(rows) != per * n_configs:
        return None
    return [rows[i * per:(i + 1) * per] for i in range(n_configs)]


def check_rows(cfg, rows):
    """Mismatches between a configuration's flags and the fields of the rows assigned to it (a guard
    against reading rows in the wrong order)."""
    expect = {"n_cpu_moe": flag_value(cfg["flags"], "--n-cpu-moe", "-ncmoe"),
              "n_ubatch": flag_value(cfg["flags"], "-ub", "--ubatch-size"),
              "type_k": flag_value(cfg["flags"], "-ctk", "--cache-type-k")}
    bad = []
    for key, want in expect.items():
        if want is None:
            continue
        for r in rows:
            if key in r and r[key] is not None and str(r[key]) != str(want):
                bad.append(f"{key} {r[key]} != {want}")
    return bad


def pick_tests(rows):
    tg = next((r for r in rows if int(r.get("n_gen") or 0) > 0 and not int(r.get("n_prompt") or 0)), None)
    pp = next((r for r in rows if int(r.get("n_prompt") or 0) > 0 and not int(r.get("n_gen") or 0)), None)
    return tg, pp


def join(out):
    out = Path(out)
    configs = read_configs(out)
    groups = {}
    for c in configs:
        groups.setdefault(c["group"], []).append(c)
    results = []
    for gname, members in groups.items():
        members.sort(key=lambda c: c["index"])
        gdir = out / "bench"
        rc = read_int(gdir / f"{gname}.rc")
        err = bc.tail(gdir / f"{gname}.err", 600)
        try:
            rows = bc.load_json_rows((gdir / f"{gname}.json").read_text(errors="replace"))
        except OSError:
            rows = []
        per_cfg = split_rows(rows, len(members))
        idle, peak = read_int(gdir / f"{gname}.idle"), poll_peak_mib(gdir / f"{gname}.vram.csv")
        for k, cfg in enumerate(members):
            r = {"id": cfg["id"], "group": gname, "flags": cfg["flags"], "rc": rc,
                 "oom": rc not in (0, None) and bc.looks_like_oom(err), "notes": []}
            crow = per_cfg[k] if per_cfg else []
            if rc not in (0, None):
                r["notes"].append(f"bench exit {rc}")
            elif per_cfg is None:
                r["notes"].append(f"{len(rows)} rows for {len(members)} configurations")
            r["notes"] += check_rows(cfg, crow)
            plan = bc.load_json_file(out / "plan" / f"{cfg['id']}.json")
            if plan is None:
                r["notes"].append("no plan JSON")
            tg, pp = pick_tests(crow)
            vram_rows = [x.get("vram_bytes") for x in crow if isinstance(x.get("vram_bytes"), (int, float))]
            r["vram_measured"] = max(vram_rows) if vram_rows else None
            r["vram_poll"] = (peak - idle) * bc.MIB if len(members) == 1 and peak is not None and idle is not None else None
            if r["vram_measured"] is None and r["vram_poll"] is not None:
                r["vram_measured"] = r["vram_poll"]
            key, pv = bc.find_key(crow, ["predicted_vram_bytes"])
            if pv is None:
                key, pv = bc.find_key(plan or {}, PRED_VRAM_KEYS)
            r["vram_predicted"], r["vram_key"] = pv, key
            r["tg_measured"] = bc.row_median_ts(tg) if tg else None
            r["pp_measured"] = bc.row_median_ts(pp) if pp else None
            r["tg_predicted"] = tg.get("predicted_tps") if tg and isinstance(tg.get("predicted_tps"), (int, float)) else None
            if r["tg_predicted"] is None:
                _, r["tg_predicted"] = bc.find_key(plan or {}, PRED_TG_KEYS)
            r["pp_predicted"] = pp.get("predicted_tps") if pp and isinstance(pp.get("predicted_tps"), (int, float)) else None
            if r["pp_predicted"] is None:
                _, r["pp_predicted"] = bc.find_key(plan or {}, PRED_PP_KEYS)
            # The machine's CPU time that went to other work or the hypervisor during the tg
            # repetitions (mox bench's host_cpu_other / host_cpu_steal): host expert layers wait for
            # every one of their threads, so a busy machine slows them beyond what the profile says.
            busy = bc.row_cpu_busy(tg)
            if busy is not None and busy >= 0.10:
                r["notes"].append(f"host busy {busy:.0%} in tg")
            score(r)
            results.append(r)
    return results


def score(r):
    v, p = r["vram_measured"], r["vram_predicted"]
    if isinstance(v, (int, float)) and isinstance(p, (int, float)) and v > 0:
        r["vram_err"] = p - v
        r["vram_err_rel"] = (p - v) / v
        r["vram_pass"] = abs(p - v) <= max(VRAM_REL * v, VRAM_ABS)
    for t in ("tg", "pp"):
        m, p = r[f"{t}_measured"], r[f"{t}_predicted"]
        if isinstance(m, (int, float)) and isinstance(p, (int, float)) and m > 0:
            r[f"{t}_err_rel"] = p / m - 1
    if "tg_err_rel" in r:
        r["tg_pass"] = abs(r["tg_err_rel"]) <= TG_REL


def _pf(v):
    return "-" if v is None else ("PASS" if v else "**FAIL**")


def _pct(x):
    return "-" if x is None else f"{100 * x:+.1f}%"


def render(results):
    hdr = ["config", "flags", "VRAM predicted (GiB)", "VRAM measured (GiB)", "error (MiB)", "error", "VRAM",
           "tg predicted", "tg measured", "error", "tg", "pp predicted", "pp measured", "error", "notes"]
    rows = []
    for r in results:
        err_mib = f"{r['vram_err'] / bc.MIB:+.0f}" if "vram_err" in r else "-"
        poll = f" (poll {bc.fmt_gib(r['vram_poll'])})" if r.get("vram_poll") is not None else ""
        notes = "; ".join(r["notes"]) + (" **OOM**" if r["oom"] else "")
        rows.append([r["id"], f"`{r['flags'].strip()}`", bc.fmt_gib(r["vram_predicted"]),
                     bc.fmt_gib(r["vram_measured"]) + poll, err_mib, _pct(r.get("vram_err_rel")),
                     _pf(r.get("vram_pass")), bc.fmt_num(r["tg_predicted"]), bc.fmt_num(r["tg_measured"]),
                     _pct(r.get("tg_err_rel")), _pf(r.get("tg_pass")), bc.fmt_num(r["pp_predicted"]),
                     bc.fmt_num(r["pp_measured"]), _pct(r.get("pp_err_rel")), notes or ""])
    n = len(results)
    vram_scored = [r for r in results if "vram_pass" in r]
    tg_scored = [r for r in results if "tg_pass" in r]
    ooms = sum(1 for r in results if r["oom"])
    oom_runs = len({r["group"] for r in results if r["oom"]})
    failed = sum(1 for r in results if r["rc"] not in (0, None))
    worst_v = max((abs(r["vram_err"]) for r in vram_scored), default=None)
    worst_t = max((abs(r["tg_err_rel"]) for r in tg_scored), default=None)
    summary = {
        "configurations": n,
        "vram_scored": len(vram_scored), "vram_pass": sum(r["vram_pass"] for r in vram_scored),
        "tg_scored": len(tg_scored), "tg_pass": sum(r["tg_pass"] for r in tg_scored),
        "oom": ooms, "oom_invocations": oom_runs, "failed": failed,
        "worst_vram_err_mib": None if worst_v is None else worst_v / bc.MIB,
        "worst_tg_err_rel": worst_t,
    }
    text = ["# Planner accuracy: predicted vs measured\n",
            f"{n} configurations. VRAM within max(2%, 256 MiB): **{summary['vram_pass']}/{summary['vram_scored']}**"
            + (f" (worst {summary['worst_vram_err_mib']:.0f} MiB)" if worst_v is not None else "")
            + f"; decode within 10%: **{summary['tg_pass']}/{summary['tg_scored']}**"
            + (f" (worst {100 * worst_t:.1f}%)" if worst_t is not None else "")
            + f"; OOM: **{oom_runs}** bench invocations (target 0), holding {ooms} configurations"
            + f"; configurations whose bench failed: {failed}.\n",
            "Errors are predicted minus measured. Measured VRAM: the row's `vram_bytes` (driver); "
            "\"poll\": nvidia-smi's peak minus idle when the configuration ran alone.\n",
            bc.md_table(hdr, rows)]
    return "\n".join(text), summary


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    out = Path(argv[0])
    results = join(out)
    text, summary = render(results)
    (out / "accuracy.md").write_text(text)
    (out / "accuracy.json").write_text(json.dumps({"summary": summary, "configurations": results}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
