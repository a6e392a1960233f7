"""The constants the core and the tables use agree with the cuDNN headers it was built with,
and the C API header agrees with the Python side."""
import re
from pathlib import Path

import pytest

from ucudnn import config
from ucudnn.vocab import ALGO_NAMES, DTYPES, MATH_MODES, OPTIMIZER_CODES, POLICY_CODES, Status


def _header_text(name):
    for d in config.build_config()["include_dirs"]:
        p = Path(d) / name
        if p.exists():
            return p.read_text()
    pytest.fail(f"{name} not found in the core's include dirs {config.build_config()['include_dirs']}")


def _enum_values(text):
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"\b(\w+)\s*=\s*(\d+)\b", text)}


def test_dtype_and_math_enums_match_cudnn():
    values = _enum_values(_header_text("cudnn_graph.h"))
    for name, code in {"float32": "CUDNN_DATA_FLOAT", "float64": "CUDNN_DATA_DOUBLE",
                       "float16": "CUDNN_DATA_HALF", "bfloat16": "CUDNN_DATA_BFLOAT16"}.items():
        assert DTYPES[name][0] == values[code], name
    for name, code in {"default": "CUDNN_DEFAULT_MATH", "tensor_op": "CUDNN_TENSOR_OP_MATH",
                       "tensor_op_allow_conversion": "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION",
                       "fma": "CUDNN_FMA_MATH"}.items():
        assert MATH_MODES[name] == values[code], name
    assert values["CUDNN_STATUS_SUCCESS"] == 0


def test_algorithm_counts_match_tables():
    """The shipped tables only name algorithms that exist in this cuDNN."""
    from importlib import resources
    from ucudnn.plan.table import read_table
    values = _enum_values(_header_text("cudnn_ops.h"))
    counts = {"fwd": values["CUDNN_CONVOLUTION_FWD_ALGO_COUNT"],
              "bwd_data": values["CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT"],
              "bwd_filter": values["CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT"]}
    assert counts == {"fwd": 8, "bwd_data": 6, "bwd_filter": 7}
    prefix = {"fwd": "CUDNN_CONVOLUTION_FWD_ALGO_", "bwd_data": "CUDNN_CONVOLUTION_BWD_DATA_",
              "bwd_filter": "CUDNN_CONVOLUTION_BWD_FILTER_"}
    for op, names in ALGO_NAMES.items():
        assert len(names) == counts[op], op
        for i, name in enumerate(names):
            full = prefix[op] + (name if name.startswith("ALGO_") else
                                 ("ALGO_" if op != "fwd" else "") + name)
            assert values[full] == i, full
    for net in ("alexnet", "resnet18"):
        with resources.as_file(resources.files("ucudnn") / "data" / "h200" / f"{net}_bench.csv") as p:
            for row in read_table(p):
                assert 0 <= row.algo < counts[row.op], row


def test_c_api_enums_match_python():
    text = (Path(config.get_include()) / "ucudnn_types.h").read_text()
    values = _enum_values(text)
    assert {v: k for k, v in POLICY_CODES.items()} == {
        "undivided": values["UCUDNN_UNDIVIDED"], "powerOfTwo": values["UCUDNN_POWER_OF_TWO"],
        "all": values["UCUDNN_ALL"]}
    assert OPTIMIZER_CODES == {values["UCUDNN_DP"]: "dp", values["UCUDNN_ILP"]: "ilp"}
    assert {s.name: int(s) for s in Status} == {
        n: values["UCUDNN_" + ("OK" if n == "OK" else "ERR_" + n)] for n in Status.__members__}
    assert (values["UCUDNN_FWD"], values["UCUDNN_BWD_DATA"], values["UCUDNN_BWD_FILTER"]) == (0, 1, 2)


def test_core_imports_without_gpu():
    """Building and importing need no GPU; only GPU calls fail, with a clear error."""
    from ucudnn import _core
    from ucudnn.measure import bench
    assert _core.cudnn_version() >= 90000
    if _core.device_count() == 0:
        with pytest.raises(bench.NoGpuError, match="no CUDA device"):
            bench.device_info()
