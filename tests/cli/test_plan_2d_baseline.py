"""2-D plans, cache keys and plan records stay byte for byte what they were before the core
learned N-D convolutions: AlexNet, ResNet-18 (the shipped layer lists) and ResNet-50
(prototxt/resnet50.prototxt) planned by each optimizer (dp, ilp, shared) at 8 and 64 MiB
over the fake core, compared with the documents that tree wrote (tests/data/plan_2d/,
gzipped), less the solver's ``seconds`` and the later key ``deterministic``.

The reference files were written by :func:`document` at the tree before N-D geometry
(commit aaec12a); write them again only for a change meant to alter 2-D plans."""
import gzip
import json
import sqlite3

import pytest

from ucudnn.cli import main
from ucudnn.measure.records import kernel_fields

from repo_paths import REPO

BASELINE = REPO / "tests" / "data" / "plan_2d"
CASES = [(net, opt, lim) for net in ("alexnet", "resnet18", "resnet50")
         for opt in ("dp", "ilp", "shared") for lim in ("8MiB", "64MiB")]


def _drop_seconds(o):
    if isinstance(o, dict):
        return {k: _drop_seconds(v) for k, v in o.items() if k != "seconds"}
    if isinstance(o, list):
        return [_drop_seconds(v) for v in o]
    return o


def document(fake_core, capsys, tmp_path, net, opt, lim):
    """The plan's JSON less ``seconds``, the cache keys of every kernel benchmarked and the
    kernel fields of its plan records, as one JSON text (the test's folder named ``TMP``, the checkout ``REPO``)."""
    cache = tmp_path / f"{net}-{opt}-{lim}.sqlite"
    capsys.readouterr()
    source = (["--prototxt", str(REPO / "prototxt" / f"{net}.prototxt")] if net == "resnet50"
              else ["--net", net])
    assert main(["plan", *source, "--batch", "32", "--optimizer", opt, "--limit", lim,
                 "--cache", str(cache), "--json"]) == 0
    plan = _drop_seconds(json.loads(capsys.readouterr().out))
    # a key the references predate (Note [Deterministic plans] in ucudnn/plan/dp.py)
    assert plan.pop("deterministic") is False
    conn = sqlite3.connect(cache)
    try:
        keys = [list(r) for r in conn.execute(
            "SELECT DISTINCT dtype, math, op, shape, family, timing, workspace_cap FROM entries "
            "ORDER BY op, shape")]
    finally:
        conn.close()
    kernels = []
    for call in fake_core.calls:
        kern = fake_core.Kernel(call.shape, call.op, call.n, call.dtype, call.math, call.name)
        fields = kernel_fields(kern)
        del fields["kernel_id"]
        kernels.append(fields)
    kernels.sort(key=lambda f: json.dumps(f, sort_keys=True))
    text = json.dumps({"plan": plan, "cache_keys": keys, "record_kernels": kernels}, indent=1,
                      sort_keys=True) + "\n"
    return text.replace(str(tmp_path), "TMP").replace(str(REPO), "REPO")


@pytest.mark.parametrize("net,opt,lim", CASES)
def test_2d_plans_keys_and_records_are_unchanged(fake_core, capsys, tmp_path, net, opt, lim):
    got = document(fake_core, capsys, tmp_path, net, opt, lim)
    want = gzip.decompress((BASELINE / f"{net}-{opt}-{lim}.json.gz").read_bytes()).decode()
    assert got == want
