"""`ucudnn plan --ilp-time-limit` (Note [ILP time limit] in ucudnn/plan/ilp.py): a net the size
of DenseNet-121 planned by the ILP within a short limit, its progress on stderr, a plan said to
be not proven optimal, and no solver file left in the temp folder."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import child_env
import densenet_sized
from cli_run import run, synthetic
from ucudnn.cli import main
from ucudnn.cli import options
from ucudnn.plan.table import group_by_kernel, read_table

#: densenet_sized.BUDGET in the canonical spelling (no note echoing it)
BUDGET = f"{densenet_sized.BUDGET // 1024}KiB"


def _densenet_plan(tmp_path, *extra):
    layers, table = densenet_sized.write(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    t0 = time.perf_counter()
    p = run(tmp_path, "plan", "--layers", layers, "--table", table, "--policy", "undivided",
            "--budget", BUDGET, "--engines", "legacy", "--ilp-time-limit", "2", *extra,
            env={"TMPDIR": str(tmp), "TMP": str(tmp)})
    wall = time.perf_counter() - t0
    assert wall < 2 + 30, wall
    assert list(tmp.iterdir()) == []                    # no .mps, .sol or log left behind
    return p, table


def _stderr_lines(p):
    lines = p.stderr.splitlines()
    assert lines[0] == "ILP: CBC chooses among 5028 plans of 359 kernels, time limit 2 s"
    note = ("ucudnn: note: ILP: time limit of 2 s reached: CBC's best plan so far, not proven "
            r"optimal \(gap (\d+(\.\d+)?% to CBC's bound|unknown)\)")
    assert re.fullmatch(note, lines[-1]), lines
    assert all(re.fullmatch(r"ILP: \d+ s of 2 s, .*", l) for l in lines[1:-1]), lines
    return lines


def test_a_densenet_sized_ilp_within_its_time_limit_json(tmp_path):
    p, table = _densenet_plan(tmp_path, "--json")
    lines = _stderr_lines(p)
    d = json.loads(p.stdout)                            # stdout: the JSON document alone
    assert d["optimizer"] == "ilp" and d["budget_bytes"] == densenet_sized.BUDGET
    assert d["solver"]["name"] == "cbc" and d["solver"]["status"] == "TimeLimit"
    assert d["solver"]["variables"] == 5028 and d["solver"]["seconds"] >= 2
    assert d["notes"] == [lines[-1][len("ucudnn: note: "):]]
    # a real plan: one measured choice per kernel, within the budget
    benches = group_by_kernel(read_table(table))
    assert len(d["kernels"]) == d["totals"]["kernels"] == 359
    for k in d["kernels"]:
        (chunk,) = k["chunks"]
        assert (chunk["algo"], chunk["math"], chunk["ws_bytes"]) in {
            (a.algo, a.math, a.ws_bytes) for a in benches[k["layer"], k["op"]][64]}
    assert sum(k["ws_bytes"] for k in d["kernels"]) <= densenet_sized.BUDGET


def test_a_densenet_sized_ilp_within_its_time_limit_text(tmp_path):
    p, _ = _densenet_plan(tmp_path)
    _stderr_lines(p)
    assert re.search(r"^optimizer: +ilp \(CBC\), status TimeLimit \(not proven optimal\), "
                     r"5028 variables, solve [0-9.]+ s$", p.stdout, re.M), p.stdout


@pytest.mark.parametrize("text, seconds", [(None, 60.0), ("7.5", 7.5), ("0", None),
                                           ("none", None), ("None", None)])
def test_the_time_limit_reaches_the_planner(tmp_path, capsys, monkeypatch, text, seconds):
    from ucudnn.cli import plan as plan_cmd
    seen = []
    real = plan_cmd.plan_network

    def spy(*args, **kw):
        seen.append(kw["ilp_time_limit"])
        return real(*args, **kw)

    monkeypatch.setattr(plan_cmd, "plan_network", spy)
    layers, table = synthetic(tmp_path)
    argv = ["plan", "--layers", str(layers), "--table", str(table), "--optimizer", "ilp",
            "--json"] + (["--ilp-time-limit", text] if text is not None else [])
    assert main(argv) == 0
    assert seen == [seconds]
    assert json.loads(capsys.readouterr().out)["solver"]["status"] == "Optimal"


@pytest.mark.parametrize("text", ["-1", "soon", "inf", "nan", ""])
def test_a_bad_time_limit_is_refused(tmp_path, text):
    layers, table = synthetic(tmp_path)
    p = run(tmp_path, "plan", "--layers", layers, "--table", table, "--ilp-time-limit", text,
            ok=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == ("ucudnn: error: --ilp-time-limit: expected seconds (a "
                                f"number >= 0) or none, got {text!r}")


def test_the_option_is_documented(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--ilp-time-limit SECONDS" in text
    assert "0 or none: no limit (default: 60)" in text
    assert options.time_limit(None) == 60.0


def test_sigterm_during_the_solve_leaves_no_solver_files(tmp_path):
    """SIGTERM while CBC runs: CBC is killed, the solve's folder removed, and the process
    ends by SIGTERM. (SIGINT, Python's KeyboardInterrupt, is tests/plan/test_ilp.py's.)"""
    layers, table = densenet_sized.write(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=child_env.python_path(), TMPDIR=str(tmp), TMP=str(tmp),
               UCUDNN_CACHE=str(tmp_path / "default.sqlite"))
    with subprocess.Popen([sys.executable, "-m", "ucudnn", "plan", "--layers", str(layers),
                           "--table", str(table), "--policy", "undivided", "--budget", BUDGET,
                           "--engines", "legacy", "--ilp-time-limit", "120"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=tmp_path) as p:
        try:
            assert p.stderr.readline().startswith("ILP: CBC chooses among 5028 plans")
            deadline = time.monotonic() + 30          # CBC has started on its problem file
            while not list(tmp.glob("ucudnn-ilp-*/*.mps")) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert list(tmp.glob("ucudnn-ilp-*/*.mps"))
            time.sleep(0.5)
            p.send_signal(signal.SIGTERM)
            _, rest = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == -signal.SIGTERM and "Traceback" not in rest, rest
    assert list(tmp.iterdir()) == []
    assert not _processes_naming(tmp)                   # CBC was killed


def _processes_naming(folder):
    """Processes whose command line names ``folder`` (CBC is given its problem file there)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(folder).encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found
