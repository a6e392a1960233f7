"""A benchmark cache under which the DP splits a kernel, whatever the GPU's timings.

Note [Forcing a split]
    The GPU tests that compare micro-batched plans with stock Caffe need a plan that really
    splits the mini-batch. No settings force one: the mini-batch N is always a candidate size
    (:func:`ucudnn.plan.settings.candidate_sizes`), and every convolution has zero-workspace
    algorithms, so even ``workspace_limit: 0`` with explicit ``micro_batch_size`` leaves the
    undivided plan in reach, and which plan wins depends on this GPU's timings (and their
    noise). What the DP plans from is the benchmark, so :func:`seed_split` writes one kernel's
    measurements into a benchmark cache of its own: algorithm 0 (IMPLICIT_GEMM forward,
    ALGO_0 backward: cuDNN supports them for every descriptor) is slow for more than
    ``split`` samples and fast up to it. The DP then plans ``split`` x N/split under any
    limit; the runtime still resolves every chunk with cuDNN (``set_plan`` asks it for each
    chunk's workspace and corrects a wrong one), and the layer runs that plan through cuDNN,
    so the comparison tests micro-batched execution. The other kernels are measured as usual
    into the same cache.
"""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterable

import child_env
from ucudnn.vocab import MATH_MODES, OPS


def seed_split(cache_path: Path, shape, batch: int, *, split: int = 8,
               ops: Iterable[str] = OPS, math: str = "fma", dtype: str = "float32") -> str:
    """Write the measurements of Note [Forcing a split] for ``shape`` (a ConvShape: the kernel
    Caffe runs for the layer) at every power of two up to ``batch``; returns the plan the DP
    will make (``Plan.describe()``). The cache keys on the GPU and the cuDNN version, so the
    entries are written by a child process that loads the cuDNN Caffe loads: this test process
    may hold PyTorch's (one process holds one libcudnn.so.9, whichever comes first)."""
    from ucudnn.plan.settings import candidate_sizes
    if batch % split or batch <= split:
        raise ValueError(f"batch {batch} is not a multiple of {split} above it")
    code = MATH_MODES[math]
    if split not in candidate_sizes("powerOfTwo", batch):
        raise ValueError(f"split {split} is not a power of two")
    spec = {"cache": str(cache_path), "shape": dataclasses.asdict(shape), "batch": batch,
            "split": split, "ops": list(ops), "math": math, "dtype": dtype}
    # run outside the checkout: `python -c` puts its working folder first on sys.path, and a
    # checkout's ucudnn (no compiled core on a node that installs the wheel) would shadow it
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], capture_output=True,
                       text=True, timeout=300, cwd=str(Path(cache_path).parent),
                       env=dict(os.environ, PYTHONPATH=child_env.python_path()))
    if r.returncode != 0:
        raise RuntimeError(f"seeding the split failed: {r.stdout}{r.stderr}")
    return f"{split}x{batch // split}:algo0" + (f"/m{code}" if code else "")


#: what the child of :func:`seed_split` runs (no PyTorch: the cuDNN of ucudnn's core)
_CHILD = """
import json, sys
from ucudnn.measure import bench
from ucudnn.measure.cache import BenchCache
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.settings import candidate_sizes
from ucudnn.plan.table import AlgoPerf
from ucudnn.vocab import MATH_MODES
s = json.loads(sys.argv[1])
shape = ConvShape(**{k: tuple(v) if isinstance(v, list) else v for k, v in s["shape"].items()})
code = MATH_MODES[s["math"]]
with BenchCache(s["cache"]) as cache:
    for op in s["ops"]:
        key = bench.cache_key(shape, op, s["math"], s["dtype"])
        cache.put_many(key, {b: [AlgoPerf(0, 1.0 * b if b <= s["split"] else 100.0 * b, 0, code)]
                             for b in candidate_sizes("powerOfTwo", s["batch"])}, 1)
"""


def split_setting(cache_path: Path, limit: int, strict: str) -> str:
    """The ucudnn_param fields (text format) of a powerOfTwo plan within ``limit`` from the
    cache at ``cache_path``; ``strict``: more fields (math, Winograd). The cache holds the
    legacy family only, so the plan takes that family alone (the default, both, would
    measure the graph family's configs and could take them instead of the seeded split)."""
    return (f'policy: POWER_OF_TWO engines: LEGACY workspace_limit: {limit} {strict} '
            f'cache_path: "{cache_path}"')
