"""scripts/graph_accuracy.py without a GPU: its options, and a clear refusal where it cannot
run (it needs a GPU and PyTorch)."""
import sys
from functools import lru_cache

import pytest

from repo_paths import load_script


@lru_cache(maxsize=None)
def _module():
    return load_script("graph_accuracy")


def test_shape_and_sizes():
    m = _module()
    assert m.parse_shape("48,27,27,128,5,5,2,1") == (48, 27, 27, 128, 5, 5, 2, 1)
    for bad in ("48,27,27", "48,27,27,128,5,5,2,x"):
        with pytest.raises(ValueError, match="--shape"):
            m.parse_shape(bad)
    assert m.sizes_dividing(128) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert m.sizes_dividing(96) == [1, 2, 4, 8, 16, 32, 96]


def test_bad_shape_is_an_option_error(capsys):
    with pytest.raises(SystemExit) as e:
        _module().main(["--shape", "1,2"])
    assert e.value.code == 2 and "--shape: expected C,H,W,K,R,S,pad,stride" in \
        capsys.readouterr().err


def test_without_gpu_or_torch_it_says_so(capsys, monkeypatch):
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a GPU is visible: the script runs")
    except ImportError:
        monkeypatch.setitem(sys.modules, "torch", None)
    assert _module().main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graph_accuracy: ") and ("PyTorch" in err or "no CUDA" in err)


def test_groups_below_one_is_an_option_error(capsys):
    with pytest.raises(SystemExit) as e:
        _module().main(["--groups", "0"])
    assert e.value.code == 2 and "--groups: must be >= 1" in capsys.readouterr().err
