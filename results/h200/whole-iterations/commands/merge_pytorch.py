"""PyTorch, timed in a call right after its Caffe points (scripts/time_pytorch.py), into that
call's grid (reproduce.json, points.csv, summary.txt) the way ``ucudnn reproduce`` records it
(``pytorch_record``, ``write_csv``).

    python results/h200/whole-iterations/commands/merge_pytorch.py [GRID PYTORCH.json NET]...

NET as the grid names it (``resnet50`` or ``resnet50@256``).

Without arguments, this folder's calls: ResNet-18 (call N) and ResNet-50 (call O) with
``channels_last`` and ``torch.compile``, one process each (eager NCHW, the slowest mode, left
out for time); AlexNet (call Q) with ``torch.compile``, 3 processes: its fastest mode in call
P, which timed all three modes (one process each) minutes before on the same machine.
"""
import json
import sys
from pathlib import Path

from ucudnn.experiments.grid import parse_net
from ucudnn.experiments.reproduce import pytorch_record
from ucudnn.experiments.results import load_results, save_results
from ucudnn.experiments.summary import format_summary, write_csv

HERE = Path(__file__).resolve().parent.parent
OWN = [(HERE / call / "grid", HERE / call / "pytorch.json", net)
       for call, net in (("call_n", "resnet18"), ("call_o", "resnet50"), ("call_q", "alexnet"))]


def merge(out: Path, pytorch_json: Path, net: str) -> None:
    got = json.loads(pytorch_json.read_text(encoding="utf-8"))
    doc = load_results(out / "reproduce.json")
    # a grid's net may name its batch (NAME@BATCH); time_pytorch.py's JSON names the net alone
    doc["pytorch"][net] = dict(pytorch_record(got, parse_net(net)[0]),
                               command=got["meta"]["command_line"])
    save_results(out / "reproduce.json", doc)
    write_csv(out, doc)
    (out / "summary.txt").write_text(format_summary(doc) + "\n", encoding="utf-8")


args = sys.argv[1:]
if len(args) % 3:
    sys.exit("usage: merge_pytorch.py [GRID PYTORCH.json NET]...")
for out, got, net in ([(Path(a), Path(b), c) for a, b, c in zip(*[iter(args)] * 3)] or OWN):
    merge(out, got, net)
