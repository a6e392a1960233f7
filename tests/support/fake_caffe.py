"""A stand-in for the patched Caffe binary on a machine without a GPU (tests of `ucudnn
reproduce` and `ucudnn baseline`)."""
import stat
import sys

import child_env
from repo_paths import LOGS

FAKE_CORE = r"""
import os, re, sys
from ucudnn.measure import records
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.dp import Chunk, Plan
from ucudnn.plan.settings import PlanSettings


class Kernel:
    # what the runtime's records read of a core Kernel
    def __init__(self, layer, op, n, instances, settings):
        self.name, self.op, self.n, self.instances = layer, op, n, instances
        self.shape, self.dtype, self.math, self.device = ConvShape(3, 8, 8, 4, 3, 3), "float32", "default", 0
        self.settings, self.workspace_size = settings, 0


def plan(n, algo, ws):
    half = n // 2
    return Plan(n, (Chunk(half, algo, 0, 1.0, ws), Chunk(n - half, algo, 0, 1.0, ws)))


model = open(sys.argv[3]).read()
if "ucudnn_param" in model and os.environ.get(records.ENV):
    ilp = "optimizer: ILP" in model
    limit = int(re.search(r"workspace_limit: (\d+)", model).group(1))
    convs = re.findall(r'name: "(\w+)"\s+type: "Convolution"', model)
    settings = PlanSettings(policy="all", limit=limit, optimizer="ilp" if ilp else "dp")
    kernels = [Kernel(c, op, 256, 2 if c in ("conv2", "conv4", "conv5") else 1, settings)
               for c in convs for op in ("fwd", "bwd_data", "bwd_filter")]
    bench = {{"sizes": 256, "sizes_benchmarked": 0, "sizes_cached": 256, "bench_s": 0.25}}
    for k in kernels:
        records.append_record({{"kind": "bench", **records.kernel_fields(k), **bench}})
    # as runtime.plan_net writes them: each kernel's plan (its benchmark's fields with it),
    # then the net
    for k in kernels:
        p = plan(256, 6 if ilp else 1, 4096 if ilp else 1024)
        k.workspace_size = p.ws_bytes
        records.append_record(records.plan_record(
            k, "ilp" if ilp else "dp", p, 4096 if ilp else limit,
            Plan(256, (Chunk(256, 0, 0, 3.0, 0),)), plan_s=0.01, optimizer=settings.optimizer,
            **bench))
    records.append_record({{"kind": "net", "net": "AlexNet", "kernels": len(kernels),
                           "calls": 23, "predicted_ms": 48.0, "undivided_ms": 72.0,
                           "workspace_bytes": sum(k.workspace_size * k.instances
                                                  for k in kernels),
                           "arena_bytes": None, "budget_bytes": 23 * limit if ilp else None,
                           "solve_s": 0.011 if ilp else None, "plan_s": 0.01,
                           "cap_bytes": None, "members": []}})
sys.stdout.write(open(sys.argv[-2]).read())
sys.exit(int(sys.argv[-1]))
"""


def fake_caffe(tmp_path, fail_setting):
    """A stand-in for the Caffe binary on a machine without a GPU: it replays logs that the
    real one wrote on the GPU host (Caffe's timing), appends plan records to $UCUDNN_RECORDS
    through the core's writer as the real core would (three kernels per convolution layer of
    the model, two instances for AlexNet's grouped layers, then the net: version 2, as
    runtime.plan_net writes them), and fails (like the real one did) for one setting."""
    core = tmp_path / "fake_core.py"
    core.write_text(FAKE_CORE.format())
    exe = tmp_path / "caffe"
    exe.write_text(f"""#!/bin/bash
model="$3"
case "$model" in
  *{fail_setting}*) cat "{LOGS}/alexnet_powerOfTwo_64MiB_failed.log"; exit 134 ;;
  *ilp*) log="{LOGS}/alexnet_ilp_8MiB.log" ;;
  *caffe_-*) log="{LOGS}/alexnet_stock.log" ;;
  *) log="{LOGS}/alexnet_all_8MiB.log" ;;
esac
PYTHONPATH="{child_env.python_path()}" exec "{sys.executable}" "{core}" "$@" "$log" 0
""")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)
