#!/usr/bin/env python3
"""Compare the plans two runs gave the same net's kernels: the last ``kernel`` plan record of
every (layer, op) in two records files (``$UCUDNN_RECORDS`` of two Caffe runs, Note [Plan
records] in ucudnn/caffe/records.py), by plan (micro-batches and algorithms), workspace and
predicted time.

    scripts/compare_plan_records.py BEFORE.jsonl AFTER.jsonl [--json]

Prints one line per kernel that differs and a summary line; exit status 0 when every kernel
has the same plan in both, 1 otherwise. Reads the records of any version (the plan fields
have kept their meaning), without the reader's validation: it compares runs across versions.
"""
import argparse
import json
import sys


def final_plans(path):
    """{(layer, op): (plan_text, ws_bytes, predicted_ms)} of the last kernel record of each."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                sys.exit(f"{path}:{i}: not a JSON object ({e})")
            if rec.get("kind") == "kernel":
                out[rec["layer"], rec["op"]] = (rec["plan_text"], int(rec["ws_bytes"]),
                                                rec["predicted_ms"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = ap.parse_args(argv)
    a, b = final_plans(args.before), final_plans(args.after)
    keys = sorted(set(a) | set(b))
    diffs = [(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]
    if args.json:
        print(json.dumps({"kernels": len(keys), "identical": len(keys) - len(diffs),
                          "differ": [{"layer": k[0], "op": k[1], "before": x, "after": y}
                                     for k, x, y in diffs]}, indent=1))
    else:
        for (layer, op), x, y in diffs:
            print(f"{layer}/{op}: {x} -> {y}")
        print(f"{args.after}: {len(keys) - len(diffs)} of {len(keys)} kernels have the plan of "
              f"{args.before}")
    return 0 if not diffs else 1


if __name__ == "__main__":
    sys.exit(main())
