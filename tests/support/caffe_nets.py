"""The nets of the pinned Caffe tarball, and Caffe's own text-format parser as a test oracle.

Not a test module: tests/caffe/test_nets.py and tests/caffe/test_fuzz.py import it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Sequence, Tuple

#: how many net prototxts models/ and examples/ of the pinned tarball hold (solvers excluded)
TARBALL_NETS = 29


def tarball_nets(caffe_source: Path) -> List[Path]:
    """The net prototxts under models/ and examples/ of a Caffe tree: every ``*.prototxt``
    but the solver definitions (whose names say ``solver``)."""
    return sorted(p for d in ("models", "examples") for p in (caffe_source / d).rglob(
        "*.prototxt") if "solver" not in p.name)


# protoc's --encode parses its input with the C++ TextFormat::Parser, the parser of Caffe's
# ReadProtoFromTextFile. grpc_tools runs that compiler in-process: one child runs every text.
_CHILD = r"""
import os, sys
from grpc_tools import protoc
args = sys.argv[1:4]
for path in sys.argv[4:]:
    for fd, name, flags in ((0, path, os.O_RDONLY), (1, os.devnull, os.O_WRONLY),
                            (2, path + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        f = os.open(name, flags, 0o600)
        os.dup2(f, fd)
        os.close(f)
    rc = protoc.main(["protoc"] + args)
    with open(path + ".rc", "w") as f:
        f.write(str(rc))
"""


def cxx_parse(protoc_cmd: Sequence[str], proto: Path, texts: Sequence[str]
              ) -> List[Tuple[bool, str]]:
    """(accepted, protoc's message) for each prototxt text, parsed as a ``caffe.NetParameter``
    by the C++ parser against ``proto``. A message missing required fields counts as refused
    (Caffe's parser refuses it; ``--encode`` only warns)."""
    args = [f"--proto_path={proto.parent}", "--encode=caffe.NetParameter", str(proto)]
    out = []
    with tempfile.TemporaryDirectory(prefix="ucudnn-cxx-") as tmp:
        paths = []
        for i, text in enumerate(texts):
            p = os.path.join(tmp, f"{i}.prototxt")
            with open(p, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            paths.append(p)
        if protoc_cmd[-1] == "grpc_tools.protoc":
            subprocess.run([sys.executable, "-c", _CHILD, *args, *paths], check=True,
                           timeout=600)
            results = [(int(Path(p + ".rc").read_text()), Path(p + ".err").read_text(
                errors="replace")) for p in paths]
        else:
            results = []
            for p in paths:
                with open(p, "rb") as f:
                    res = subprocess.run(list(protoc_cmd) + args, stdin=f,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         timeout=60)
                results.append((res.returncode, res.stderr.decode(errors="replace")))
    for rc, err in results:
        out.append((rc == 0 and "missing required fields" not in err, err.strip()))
    return out
