"""The H200 benchmark data shipped with the package, found by kernel identity.

``ucudnn/data/h200/`` holds, per network, a layer list (``{net}_layers.csv``, LayerSpec
semantics: Note [Layers, groups and counts] in :mod:`ucudnn.plan.network`) and a benchmark table
(``{net}_bench.csv``) keyed by those layer names, plus ``meta.json`` (GPU, cuDNN version, dtype,
math mode, workspace offered, timing). This module loads every table once into an in-memory map
``{CacheKey: {batch: [AlgoPerf]}}`` -- each layer's kernel as Caffe builds it
(:meth:`ConvShape.from_layer`) -- so that any list of layers, whatever its names (a prototxt's
``res2a_branch2a`` finds the table's ``l1_3x3``), is looked up by its kernels.

API (for the CLI and the experiments):

* :func:`meta` -- the parsed ``meta.json`` (a copy).
* :func:`nets` / :func:`layers` -- the shipped networks and their layer lists.
* :func:`lookup` -- benchmarks for a list of :class:`~ucudnn.plan.network.LayerSpec`, by kernel,
  with what is missing and why.
* :func:`entries` -- the whole map, e.g. to import it into a :class:`BenchCache`.

Note [Shipped data is never stretched]
    A lookup gets the shipped numbers only for the exact kernel (shape and strides), dtype,
    math mode, GPU and cuDNN version they were measured with, under the matching rule of the
    cache (same timing, measured with at least the workspace asked for). Anything else is
    reported missing with the reason (``math 'fma' asked, the shipped data was measured with
    'default'``) and never planned from other data.

Note [Grouped layers in the shipped tables]
    ``ucudnn bench --net alexnet`` measured AlexNet's grouped layers (conv2, conv4, conv5,
    group 2) as packed tensors of C/2 -> K/2 channels, while Caffe runs each group as a strided
    view into the whole blob (Note [Grouped layers] in :mod:`ucudnn.plan.conv`): only the
    sample strides differ (2x), the arithmetic is the same. meta.json says so
    (``grouped_layers_measured``); the tables are keyed by Caffe's strided kernel so that
    Caffe's layers find them, and ``meta()["grouped_layers_measured"]`` is what a report should
    quote. Re-measuring those three layers with ``ucudnn bench`` on an H200 removes the caveat.
"""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..paths import SHIPPED, shipped_dir
from ..plan.conv import ConvShape
from ..plan.layers import LayerSpec, read_layers
from ..plan.table import AlgoPerf, KernelBench, group_by_kernel, parse_table
from ..vocab import DTYPES, MATH_MODES, InputError
from .cache import CacheKey

__all__ = ["DATA", "meta", "nets", "layers", "entries", "lookup"]

#: The shipped data folder, inside the package.
DATA = SHIPPED


def _file(name: str):
    return shipped_dir() / name


@lru_cache(maxsize=None)
def _meta() -> dict:
    where = f"ucudnn/data/{DATA}/meta.json"
    try:
        m = json.loads(_file("meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{where}: cannot read: {e}") from None
    for field in ("gpu", "cudnn_version", "dtype", "math", "workspace_cap", "timing", "nets"):
        if field not in m:
            raise InputError(f"{where}: field {field!r} is missing")
    return m


def meta() -> dict:
    """``meta.json``: gpu, compute_capability, driver, cuda, cudnn_version, dtype, math,
    workspace_cap (bytes offered to cudnnFind), timing (``events5``), nets, sizes,
    grouped_layers_measured, commands, date."""
    return copy.deepcopy(_meta())


def nets() -> List[str]:
    """The shipped networks (``alexnet``, ``resnet18``)."""
    return list(_meta()["nets"])


@lru_cache(maxsize=None)
def _layers(net: str) -> Tuple[LayerSpec, ...]:
    if net not in _meta()["nets"]:
        raise InputError(f"net: no shipped data for {net!r} (shipped: {', '.join(nets())})")
    return tuple(read_layers(_file(f"{net}_layers.csv")))


def layers(net: str) -> List[LayerSpec]:
    """The shipped layer list of ``net``."""
    return list(_layers(net))


def _key(m: dict, op: str, shape: ConvShape) -> CacheKey:
    return CacheKey(m["gpu"], int(m["cudnn_version"]), m["dtype"], m["math"], op, shape,
                    int(m["workspace_cap"]), m["timing"])


@lru_cache(maxsize=None)
def _entries() -> Dict[CacheKey, Dict[int, Tuple[AlgoPerf, ...]]]:
    m = _meta()
    out: Dict[CacheKey, Dict[int, Tuple[AlgoPerf, ...]]] = {}
    for net in m["nets"]:
        where = f"ucudnn/data/{DATA}/{net}_bench.csv"
        text = _file(f"{net}_bench.csv").read_text(encoding="utf-8")
        by_name = {l.name: l for l in _layers(net)}
        for (name, op), bench in group_by_kernel(parse_table(text, source=where)).items():
            if name not in by_name:
                raise InputError(f"{where}: layer {name!r} is not in {net}_layers.csv")
            key = _key(m, op, ConvShape.from_layer(by_name[name]))
            have = out.setdefault(key, {})
            for b, perfs in bench.items():
                # the same kernel in two nets: the first net's measurement is kept
                have.setdefault(b, tuple(perfs))
    return out


def entries() -> Dict[CacheKey, KernelBench]:
    """Every shipped measurement: ``{CacheKey: {batch: [AlgoPerf]}}`` (fresh lists)."""
    return {k: {b: list(p) for b, p in v.items()} for k, v in _entries().items()}


def lookup(layer_list: Iterable[LayerSpec], *, math: str = "default", dtype: str = "float32",
           gpu: Optional[str] = None, cudnn_version: Optional[int] = None,
           workspace_cap: int = 0, timing: Optional[str] = None,
           sizes_of: Optional[Callable[[LayerSpec], Iterable[int]]] = None,
           require_all_sizes: bool = False, ops: Optional[Sequence[str]] = None,
           ) -> Tuple[Dict[Tuple[str, str], KernelBench], Dict[Tuple[str, str], str]]:
    """Shipped benchmarks for ``layer_list``, found by each layer's kernel, not its name.

    Returns ``(benches, missing)``: ``benches[layer_name, op] = {batch: [AlgoPerf]}`` ready for
    :func:`ucudnn.plan.network.plan_network`, and ``missing[layer_name, op] = reason`` for every
    kernel (``op`` in ``layer.ops``, or in ``ops``) that cannot be answered -- iterate it for
    the ``(layer_name, op)`` pairs, index it for the reason. A kernel is in exactly one of the two.

    ``math``, ``dtype``: what the plan is for; ``gpu``, ``cudnn_version``: the device to plan
    for (``None``: whatever the data was measured on); ``workspace_cap``: the least workspace
    the measurement must have been offered; ``timing``: ``"find"`` / ``"events<N>"`` (``None``:
    any). Any mismatch makes every kernel missing with the reason (Note [Shipped data is never
    stretched]). ``sizes_of(layer)``: the micro-batch sizes wanted (default: every shipped size
    up to ``layer.n``). A kernel is found when the data has its mini-batch size ``layer.n``
    (the undivided baseline needs it); it then comes with the wanted sizes the data has, and
    :func:`~ucudnn.plan.network.plan_network` reports the others (an error when strict, a note
    otherwise), as for a partial cache. ``require_all_sizes``: a kernel lacking any wanted
    size is missing instead.
    """
    if math not in MATH_MODES:
        raise InputError(f"math: unknown math mode {math!r} (expected one of "
                         f"{', '.join(MATH_MODES)})")
    if dtype not in DTYPES:
        raise InputError(f"dtype: unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    m = _meta()
    layer_list = list(layer_list)
    measured = f"the shipped {m['gpu']} data was measured with"
    reason = None
    if math != m["math"]:
        reason = f"math {math!r} asked; {measured} math {m['math']!r}"
    elif dtype != m["dtype"]:
        reason = f"dtype {dtype!r} asked; {measured} dtype {m['dtype']!r}"
    elif gpu is not None and gpu != m["gpu"]:
        reason = f"GPU {gpu!r} asked; the shipped data was measured on {m['gpu']!r}"
    elif cudnn_version is not None and int(cudnn_version) != int(m["cudnn_version"]):
        reason = f"cuDNN {cudnn_version} asked; {measured} cuDNN {m['cudnn_version']}"
    elif timing is not None and timing != m["timing"]:
        reason = f"timing {timing!r} asked; {measured} timing {m['timing']!r}"
    elif workspace_cap > int(m["workspace_cap"]):
        reason = (f"a measurement offered at least {workspace_cap} B asked; {measured} "
                  f"{m['workspace_cap']} B offered to cudnnFind")

    benches: Dict[Tuple[str, str], KernelBench] = {}
    missing: Dict[Tuple[str, str], str] = {}
    table = _entries()
    for l in layer_list:
        kernel_ops = list(ops) if ops is not None else list(l.ops)
        shape = ConvShape.from_layer(l)
        for op in kernel_ops:
            if reason is not None:
                missing[l.name, op] = reason
                continue
            have = table.get(_key(m, op, shape))
            if have is None:
                missing[l.name, op] = (f"kernel not in the shipped data ({l.describe()}, "
                                       f"{op})")
                continue
            if sizes_of is None:
                want = sorted({b for b in have if b <= l.n} | {l.n})
            else:
                want = sorted({int(b) for b in sizes_of(l)})
            lacking = [b for b in want if b not in have]
            if l.n not in have or (lacking and require_all_sizes):
                lacking = sorted(set(lacking) | ({l.n} - set(have)))
                missing[l.name, op] = (f"micro-batch size(s) {lacking} not in the shipped data "
                                       f"(it has {sorted(have)})")
                continue
            benches[l.name, op] = {b: list(have[b]) for b in want if b in have}
    return benches, missing
