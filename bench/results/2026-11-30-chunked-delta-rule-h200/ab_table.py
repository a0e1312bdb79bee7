"""Median, min..max and count of every (binary, test) pair of the ab_BINARY_rROUND_*.json files that
one run of this directory wrote (`mox bench -o json`, samples_ts of every repetition)."""
import collections
import glob
import json
import statistics
import sys

samples = collections.defaultdict(list)
for path in sorted(glob.glob(sys.argv[1] + "/ab_*.json")):
    binary = path.split("/ab_")[1].split("_r")[0]
    try:
        rows = json.load(open(path))
    except (OSError, ValueError) as err:
        print("unreadable", path, err)
        continue
    for r in rows:
        samples[(binary, r["test"])] += r.get("samples_ts") or [r["avg_ts"]]
print("| test | binary | median t/s | min..max | n |\n| :-- | :-- | --: | :-- | --: |")
for (binary, test), xs in sorted(samples.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"| {test} | {binary} | {statistics.median(xs):.1f} | {min(xs):.1f}..{max(xs):.1f} | {len(xs)} |")
