"""A seeded fuzz of the files the commands read besides prototxts: layer lists and benchmark
tables (CSV: ``--layers``, ``--table``, ``cache import TABLE``) and benchmark caches (SQLite:
``--cache``, ``cache list``, ``cache export``, ``cache import CACHE``). Each case mutates a
good file -- a field replaced, lines dropped or repeated, bytes flipped, the file cut short, a
foreign schema, a row of bad values -- and runs a command on it in process
(:func:`cli_fuzz.run_main`).

Every case ends with exit status 0 or 2 (an error is one line, the last on stderr), no
traceback, no escape character printed, within CASE_LIMIT_S, and no file lost or replaced:
a file a case reads is byte for byte as it was, a command that refuses writes nothing (not
its output, not the cache it would store into, no temporary file left beside them), and the
files a command may write are written only when it succeeds.

``UCUDNN_FUZZ_CASES`` (:data:`DEFAULT_CASES` by default) cases from ``UCUDNN_FUZZ_SEED``
(:data:`SEED`); a failure names the seed, the case and its command line, and
``UCUDNN_FUZZ_SEED=S UCUDNN_FUZZ_FIRST=K UCUDNN_FUZZ_CASES=1`` replays case K alone."""
import hashlib
import os
import random
import shutil
import sqlite3
import time

import pytest

from cli_fuzz import fuzz_settings, run_case, run_main
from repo_paths import SHARED, SHIPPED, needs_shared

SEED = 4848
DEFAULT_CASES = 300
GPU = ["--gpu", "NVIDIA H200", "--cudnn-version", "91400"]
#: SQLite's files beside a cache: a reader that may write the cache rolls a hot journal back
#: (Note [Read-only caches] in ucudnn/measure/cache/access.py), which removes it
SIDECARS = ("-journal", "-wal", "-shm")

#: values a mutated field takes
WEIRD = ["", " ", "-1", "0", "-0", "1", "2", "3", "nan", "inf", "-inf", "1e309", "1e-320",
         "9" * 400, str(2**31), str(2**63 - 1), str(2**63), str(2**64), "0x10", "1.5", "+5",
         "007", "\u0663", "\x00", "caf\u00e9", "\x1b[2J", '"', '"a,b"', "a\nb", "fwd",
         "bwd_data", "bwd_filter", "conv1", "conv2", "x" * 300, "-5.5", "1e3", "True"]
#: values a mutated cache column takes (SQLite binds them as they are: text in an integer
#: column, a blob, a float where an integer is expected)
DB_VALUES = [None, -1, 0, 1, 2**62, -2**63, 1.5, -0.001, float("inf"), float("-inf"), "",
             "x", "nan", "1e309", "-1", "caf\u00e9", "\x1b[31m", b"\x00\xff", "legacy", "graph",
             "fwd", "bwd_data", "c=1", "c=3,h=227", "NVIDIA H200", 91400, "float32", "default",
             "events5", "find"]


# ---------------------------------------------------------------------------------------------
# mutations
# ---------------------------------------------------------------------------------------------

def mutate_csv(rng, data: bytes) -> bytes:
    """One to three mutations of a CSV file."""
    for _ in range(rng.randint(1, 3)):
        data = rng.choice(_CSV_MUTATIONS)(rng, data)
    return data


def _lines(data):
    return data.decode("utf-8", "surrogateescape").splitlines(keepends=True)


def _join(lines):
    return "".join(lines).encode("utf-8", "surrogateescape")


def _field(rng, data):
    lines = _lines(data)
    if not lines:
        return data
    i = 0 if rng.random() < 0.1 else rng.randrange(len(lines))
    end = "\n" if lines[i].endswith("\n") else ""
    cells = lines[i].rstrip("\r\n").split(",")
    j = rng.randrange(len(cells))
    cells[j] = rng.choice(WEIRD) if i else rng.choice(WEIRD + [c.upper() for c in cells])
    lines[i] = ",".join(cells) + end
    return _join(lines)


def _column(rng, data):
    lines = _lines(data)
    if not lines:
        return data
    j = rng.randrange(len(lines[0].split(",")))
    add = rng.random() < 0.4
    out = []
    for ln in lines:
        end = "\n" if ln.endswith("\n") else ""
        cells = ln.rstrip("\r\n").split(",")
        if add:
            cells.insert(j, rng.choice(WEIRD[:12]))
        elif j < len(cells):
            del cells[j]
        out.append(",".join(cells) + end)
    return _join(out)


def _lines_op(rng, data):
    lines = _lines(data)
    if len(lines) < 2:
        return data
    i, k = rng.randrange(len(lines)), rng.randrange(len(lines))
    op = rng.choice(["drop", "dup", "swap", "header-only", "no-header", "shuffle"])
    if op == "drop":
        del lines[i]
    elif op == "dup":
        lines.insert(k, lines[i])
    elif op == "swap":
        lines[i], lines[k] = lines[k], lines[i]
    elif op == "header-only":
        lines = lines[:1]
    elif op == "no-header":
        lines = lines[1:]
    else:
        body = lines[1:]
        rng.shuffle(body)
        lines = lines[:1] + body
    return _join(lines)


def _bytes_op(rng, data):
    op = rng.choice(["truncate", "flip", "nul", "crlf", "bom", "empty", "latin1", "blank"])
    if op == "truncate":
        return data[:rng.randrange(len(data) + 1)]
    if op == "flip" and data:
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if op == "nul" and data:
        i = rng.randrange(len(data))
        return data[:i] + b"\0" + data[i:]
    if op == "crlf":
        return data.replace(b"\n", b"\r\n")
    if op == "bom":
        return b"\xef\xbb\xbf" + data
    if op == "latin1":
        return data.replace(b"1", b"\xe9", 1)
    if op == "blank":
        return b"\n \n" + data + b"\n\n"
    return b""


_CSV_MUTATIONS = [_field] * 5 + [_column, _lines_op, _lines_op, _bytes_op, _bytes_op]


def mutate_cache(rng, path: str) -> str:
    """Mutate the cache file at ``path`` in place; what was done, for the failure message."""
    op = rng.choice(["row"] * 6 + ["flip", "flip", "truncate", "schema", "table", "foreign",
                                   "journal", "wal"])
    if op == "flip":
        with open(path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            at = [rng.randrange(100) if rng.random() < 0.4 else rng.randrange(size)
                  for _ in range(rng.randint(1, 8))]
            for i in at:
                f.seek(i)
                b = f.read(1)
                f.seek(i)
                f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
        return f"bytes flipped at {at}"
    if op == "truncate":
        size = os.path.getsize(path)
        n = rng.choice([0, 1, 50, 100, 4096, rng.randrange(size)])
        os.truncate(path, n)
        return f"cut to {n} bytes"
    if op == "foreign":
        data = rng.choice([b"layer,op,batch\n", rng.randbytes(rng.randrange(1, 5000)),
                           b"SQLite format 3\x00" + rng.randbytes(200)])
        with open(path, "wb") as f:
            f.write(data)
        return f"replaced by {data[:20]!r}"
    if op == "journal":
        with open(path + "-journal", "wb") as f:
            f.write(rng.randbytes(rng.choice([10, 512, 4096])))
        return "a hot journal of junk beside it"
    con = sqlite3.connect(path, isolation_level=None)
    try:
        if op == "schema":
            sql = rng.choice([f"PRAGMA user_version = {rng.choice([0, 1, 2, 5, 7, 99, -1])}",
                              f"PRAGMA application_id = {rng.choice([0, 1, 0x75634E4F])}",
                              "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
                              "UPDATE meta SET value = 'x' WHERE key = 'schema_version'",
                              "DELETE FROM meta", "UPDATE meta SET value = 'other'"])
            con.execute(sql)
            return sql
        if op == "table":
            sql = rng.choice(["DROP TABLE perfs", "DROP TABLE refused", "DROP TABLE meta",
                              "ALTER TABLE entries ADD COLUMN extra TEXT",
                              "ALTER TABLE perfs RENAME TO perfs_old",
                              "DELETE FROM entries", "DELETE FROM perfs",
                              "CREATE TABLE other (x)"])
            con.execute(sql)
            return sql
        if op == "wal":
            con.execute("PRAGMA journal_mode = WAL")
            con.execute("UPDATE entries SET repeats = repeats + 1")
            return "WAL mode"
        # a row with a bad value: NOT NULL columns lose their constraint in a rebuilt table
        table = rng.choice(["entries", "entries", "perfs", "perfs", "refused"])
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        col = rng.choice(cols)
        value = rng.choice(DB_VALUES)
        if table == "refused":
            con.execute("INSERT INTO refused SELECT gpu, cudnn_version, dtype, math, op, shape, "
                        "0, 'r', 0 FROM entries LIMIT 1")
        rowid = rng.choice([r[0] for r in con.execute(f"SELECT rowid FROM {table}")] or [1])
        try:
            con.execute(f"UPDATE {table} SET {col} = ? WHERE rowid = ?", (value, rowid))
        except sqlite3.DatabaseError:       # NOT NULL, UNIQUE: write it past the constraints
            con.execute("PRAGMA writable_schema = ON")
            con.execute("UPDATE sqlite_master SET sql = replace(replace(sql, 'NOT NULL', ''), "
                        "'UNIQUE', 'CHECK') WHERE name = ?", (table,))
            con.execute("PRAGMA writable_schema = OFF")
            con.close()
            con = sqlite3.connect(path, isolation_level=None)
            try:
                con.execute(f"UPDATE {table} SET {col} = ? WHERE rowid = ?", (value, rowid))
            except sqlite3.DatabaseError as e:
                return f"{table}.{col} = {value!r} refused by SQLite ({e})"
        return f"{table}.{col} = {value!r} at row {rowid}"
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# the cases
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """The good files every case starts from: a layer list, two benchmark tables, a cache."""
    d = tmp_path_factory.mktemp("seeds")
    cache = d / "seed.sqlite"
    rc, _, err = run_main(["cache", "import", SHARED / "alexnet_default.csv", "--net",
                           "alexnet", "--cache", cache, *GPU])
    assert rc == 0, err
    for name in ("alexnet_layers.csv", "alexnet_bench.csv"):
        shutil.copy(SHIPPED / name, d / name)
    shutil.copy(SHARED / "alexnet_default.csv", d / "alexnet_default.csv")
    return {"layers": (d / "alexnet_layers.csv").read_bytes(),
            "table": (d / "alexnet_default.csv").read_bytes(),
            "bench": (d / "alexnet_bench.csv").read_bytes(),
            "cache": cache}


def _case(rng, seeds, folder):
    """One case in ``folder``: (command line, {file: may the command change it}, what the
    mutation was)."""
    os.makedirs(folder)
    layers, table, cache = (os.path.join(folder, n) for n in ("l.csv", "t.csv", "c.sqlite"))
    out = os.path.join(folder, "out")

    def csv(path, key, mutate=True):
        data = seeds[key]
        with open(path, "wb") as f:
            f.write(mutate_csv(rng, data) if mutate else data)

    def db(path, mutate=True):
        shutil.copy(seeds["cache"], path)
        return mutate_cache(rng, path) if mutate else "good"

    what = rng.choice(["layers"] * 3 + ["table"] * 3 + ["cache"] * 6)
    if what == "layers":
        csv(layers, "layers")
        how = "layers mutated"
        argv = rng.choice([
            ["plan", "--layers", layers, "--table", SHARED / "alexnet_default.csv"],
            ["plan", "--layers", layers],
            ["cache", "export", "--layers", layers, "--cache", cache, *GPU],
            ["cache", "import", SHARED / "alexnet_default.csv", "--layers", layers, "--cache",
             cache, *GPU],
            ["plan", "--layers", layers, "--cache", cache, "--gpu", "NVIDIA H200"],
        ])
        how += "; cache " + db(cache, mutate=False)
        writes = {cache} if argv[1] == "import" else set()
    elif what == "table":
        csv(table, rng.choice(["table", "bench"]))
        how = "table mutated"
        argv = rng.choice([
            ["plan", "--table", table],
            ["plan", "--net", "alexnet", "--table", table, "--json"],
            ["plan", "--layers", SHIPPED / "alexnet_layers.csv", "--table", table,
             "--optimizer", "ilp"],
            ["cache", "import", table, "--net", "alexnet", "--cache", cache, *GPU],
        ])
        if argv[1] == "import" and rng.random() < 0.5:
            how += "; cache " + db(cache, mutate=False)
        writes = {cache} if argv[1] == "import" else set()
    else:
        how = "cache: " + db(cache)
        source = os.path.join(folder, "good.sqlite")
        argv = rng.choice([
            ["cache", "list", "--cache", cache],
            ["cache", "list", "--cache", cache, "--json"],
            ["cache", "export", out, "--cache", cache],
            ["cache", "export", "--net", "alexnet", "--cache", cache, *GPU],
            ["cache", "export", "--net", "alexnet", "--cache", cache, *GPU, "--csv", out],
            ["plan", "--net", "alexnet", "--cache", cache, "--gpu", "NVIDIA H200"],
            ["plan", "--net", "alexnet", "--cache", cache, *GPU, "--json"],
            ["cache", "import", cache, "--cache", source],
            ["cache", "import", SHARED / "alexnet_default.csv", "--net", "alexnet", "--cache",
             cache, *GPU],
        ])
        if source in argv:
            db(source, mutate=False)
        writes = {source} if source in argv else ({cache} if argv[1] == "import" else set())
    return argv, writes, out, how


def _digests(folder):
    """{file: sha256} of every file in ``folder``."""
    out = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            out[os.path.join(folder, name)] = hashlib.sha256(f.read()).hexdigest()
    return out


@needs_shared
def test_fuzz_tables_and_caches(seeds, tmp_path):
    """Mutated layer lists, benchmark tables and caches, through every command that reads
    them: exit status 0 or 2, one error line, no traceback or hang, nothing lost or
    replaced (module docstring)."""
    seed, first, cases = fuzz_settings(SEED, DEFAULT_CASES)
    counts = {0: 0, 2: 0}
    t0 = time.monotonic()
    for k in range(first, first + cases):
        counts[_run_case(seeds, tmp_path, seed, k)] += 1
    print(f"fuzz of tables and caches: seed {seed}, {cases} cases, {counts[0]} ran, "
          f"{counts[2]} refused in one line, {time.monotonic() - t0:.1f} s")


#: (seed, case) of defects the fuzz found, replayed in every run: a cache's text printed with
#: its escape codes, text that is not UTF-8, a table's integer beyond 64 bits, damaged pages
#: that the open's check passes and a read finds, a layer list's count of 2^63 (a plan without
#: end), a table lacking one op of a layer
FOUND = [(1, 140), (1, 380), (3, 216), (5, 4), (7, 255), (5, 44), (10, 302), (10, 9), (5, 313)]


@needs_shared
@pytest.mark.parametrize("seed, case", FOUND)
def test_defects_found_stay_fixed(seeds, tmp_path, seed, case):
    _run_case(seeds, tmp_path, seed, case)


def _run_case(seeds, tmp_path, seed, k):
    """Case ``k`` of ``seed``, checked (module docstring); its exit status."""
    rng = random.Random(f"{seed}/{k}")          # each case its own: a case replays alone
    folder = str(tmp_path / f"case{k}")
    argv, writes, out, how = _case(rng, seeds, folder)
    where = (f"UCUDNN_FUZZ_SEED={seed} UCUDNN_FUZZ_FIRST={k} UCUDNN_FUZZ_CASES=1: "
             f"{[str(a) for a in argv]!r} ({how})")
    before = _digests(folder)
    rc, _ = run_case(argv, where)
    after = _digests(folder)
    may_write = writes | {out} if rc == 0 else set()
    assert set(after) - set(before) <= may_write, f"{where}: left {set(after) - set(before)}"
    for path, digest in before.items():
        if path.endswith(SIDECARS) and path not in after:
            continue                        # SQLite rolled back or checkpointed it
        assert path in after, f"{where}: {path} is gone"
        assert after[path] == digest or path in may_write, f"{where}: {path} changed"
    shutil.rmtree(folder)
    return rc
