"""``ucudnn info``: the GPU, driver, CUDA, cuDNN and the compiled core."""
from __future__ import annotations

import json

from .common import version

HELP = "GPU, driver, CUDA, cuDNN and the compiled core"


def add_parser(sub) -> None:
    s = sub.add_parser("info", help=HELP, description=HELP + ".")
    s.add_argument("--json", action="store_true", help="print a JSON object")
    s.set_defaults(func=run)


def _core_status():
    """("ok" | "missing" | "error", detail) of the compiled core, imported only here."""
    import importlib
    import importlib.util
    try:
        spec = importlib.util.find_spec("ucudnn._core")
    except (ImportError, ValueError) as e:
        return "error", str(e)
    if spec is None:
        return "missing", "ucudnn._core is not built (pip install . on a machine with CUDA/cuDNN)"
    try:
        mod = importlib.import_module("ucudnn._core")
    except Exception as e:      # noqa: BLE001 - any failure to load is reported, not raised
        return "error", f"ucudnn._core is built but cannot be loaded: {e}"
    return "ok", getattr(mod, "__file__", None) or spec.origin or "ucudnn._core"


def run(args) -> int:
    from ..measure.sources import device_status, format_cudnn
    info, reason = device_status()
    core, core_detail = _core_status()
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
