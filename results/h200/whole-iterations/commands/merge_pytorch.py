"""PyTorch, timed in each call right after its Caffe points (scripts/time_pytorch.py), into
that call's grid (reproduce.json, points.csv, summary.txt) the way ``ucudnn reproduce``
records it (``pytorch_record``, ``write_csv``): ResNet-18 (call N) and ResNet-50 (call O)
with ``channels_last`` and ``torch.compile``, one process each (eager NCHW, the slowest mode,
left out for time); AlexNet (call Q) with ``torch.compile``, 3 processes: its fastest mode in
call P, which timed all three modes (one process each) minutes before on the same machine.

    python results/h200/whole-iterations/commands/merge_pytorch.py
"""
import json
from pathlib import Path

from ucudnn.experiments.reproduce import pytorch_record
from ucudnn.experiments.results import load_results, save_results
from ucudnn.experiments.summary import format_summary, write_csv

HERE = Path(__file__).resolve().parent.parent
for call, net in (("call_n", "resnet18"), ("call_o", "resnet50"), ("call_q", "alexnet")):
    got = json.loads((HERE / call / "pytorch.json").read_text(encoding="utf-8"))
    out = HERE / call / "grid"
    doc = load_results(out / "reproduce.json")
    doc["pytorch"][net] = dict(pytorch_record(got, net), command=got["meta"]["command_line"])
    save_results(out / "reproduce.json", doc)
    write_csv(out, doc)
    (out / "summary.txt").write_text(format_summary(doc) + "\n", encoding="utf-8")
