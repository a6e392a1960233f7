"""Write {net}_bench.csv.xz from the recorded H200 cache (see README.md next to this file).

    xz -dkc results/h200/reproduce/rerun/bench_cache.sqlite.xz > /tmp/rerun_cache.sqlite
    python tests/data/h200_all_sizes/extract.py /tmp/rerun_cache.sqlite

Each cache key is matched to a layer of the shipped layer lists
(``ucudnn/data/h200/{net}_layers.csv``) by its kernel (:meth:`ConvShape.from_layer`), as
:mod:`ucudnn.measure.shipped` does; rows are written in the :mod:`ucudnn.plan.table` format.
"""
import lzma
import sys
from pathlib import Path

from ucudnn.measure import shipped
from ucudnn.measure.cache import BenchCache
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.table import BenchRow, format_table

HERE = Path(__file__).resolve().parent


def main(cache_path: str) -> None:
    cache = BenchCache(cache_path, readonly=True)
    entries = cache.entries()
    used = set()
    for net in ("alexnet", "resnet18"):
        rows = []
        for layer in shipped.layers(net):
            shape_key = ConvShape.from_layer(layer).key()
            for op in layer.ops:
                keys = [k for k, _ in entries if k.op == op and k.shape.key() == shape_key]
                if len(keys) != 1:
                    raise SystemExit(f"{net} {layer.name} {op}: {len(keys)} cache keys")
                key = keys[0]
                used.add(key)
                sizes = cache.batches(key, exact=True)
                if sizes != list(range(1, layer.n + 1)):
                    raise SystemExit(f"{net} {layer.name} {op}: sizes {sizes[:3]}...")
                for b, perfs in cache.get_many(key, sizes, exact=True).items():
                    rows += [BenchRow(layer.name, op, b, p.algo, p.time_ms, p.ws_bytes, p.math)
                             for p in perfs]
        with lzma.open(HERE / f"{net}_bench.csv.xz", "wt", preset=9 | lzma.PRESET_EXTREME) as f:
            f.write(format_table(rows))
        print(net, len(rows), "rows")
    left = [k for k, _ in entries if k not in used]
    print("keys not matched to a layer:", len(left))


if __name__ == "__main__":
    main(sys.argv[1])
