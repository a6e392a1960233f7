"""``curves.csv``: the training curves of every (net, setting), one row per recorded iteration.

Its columns are :data:`CURVE_COLUMNS`, exactly: ``net,setting,iteration,loss,test_accuracy``,
numbers at full precision, ``test_accuracy`` empty where the held-out set was not evaluated.
:func:`write_curves` and :func:`read_curves` write and read it; :func:`rows_of` makes its
:class:`Row` s from the children's run records, :func:`by_setting` groups them.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
from typing import Dict, Iterable, List, Mapping, Optional

from ...plan.table import read_text, write_text
from .settings import TrainingError, setting_order

#: ``curves.csv``'s columns, exactly.
CURVE_COLUMNS = ("net", "setting", "iteration", "loss", "test_accuracy")


@dataclasses.dataclass(frozen=True)
class Row:
    """One recorded iteration: the loss of the forward pass of ``iteration`` (the weights after
    ``iteration`` updates, on that iteration's batch) and, where evaluated, the held-out
    accuracy of the same weights."""
    net: str
    setting: str
    iteration: int
    loss: Optional[float]
    test_accuracy: Optional[float] = None


def _num(v: Optional[float]) -> str:
    return "" if v is None else repr(float(v))


def write_curves(path, rows: Iterable[Row]) -> None:
    """``curves.csv``: :data:`CURVE_COLUMNS`, one row per (net, setting, iteration), numbers
    at full precision (float32 values round-trip), empty where not evaluated; written
    atomically."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CURVE_COLUMNS)
    for r in sorted(rows, key=lambda r: (r.net, setting_order(r.setting), r.iteration)):
        w.writerow([r.net, r.setting, r.iteration, _num(r.loss), _num(r.test_accuracy)])
    write_text(path, buf.getvalue())


def read_curves(path) -> List[Row]:
    """The rows of a ``curves.csv``; errors name the file, line and column."""
    text = read_text(path, TrainingError, "a curves.csv")
    rows: List[Row] = []
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(header) != CURVE_COLUMNS:
        raise TrainingError(f"{path}:1: expected the columns {','.join(CURVE_COLUMNS)}, got "
                            f"{','.join(header or [])!r}")
    seen = set()
    for line, rec in enumerate(reader, start=2):
        if not rec:
            continue
        if len(rec) != len(CURVE_COLUMNS):
            raise TrainingError(f"{path}:{line}: expected {len(CURVE_COLUMNS)} fields, got "
                                f"{len(rec)}")
        net, setting, it, loss, acc = rec
        try:
            it_v = int(it)
        except ValueError:
            raise TrainingError(f"{path}:{line}: iteration: not an integer: {it!r}") from None
        vals = []
        for col, v in (("loss", loss), ("test_accuracy", acc)):
            try:
                x = float(v) if v.strip() else None
            except ValueError:
                raise TrainingError(f"{path}:{line}: {col}: not a number: {v!r}") from None
            if x is not None and not math.isfinite(x) and col == "test_accuracy":
                raise TrainingError(f"{path}:{line}: {col}: not finite: {v!r}")
            vals.append(x)
        if (net, setting, it_v) in seen:
            raise TrainingError(f"{path}:{line}: {net}/{setting} iteration {it_v} appears "
                                "twice")
        seen.add((net, setting, it_v))
        rows.append(Row(net, setting, it_v, vals[0], vals[1]))
    return rows


def by_setting(rows: Iterable[Row]) -> Dict[str, Dict[str, List[Row]]]:
    """``{net: {setting: rows by iteration}}``."""
    out: Dict[str, Dict[str, List[Row]]] = {}
    for r in rows:
        out.setdefault(r.net, {}).setdefault(r.setting, []).append(r)
    for per in out.values():
        for s in per:
            per[s].sort(key=lambda r: r.iteration)
    return out


def rows_of(runs: Mapping[str, Mapping[str, dict]]) -> List[Row]:
    """The rows of the runs that finished (``{net: {setting: run record}}``, the ``curve`` of
    each record: ``[iteration, loss, test_accuracy]`` triples)."""
    rows = []
    for net, per in runs.items():
        for setting, rec in per.items():
            if rec.get("status") == "ok":
                rows += [Row(net, setting, int(i), loss, acc) for i, loss, acc in rec["curve"]]
    return rows
