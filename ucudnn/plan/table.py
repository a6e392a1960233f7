"""Benchmark tables: what cuDNN measured for each (layer, op, micro-batch size, algorithm).

This is the exchange format of the project (``../shared/data``, the package's shipped data,
``ucudnn bench --csv``)::

    layer,op,batch,algo,time_ms,ws_bytes,math
    conv1,fwd,1,0,0.05200,0,0

``op`` is ``fwd``, ``bwd_data`` or ``bwd_filter``; ``algo`` the cuDNN enum value of
``cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t``; ``math`` the ``cudnnMathType_t`` the algorithm
ran with. Only successful choices are listed. A table that holds graph-API engine configs has
an eighth column, ``engine``: the config's text, with ``algo`` -1 (Note [Choices] in
ucudnn/vocab.py); empty for an algorithm. A table that knows whether its choices are
deterministic has a column ``deterministic``: 1, 0, or empty where it is not known (Note
[Deterministic plans] in ucudnn/plan/dp.py).
"""
from __future__ import annotations

import csv
import io
import math as _math
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "OPS", "AlgoPerf", "BenchRow", "KernelBench", "TableError",
    "read_table", "write_table", "group_by_kernel", "rows_from_kernel", "perf_problem",
    "deterministic_value",
]

from .. import files
from ..files import write_text
from ..vocab import GRAPH_ALGO, OPS, SIZE_MAX, InputError, parse_engine

TABLE_COLUMNS = ("layer", "op", "batch", "algo", "time_ms", "ws_bytes", "math")
ENGINE_COLUMN = "engine"
DETERMINISTIC_COLUMN = "deterministic"


class TableError(InputError):
    """A benchmark table is malformed; the message names the file, line and field."""


@dataclass(frozen=True)
class AlgoPerf:
    """One choice measured at one micro-batch size: an algorithm (``engine`` empty) or a
    graph engine config (``algo`` -1, Note [Choices] in ucudnn/vocab.py). ``deterministic``:
    whether cuDNN says its results are bitwise reproducible, None where that was not
    recorded (Note [Deterministic plans] in ucudnn/plan/dp.py)."""
    algo: int
    time_ms: float
    ws_bytes: int
    math: int = 0
    engine: str = ""
    deterministic: Optional[bool] = None


@dataclass(frozen=True)
class BenchRow:
    layer: str
    op: str
    batch: int
    algo: int
    time_ms: float
    ws_bytes: int
    math: int = 0
    engine: str = ""
    deterministic: Optional[bool] = None

    @property
    def perf(self) -> AlgoPerf:
        return AlgoPerf(self.algo, self.time_ms, self.ws_bytes, self.math, self.engine,
                        self.deterministic)


#: micro-batch size -> algorithms measured at that size
KernelBench = Dict[int, List[AlgoPerf]]


def _field(where: str, name: str, text: str, conv):
    try:
        value = conv(text)
    except (TypeError, ValueError):
        raise TableError(f"{where}: field {name!r}: cannot parse {text!r}") from None
    return value


def _shown(value) -> str:
    return repr(value) if isinstance(value, (str, bytes)) else str(value)


def _integer(value) -> bool:
    """An int that a cache's INTEGER column (64 bits, signed) holds."""
    return (isinstance(value, int) and not isinstance(value, bool)
            and -SIZE_MAX - 1 <= value <= SIZE_MAX)


def deterministic_value(value) -> Optional[bool]:
    """A choice's ``deterministic`` as stored (None, a bool, or a cache's 0 or 1) as
    :class:`AlgoPerf` holds it."""
    return None if value is None else bool(value)


def perf_problem(algo, time_ms, ws_bytes, math=0, engine="", deterministic=None
                 ) -> Optional[str]:
    """What is wrong with one measured choice (``field 'time_ms': must be a finite time >= 0,
    got -1.0``), or None: the check every measurement passes where it is read, shared by the
    tables' reader and the cache's reads and imports (values of any type: a cache's columns
    may hold text)."""
    if not isinstance(engine, str):
        return f"field 'engine': must be text, got {_shown(engine)}"
    if not _integer(algo):
        return f"field 'algo': must be an integer of 64 bits, got {_shown(algo)}"
    if engine:
        try:
            parse_engine(engine)
        except InputError as e:
            return str(e)
        if algo != GRAPH_ALGO:
            return f"field 'algo': an engine config's is {GRAPH_ALGO}, got {algo}"
    elif algo < 0:
        return f"field 'algo': must be >= 0, got {algo}"
    if not (isinstance(time_ms, (int, float)) and not isinstance(time_ms, bool)
            and time_ms >= 0 and _math.isfinite(time_ms)):
        return f"field 'time_ms': must be a finite time >= 0, got {_shown(time_ms)}"
    if not _integer(ws_bytes) or ws_bytes < 0:
        return (f"field 'ws_bytes': must be an integer from 0 to {SIZE_MAX}, got "
                f"{_shown(ws_bytes)}")
    if not _integer(math):
        return f"field 'math': must be an integer of 64 bits, got {_shown(math)}"
    if deterministic is not None and deterministic not in (0, 1):
        return (f"field 'deterministic': must be 1, 0 or unknown, got "
                f"{_shown(deterministic)}")
    return None


def _check_row(where: str, row: BenchRow) -> None:
    if row.op not in OPS:
        raise TableError(f"{where}: field 'op': {row.op!r} is not one of {', '.join(OPS)}")
    if not 1 <= row.batch <= SIZE_MAX:
        raise TableError(f"{where}: field 'batch': must be from 1 to {SIZE_MAX}, got "
                         f"{row.batch}")
    problem = perf_problem(row.algo, row.time_ms, row.ws_bytes, row.math, row.engine,
                           row.deterministic)
    if problem is not None:
        raise TableError(f"{where}: {problem}")


def read_text(path: str | os.PathLike, error=InputError, what: str = "text") -> str:
    """The UTF-8 text of the file at ``path``: :func:`ucudnn.files.read_text` (its size
    bounded, special files refused, long lines left to the parser; Note [Reading a named
    file] in ucudnn/files.py), the one reader of the project's text inputs (tables, layer
    lists, prototxt)."""
    return files.read_text(path, error, what, line_limit=None)


def read_table(path: str | os.PathLike, text: Optional[str] = None) -> List[BenchRow]:
    """Read a benchmark table; raise :class:`TableError` naming line and field on bad input.
    ``text``: the file's text where the caller has read it already (else it is read here)."""
    path = os.fspath(path)
    if text is None:
        text = read_text(path, TableError, "a benchmark table")
    return parse_table(text, source=path)


def parse_table(text: str, source: str = "<table>") -> List[BenchRow]:
    lines = [ln for ln in text.splitlines()]
    reader = csv.reader(lines)
    header = None
    rows: List[BenchRow] = []
    for lineno, rec in enumerate(reader, start=1):
        if not rec or not "".join(rec).strip() or rec[0].lstrip().startswith("#"):
            continue
        rec = [r.strip() for r in rec]
        if header is None:
            header = rec
            missing = [c for c in TABLE_COLUMNS if c not in header]
            if missing:
                raise TableError(f"{source}:{lineno}: header lacks column(s) {', '.join(missing)} "
                                 f"(expected {','.join(TABLE_COLUMNS)})")
            continue
        if len(rec) != len(header):
            raise TableError(f"{source}:{lineno}: {len(rec)} fields, header has {len(header)}")
        d = dict(zip(header, rec))
        where = f"{source}:{lineno}"
        row = BenchRow(
            layer=d["layer"], op=d["op"],
            batch=_field(where, "batch", d["batch"], int),
            algo=_field(where, "algo", d["algo"], int),
            time_ms=_field(where, "time_ms", d["time_ms"], float),
            ws_bytes=_field(where, "ws_bytes", d["ws_bytes"], int),
            math=_field(where, "math", d.get("math", "0") or "0", int),
            engine=d.get(ENGINE_COLUMN, ""),
            deterministic=_deterministic(where, d.get(DETERMINISTIC_COLUMN, "")),
        )
        if not row.layer:
            raise TableError(f"{where}: field 'layer' is empty")
        _check_row(where, row)
        rows.append(row)
    if not rows:
        raise TableError(f"{source}: the table holds no measurements")
    return rows


def _deterministic(where: str, text: str) -> Optional[bool]:
    if text == "":
        return None
    if text not in ("0", "1"):
        raise TableError(f"{where}: field 'deterministic': must be 1, 0 or empty (not "
                         f"known), got {text!r}")
    return text == "1"


def format_table(rows: Iterable[BenchRow]) -> str:
    """The table's text; the ``engine`` column only when some row is an engine config, the
    ``deterministic`` column only when some row's determinism is known."""
    rows = list(rows)
    engines = any(r.engine for r in rows)
    known = any(r.deterministic is not None for r in rows)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(TABLE_COLUMNS + ((ENGINE_COLUMN,) if engines else ())
               + ((DETERMINISTIC_COLUMN,) if known else ()))
    for r in rows:
        w.writerow([r.layer, r.op, r.batch, r.algo, f"{r.time_ms:.5f}", r.ws_bytes, r.math]
                   + ([r.engine] if engines else [])
                   + (["" if r.deterministic is None else int(r.deterministic)] if known
                      else []))
    return out.getvalue()


def write_table(path: str | os.PathLike, rows: Iterable[BenchRow], *,
                replace: bool = True) -> None:
    """Write a benchmark table atomically (Note [Writing a named file] in ucudnn/files.py)."""
    write_text(path, format_table(rows), fsync=True, replace=replace)


def group_by_kernel(rows: Iterable[BenchRow]) -> Dict[Tuple[str, str], KernelBench]:
    """``{(layer, op): {batch: [AlgoPerf, ...]}}``, algorithms sorted by time."""
    out: Dict[Tuple[str, str], KernelBench] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        out[(r.layer, r.op)][r.batch].append(r.perf)
    result = {}
    for key, bench in out.items():
        result[key] = {b: sorted(perfs, key=lambda p: (p.time_ms, p.ws_bytes, p.algo, p.engine))
                       for b, perfs in sorted(bench.items())}
    return result


def rows_from_kernel(layer: str, op: str, bench: Mapping[int, Sequence[AlgoPerf]]) -> List[BenchRow]:
    return [BenchRow(layer, op, b, p.algo, p.time_ms, p.ws_bytes, p.math, p.engine,
                     p.deterministic)
            for b in sorted(bench) for p in bench[b]]
