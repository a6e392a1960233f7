"""Milliseconds per training iteration of call G2's ``caffe train`` runs, from the solver's
own lines ("Iteration N (X iter/s, Ys/10 iters)": Caffe's host timer over the 10 iterations
before N, each of which reads the loss back, so each ends with the GPU's work): per process the
median over iterations 20-70 (the first 10-iteration window holds the warm-up), then the median
of the 3 processes per net and BatchNorm factor (UCUDNN_BN_HOST_FACTOR 1: on the host, as BVLC;
0: on the GPU, caffe_patch/0018).

    python results/h200/memory-and-training/commands/train_times.py
"""
import re
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "call_g2"
LINE = re.compile(r"Iteration (\d+) \(([0-9.e+-]+) iter/s")
for net in ("resnet50", "resnet18"):
    for host, where in ((1, "host"), (0, "GPU")):
        per = []
        for rep in (1, 2, 3):
            text = (HERE / f"train_{net}_h{host}_{rep}.log.lines").read_text(encoding="utf-8")
            ms = [1000 / float(r) for n, r in LINE.findall(text) if 20 <= int(n) <= 70]
            per.append(statistics.median(ms))
        print(f"{net} factor on the {where:4}: {statistics.median(per):.2f} ms per iteration "
              f"(processes {', '.join(f'{p:.2f}' for p in per)})")
