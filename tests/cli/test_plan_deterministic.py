"""`ucudnn plan --deterministic` (Note [Deterministic plans] in ucudnn/plan/dp.py): from a table
that says which choices are deterministic, from data that does not (refused in one line), and
on the fake core, where a cache without the answer is measured again."""
import json

from cli_run import run
from ucudnn.cli import main
from ucudnn.plan.table import AlgoPerf

LAYERS = ("name,N,C,H,W,K,R,S,pad,stride,dilation,groups,count,bwd_data\n"
          "c,2,3,8,8,4,3,3,1,1,1,1,1,0\n")
# at each size: algorithm 1 fast and non-deterministic, algorithm 0 slow and deterministic,
# algorithm 2 fastest and of unknown determinism
TABLE = ("layer,op,batch,algo,time_ms,ws_bytes,math,deterministic\n"
         + "".join(f"c,{op},{b},0,{0.5 * b},0,0,1\nc,{op},{b},1,{0.1 * b},0,0,0\n"
                   f"c,{op},{b},2,{0.05 * b},0,0,\n"
                   for op in ("fwd", "bwd_filter") for b in (1, 2)))


def _files(tmp_path):
    layers, table = tmp_path / "l.csv", tmp_path / "t.csv"
    layers.write_text(LAYERS)
    table.write_text(TABLE)
    return layers, table


def test_plan_deterministic_from_a_table(tmp_path):
    layers, table = _files(tmp_path)
    for optimizer in ("dp", "ilp", "shared"):
        args = ("plan", "--layers", layers, "--table", table, "--optimizer", optimizer,
                "--json")
        free = json.loads(run(tmp_path, *args).stdout)
        det = json.loads(run(tmp_path, *args, "--deterministic").stdout)
        assert free["deterministic"] is False and det["deterministic"] is True
        assert {ch["algo"] for k in free["kernels"] for ch in k["chunks"]} == {2}
        assert {ch["algo"] for k in det["kernels"] for ch in k["chunks"]} == {0}
        assert det["totals"]["time_ms"] > free["totals"]["time_ms"]
    text = run(tmp_path, "plan", "--layers", layers, "--table", table, "--deterministic").stdout
    assert ", deterministic choices only, data: table" in text.splitlines()[0]


def test_plan_deterministic_refuses_data_without_the_answer(no_gpu, tmp_path):
    """The shipped data predates the column: every choice is of unknown determinism."""
    p = run(tmp_path, "plan", "--net", "alexnet", "--deterministic", ok=False)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("ucudnn: error: plan: layer 'conv1' op fwd (N=256 ")
    assert "no deterministic choice measured (deterministic planning): 0 of its" in lines[0]
    assert "of unknown determinism (measured before ucudnn recorded it" in lines[0]


def test_prototxt_takes_no_deterministic_option(tmp_path):
    """caffe.proto's ucudnn_param has no field for it."""
    p = run(tmp_path, "prototxt", "in.prototxt", "-o", "out.prototxt", "--deterministic",
            ok=False)
    assert p.returncode == 2
    assert "unrecognized arguments: --deterministic" in p.stderr


def test_plan_deterministic_measures_again_what_the_cache_cannot_say(fake_core, capsys):
    fake_core.model = lambda kern, b: [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(1, 0.2 * b, 0)]
    args = ["plan", "--net", "alexnet", "--batch", "4", "--json"]
    assert main(args) == 0
    capsys.readouterr()
    n = len(fake_core.calls)
    fake_core.model = lambda kern, b: [AlgoPerf(0, 1.0 * b, 0, deterministic=True),
                                       AlgoPerf(1, 0.2 * b, 0, deterministic=False)]
    assert main(args) == 0                  # from the cache: no answer needed
    assert len(fake_core.calls) == n
    capsys.readouterr()
    assert main(args + ["--deterministic"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(fake_core.calls) > n and d["source"]["kind"] == "benchmark"
    assert {ch["algo"] for k in d["kernels"] for ch in k["chunks"]} == {0}
    n = len(fake_core.calls)
    assert main(args + ["--deterministic"]) == 0        # the answers are cached now
    assert len(fake_core.calls) == n and json.loads(capsys.readouterr().out)["deterministic"]
