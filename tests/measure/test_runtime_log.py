"""UCUDNN_LOG: the core's messages on stderr in hosts that do not configure logging (Caffe)."""
import os
import subprocess
import sys
from pathlib import Path

import ucudnn

CODE = "import logging, ucudnn.measure.runtime; logging.getLogger('ucudnn').info('planned conv1')"


def _run(level):
    env = dict(os.environ, PYTHONPATH=str(Path(ucudnn.__file__).resolve().parents[1]))
    env.pop("UCUDNN_LOG", None)
    if level is not None:
        env["UCUDNN_LOG"] = level
    return subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                          env=env, timeout=60)


def test_info_lines_on_stderr_when_asked():
    r = _run("info")
    assert r.returncode == 0, r.stderr
    assert "ucudnn INFO: planned conv1" in r.stderr


def test_silent_by_default_and_above_level():
    assert "planned conv1" not in _run(None).stderr
    assert "planned conv1" not in _run("WARNING").stderr


def test_unknown_level_is_an_error_naming_the_variable():
    r = _run("LOUD")
    assert r.returncode != 0 and "UCUDNN_LOG: unknown level 'LOUD'" in r.stderr
