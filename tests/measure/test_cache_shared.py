"""A cache on shared storage, used by users who may not write it (Notes [Read-only caches] and
[A cache shared by a cluster] in ucudnn.measure.cache): the cache commands run as other users.

Running as root (as CI does), the readers are uid 65534 (nobody) and the owner of the files a
second unprivileged uid, so that permissions apply to both (they do not to root). Running as
another user, the scenarios that need a single user run as that user, with the files made
unwritable to it; those that need two users are skipped.
"""
import atexit
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import ucudnn
from ucudnn.measure.cache import BenchCache, CacheError, CacheKey
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.table import AlgoPerf

from repo_paths import SHIPPED

ROOT = os.geteuid() == 0
NOBODY, OWNER = 65534, 4242          # the reader, and a second unprivileged uid
SETPRIV = shutil.which("setpriv")      # util-linux; else subprocess's own user switch
needs_two_users = pytest.mark.skipif(
    not ROOT, reason="needs root to run the cache as two other users (the owner and a "
                     "reader); running as an unprivileged user only one user is available")

DEVICE = ["--gpu", "NVIDIA TEST", "--cudnn-version", "1"]     # never the visible GPU
SHAPE = ConvShape(64, 56, 56, 64, 3, 3, 1, 1)
KEY = CacheKey("NVIDIA TEST", 1, "float32", "default", "fwd", SHAPE)
PERFS = [AlgoPerf(1, 0.25, 4096, 0), AlgoPerf(0, 0.5, 0, 0)]

# lookups and a fill, as another user; prints what it saw as JSON
LOOKUP = """
import dataclasses, json, sys
from ucudnn.measure.cache import BenchCache, CacheKey
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.table import AlgoPerf
key = CacheKey("NVIDIA TEST", 1, "float32", "default", "fwd", ConvShape(64, 56, 56, 64, 3, 3, 1, 1))
with BenchCache(sys.argv[1]) as c:
    got = c.get(key, 4)
    filled = c.fill(key, [4, 8], lambda sizes: {8: [AlgoPerf(3, 1.0, 0)]})
    print(json.dumps({"readonly": c.readonly, "reason": c.readonly_reason,
                      "got": [dataclasses.astuple(p) for p in got or []],
                      "filled": sorted(filled), "stored": c.get(key, 8) is not None}))
"""
# a new entry, stored by the owner; prints whether it was read-only
PUT = """
import sys
from ucudnn.measure.cache import BenchCache, CacheKey
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.table import AlgoPerf
key = CacheKey("NVIDIA TEST", 1, "float32", "default", "bwd_data",
               ConvShape(64, 56, 56, 64, 3, 3, 1, 1))
with BenchCache(sys.argv[1], readonly=False) as c:
    c.put(key, 16, [AlgoPerf(7, 0.75, 8, 0)])
with BenchCache(sys.argv[1]) as c:
    assert c.get(key, 16) == [AlgoPerf(7, 0.75, 8, 0)], c.get(key, 16)
    print("stored", c.readonly)
"""


@pytest.fixture
def world():
    """A folder every user can reach (pytest's own are private to their user)."""
    base = Path(tempfile.mkdtemp(prefix="ucudnn-shared-"))
    base.chmod(0o755)
    yield base
    for folder, dirs, _ in os.walk(base):        # a non-root run made some unwritable
        for d in dirs:
            os.chmod(os.path.join(folder, d), 0o755)
    shutil.rmtree(base)


@functools.lru_cache(maxsize=None)
def _readable_package() -> Path:
    """A folder holding a copy of the ucudnn this process imported (the installed package),
    readable by every user: the environment it is installed in may be private to this user
    (CI's is, in a folder of mkdtemp's). The other users' interpreters import it from there;
    what they run needs nothing else outside the standard library."""
    base = Path(tempfile.mkdtemp(prefix="ucudnn-package-"))
    atexit.register(shutil.rmtree, base, True)
    shutil.copytree(Path(ucudnn.__file__).parent, base / "ucudnn",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for folder, dirs, files in os.walk(base):
        os.chmod(folder, 0o755)
        for f in files:
            os.chmod(os.path.join(folder, f), 0o644)
    return base


def _as(user, argv, cwd, ok=True):
    """Run ``argv`` as ``user`` ("reader" or "owner"; without root: this user)."""
    kw = {}
    if ROOT:
        uid = NOBODY if user == "reader" else OWNER
        if SETPRIV:
            argv = [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
        else:
            kw = dict(user=uid, group=uid, extra_groups=[])
    env = dict(os.environ, PYTHONPATH=str(_readable_package()), PYTHONDONTWRITEBYTECODE="1",
               HOME=str(cwd), UCUDNN_CACHE=str(cwd / "never-created.sqlite"))
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=120, **kw)
    assert "Traceback" not in p.stderr, p.stderr
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def _ucudnn(user, cwd, *args, ok=True):
    return _as(user, [sys.executable, "-m", "ucudnn", *map(str, args)], cwd, ok=ok)


@pytest.fixture
def users(world):
    """Skips where the interpreter or the package cannot be run as the other users."""
    for user in (("reader", "owner") if ROOT else ("reader",)):
        who = f"uid {NOBODY if user == 'reader' else OWNER}" if ROOT else "this user"
        try:
            p = _as(user, [sys.executable, "-c", "import ucudnn.measure.cache"], world, ok=False)
            why = p.stderr.strip()[-300:] if p.returncode else None
        except OSError as e:
            why = str(e)
        if why:
            pytest.skip(f"cannot run {sys.executable} with ucudnn as the {user} ({who}): {why}")
    return world


def _own(path: Path, mode: int) -> None:
    """Give ``path`` to the owner with ``mode`` (without root: keep it, and take away this
    user's write permission, which then applies)."""
    if ROOT:
        os.chown(path, OWNER, OWNER)
        path.chmod(mode)
    else:
        path.chmod(mode & ~0o222)


def _cache(folder: Path, folder_mode: int, *, wal: bool = False) -> Path:
    """A cache holding one entry, owned by the owner: file 0644 in ``folder``."""
    folder.mkdir()
    path = folder / "bench.sqlite"
    with BenchCache(path) as c:
        c.put(KEY, 4, PERFS)
    if wal:                          # as older versions left it
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
        conn.close()
    _own(path, 0o644)
    _own(folder, folder_mode)
    return path


def _state(folder: Path):
    """The folder's names with their owners, and the bytes of each file."""
    return {p.name: (p.stat().st_uid, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in folder.iterdir()}


def _listing(p):
    return [(d["op"], d["batches"]) for d in json.loads(p.stdout)]


# -- in this process ------------------------------------------------------------------------

def _sorted(perfs):
    return sorted(perfs, key=lambda p: (p.time_ms, p.ws_bytes, p.algo))


def test_read_only_open_lists_and_reads(tmp_path):
    path = tmp_path / "c.sqlite"
    with BenchCache(path) as c:
        c.put(KEY, 4, PERFS)
    before = path.read_bytes()
    with BenchCache(path, readonly=True) as c:
        assert c.readonly and c.get(KEY, 4) == _sorted(PERFS) and c.keys() == [KEY]
        with pytest.raises(CacheError, match="read-only"):
            c.put(KEY, 8, PERFS)
        # fill measures what is missing and returns it, without storing it
        assert c.fill(KEY, [4, 8], lambda s: {8: PERFS[:1]}) == {4: _sorted(PERFS),
                                                                  8: PERFS[:1]}
        assert c.get(KEY, 8) is None
    assert path.read_bytes() == before
    for kw in (dict(readonly=True), dict(create=False)):
        with pytest.raises(CacheError, match="no cache at .*absent"):
            BenchCache(tmp_path / "absent" / "absent.sqlite", **kw)
        assert not (tmp_path / "absent").exists()             # no folder, no file
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with BenchCache(empty, readonly=True) as c:
        assert len(c) == 0 and c.keys() == [] and c.get(KEY, 1) is None
    assert empty.read_bytes() == b""


def test_a_wal_file_is_switched_to_the_rollback_journal(tmp_path):
    """Note [Cache file safety]: a WAL file (as older versions wrote them) is switched on a
    read-write open that has it to itself; while another connection holds it, both keep WAL
    and writes go on."""
    path = tmp_path / "c.sqlite"
    with BenchCache(path) as c:
        c.put(KEY, 4, PERFS)
    held = sqlite3.connect(path, isolation_level=None)
    assert held.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    held.execute("SELECT COUNT(*) FROM entries").fetchone()
    with BenchCache(path) as c:
        c.put(KEY, 8, PERFS[:1])
        assert held.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    held.close()
    with BenchCache(path) as c:
        assert c.get_many(KEY, [4, 8]) == {4: _sorted(PERFS), 8: PERFS[:1]}
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.sqlite"]


# -- (a) a folder the user cannot write ---------------------------------------------------------

@pytest.mark.parametrize("wal", [False, True], ids=["rollback", "wal-file"])
def test_read_only_folder_lists_and_looks_up_creating_nothing(users, wal):
    folder = users / "shared"
    path = _cache(folder, 0o755, wal=wal)
    before = _state(folder)
    p = _ucudnn("reader", users, "cache", "list", "--cache", path, "--json")
    assert _listing(p) == [("fwd", [4])]
    assert f"{path}: read-only: " in p.stderr and f"folder {folder} not writable" in p.stderr
    if wal:
        assert "read as immutable" in p.stderr
    got = json.loads(_as("reader", [sys.executable, "-c", LOOKUP, str(path)], users).stdout)
    assert got["readonly"] and f"folder {folder} not writable" in got["reason"]
    assert got["got"] == [list(dataclasses.astuple(p)) for p in PERFS]
    assert got["filled"] == [4, 8] and not got["stored"]     # measured, returned, not stored
    # planning reads it too (without a GPU to benchmark: read-only whatever the permissions)
    p = _ucudnn("reader", users, "plan", "--net", "alexnet", "--cache", path, *DEVICE,
                ok=False)
    assert "no benchmark data" in p.stderr and "does not hold them" in p.stderr
    assert f"{path}: read-only: " in p.stderr
    assert _state(folder) == before


# -- (b) another user reads, then the owner writes ------------------------------------------------

@needs_two_users
@pytest.mark.parametrize("folder_mode", [0o755, 0o1777], ids=["owner-only", "all-writable"])
@pytest.mark.parametrize("wal", [False, True], ids=["rollback", "wal-file"])
def test_a_reader_never_blocks_the_owner(users, folder_mode, wal):
    folder = users / "cache"
    path = _cache(folder, folder_mode, wal=wal)
    before = _state(folder)
    p = _ucudnn("reader", users, "cache", "list", "--cache", path, "--json")
    assert _listing(p) == [("fwd", [4])] and "read-only" in p.stderr
    _as("reader", [sys.executable, "-c", LOOKUP, str(path)], users)
    assert _state(folder) == before                      # no -wal, -shm or -journal left
    out = _as("owner", [sys.executable, "-c", PUT, str(path)], users).stdout
    assert out.split() == ["stored", "False"]
    assert sorted(p.name for p in folder.iterdir()) == ["bench.sqlite"]
    assert path.stat().st_uid == OWNER
    with BenchCache(path, readonly=True) as c:           # reopened: both entries are there
        assert len(c) == 2
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"   # converted
    conn.close()


@needs_two_users
def test_sidecars_of_another_user_are_named_not_written_through(users):
    """A reader of an older ucudnn left -wal/-shm files of its own beside a WAL file: its owner
    falls back to read-only and is told which file is in the way."""
    folder = users / "cache"
    path = _cache(folder, 0o1777, wal=True)
    old_reader = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], uri=True); "
                  "c.execute('SELECT COUNT(*) FROM entries').fetchone(); c.close()")
    _as("reader", [sys.executable, "-c", old_reader, f"{path.as_uri()}?mode=ro"], users)
    shm = Path(f"{path}-shm")
    assert shm.stat().st_uid == NOBODY
    p = _as("owner", [sys.executable, "-c", LOOKUP, str(path)], users)
    got = json.loads(p.stdout)
    assert got["readonly"] and f"{shm} belongs to uid {NOBODY}" in got["reason"]
    assert got["got"] == [list(dataclasses.astuple(p)) for p in PERFS] and not got["stored"]
    strict = ("import sys\nfrom ucudnn.measure.cache import BenchCache, CacheError\n"
              "try:\n    BenchCache(sys.argv[1], readonly=False)\n"
              "except CacheError as e:\n    print(e)\n")
    p = _as("owner", [sys.executable, "-c", strict, str(path)], users)
    assert f"{path}: attempt to write a readonly database" in p.stdout
    assert f"{shm} belongs to uid {NOBODY}" in p.stdout
    shm.unlink()                                          # what the message says to do
    Path(f"{path}-wal").unlink()
    assert _as("owner", [sys.executable, "-c", PUT, str(path)], users).stdout.split() == [
        "stored", "False"]


@needs_two_users
def test_an_interrupted_write_is_rolled_back_by_the_owner_not_read_half(users):
    folder = users / "cache"
    path = _cache(folder, 0o755)
    crash = ("import os, sqlite3, sys\n"
             "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
             "c.execute('PRAGMA cache_size = 1')\n"        # spill: the journal reaches the disk
             "c.execute('BEGIN IMMEDIATE')\n"
             "for i in range(2000):\n"
             "    c.execute('INSERT INTO meta VALUES (?, ?)', (f'k{i}', 'x' * 200))\n"
             "os.kill(os.getpid(), 9)\n")
    p = _as("owner", [sys.executable, "-c", crash, str(path)], users, ok=False)
    assert p.returncode == -9 and Path(f"{path}-journal").stat().st_size > 0
    before = _state(folder)
    p = _ucudnn("reader", users, "cache", "list", "--cache", path, ok=False)
    assert p.returncode == 2 and "a write was interrupted (hot journal" in p.stderr
    assert _state(folder) == before
    p = _ucudnn("owner", users, "cache", "list", "--cache", path, "--json")
    assert _listing(p) == [("fwd", [4])]
    assert sorted(q.name for q in folder.iterdir()) == ["bench.sqlite"]
    assert _listing(_ucudnn("reader", users, "cache", "list", "--cache", path,
                            "--json")) == [("fwd", [4])]


# -- (c) a path with no cache ---------------------------------------------------------------------

def test_missing_cache_is_said_and_nothing_is_created(users):
    scratch = users / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)                  # the reader could create things here; it must not
    missing = scratch / "typo" / "sub" / "bench.sqlite"
    for args in (["cache", "list", "--cache", missing],
                 ["cache", "list", "--cache", missing, "--json"],
                 ["cache", "export", scratch / "copy.sqlite", "--cache", missing],
                 ["cache", "export", "--net", "alexnet", "--cache", missing, *DEVICE]):
        p = _ucudnn("reader", users, *args, ok=False)
        assert p.returncode == 2 and f"--cache: no cache at {missing}" in p.stderr, args
    p = _ucudnn("reader", users, "plan", "--net", "alexnet", "--cache", missing, *DEVICE,
                ok=False)
    assert f"there is no cache at {missing}" in p.stderr
    assert list(scratch.iterdir()) == [] and not (users / "never-created.sqlite").exists()


# -- (d) a read-only file in a writable folder ----------------------------------------------------

def test_read_only_file_in_a_writable_folder(users):
    folder = users / "mine"
    path = _cache(folder, 0o755)
    if ROOT:
        os.chown(folder, NOBODY, NOBODY)     # the reader's own folder, the owner's file
    else:
        folder.chmod(0o755)
    before = _state(folder)
    p = _ucudnn("reader", users, "cache", "list", "--cache", path, "--json")
    assert _listing(p) == [("fwd", [4])] and f"read-only: file {path} not writable" in p.stderr
    got = json.loads(_as("reader", [sys.executable, "-c", LOOKUP, str(path)], users).stdout)
    assert got["readonly"] and got["got"] and not got["stored"]
    p = _ucudnn("reader", users, "cache", "import", SHIPPED / "alexnet_bench.csv", "--net",
                "alexnet", "--cache", path, *DEVICE, ok=False)
    assert p.returncode == 2 and "opened read-only" in p.stderr and "nothing can be stored" \
        in p.stderr
    assert _state(folder) == before


# -- the cluster: one node measures, the others read a copy --------------------------------------

def test_cluster_one_node_measures_the_others_plan_from_a_copy(users):
    node, shared, mine = users / "node", users / "shared", users / "mine"
    for f in (node, shared, mine):
        f.mkdir()
        if ROOT:                         # the node's folders are the owner's, mine the reader's
            os.chown(f, *(2 * (NOBODY if f is mine else OWNER,)))
    local, copy, merged = node / "bench.sqlite", shared / "bench.sqlite", mine / "bench.sqlite"
    writer = "owner" if ROOT else "reader"
    # the measuring node fills its cache, then publishes a copy
    p = _ucudnn(writer, users, "cache", "import", SHIPPED / "alexnet_bench.csv", "--net",
                "alexnet", "--cache", local, *DEVICE)
    n = int(re.search(r"imported (\d+) entries", p.stderr).group(1))
    p = _ucudnn(writer, users, "cache", "export", copy, "--cache", local)
    assert f"copied {n} entries of {local} to {copy}" in p.stderr
    if not ROOT:
        shared.chmod(0o555)              # published: not writable by its readers
    assert stat.S_IMODE(copy.stat().st_mode) & 0o044 == 0o044       # readable by the others
    before = _state(shared)
    # another user plans from the copy, read-only, and leaves nothing beside it
    plans = [json.loads(_ucudnn("reader", users, "plan", "--net", "alexnet", "--cache", c,
                                *DEVICE, "--json").stdout) for c in (copy, local)]
    assert plans[0]["source"]["kind"] == "cache"
    assert plans[0]["totals"] == plans[1]["totals"] and plans[0]["kernels"] == plans[1]["kernels"]
    assert _state(shared) == before
    # ... or merges it into a cache of its own: the same entries
    p = _ucudnn("reader", users, "cache", "import", copy, "--cache", merged)
    assert f"imported {n} entries from {copy} into {merged}" in p.stderr
    lists = [json.loads(_ucudnn("reader", users, "cache", "list", "--cache", c,
                                "--json").stdout) for c in (local, merged)]
    assert lists[0] == lists[1] and len(lists[0]) == 14    # 5 layers, conv1 without bwd_data
    # a merge keeps the later measurement of an entry
    with BenchCache(merged) as c:
        (key,) = [k for k in c.keys() if k.op == "fwd" and k.shape.c == 3]       # conv1
        c.put(key, 256, PERFS)
    p = _ucudnn("reader", users, "cache", "import", copy, "--cache", merged)
    assert f"imported {n - 1} entries" in p.stderr and "kept 1 entries" in p.stderr
    with BenchCache(merged, readonly=True) as c:
        assert c.get(key, 256) == sorted(PERFS, key=lambda p: p.time_ms)
    assert _state(shared) == before
