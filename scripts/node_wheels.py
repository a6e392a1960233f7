"""The Python wheels an air-gapped GPU node needs for ``scripts/gpu_node.sh setup``, gathered
on a connected machine.

    python3 scripts/node_wheels.py .wheels            # then copy .wheels with the checkout

The node (Ubuntu 24.04, Python 3.12, x86-64) has Cython, protobuf and grpcio but lacks:

* ``grpcio-tools``: the build compiles ``ucudnn/caffe/caffe_net.proto`` with whatever protobuf
  compiler there is (:mod:`ucudnn.caffe.protoc`), and the node has no ``protoc``; with
  ``pip install --no-build-isolation`` the build requirement must already be installed;
* ``pulp``: the ILP optimizer (Note [CBC] in ``ucudnn/plan/ilp.py``).

Note [Slim PuLP wheel]
    PuLP 3's wheel (16 MB) ships CBC for six platforms; the node runs only one. The wheel is
    rewritten with that platform's binary alone (``pulp/solverdir/cbc/linux/i64`` for
    x86-64 Linux) and without PuLP's own test suite: about 3 MB. A wheel's RECORD lists
    every file with its hash; the rewritten one lists the files it keeps, their lines
    unchanged, so pip installs it as it would the original. The file keeps its name (its
    tags still say ``py3-none-any``: only the platform it was slimmed for can run its ILP).
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Iterable, List, Tuple

#: what the node's Python needs, as binary wheels
WHEELS = ("grpcio-tools>=1.48", "pulp>=3.3,<4")
#: PuLP's CBC folder per target platform (Note [Slim PuLP wheel])
CBC_DIRS = {"x86_64": "pulp/solverdir/cbc/linux/i64/", "aarch64": "pulp/solverdir/cbc/linux/arm64/"}


def slim_members(names: Iterable[str], keep_cbc: str) -> List[str]:
    """The members of PuLP's wheel to drop: every CBC binary outside ``keep_cbc`` and the
    test suite (``pulp/tests/``)."""
    out = []
    for n in names:
        if n.startswith("pulp/solverdir/cbc/") and not n.startswith(keep_cbc):
            out.append(n)
        elif n.startswith("pulp/tests/"):
            out.append(n)
    return out


def slim_wheel(src: Path, dst: Path, keep_cbc: str) -> Tuple[int, int]:
    """Write ``src`` (a PuLP wheel) to ``dst`` without :func:`slim_members`, its RECORD
    without their lines (Note [Slim PuLP wheel]); (members dropped, bytes dropped
    uncompressed). Refuses a wheel without ``keep_cbc``: that platform could not run the
    ILP."""
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        names = [i.filename for i in infos]
        if not any(n.startswith(keep_cbc) and not n.endswith("/") for n in names):
            raise SystemExit(f"node_wheels: {src.name} has no {keep_cbc}: not slimmed")
        drop = set(slim_members(names, keep_cbc))
        records = [n for n in names if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise SystemExit(f"node_wheels: {src.name}: {len(records)} RECORD files")
        tmp = dst.with_name(dst.name + ".part")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in infos:
                if info.filename in drop:
                    continue
                data = zin.read(info)
                if info.filename == records[0]:
                    lines = data.decode("utf-8").splitlines(keepends=True)
                    data = "".join(l for l in lines
                                   if l.split(",", 1)[0] not in drop).encode("utf-8")
                zout.writestr(info, data)
        tmp.replace(dst)
        return len(drop), sum(i.file_size for i in infos if i.filename in drop)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(out: Path, python_version: str, arch: str) -> None:
    """pip download of :data:`WHEELS` for the node (``arch`` Linux, glibc 2.17 or newer)
    into ``out``."""
    for req in WHEELS:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "-d", str(out), "--python-version", python_version,
               "--platform", f"manylinux_2_17_{arch}", "--platform", f"manylinux2014_{arch}",
               req]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode:
            raise SystemExit(f"node_wheels: pip download {req} failed:\n{r.stdout[-2000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder for the wheels (gpu_node.sh --wheels)")
    ap.add_argument("--python-version", default="3.12", help="the node's Python (3.12)")
    ap.add_argument("--arch", choices=sorted(CBC_DIRS), default="x86_64",
                    help="the node's CPU (x86_64)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    download(args.out, args.python_version, args.arch)
    for whl in sorted(args.out.glob("pulp-*.whl")):
        dropped, size = slim_wheel(whl, whl, CBC_DIRS[args.arch])
        print(f"{whl.name}: {dropped} files ({size / 2**20:.1f} MiB) of other platforms' CBC "
              f"and PuLP's tests left out (Note [Slim PuLP wheel])")
    manifest = args.out / "MANIFEST"
    manifest.write_text("".join(f"{sha256(w)}  {w.name}\n"
                                for w in sorted(args.out.glob("*.whl"))))
    for w in sorted(args.out.glob("*.whl")):
        print(f"{w.stat().st_size / 2**20:6.1f} MiB  {w.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
