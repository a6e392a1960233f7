"""PyTorch's runs of calls G1 (AlexNet at 256, torch.compile) and G4 (ResNet-50 at 256,
torch.compile and channels_last), timed in the same call right after the Caffe points, into
those grids' reproduce.json and CSVs, the way ``ucudnn reproduce`` records them
(``pytorch_record``, ``write_csv``). Eager NCHW, the slowest mode in every earlier call, was
not timed.

    python results/h200/memory-and-training/commands/merge_pytorch.py
"""
import json
from pathlib import Path

from ucudnn.experiments.reproduce import pytorch_record
from ucudnn.experiments.results import load_results, save_results
from ucudnn.experiments.summary import format_summary, write_csv

HERE = Path(__file__).resolve().parent.parent
for call, grid, net, name, got_file in (
        ("call_g1", "grid_alexnet", "alexnet", "alexnet", "pytorch_alexnet.json"),
        ("call_g4", "grid_resnet50_256", "resnet50@256", "resnet50", "pytorch_resnet50_256.json")):
    got = json.loads((HERE / call / got_file).read_text(encoding="utf-8"))
    out = HERE / call / grid
    doc = load_results(out / "reproduce.json")
    doc["pytorch"][net] = dict(pytorch_record(got, name), command=got["meta"]["command_line"])
    save_results(out / "reproduce.json", doc)
    write_csv(out, doc)
    (out / "summary.txt").write_text(format_summary(doc) + "\n", encoding="utf-8")
