#!/usr/bin/env python3
"""Where cold planning spends its time (issue 14): the core's Kernel.benchmark per kernel,
micro-batch size and setting, timed from Python.

For every convolution kernel of a shipped net and each (repeats, time_iters) setting, ONE
``measure_kernel`` call over the listed sizes (cudnnFind...Ex ``repeats`` times per size, then
``time_iters`` CUDA-event re-timings of each algorithm; Note [Find times] in
cython/ucudnn/_core.pyx), as a real ``all`` run makes it; the progress callback's timestamps
split the call into sizes (the first size also carries the call's set-up: buffers, workspace,
which ``setup_s`` estimates from a call with the smallest size alone). Writes one JSON file:
``rows`` of [layer, op, count, batch, repeats, time_iters, seconds, best_ms, algorithms].
Needs a GPU; uses no cache.

    python3 scripts/profile_benchmark.py --net resnet18 --out profile.json
"""
import argparse
import json
import sys
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="resnet18", help="a shipped net (alexnet, resnet18)")
    ap.add_argument("--sizes", default="1,16,64,128,256", help="micro-batch sizes")
    ap.add_argument("--settings", default="3:5,1:5,1:0,3:0",
                    help="repeats:time_iters pairs (the core's default is 3:5)")
    ap.add_argument("--out", required=True, help="JSON file to write (after every kernel)")
    args = ap.parse_args(argv)
    from ucudnn.measure import bench as B
    from ucudnn.measure import shipped
    from ucudnn.plan.conv import ConvShape
    sizes = [int(s) for s in args.sizes.split(",")]
    settings = [tuple(int(x) for x in s.split(":")) for s in args.settings.split(",")]
    out = {"net": args.net, "device": B.device_info(), "sizes": sizes,
           "settings": settings, "rows": []}
    t_all = time.perf_counter()
    for layer in shipped.layers(args.net):
        shape = ConvShape.from_layer(layer)
        for op in layer.ops:
            kern = B.core().Kernel(shape, op, layer.n, "float32", "default", layer.name)
            B.measure_kernel(kern, [layer.n], repeats=1)          # warm-up: cuDNN's set-up
            todo = [s for s in sizes if s <= layer.n]
            for repeats, time_iters in settings:
                t0 = time.perf_counter()
                B.measure_kernel(kern, todo[:1], repeats=repeats, time_iters=time_iters)
                setup_s = time.perf_counter() - t0
                stamps = []
                t0 = time.perf_counter()
                m = B.measure_kernel(kern, todo, repeats=repeats, time_iters=time_iters,
                                     progress=lambda *a: stamps.append(time.perf_counter()))
                ends = stamps if len(stamps) == len(todo) else [time.perf_counter()] * len(todo)
                starts = [t0] + ends[:-1]
                for b, a, e in zip(todo, starts, ends):
                    out["rows"].append([layer.name, op, layer.count, b, repeats, time_iters,
                                        round(e - a, 4), m[b][0].time_ms if m[b] else None,
                                        len(m[b])])
                out.setdefault("setup_s", []).append([layer.name, op, repeats, time_iters,
                                                      round(setup_s, 4)])
            print(f"{layer.name} {op}: {time.perf_counter() - t_all:.1f} s", flush=True)
            with open(args.out, "w") as f:
                json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
