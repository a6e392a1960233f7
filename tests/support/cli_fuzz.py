"""Running ``ucudnn`` in process for the fuzz tests, under a watchdog, and what each case is
checked for: an exit status, one error line, and files left as they were."""
import contextlib
import io
import json
import os
import signal
import stat
import time

import pytest

from ucudnn.cli import main

#: seconds a case may take before it counts as a hang
CASE_LIMIT_S = 30


def fuzz_settings(seed: int, cases: int):
    """(seed, first case, number of cases) from ``UCUDNN_FUZZ_SEED``, ``UCUDNN_FUZZ_FIRST`` and
    ``UCUDNN_FUZZ_CASES``, with these defaults."""
    return (int(os.environ.get("UCUDNN_FUZZ_SEED", seed)),
            int(os.environ.get("UCUDNN_FUZZ_FIRST", 0)),
            int(os.environ.get("UCUDNN_FUZZ_CASES", cases)))


def run_main(argv):
    """(exit status, stdout, stderr) of ``ucudnn ARGV`` in process; a case that takes longer
    than CASE_LIMIT_S raises TimeoutError."""
    out, err = io.StringIO(), io.StringIO()

    def hang(signum, frame):
        raise TimeoutError(f"no answer within {CASE_LIMIT_S} s")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(CASE_LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in argv])
            except SystemExit as e:         # argparse
                rc = e.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue()


def one_line_error(rc, err, argv):
    """The error line of a refusal: exit status 2, no traceback, one ``ucudnn...: error:``
    line and it is the last on stderr."""
    assert rc == 2, (argv, rc, err)
    assert "Traceback" not in err, (argv, err)
    lines = err.rstrip("\n").split("\n")
    errors = [ln for ln in lines if ": error: " in ln]
    assert len(errors) == 1 and lines[-1] == errors[0], (argv, err)
    assert errors[0].startswith("ucudnn"), (argv, err)
    return errors[0]


def run_case(argv, where):
    """(exit status, stdout) of one fuzz case ``ucudnn ARGV``, checked: no hang or crash,
    exit status 0 or 2, no traceback, a refusal in one error line, JSON that parses where
    ``--json`` asked for it, no escape reaching the terminal, within CASE_LIMIT_S. ``where``
    (the line that replays the case) starts every failure."""
    t = time.monotonic()
    try:
        rc, out, err = run_main(argv)
    except BaseException as e:              # noqa: BLE001 - a hang or a crash: report it
        pytest.fail(f"{where}: {type(e).__name__}: {e}")
    assert rc in (0, 2), f"{where}: exit status {rc}: {err[-2000:]}"
    assert "Traceback" not in err and "internal error" not in err, f"{where}: {err}"
    if rc == 2:
        one_line_error(rc, err, where)
    else:
        assert ": error: " not in err, f"{where}: {err}"
        if "--json" in argv:
            json.loads(out, parse_constant=lambda c: pytest.fail(f"{where}: {c} in JSON"))
    assert "\x1b" not in out + err, f"{where}: an escape reached the terminal"
    assert time.monotonic() - t < CASE_LIMIT_S, where
    return rc, out


def snapshot(folder):
    """What a case must not change: every entry's kind, size, mode and content time."""
    out = {}
    for root, dirs, names in os.walk(folder):
        for n in dirs + names:
            p = os.path.join(root, n)
            st = os.lstat(p)
            out[p] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mode, st.st_mtime_ns)
    st = os.stat(os.devnull)
    out[os.devnull] = (stat.S_IFMT(st.st_mode), stat.S_ISCHR(st.st_mode))
    return out
