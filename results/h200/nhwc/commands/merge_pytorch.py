"""PyTorch's two faster modes (channels_last, torch.compile; one process each), timed in call
T right after the Caffe points of ``r18_nhwc_callT`` (the session's last device seconds), into
that grid's reproduce.json and CSVs the way ``ucudnn reproduce`` records them
(``pytorch_record``, ``write_csv``); eager NCHW, the slowest mode, was not timed.

    python results/h200/nhwc/commands/merge_pytorch.py
"""
import json
from pathlib import Path

from ucudnn.experiments.reproduce import pytorch_record
from ucudnn.experiments.results import load_results, save_results
from ucudnn.experiments.summary import format_summary, write_csv

HERE = Path(__file__).resolve().parent.parent
got = json.loads((HERE / "pytorch.json").read_text(encoding="utf-8"))
out = HERE / "r18_nhwc_callT"
doc = load_results(out / "reproduce.json")
doc["pytorch"]["resnet18"] = dict(pytorch_record(got, "resnet18"),
                                  command=got["meta"]["command_line"])
save_results(out / "reproduce.json", doc)
write_csv(out, doc)
(out / "summary.txt").write_text(format_summary(doc) + "\n", encoding="utf-8")
