"""``ucudnn reproduce``: the paper's experiment grid with the patched Caffe, or predicted."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..experiments import reproduce as rp
from ..experiments.grid import BN_ENGINES, FUSIONS, LIMITS, NETS
from ..experiments.results import ReproduceError
from ..experiments.summary import format_summary
from ..measure.sources import device_status
from ..paths import caffe_binary
from ..vocab import ENGINE, LAYOUT, InputError
from . import common as c

HELP = ("the paper's experiment grid with the patched Caffe (predicted from the shipped H200 "
        "data without a GPU)")


#: The on/off options of reproduce: (flag, help); each false unless given.
SWITCHES = (
    ("--no-ilp", "leave out the ILP points"),
    ("--no-unlimited", "leave out unlimited workspace"),
    ("--no-stock", "leave out stock Caffe"),
    ("--no-shared",
     "leave out the shared-arena points (at every limit, and at stock Caffe's "
     "measured workspace memory)"),
    ("--retry-failed", "run failed points again"),
    ("--predict", "plan from the shipped H200 data instead of running Caffe"),
    ("--no-pytorch", "skip the PyTorch comparison"),
    ("--no-pytorch-profile",
     "time PyTorch's modes without the profiling process per mode that gives its "
     "time by kind of layer (a shorter run)"),
    ("--im2col",
     "add a point per net that runs every convolution with Caffe's im2col (engine: CAFFE, "
     "no ucudnn_param), as BVLC ran dilated ones (Note [im2col points])"),
    ("--force-backward",
     "run every Caffe point with the net's force_backward: true (a deploy net has no loss, "
     "and Caffe's whole iterations then run no backward pass)"),
    ("--share-diffs",
     "run every Caffe point with the net's share_diffs: true (activation gradients "
     "whose lives do not overlap share memory; caffe_patch/0007)"),
)


def add_parser(sub) -> None:
    s = sub.add_parser("reproduce", help=HELP, description=HELP + ".")
    s.add_argument("--out", metavar="DIR", default="reproduce-out",
                   help="results folder (reproduce.json, points.csv, layers.csv, logs/); a run "
                   "with the same folder resumes; with --merge-pytorch, the grid merged into")
    s.add_argument("--nets", default=",".join(NETS),
                   help="comma-separated names of the shipped nets (prototxt/NAME.prototxt), "
                   "NAME@BATCH for one at another batch (Note [Nets at another batch])")
    s.add_argument("--prototxt-dir", metavar="DIR",
                   help="take the --nets from DIR/NAME.prototxt (default: the shipped nets, "
                   "prototxt/); a net's input is DummyData, Input or input_shape")
    s.add_argument("--limits", default=",".join(LIMITS), help="per-kernel workspace limits")
    s.add_argument("--policies", default="undivided,powerOfTwo,all", help="DP policies")
    s.add_argument("--ilp-policy", default="powerOfTwo",
                   help="micro-batch policy of the ILP points")
    for flag, text in SWITCHES:
        s.add_argument(flag, action="store_true", help=text)
    s.add_argument("--iterations", type=int, default=20, help="caffe time iterations")
    s.add_argument("--repeats", type=int, default=3,
                   help="Caffe processes per point, run in rounds; the point's time is their "
                   "median")
    s.add_argument("--gpu", type=int, default=0, help="GPU id for caffe time")
    s.add_argument("--timeout", type=float, default=900, help="seconds per point")
    s.add_argument("--caffe", metavar="EXE", help="the patched caffe binary (default: "
                   "$UCUDNN_CAFFE or third_party/caffe/build/tools/caffe)")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache for Caffe (default: the "
                   "core's, $UCUDNN_CACHE or ~/.cache/ucudnn/bench.sqlite)")
    s.add_argument("--merge-pytorch", metavar="PYTORCH.json", nargs="+",
                   help="run nothing: merge scripts/time_pytorch.py's JSON files into the grid "
                   "that --out names (its reproduce.json; then points.csv, layers.csv and "
                   "summary.txt are written again); each PyTorch net goes to the grid net of "
                   "its name and batch")
    s.add_argument("--fusions", default=None,
                   help="the fusions on in every Caffe point's net, the others off: a "
                   "comma-separated list of the fusions of caffe_patch/0010: eltwise_relu "
                   "(an Eltwise SUM and the in-place ReLU after it as one layer), "
                   "batch_norm_relu (a FUSED "
                   "BatchNorm, its Scale and the in-place ReLU after them), "
                   "split_sum (that Eltwise layer sums the gradients of the Split layer "
                   "after it) and batch_norm_eltwise (that Eltwise layer applies the "
                   "FUSED BatchNorm and Scale before it), or all, or none (default: "
                   "the nets' own, Caffe's defaults: all on)")
    s.add_argument("--layouts", default="NCHW",
                   help="activations' layouts of ucudnn's points, each a point of its own "
                   "(the net's ucudnn_param.layout): NCHW, NHWC (the blobs between Caffe's "
                   "layout-aware layers channel-innermost; Note [NHWC in Caffe] in "
                   "caffe_patch/0011); stock Caffe runs NCHW")
    s.add_argument("--engines", default="legacy",
                   help="families of convolution choices of ucudnn's points, each a point of "
                   "its own: legacy (cuDNN's algorithms), graph (the graph API's engine "
                   "configs), both (Note [Choices])")
    s.add_argument("--bn-engines", default="caffe,fused",
                   help="BatchNorm engines of nets that have BatchNorm layers: caffe (BVLC's "
                   "layer, the paper's baseline), fused or cudnn (caffe_patch/0009's kernels "
                   "or cuDNN's calls; points keyed .../fused-bn, .../cudnn-bn, skipped when "
                   "the binary lacks that patch)")
    s.set_defaults(func=run)


def run(args) -> int:
    if args.merge_pytorch:
        try:
            rp.merge_pytorch(Path(args.out), args.merge_pytorch,
                             say=lambda m: print(m, flush=True))
        except ReproduceError as e:
            raise c.CliError(str(e)) from None
        return 0
    c.positive(args.iterations, "--iterations")
    c.positive(args.repeats, "--repeats")
    limits = [c.size(x, "--limits") for x in c.split_list(args.limits)]
    policies = [c.policy(p, "--policies") for p in c.split_list(args.policies)]
    ilp_policy = c.policy(args.ilp_policy, "--ilp-policy")
    fusions = None if args.fusions is None else c.split_list(args.fusions)
    if fusions == []:
        raise c.CliError("--fusions: empty; name the fusions to turn on, or all, or none")
    if fusions == ["all"]:
        fusions = list(FUSIONS)
    elif fusions == ["none"]:
        fusions = []
    for f in fusions or ():
        if f not in FUSIONS:
            raise c.CliError(f"--fusions: {f!r} is not one of {', '.join(FUSIONS)}, "
                             "or all, or none")
    try:
        layouts = [LAYOUT(x, "--layouts") for x in c.split_list(args.layouts)]
    except InputError as e:
        raise c.CliError(str(e)) from None
    if not layouts:
        raise c.CliError("--layouts: empty; name NCHW, NHWC or both")
    bn_engines = c.split_list(args.bn_engines)
    for b in bn_engines:
        if b not in BN_ENGINES:
            raise c.CliError(f"--bn-engines: {b!r} is not one of {', '.join(BN_ENGINES)}")
    try:
        engines = [ENGINE(e, "--engines") for e in c.split_list(args.engines)]
    except InputError as e:
        raise c.CliError(str(e)) from None
    caffe = args.caffe or str(caffe_binary())
    predict = args.predict
    if not predict:
        if args.caffe and not os.access(args.caffe, os.X_OK):
            raise c.CliError(f"--caffe: {args.caffe!r} is not an executable")
        info, reason = device_status()
        if args.caffe and info is None:
            raise c.CliError(f"reproduce --caffe needs a GPU: no GPU visible: {reason}")
        if info is None or not os.access(caffe, os.X_OK):
            why = reason if info is None else f"no Caffe binary at {caffe}"
            c.note(f"no GPU run possible ({why}): predicting every point from the shipped "
                   "H200 benchmark data instead (planner estimates, not measurements)")
            predict = True
    if predict and "all" in policies:
        c.note("predicted points: the shipped data holds only power-of-two micro-batch sizes "
               "(and N), so policy 'all' plans exactly as 'powerOfTwo' here; a GPU run "
               "measures the other sizes")
    opts = rp.Options(
        out=Path(args.out), nets=c.split_list(args.nets), limits=limits, policies=policies,
        ilp=not args.no_ilp, ilp_policy=ilp_policy, unlimited=not args.no_unlimited,
        stock=not args.no_stock, shared=not args.no_shared, iterations=args.iterations, repeats=args.repeats, gpu=args.gpu,
        timeout=args.timeout, caffe=None if predict else caffe, cache_path=args.cache,
        retry_failed=args.retry_failed, predict=predict, pytorch=not args.no_pytorch,
        pytorch_profile=not args.no_pytorch_profile,
        bn_engines=bn_engines, engines=engines, share_diffs=args.share_diffs, fusions=fusions,
        layouts=layouts, im2col=args.im2col, force_backward=args.force_backward,
        prototxt_dir=None if args.prototxt_dir is None else Path(args.prototxt_dir), argv=["ucudnn", "reproduce", *getattr(args, "argv", [])])
    try:
        doc = rp.run(opts, say=lambda m: print(m, flush=True))
    except ReproduceError as e:      # not an InputError in every tree
        raise c.CliError(str(e)) from None
    summary = format_summary(doc)
    print(summary)
    if predict and "all" in policies:
        print("note: predicted 'all' equals 'powerOfTwo' (the shipped data has only power-of-two "
              "micro-batch sizes)")
    failed = [k for k, r in doc["points"].items() if r.get("status") == "failed"]
    if failed:
        print(f"{len(failed)} point(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
