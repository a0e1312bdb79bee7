#!/usr/bin/env python3
"""Holds ctest's summary against the expected GoogleTest skips: every test ctest reports as Skipped
must match a pattern of the list (printed with its reason), and any other skip fails.

    scripts/check_skips.py CTEST_LOG tests/expected_gtest_skips.txt"""
import fnmatch
import re
import sys


def main() -> int:
    log, listing = sys.argv[1], sys.argv[2]
    patterns = []
    for line in open(listing, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("#"):
            pattern, _, why = line.partition(" ")
            patterns.append((pattern, why.strip()))
    # A value-parametrized test's ctest name ends in "  # GetParam() = ...": the name is what precedes it.
    skipped = re.findall(r"^\s*\d+ - (\S+)(?:\s+# GetParam\(\) = .*)? \(Skipped\)",
                         open(log, encoding="utf-8", errors="replace").read(), re.M)
    unexpected = []
    for name in skipped:
        match = next((why for pattern, why in patterns if fnmatch.fnmatch(name, pattern)), None)
        if match is None:
            unexpected.append(name)
        else:
            print(f"skipped (expected: {match}): {name}")
    for name in unexpected:
        print(f"UNEXPECTED skip: {name} (not in {listing})")
    print(f"{len(skipped)} skipped, {len(unexpected)} unexpected")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
