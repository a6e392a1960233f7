"""The points of the paper's grid (``ucudnn reproduce``): which runs, in which order, and how
a point is named and sorted."""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

from ..vocab import UNLIMITED, format_size

NETS = ("alexnet", "resnet18", "cifar10")
POLICIES = ("undivided", "powerOfTwo", "all")
LIMITS = ("8MiB", "64MiB", "512MiB")
#: Settings in the order tables and figures show them within a limit.
SETTINGS = ("caffe", "unlimited", *POLICIES, "ilp")
#: What results of schema 1 (before 2026-12) stored as the limit of ``unlimited`` points.
LEGACY_UNLIMITED = 1 << 40


def is_unlimited(limit: Optional[int]) -> bool:
    """``limit`` means no limit: :data:`ucudnn.vocab.UNLIMITED`, or the 1 TiB old results
    used."""
    return limit is not None and limit >= LEGACY_UNLIMITED


def limit_label(limit: Optional[int]) -> str:
    """``64.0MiB``, ``unlimited``, or ``-`` for none (stock Caffe)."""
    if limit is None:
        return "-"
    return "unlimited" if is_unlimited(limit) else format_size(limit)


@dataclasses.dataclass(frozen=True)
class Point:
    """One run of one network: ``setting`` is a policy, ``ilp``, ``unlimited`` or ``caffe``
    (stock Caffe, no ucudnn_param)."""
    net: str
    setting: str
    limit: Optional[int] = None

    @property
    def key(self) -> str:
        lim = "-" if self.limit is None or is_unlimited(self.limit) else format_size(self.limit)
        return f"{self.net}/{self.setting}/{lim}"

    @property
    def policy(self) -> Optional[str]:
        if self.setting in POLICIES:
            return self.setting
        return {"unlimited": "undivided", "caffe": None}.get(self.setting)

    @property
    def stem(self) -> str:
        """File name stem of the point's prototxt and logs."""
        return self.key.replace("/", "_")


def grid(nets: Sequence[str], limits: Sequence[int], policies: Sequence[str] = POLICIES, *,
         ilp: bool = True, unlimited: bool = True, stock: bool = True) -> List[Point]:
    """The points, in the order they run: per network the cheap settings first, so that
    an interrupted run has the baselines."""
    points: List[Point] = []
    for net in nets:
        if stock:
            points.append(Point(net, "caffe"))
        if unlimited:
            points.append(Point(net, "unlimited", UNLIMITED))
        for limit in limits:
            points += [Point(net, p, limit) for p in policies]
            if ilp:
                points.append(Point(net, "ilp", limit))
    return points


def point_order(rec: dict) -> tuple:
    """Sort key of a point record within its network: stock Caffe and unlimited first, then
    by limit and setting (tables and figures)."""
    lim = rec.get("limit_bytes") or 0
    first = is_unlimited(lim) or rec["setting"] == "caffe"
    return (0 if first else 1, lim,
            SETTINGS.index(rec["setting"]) if rec["setting"] in SETTINGS else len(SETTINGS))
