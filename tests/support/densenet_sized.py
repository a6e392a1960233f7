"""A net the size of DenseNet-121 whose ILP CBC cannot prove optimal quickly (Note [ILP time
limit] in ucudnn/plan/ilp.py): DenseNet-121's 120 convolutions (359 kernels), each kernel with
a dozen or more choices that all save the same time per byte of workspace, up to a little
noise, and workspaces in 2 KiB steps under a budget that is not. CBC finds a plan within a
millionth of its bound in a second and closes the rest slowly (more than 60 s on a 2-core
machine)."""
import random
from typing import Dict, List, Tuple

from ucudnn.plan.layers import LayerSpec, write_layers
from ucudnn.plan.table import AlgoPerf, BenchRow, format_table

#: cuDNN's legacy algorithms per op; each comes in two math modes.
ALGOS = {"fwd": 8, "bwd_filter": 7, "bwd_data": 6}
#: Workspaces are multiples of this; the budget is not (no plan fills it exactly).
STEP = 2048
#: A budget of about 2.8 MiB per call, 1 KiB off the steps.
BUDGET = 1000 * (1 << 20) + 1024


def layers(n: int = 64) -> List[LayerSpec]:
    """DenseNet-121's convolutions at batch ``n``: the stem, four dense blocks of 6, 12, 24
    and 16 layers (a 1x1 bottleneck to 128 channels, then a 3x3 to 32), and three
    transitions that halve the channels."""
    out = [LayerSpec("conv1", n, 3, 224, 224, 64, 7, 7, pad=3, stride=2, bwd_data=False)]
    c, hw = 64, 56
    for b, reps in enumerate((6, 12, 24, 16), start=2):
        for i in range(1, reps + 1):
            out.append(LayerSpec(f"conv{b}_{i}/x1", n, c, hw, hw, 128, 1, 1))
            out.append(LayerSpec(f"conv{b}_{i}/x2", n, 128, hw, hw, 32, 3, 3, pad=1))
            c += 32
        if b < 5:
            out.append(LayerSpec(f"conv{b}_blk", n, c, hw, hw, c // 2, 1, 1))
            c, hw = c // 2, hw // 2
    return out


def benches(net: List[LayerSpec], seed: int = 0) -> Dict[Tuple[str, str], Dict[int, list]]:
    """Each kernel's choices at its whole mini-batch (plan with policy ``undivided``): a
    choice of ``u`` steps of workspace takes 100 - u / 64 ms, give or take 0.01 ms."""
    rng = random.Random(seed)
    out = {}
    for l in net:
        for op in l.ops:
            units = sorted(rng.sample(range(4096), 2 * ALGOS[op]))
            out[l.name, op] = {l.n: [AlgoPerf(j // 2, 100 - u / 64 + rng.uniform(-0.01, 0.01),
                                              u * STEP, j % 2)
                                     for j, u in enumerate(units)]}
    return out


def write(folder, seed: int = 0):
    """(layer list, table): the net as ``ucudnn plan --layers L --table T`` reads it."""
    net = layers()
    rows = [BenchRow(name, op, b, p.algo, p.time_ms, p.ws_bytes, p.math)
            for (name, op), bench in benches(net, seed).items()
            for b, perfs in bench.items() for p in perfs]
    layer_csv, table_csv = folder / "densenet121_layers.csv", folder / "densenet121_table.csv"
    write_layers(layer_csv, net)
    table_csv.write_text(format_table(rows))
    return layer_csv, table_csv
