"""One ``ucudnn training`` invocation: its :class:`Options` (where pycaffe and Caffe's build
are defaults to :func:`ucudnn.paths.pycaffe_dir` and :func:`ucudnn.paths.caffe_build`) and
:func:`check_options`, which refuses what cannot run before anything starts.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import List, Mapping, Optional, Sequence

from ...paths import pycaffe_dir
from .nets import need_sklearn, net_config
from .settings import DEFAULT_SETTINGS, TrainingError, get_setting


@dataclasses.dataclass
class Options:
    """One ``ucudnn training`` invocation. ``settings``/``iterations``/``test_interval``/
    ``limits``: per net, missing nets take :data:`DEFAULT_SETTINGS` and the :data:`NETS`
    values. ``mode`` ``cpu``: Caffe's CPU mode with engine CAFFE convolutions (only the stock
    settings; for tests). ``batch``: override the nets' batch (tests)."""
    out: Path
    nets: Sequence[str] = ("digits", "cifar10")
    settings: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    iterations: Mapping[str, int] = dataclasses.field(default_factory=dict)
    test_interval: Mapping[str, int] = dataclasses.field(default_factory=dict)
    limits: Mapping[str, int] = dataclasses.field(default_factory=dict)
    pycaffe: Optional[Path] = None
    caffe_build: Optional[Path] = None
    gpu: int = 0
    mode: str = "gpu"
    timeout: float = 900.0
    force: bool = False
    seed: Optional[int] = None
    cache_path: Optional[str] = None
    batch: Mapping[str, int] = dataclasses.field(default_factory=dict)
    argv: Optional[Sequence[str]] = None

    def net_settings(self, net: str) -> List[str]:
        """The settings ``net`` runs, in the order given."""
        return list(self.settings.get(net) or DEFAULT_SETTINGS[net])

    def plan(self, net: str) -> dict:
        """What (net) runs with, as JSON."""
        cfg = net_config(net)
        return {"batch": self.batch.get(net, cfg.batch),
                "iterations": self.iterations.get(net, cfg.iterations),
                "test_interval": self.test_interval.get(net, cfg.test_interval),
                "limit_bytes": self.limits.get(net, cfg.limit),
                "seed": cfg.seed if self.seed is None else self.seed}




def check_options(opts: Options) -> None:
    """Refuse what cannot run, naming the option."""
    for net in opts.nets:
        net_config(net)
        for s in opts.net_settings(net):
            if not get_setting(s).stock and opts.mode == "cpu":
                raise TrainingError(f"--settings: {s} needs a GPU (the CPU mode runs Caffe's "
                                    "own convolution, engine CAFFE: only stock, stock-rerun)")
        p = opts.plan(net)
        for field, option in (("iterations", "--iterations"),
                              ("test_interval", "--test-interval"), ("batch", "batch")):
            if not isinstance(p[field], int) or p[field] < 1:
                raise TrainingError(f"{option}: must be a positive integer, got {p[field]!r}")
        if p["limit_bytes"] < 0:
            raise TrainingError(f"--limit: must not be negative, got {p['limit_bytes']}")
    if "digits" in opts.nets:
        need_sklearn()
    pycaffe = Path(opts.pycaffe or pycaffe_dir())
    if not (pycaffe / "caffe" / "__init__.py").is_file():
        raise TrainingError(f"--pycaffe: no pycaffe at {pycaffe} (a folder holding caffe/"
                            "__init__.py; scripts/gpu_node.sh setup or scripts/build_caffe.sh "
                            "builds it; $UCUDNN_PYCAFFE sets the default)")
    if opts.caffe_build is not None and not Path(opts.caffe_build).is_dir():
        raise TrainingError(f"--caffe-build: {opts.caffe_build} is not a folder")
