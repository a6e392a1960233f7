"""``ucudnn info``: the GPU, driver, CUDA, cuDNN and the compiled core."""
from __future__ import annotations

import json

from ..measure.bench import core_status
from ..measure.sources import device_status, format_cudnn
from .common import version

HELP = "GPU, driver, CUDA, cuDNN and the compiled core"


def add_parser(sub) -> None:
    s = sub.add_parser("info", help=HELP, description=HELP + ".")
    s.add_argument("--json", action="store_true", help="print a JSON object")
    s.set_defaults(func=run)


def run(args) -> int:
    info, reason = device_status()
    core, core_detail = core_status()
    if args.json:
        print(json.dumps({"ucudnn_version": version(), "core": {"status": core,
                          "detail": core_detail}, "gpu": info, "no_gpu_reason": reason or None},
                         indent=2, sort_keys=True, default=str))
        return 0
    print(f"ucudnn {version()}")
    print(f"compiled core: {core} ({core_detail})")
    if info is None:
        print(f"no GPU visible: {reason}")
    else:
        for k, v in info.items():
            print(f"{k}: {format_cudnn(v) if k.startswith('cudnn') else v}")
    return 0
