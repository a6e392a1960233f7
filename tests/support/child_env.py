"""The environment of a child interpreter that must import this process's ucudnn: Caffe's
embedded Python (its own prefix, not this environment's), pycaffe run in a subprocess."""
import os
import site
import sysconfig
from pathlib import Path

import ucudnn


def python_path(*first) -> str:
    """``PYTHONPATH`` for the child: ``first``, then the folder holding this ucudnn package
    (an editable install is not on a site folder of its own), then this environment's
    site-packages (protobuf, PuLP, numpy...). The child's standard library is its own."""
    paths = [str(p) for p in first] + [str(Path(ucudnn.__file__).resolve().parents[1])]
    paths += site.getsitepackages()
    paths += [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    if site.ENABLE_USER_SITE:
        paths.append(site.getusersitepackages())
    return os.pathsep.join(dict.fromkeys(p for p in paths if p and os.path.isdir(p)))
