"""One libcudnn in the process (Note [One cuDNN with PyTorch] in ucudnn/torch/libcudnn.py): the
memory map is read for cuDNN's main library, two files raise, a core built against another file
of the same major version is a warning naming the fix, another major version raises; and in a
real process importing ucudnn.torch finds PyTorch's cuDNN, the core loaded after it runs on that
one, and a second copy loaded by its path is refused."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")

from ucudnn.torch.libcudnn import (CudnnFacts, CudnnMismatch, judge,  # noqa: E402
                                   mapped_cudnn)


def _lib(folder, name="libcudnn.so.9"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"\x7fELF")
    return str(path)


def _maps_line(path, offset=0):
    return f"7f0000000000-7f0000001000 r-xp {offset:08x} 00:2a 1234   {path}\n"


def test_the_map_names_cudnns_main_library_once(tmp_path):
    torch_lib = _lib(tmp_path / "wheel" / "lib")
    sub = _lib(tmp_path / "wheel" / "lib", "libcudnn_cnn.so.9")
    link = tmp_path / "link" / "libcudnn.so.9"
    link.parent.mkdir()
    link.symlink_to(torch_lib)
    maps = tmp_path / "maps"
    maps.write_text(_maps_line(torch_lib) + _maps_line(torch_lib, 4096) + _maps_line(sub)
                    + "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0   [stack]\n"
                    + _maps_line(link))
    assert mapped_cudnn(str(maps)) == [torch_lib]
    other = _lib(tmp_path / "system", "libcudnn.so.9.19.0")
    maps.write_text(maps.read_text() + _maps_line(other))
    assert mapped_cudnn(str(maps)) == [torch_lib, other]
    assert mapped_cudnn(str(tmp_path / "no-such-maps")) == []


def test_judging_the_facts(tmp_path):
    torch_lib = _lib(tmp_path / "wheel" / "lib")
    system = _lib(tmp_path / "system", "libcudnn.so.9")
    old = _lib(tmp_path / "old", "libcudnn.so.8")
    link = tmp_path / "libcudnn.so.9"
    link.symlink_to(torch_lib)
    assert judge(CudnnFacts([torch_lib], torch_lib, "9.26.0")) is None
    assert judge(CudnnFacts([torch_lib], str(link), "9.26.0")) is None
    assert judge(CudnnFacts([], system, "9.19.0")) is None          # PyTorch without CUDA
    assert judge(CudnnFacts([torch_lib], None, None)) is None        # no core built
    warning = judge(CudnnFacts([torch_lib], system, "9.19.0"))
    assert system in warning and torch_lib in warning
    assert f"CUDNN_ROOT={tmp_path / 'wheel'}" in warning
    with pytest.raises(CudnnMismatch, match="two libcudnn files") as e:
        judge(CudnnFacts([torch_lib, system], torch_lib, "9.26.0"))
    assert system in str(e.value)
    with pytest.raises(CudnnMismatch, match="major version 9"):
        judge(CudnnFacts([torch_lib], old, "8.9.7"))


def _run(code, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=300)


def test_a_real_process_has_pytorchs_cudnn_and_refuses_a_second(tmp_path):
    loaded = _run("""
        import torch
        from ucudnn.torch.libcudnn import mapped_cudnn
        print("\\n".join(mapped_cudnn()))
    """, tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    files = loaded.stdout.split()
    if not files:
        pytest.skip("this PyTorch loads no cuDNN (a build without CUDA)")
    assert len(files) == 1
    copy = tmp_path / "copy" / "libcudnn.so.9"
    copy.parent.mkdir()
    shutil.copy(files[0], copy)
    got = _run(f"""
        import ctypes, torch
        import ucudnn.torch
        facts = ucudnn.torch.check_process()
        print(facts.mapped[0])
        try:                            # the core, loaded now, runs on PyTorch's cuDNN
            from ucudnn import _core
            print(_core.cudnn_version() == torch.backends.cudnn.version(),
                  len(ucudnn.torch.libcudnn.mapped_cudnn()))
        except ImportError:             # no core built
            print(True, 1)
        ctypes.CDLL({str(copy)!r})
        try:
            ucudnn.torch.check_process()
        except ucudnn.torch.CudnnMismatch as e:
            print("refused:", e)
    """, tmp_path)
    assert got.returncode == 0, got.stderr
    first, core, refused = got.stdout.splitlines()
    assert first == files[0] and core == "True 1"
    assert refused.startswith("refused: ") and str(copy) in refused and files[0] in refused
