"""The grids of calls R, S and T ran ``ucudnn reproduce --layout NCHW|NHWC``, a run-wide option
of that tree (recorded in each run's ``meta.options.layout``), since replaced by the per-point
``--layouts``. This writes each run's layout into its point records and keys (``.../nhwc``)
the way the current schema has them (``Point.layout``), then the CSVs and the summary again.
Nothing measured changes.

    python results/h200/nhwc/commands/mark_layout.py
"""
from pathlib import Path

from ucudnn.experiments.grid import point_of
from ucudnn.experiments.results import load_results, save_results
from ucudnn.experiments.summary import format_summary, write_csv

HERE = Path(__file__).resolve().parent.parent
for grid in sorted(p.parent for p in HERE.glob("*/reproduce.json")):
    doc = load_results(grid / "reproduce.json")
    points = {}
    for rec in doc["points"].values():
        run = doc["runs"][rec.get("run", -1)]
        if rec.get("setting") != "caffe":
            rec["layout"] = run["options"].get("layout", "NCHW")
        points[point_of(rec).key] = rec
    doc["points"] = points
    save_results(grid / "reproduce.json", doc)
    write_csv(grid, doc)
    (grid / "summary.txt").write_text(format_summary(doc) + "\n", encoding="utf-8")
    print(grid.name, list(points))
