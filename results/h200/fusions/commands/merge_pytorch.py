"""PyTorch's three modes, timed in call Q right after the Caffe points of ``grid_all`` (the
call's time did not allow reproduce's own PyTorch run, which adds a profiling process per
mode), into ``grid_all``'s reproduce.json and CSVs, the way ``ucudnn reproduce`` records
them (``pytorch_record``, ``write_csv``).

    python results/h200/fusions/commands/merge_pytorch.py
"""
import json
from pathlib import Path

from ucudnn.experiments.reproduce import pytorch_record
from ucudnn.experiments.results import load_results, save_results
from ucudnn.experiments.summary import format_summary, write_csv

HERE = Path(__file__).resolve().parent.parent
got = json.loads((HERE / "pytorch.json").read_text(encoding="utf-8"))
out = HERE / "grid_all"
doc = load_results(out / "reproduce.json")
for net in ("resnet18", "resnet50"):
    doc["pytorch"][net] = dict(pytorch_record(got, net), command=got["meta"]["command_line"])
save_results(out / "reproduce.json", doc)
write_csv(out, doc)
(out / "summary.txt").write_text(format_summary(doc) + "\n", encoding="utf-8")
