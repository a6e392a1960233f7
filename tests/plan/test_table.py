"""Benchmark tables: reading, writing, grouping, errors naming file, line and field."""
import pytest

from repo_paths import SHARED, needs_shared
from ucudnn.plan.table import (AlgoPerf, BenchRow, TableError, group_by_kernel, parse_table,
                               read_table, rows_from_kernel, write_table)

GOOD = """# a comment
layer,op,batch,algo,time_ms,ws_bytes,math
conv1,fwd,1,0,0.05200,0,0
conv1,fwd,1,1,0.04000,1024,1

conv1,bwd_filter,2,3,0.5,64,0
"""


def test_parse_and_group():
    rows = parse_table(GOOD)
    assert rows[0] == BenchRow("conv1", "fwd", 1, 0, 0.052, 0, 0)
    g = group_by_kernel(rows)
    assert set(g) == {("conv1", "fwd"), ("conv1", "bwd_filter")}
    assert g["conv1", "fwd"][1] == [AlgoPerf(1, 0.04, 1024, 1), AlgoPerf(0, 0.052, 0, 0)]


def test_empty_math_field_means_default():
    rows = parse_table("layer,op,batch,algo,time_ms,ws_bytes,math\nc,fwd,4,1,1.0,8,\n")
    assert rows == [BenchRow("c", "fwd", 4, 1, 1.0, 8, 0)]


def test_write_read_round_trip(tmp_path):
    rows = parse_table(GOOD)
    out = tmp_path / "t.csv"
    write_table(out, rows)
    assert read_table(out) == rows
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]      # no temporary left
    assert rows_from_kernel("conv1", "fwd", group_by_kernel(rows)["conv1", "fwd"]) == \
        sorted(rows[:2], key=lambda r: r.time_ms)


@needs_shared
def test_shared_tables_parse():
    for name in ("alexnet_default.csv", "alexnet_fma.csv", "resnet18_default.csv"):
        g = group_by_kernel(read_table(SHARED / name))
        assert all(256 in bench and 1 in bench for bench in g.values()), name
        assert len(g) == (15 if name.startswith("alexnet") else 33)


@pytest.mark.parametrize("body, match", [
    ("conv1,fwd,x,0,0.1,0,0", r"t.csv:2: field 'batch': cannot parse 'x'"),
    ("conv1,fwd,1,0,0.1,0", r"t.csv:2: 6 fields, header has 7"),
    ("conv1,fwdd,1,0,0.1,0,0", r"t.csv:2: field 'op': 'fwdd' is not one of"),
    ("conv1,fwd,0,0,0.1,0,0", r"t.csv:2: field 'batch': must be from 1 to 9223372036854775807"),
    # a cache's INTEGER columns hold 64 bits: larger values are refused where they are read
    (f"conv1,fwd,{2**63},0,0.1,0,0", r"t.csv:2: field 'batch': must be from 1 to "),
    (f"conv1,fwd,1,{2**63},0.1,0,0", r"t.csv:2: field 'algo': must be an integer of 64 bits"),
    (f"conv1,fwd,1,0,0.1,{2**63},0", r"t.csv:2: field 'ws_bytes': must be an integer from 0 to "),
    (f"conv1,fwd,1,0,0.1,0,{-2**63 - 1}", r"t.csv:2: field 'math': must be an integer of 64 "),
    ("conv1,fwd,1,-1,0.1,0,0", r"t.csv:2: field 'algo'"),
    ("conv1,fwd,1,0,nan,0,0", r"t.csv:2: field 'time_ms'"),
    ("conv1,fwd,1,0,-0.1,0,0", r"t.csv:2: field 'time_ms'"),
    ("conv1,fwd,1,0,0.1,-4,0", r"t.csv:2: field 'ws_bytes'"),
    (",fwd,1,0,0.1,0,0", r"t.csv:2: field 'layer' is empty"),
    ("", r"t.csv: the table holds no measurements"),
])
def test_errors_name_file_line_and_field(tmp_path, body, match):
    p = tmp_path / "t.csv"
    p.write_text("layer,op,batch,algo,time_ms,ws_bytes,math\n" + body + "\n")
    with pytest.raises(TableError, match=match):
        read_table(p)


def test_header_errors():
    with pytest.raises(TableError, match=r"<table>:1: header lacks column\(s\) ws_bytes"):
        parse_table("layer,op,batch,algo,time_ms\nc,fwd,1,0,1\n")
    with pytest.raises(TableError, match="no measurements"):
        parse_table("")


def test_engine_configs_round_trip_in_an_eighth_column(tmp_path):
    from ucudnn.plan.table import BenchRow, parse_table, write_table
    rows = [BenchRow("c", "fwd", 4, 1, 0.5, 0, 0),
            BenchRow("c", "fwd", 4, -1, 0.25, 1024, 0, "eng12[k3=1]")]
    path = tmp_path / "t.csv"
    write_table(path, rows)
    assert path.read_text().splitlines()[0].endswith(",math,engine")
    assert parse_table(path.read_text()) == rows
    legacy_only = tmp_path / "l.csv"
    write_table(legacy_only, rows[:1])
    assert legacy_only.read_text().splitlines()[0].endswith(",ws_bytes,math")


@pytest.mark.parametrize("line, match", [
    ("c,fwd,4,2,0.5,0,0,eng1", r"t.csv:2: field 'algo': an engine config's is -1, got 2"),
    ("c,fwd,4,-1,0.5,0,0,ALGO_1", r"t.csv:2: field 'engine': 'ALGO_1' is not an engine"),
    ("c,fwd,4,-1,0.5,0,0,", r"t.csv:2: field 'algo': must be >= 0, got -1")])
def test_engine_column_errors_name_line_and_field(tmp_path, line, match):
    from ucudnn.plan.table import TableError, read_table
    path = tmp_path / "t.csv"
    path.write_text("layer,op,batch,algo,time_ms,ws_bytes,math,engine\n" + line + "\n")
    with pytest.raises(TableError, match=match):
        read_table(path)
