#!/usr/bin/env python3
"""Whether ``CUDNN_CONV_WSCAP_DBG`` caps PyTorch's cuDNN workspace: one convolution's training
step, timed in fresh processes under each setting of the variable and of PyTorch's cuDNN API.

The convolution is nnU-Net's first level (32 -> 32 channels, 3x3x3, padding 1, 128^3, batch 2),
in bf16 autocast with ``cudnn.benchmark``, once with NCDHW tensors and once channels_last_3d
(NDHWC). Per process and layout: three untimed steps (the benchmark), then the median of seven
CUDA-event timed steps (forward, ``.float().sum()``, backward), and how far the allocator's peak
rose above the memory held before the timed steps (activations, gradients and workspaces
together). A variable that caps the workspace shows as a lower peak, a slower step, or both,
against the process without it.

Prints one line per process: ``TORCH <api> <CUDNN_CONV_WSCAP_DBG or -> {json}``; ``--out``
also writes them as JSON. ``--core`` then benchmarks the same convolution in NDHWC through
ucudnn's core (both families, batch 1 and 2, within 256 MiB and 8 GiB), one ``CORE`` line per
operation, cap and batch: the fastest choice and the fastest within 256 MiB. Needs a CUDA GPU
and PyTorch (and the built core for ``--core``); about 20 s on an H100, 60 s with ``--core``.
"""
import argparse
import json
import os
import subprocess
import sys

#: (PyTorch's cuDNN API, CUDNN_CONV_WSCAP_DBG in MiB or None): v8 is PyTorch's default,
#: v7 the one TORCH_CUDNN_V8_API_DISABLED=1 selects
SETTINGS = (("v8", None), ("v8", "256"), ("v8", "1"), ("v7", None), ("v7", "256"), ("v7", "1"))


def one_process() -> dict:
    import torch
    torch.backends.cudnn.benchmark = True
    out = {}
    for name, fmt in (("ncdhw", torch.contiguous_format), ("ndhwc", torch.channels_last_3d)):
        conv = torch.nn.Conv3d(32, 32, 3, padding=1).cuda().to(memory_format=fmt)
        x = torch.randn(2, 32, 128, 128, 128, device="cuda").to(memory_format=fmt)
        x.requires_grad_()

        def step():
            with torch.autocast("cuda", torch.bfloat16):
                y = conv(x)
            y.float().sum().backward()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(7):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        out[name] = {"ms": round(sorted(times)[3], 3),
                     "peak_over_base_mib": round((torch.cuda.max_memory_allocated() - base)
                                                 / 2**20, 1)}
        del conv, x
        torch.cuda.empty_cache()
    return out


def core_lines():
    """The ``--core`` part: the NDHWC convolution's choices through ucudnn's core."""
    import time
    from ucudnn import _core
    from ucudnn.measure.bench import _perfs
    from ucudnn.plan.conv import ConvShape
    shape = ConvShape.nd(32, 32, (128, 128, 128), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1),
                         layout="NDHWC")

    def show(p):
        return f"{p.time_ms:.3f}ms/{p.ws_bytes / 2**20:.1f}MiB/{p.engine or p.algo}" if p else "-"
    for op in ("fwd", "bwd_data", "bwd_filter"):
        for cap in (256 << 20, 8 << 30):
            kern = _core.Kernel(shape, op, 2, "bfloat16", "default", f"l1/{op}/NDHWC")
            t = time.time()
            res = kern.benchmark([1, 2], 1, cap, None, 5, ("graph", "legacy"))
            for b in (1, 2):
                ps = _perfs(res[b])                         # fastest first
                fit = [p for p in ps if p.ws_bytes <= 256 << 20]
                print(f"CORE NDHWC {op} cap={cap >> 20}MiB b={b} n={len(ps)} "
                      f"best={show(ps[0] if ps else None)} "
                      f"best<=256={show(fit[0] if fit else None)} t={time.time() - t:.1f}s",
                      flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the records here (JSON)")
    ap.add_argument("--core", action="store_true", help="also the core's NDHWC choices")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one_process()), flush=True)
        return 0
    records = []
    for api, cap in SETTINGS:
        env = {k: v for k, v in os.environ.items()
               if k not in ("CUDNN_CONV_WSCAP_DBG", "TORCH_CUDNN_V8_API_DISABLED")}
        if cap:
            env["CUDNN_CONV_WSCAP_DBG"] = cap
        if api == "v7":
            env["TORCH_CUDNN_V8_API_DISABLED"] = "1"
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--one"], env=env,
                             capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            print(f"torch_wscap.py: the {api} process with CUDNN_CONV_WSCAP_DBG={cap or '-'} "
                  f"failed: {(run.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
            return 1
        got = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"TORCH {api} {cap or '-'} {json.dumps(got)}", flush=True)
        records.append({"api": api, "wscap_mib": cap, **got})
    if args.out:
        from ucudnn.files import write_text     # atomic; refuses what is not a regular file
        from ucudnn.vocab import UcudnnError
        try:
            write_text(args.out, json.dumps({"records": records}, indent=2) + "\n")
        except (OSError, UcudnnError) as e:
            print(f"torch_wscap.py: --out {args.out}: {e}", file=sys.stderr)
            return 2
    if args.core:
        core_lines()
    return 0


if __name__ == "__main__":
    sys.exit(main())
