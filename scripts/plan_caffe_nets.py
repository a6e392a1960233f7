#!/usr/bin/env python3
"""Plan every net that Caffe's source tree ships (``models/`` and ``examples/``, solvers left
out) with ``ucudnn plan --prototxt``, as a user would: first as the file stands, then, where
the plan asks for the shape of a blob the file does not settle (a data layer reading files),
once more with that shape given (``--input-shape``, from :data:`INPUT_SHAPES`: what the data
files of those examples hold).

    scripts/plan_caffe_nets.py CAFFE_SOURCE [--limit 64MiB] [--csv OUT.csv] [-- PLAN OPTIONS]

One CSV row per net: ``net,status,kernels,predicted_ms,speedup,asked,message`` with status
``planned`` (the file alone settles every shape), ``planned with --input-shape`` (the one
shape asked for, in ``asked``), ``nothing to plan`` (no Convolution layer) or ``error``.
Exit status 0 when no net ends in an error. On a GPU host the plans are benchmarked there;
elsewhere they come from the cache or the shipped data, and kernels that neither holds end in
"no benchmark data".
"""
import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

#: Shapes of the data layers' tops in Caffe's examples, as their data files hold them
#: (the batch from the file's data layer, the image size the examples' readme's use).
INPUT_SHAPES = {
    "models/bvlc_alexnet/train_val.prototxt": "data=256,3,227,227",
    "models/bvlc_reference_caffenet/train_val.prototxt": "data=256,3,227,227",
    "models/finetune_flickr_style/train_val.prototxt": "data=50,3,227,227",
    "examples/cifar10/cifar10_full_train_test.prototxt": "data=100,3,32,32",
    "examples/cifar10/cifar10_full_sigmoid_train_test.prototxt": "data=100,3,32,32",
    "examples/cifar10/cifar10_full_sigmoid_train_test_bn.prototxt": "data=100,3,32,32",
    "examples/cifar10/cifar10_quick_train_test.prototxt": "data=100,3,32,32",
    "examples/mnist/lenet_train_test.prototxt": "data=64,1,28,28",
    "examples/siamese/mnist_siamese_train_test.prototxt": "pair_data=64,2,28,28",
    "examples/finetune_pascal_detection/pascal_finetune_trainval_test.prototxt":
        "data=128,3,227,227",
    "examples/feature_extraction/imagenet_val.prototxt": "data=50,3,227,227",
}
_ASKED = re.compile(r"pass --input-shape (\S+)=N,C,H,W")


def nets(source: Path):
    for folder in ("models", "examples"):
        for p in sorted((source / folder).rglob("*.prototxt")):
            if "solver" not in p.name:
                yield p


def plan(ucudnn, path: Path, extra):
    r = subprocess.run(ucudnn + ["plan", "--prototxt", str(path), "--json"] + extra,
                       capture_output=True, text=True)
    doc = None
    if r.returncode == 0:
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            pass
    return r.returncode, doc, (r.stderr.strip().splitlines() or [""])[-1]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a Caffe source tree (the pinned tarball's)")
    ap.add_argument("--limit", default="64MiB", help="workspace per call (64MiB)")
    ap.add_argument("--csv", help="write the rows here")
    args = ap.parse_args(argv)
    ucudnn = [sys.executable, "-P", "-m", "ucudnn"]
    rows = []
    for path in nets(args.source):
        name = str(path.relative_to(args.source))
        extra = ["--limit", args.limit] + passthrough
        rc, doc, msg = plan(ucudnn, path, extra)
        asked = ""
        m = _ASKED.search(msg)
        if rc != 0 and m:
            asked = INPUT_SHAPES.get(name, "")
            if asked:
                rc, doc, msg = plan(ucudnn, path, extra + ["--input-shape", asked])
        if rc == 0 and doc is not None and not doc["kernels"]:
            status = "nothing to plan"
        elif rc == 0 and doc is not None:
            status = "planned with --input-shape" if asked else "planned"
        else:
            status = "error"
        t = (doc or {}).get("totals", {})
        rows.append({"net": name, "status": status, "kernels": len((doc or {}).get("kernels", [])),
                     "predicted_ms": t.get("time_ms"), "speedup": t.get("speedup"),
                     "asked": asked, "message": "" if status != "error" else msg})
        print(f"{name}: {status}" + (f" ({asked})" if asked else "")
              + (f": {msg}" if status == "error" else ""), flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    errors = sum(r["status"] == "error" for r in rows)
    print(f"{len(rows)} nets: {len(rows) - errors} planned or with nothing to plan, "
          f"{errors} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
