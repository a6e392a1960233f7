"""Output files the commands write (Note [Writing a named file] in ucudnn/files.py): never
over a FIFO, a device or a folder; over a regular file only with --force, without its setuid
bits; an OS error is one line naming the file, and leaves the folder as it was."""
import errno
import os
import stat

import pytest

from cli_run import run
from repo_paths import NETS, SHIPPED
from ucudnn import files
from ucudnn.cli import main
from ucudnn.plan.table import read_table

NET = NETS / "cifar10.prototxt"


def _listing(folder):
    return sorted(p.name for p in folder.iterdir())


def _cache_with_alexnet(tmp_path, capsys):
    cache = tmp_path / "c.sqlite"
    assert main(["cache", "import", str(SHIPPED / "alexnet_bench.csv"), "--net", "alexnet",
                 "--cache", str(cache), "--gpu", "G", "--cudnn-version", "91400"]) == 0
    capsys.readouterr()
    return cache


# -- every writer: a FIFO, a symlink to one, a device, a folder are never written ------------

def _writers(tmp_path, out):
    """The commands that write ``out`` (with --force where they take it)."""
    cache = tmp_path / "c.sqlite"
    return [["prototxt", NET, "-o", out, "--policy", "all", "--force"],
            ["cache", "export", "--net", "alexnet", "--cache", cache, "-o", out, "--force"],
            ["cache", "export", out, "--cache", cache, "--force"],
            ["bench", "--net", "alexnet", "--csv", out]]     # refused before measuring


@pytest.mark.parametrize("which", [0, 1, 2, 3])
@pytest.mark.parametrize("through_link", [False, True])
def test_a_fifo_is_never_opened_nor_replaced(tmp_path, capsys, which, through_link):
    _cache_with_alexnet(tmp_path, capsys)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = fifo
    if through_link:
        out = tmp_path / "link"
        out.symlink_to(fifo)
    before = _listing(tmp_path)
    p = run(tmp_path, *_writers(tmp_path, out)[which], ok=False)    # a blocked open: timeout
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "is a FIFO" in p.stderr and str(out) in p.stderr
    assert ".tmp" not in p.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and _listing(tmp_path) == before


@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_dev_null_is_refused_even_with_force(tmp_path, capsys, which):
    _cache_with_alexnet(tmp_path, capsys)
    before = os.stat("/dev/null")
    assert main(list(map(str, _writers(tmp_path, "/dev/null")[which]))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/dev/null" in err and "is a character device" in err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino


def test_a_folder_is_refused(tmp_path, capsys):
    folder = tmp_path / "d"
    folder.mkdir()
    assert main(["prototxt", str(NET), "-o", str(folder), "--force"]) == 2
    assert "is a folder" in capsys.readouterr().err and _listing(folder) == []


def test_force_drops_the_setuid_and_setgid_bits(tmp_path, capsys):
    out = tmp_path / "v.prototxt"
    out.write_text("old\n")
    os.chmod(out, 0o6755)
    assert main(["prototxt", str(NET), "-o", str(out), "--policy", "all", "--force"]) == 0
    mode = os.stat(out).st_mode
    assert mode & (stat.S_ISUID | stat.S_ISGID) == 0 and stat.S_IMODE(mode) == 0o755
    assert "ucudnn_param" in out.read_text()


# -- cache export -o: an existing file needs --force ---------------------------------------------

def test_cache_export_table_needs_force_over_a_file(tmp_path, capsys):
    cache = _cache_with_alexnet(tmp_path, capsys)
    out = tmp_path / "t.csv"
    out.write_text("precious\n")
    args = ["cache", "export", "--net", "alexnet", "--cache", str(cache), "-o", str(out)]
    assert main(args) == 2
    assert f"--csv: {out} exists; pass --force" in capsys.readouterr().err
    assert out.read_text() == "precious\n"
    assert main(args + ["--force"]) == 0
    assert len(read_table(out)) > 0 and _listing(tmp_path) == ["c.sqlite", "t.csv"]


def test_cache_export_file_needs_force_over_a_file(tmp_path, capsys):
    cache = _cache_with_alexnet(tmp_path, capsys)
    out = tmp_path / "copy.sqlite"
    out.write_bytes(b"precious")
    assert main(["cache", "export", str(out), "--cache", str(cache)]) == 2
    assert "already exists; nothing was overwritten" in capsys.readouterr().err
    assert out.read_bytes() == b"precious"
    assert main(["cache", "export", str(out), "--cache", str(cache), "--force"]) == 0
    assert out.read_bytes().startswith(b"SQLite format 3")
    assert _listing(tmp_path) == ["c.sqlite", "copy.sqlite"]


# -- OS errors: one line naming the target; nothing left behind ----------------------------------

def _enospc(*a, **kw):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("which", [0, 1, 2])
def test_disk_full_names_the_target_and_leaves_nothing(tmp_path, capsys, monkeypatch, which):
    _cache_with_alexnet(tmp_path, capsys)
    out = tmp_path / "out"
    before = _listing(tmp_path)
    monkeypatch.setattr(files.os, "fsync", _enospc)         # where the data reaches the disk
    assert main(list(map(str, _writers(tmp_path, out)[which]))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out) in err and "No space left on device" in err, err
    assert ".tmp" not in err and _listing(tmp_path) == before


def test_an_unwritable_folder_names_the_target_not_the_temporary_file(tmp_path, capsys,
                                                                      monkeypatch):
    real = os.open

    def refused(path, *a, **kw):
        if str(path).endswith(".tmp"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path, *a, **kw)
    monkeypatch.setattr(files.os, "open", refused)
    out = tmp_path / "v.prototxt"
    assert main(["prototxt", str(NET), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--output: {out}: Permission denied" in err and ".tmp" not in err
    assert _listing(tmp_path) == []


def test_write_file_removes_its_temporary_file_when_fill_fails(tmp_path):
    def fill(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("stopped")
    with pytest.raises(RuntimeError):
        files.write_file(tmp_path / "x", fill)
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_new_files_get_the_umasks_mode(tmp_path, umask):
    old = os.umask(umask)
    try:
        files.write_text(tmp_path / "n.txt", "new\n", replace=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "n.txt").st_mode) == 0o666 & ~umask


@pytest.mark.parametrize("role", ["--cache", "source"])
def test_a_fifo_as_a_cache_or_an_import_source_is_refused_without_blocking(tmp_path, capsys,
                                                                         role):
    cache = _cache_with_alexnet(tmp_path, capsys)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    args = {"--cache": [["cache", "list", "--cache", fifo],
                        ["cache", "import", cache, "--cache", fifo]],
            "source": [["cache", "import", fifo, "--cache", cache]]}[role]
    for a in args:
        p = run(tmp_path, *a, ok=False)
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert f"{fifo}: not a regular file" in p.stderr, p.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
