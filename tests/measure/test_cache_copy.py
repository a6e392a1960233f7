"""Whole-cache copies: BenchCache.export_cache / import_cache and ``ucudnn cache export FILE``
/ ``ucudnn cache import FILE`` (Note [A cache shared by a cluster])."""
import dataclasses
import sqlite3

import pytest

from ucudnn.cli import main
from ucudnn.measure.cache import UNKNOWN_CAP, BenchCache, CacheError, CacheKey
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.table import AlgoPerf

SHAPE = ConvShape(64, 56, 56, 64, 3, 3, 1, 1)
KEY = CacheKey("NVIDIA H200", 91400, "float32", "default", "fwd", SHAPE)
PERFS = [AlgoPerf(1, 0.25, 4096, 0), AlgoPerf(0, 0.5, 0, 0)]


def _sorted(perfs):
    return sorted(perfs, key=lambda p: (p.time_ms, p.ws_bytes, p.algo))


def _rows(path):
    """Every entry as stored: key columns, batch, repeats, created, and its perfs."""
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    entries = conn.execute(
        "SELECT gpu, cudnn_version, dtype, math, op, shape, timing, workspace_cap, batch, "
        "repeats, created, (SELECT group_concat(algo || ':' || time_ms || ':' || ws_bytes || "
        "':' || algo_math) FROM (SELECT * FROM perfs WHERE entry = e.id ORDER BY algo)) "
        "FROM entries e ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9").fetchall()
    conn.close()
    return entries


def _filled(path):
    with BenchCache(path) as c:
        c.put(KEY, 4, PERFS, repeats=3)
        c.put_many(dataclasses.replace(KEY, op="bwd_data", workspace_cap=1 << 30),
                   {1: PERFS[:1], 2: []})
        c.put(dataclasses.replace(KEY, timing="find"), 8, PERFS[1:])
    return path


def test_export_then_import_round_trip(tmp_path):
    src = _filled(tmp_path / "src.sqlite")
    copy = tmp_path / "copy.sqlite"
    with BenchCache(src, readonly=True) as c:           # a reader can export
        assert c.export_cache(copy) == 4
    assert _rows(copy) == _rows(src) and len(_rows(src)) == 4
    conn = sqlite3.connect(copy)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite", "src.sqlite"]
    # the copy is a cache; merged into an empty one, it gives the same entries
    dest = tmp_path / "dest.sqlite"
    with BenchCache(dest) as c:
        assert c.import_cache(copy) == (4, 0, 0, 0)
    assert _rows(dest) == _rows(src)


def test_export_never_overwrites(tmp_path):
    src = _filled(tmp_path / "src.sqlite")
    dest = tmp_path / "there.sqlite"
    dest.write_bytes(b"precious")
    with BenchCache(src) as c:
        with pytest.raises(CacheError, match="already exists; nothing was overwritten"):
            c.export_cache(dest)
        with pytest.raises(CacheError, match="does not exist"):
            c.export_cache(tmp_path / "no" / "copy.sqlite")
    assert dest.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.sqlite", "there.sqlite"]


def _set_created(path, created, where="1"):
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE entries SET created = ? WHERE {where}", (created,))
    conn.commit()
    conn.close()


def test_import_keeps_the_later_measurement(tmp_path):
    old = _filled(tmp_path / "old.sqlite")
    _set_created(old, 1000.0)
    dest = tmp_path / "dest.sqlite"
    with BenchCache(dest) as c:
        c.put(KEY, 4, [AlgoPerf(9, 9.0, 9, 0)])
    _set_created(dest, 2000.0)                            # measured after old's
    with BenchCache(dest) as c:
        got = c.import_cache(old)
        assert got.stored == 3 and got.kept_newer == 1
        assert c.get(KEY, 4) == [AlgoPerf(9, 9.0, 9, 0)]
    _set_created(old, 3000.0, "op = 'fwd' AND timing = 'events5'")    # measured again later
    with BenchCache(dest) as c:
        assert c.import_cache(old).stored == 4 and c.get(KEY, 4) == _sorted(PERFS)


def test_import_skips_legacy_entries(tmp_path):
    src = _filled(tmp_path / "src.sqlite")
    conn = sqlite3.connect(src)
    conn.execute(f"UPDATE entries SET workspace_cap = {UNKNOWN_CAP} WHERE op = 'bwd_data'")
    conn.commit()
    conn.close()
    with BenchCache(tmp_path / "dest.sqlite") as c:
        assert c.import_cache(src) == (2, 0, 2, 0) and c.legacy_count() == 0


def test_import_refuses_foreign_files_and_itself(tmp_path):
    path = _filled(tmp_path / "c.sqlite")
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    with BenchCache(path) as c:
        with pytest.raises(CacheError, match="another application"):
            c.import_cache(other)
        with pytest.raises(CacheError, match="into itself"):
            c.import_cache(path)
        with pytest.raises(CacheError, match="no cache at"):
            c.import_cache(tmp_path / "absent.sqlite")
        assert len(c) == 4
    assert other.read_bytes() == before and not (tmp_path / "absent.sqlite").exists()


def test_cli_export_and_import_a_whole_cache(tmp_path, capsys):
    src = _filled(tmp_path / "src.sqlite")
    copy, dest = tmp_path / "copy.sqlite", tmp_path / "dest.sqlite"
    assert main(["cache", "export", str(copy), "--cache", str(src)]) == 0
    assert f"copied 4 entries of {src} to {copy}" in capsys.readouterr().err
    assert main(["cache", "import", str(copy), "--cache", str(dest)]) == 0
    assert f"imported 4 entries from {copy} into {dest}" in capsys.readouterr().err
    assert _rows(dest) == _rows(src)
    for args, message in (
            (["cache", "export", str(copy), "--cache", str(src)], "already exists"),
            (["cache", "export", "--cache", str(src)], "export: give FILE"),
            (["cache", "export", str(tmp_path / "x.sqlite"), "--net", "alexnet", "--cache",
              str(src)], "--net: 'cache export FILE' copies entries as they are"),
            (["cache", "import", str(copy), "--cache", str(dest), "--gpu", "G"],
             "--gpu: importing the cache file"),
            (["cache", "export", str(tmp_path / "y.sqlite"), "--cache",
              str(tmp_path / "none.sqlite")], "no cache at")):
        assert main(args) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "x.sqlite").exists() and not (tmp_path / "y.sqlite").exists()
    assert not (tmp_path / "none.sqlite").exists()
