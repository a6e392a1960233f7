"""Running the ``ucudnn`` command as a subprocess, and small inputs for it."""
import os
import subprocess
import sys

import child_env


def run(tmp_path, *args, ok=True, env=None, traceback=False):
    """``python -m ucudnn ARGS`` in ``tmp_path``, importing the ucudnn this process imported
    (the installed package, not the source tree), with a benchmark cache of its own; no
    traceback allowed (unless ``traceback``: the caller checks); ``ok``: exit status 0
    asserted."""
    full = dict(os.environ, PYTHONPATH=child_env.python_path(),
                UCUDNN_CACHE=str(tmp_path / "default.sqlite"))
    full.update(env or {})
    p = subprocess.run([sys.executable, "-m", "ucudnn", *map(str, args)], capture_output=True,
                       text=True, env=full, cwd=tmp_path, timeout=120)
    assert traceback or "Traceback" not in p.stderr, p.stderr
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def synthetic(tmp_path):
    """(layer list, table): one layer of batch 2 whose algorithm needs 2 MB per sample."""
    layers = tmp_path / "l.csv"
    layers.write_text("name,N,C,H,W,K,R,S,pad,stride,dilation,groups,count,bwd_data\n"
                      "c,2,3,8,8,4,3,3,1,1,1,1,1,0\n")
    table = tmp_path / "t.csv"
    table.write_text("layer,op,batch,algo,time_ms,ws_bytes,math\n"
                     "c,fwd,1,1,0.1,2000000,0\nc,fwd,2,1,0.2,4000000,0\n"
                     "c,bwd_filter,1,1,0.1,2000000,0\nc,bwd_filter,2,1,0.2,4000000,0\n")
    return layers, table
