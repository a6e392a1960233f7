#!/usr/bin/env python3
"""The ILP's solve time with a given CBC binary (Note [CBC] in ucudnn/plan/ilp.py): the shipped
nets' ILPs at 8 and 64 MiB x kernels, powerOfTwo from the shipped tables, and with ``--all``
policy all from the recorded tables of every size (tests/data/h200_all_sizes).

    scripts/bench_ilp_solvers.py CBC_BINARY [--all]

Prints per net and limit the median solve seconds of three solves, the plan's predicted time
and the number of binary variables.
"""
import argparse
import lzma
import statistics
from pathlib import Path

import ucudnn.plan.ilp as ilp
from ucudnn.measure import shipped
from ucudnn.plan.network import plan_network
from ucudnn.plan.settings import PlanSettings
from ucudnn.plan.table import group_by_kernel, parse_table

ALL_SIZES = Path(__file__).resolve().parents[1] / "tests" / "data" / "h200_all_sizes"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cbc", help="the CBC binary to solve with")
    ap.add_argument("--all", action="store_true", help="policy all from the tables of every size")
    args = ap.parse_args(argv)
    ilp.cbc_path = lambda: args.cbc
    for net in ("alexnet", "resnet18"):
        layers = shipped.layers(net)
        if args.all:
            with lzma.open(ALL_SIZES / f"{net}_bench.csv.xz", "rt") as f:
                benches = group_by_kernel(parse_table(f.read()))
        else:
            benches, _ = shipped.lookup(layers)
        for lim in ("8MiB", "64MiB"):
            settings = PlanSettings(optimizer="ilp", limit=lim,
                                    policy="all" if args.all else "powerOfTwo")
            times = []
            for _ in range(3):
                p = plan_network(layers, benches, settings, strict=False)
                times.append(p.ilp.solve_seconds)
            print(f"{net} {settings.policy} {lim}: solve {statistics.median(times):.3f} s, "
                  f"{p.time_ms:.4f} ms predicted, {p.ilp.n_variables} variables")


if __name__ == "__main__":
    main()
