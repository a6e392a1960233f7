"""The plan settings on the command line (ucudnn.cli.options, Note [Settings options]): one
validation for ``ucudnn plan`` and ``ucudnn prototxt``, so both give the same error for the
same options, and both take every spelling of an enumeration."""
import re

import pytest

from repo_paths import NETS
from ucudnn.caffe.prototxt import load_prototxt
from ucudnn.cli import main

ALEXNET = str(NETS / "alexnet.prototxt")


def _error(capsys, argv):
    """The exit status and the error's text after ``error:`` (without argparse's pointer to
    the command's --help, which names the command)."""
    try:
        rc = main(argv)
    except SystemExit as e:           # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    m = re.match(r"^ucudnn(?: \w+)?: error: (.*?)(?: \(see ucudnn \w+ --help\))?$", err)
    assert m, err
    return rc, m.group(1)


@pytest.mark.parametrize("options, message", [
    (["--policy", "all", "--sizes", "8,16"], "argument --sizes: not allowed with argument "
                                             "--policy"),
    (["--budget", "1GiB", "--optimizer", "dp"], "--budget: only the ilp and shared optimizers "
                                                "take a total budget"),
    (["--sizes", "512"], "--sizes: 512 is larger than the net's mini-batch (256)"),
    (["--sizes", "8,x"], "--sizes: expected comma-separated positive integers, got '8,x'"),
    (["--policy", "fast"], "--policy: unknown policy 'fast' (expected one of undivided, "
                           "powerOfTwo, all)"),
    (["--optimizer", "greedy"], "--optimizer: unknown optimizer 'greedy' (expected one of dp, "
                                "ilp, shared)"),
    (["--math", "fast"], "--math: unknown math mode 'fast'"),
    (["--limit", "64XB"], "--limit: cannot parse '64XB' as a byte size"),
    (["--limit", "-1MiB"], "--limit: size must not be negative"),
    (["--budget", "lots"], "--budget: cannot parse 'lots' as a byte size"),
])
def test_plan_and_prototxt_refuse_alike(tmp_path, capsys, options, message):
    out = str(tmp_path / "v.prototxt")
    plan = _error(capsys, ["plan", "--prototxt", ALEXNET, *options])
    variant = _error(capsys, ["prototxt", ALEXNET, "-o", out, *options])
    assert plan[0] == variant[0] == 2
    assert plan[1] == variant[1] and message in plan[1], (plan, variant)
    assert not (tmp_path / "v.prototxt").exists()


@pytest.mark.parametrize("policy, optimizer, math", [
    ("POWER_OF_TWO", "SHARED", "FMA"), ("power_of_two", "shared", "fma"),
    ("powerOfTwo", "Shared", "Fma"), ("poweroftwo", "shared", "FMA")])
def test_enumerations_in_any_spelling(tmp_path, capsys, policy, optimizer, math):
    """Note [Enum spellings]: caffe.proto's, the canonical one, any case, underscores or not;
    the variant stores caffe.proto's enum, plan prints the canonical name."""
    out = tmp_path / "v.prototxt"
    assert main(["prototxt", ALEXNET, "-o", str(out), "--policy", policy, "--optimizer",
                 optimizer, "--math", math]) == 0
    s = load_prototxt(out).net_ucudnn
    assert (s.policy, s.optimizer, s.math) == ("powerOfTwo", "shared", "fma")
    assert "policy: POWER_OF_TWO" in out.read_text()
    capsys.readouterr()
    # the plan CLI accepts the same spellings (math: the shipped data is default math)
    assert main(["plan", "--policy", policy, "--optimizer", optimizer, "--json"]) == 0
    doc = capsys.readouterr().out
    assert '"policy": "powerOfTwo"' in doc and '"optimizer": "shared"' in doc


def test_budget_implies_the_ilp_and_zero_is_zero_bytes(tmp_path, capsys):
    out = tmp_path / "v.prototxt"
    assert main(["prototxt", ALEXNET, "-o", str(out), "--budget", "0"]) == 0
    s = load_prototxt(out).net_ucudnn
    assert (s.optimizer, s.budget) == ("ilp", 0)
    assert main(["prototxt", ALEXNET, "-o", str(out), "--budget", "64MiB", "--optimizer",
                 "shared", "--force"]) == 0
    assert load_prototxt(out).net_ucudnn.optimizer == "shared"
