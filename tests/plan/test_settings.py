"""The one settings record (ucudnn.plan.settings.PlanSettings): Caffe's defaults, checked
values naming the field, every spelling of an enumeration, candidate sizes, the budget."""
import dataclasses

import pytest

from ucudnn.plan.settings import (DEFAULT_LIMIT, DEFAULTS, FIND_REPEATS, PlanSettings,
                                  candidate_sizes)
from ucudnn.vocab import InputError, PlanError

MiB = 1 << 20


def test_defaults_are_caffes():
    """Note [Default settings]: stock Caffe's 8 MiB per cuDNN call, powerOfTwo, the DP,
    cuDNN's default math, one cudnnFind per size, float32 NCHW with both families of choices
    (measured faster than the legacy algorithms alone in Caffe on the H200)."""
    assert DEFAULT_LIMIT == 8 * 1024 * 1024
    assert DEFAULTS == PlanSettings()
    assert (DEFAULTS.policy, DEFAULTS.sizes, DEFAULTS.limit, DEFAULTS.budget, DEFAULTS.optimizer,
            DEFAULTS.math, DEFAULTS.dtype, DEFAULTS.repeats, DEFAULTS.search,
            DEFAULTS.exclude_winograd, DEFAULTS.cache_path, DEFAULTS.engines,
            DEFAULTS.layout) == ("powerOfTwo", None, 8 * MiB, None, "dp", "default", "float32",
                                 FIND_REPEATS, None, False, None, "both", "NCHW")
    assert FIND_REPEATS == 1


def test_defaults_are_what_an_empty_ucudnn_param_means():
    """``ucudnn_param {}`` in a prototxt (caffe.proto's defaults) means DEFAULTS: ucudnn plan
    predicts what Caffe runs."""
    from ucudnn.caffe.params import settings_of
    from ucudnn.caffe.proto import load_caffe_pb2
    pb2 = load_caffe_pb2()
    assert settings_of(pb2.UcudnnParameter(), "net") == DEFAULTS


@pytest.mark.parametrize("field, values, canonical", [
    ("policy", ["powerOfTwo", "POWER_OF_TWO", "power_of_two", "poweroftwo", "Power-Of-Two", 1],
     "powerOfTwo"),
    ("policy", ["all", "ALL", 2], "all"),
    ("optimizer", ["shared", "SHARED", "Shared", 2], "shared"),
    ("math", ["fma", "FMA", 3], "fma"),
    ("math", ["default", "DEFAULT_MATH", "default_math", 0], "default"),
    ("math", ["tensor_op", "TENSOR_OP", "tensorOp", 1], "tensor_op"),
    ("dtype", ["float16", "half", "FLOAT16", 2], "float16"),
    ("dtype", ["float64", "double", 1], "float64"),
    ("search", ["pruned", "PRUNED", "Pruned"], "pruned"),
    ("engines", ["legacy", "LEGACY", 0], "legacy"),
    ("engines", ["graph", "GRAPH", 1], "graph"),
    ("engines", ["both", "BOTH", 2], "both"),
    ("layout", ["NCHW", "nchw", 0], "NCHW"),
    ("layout", ["NHWC", "nhwc", 1], "NHWC"),
])
def test_enumerations_in_any_spelling(field, values, canonical):
    """Note [Enum spellings]: what is stored is the canonical name."""
    for v in values:
        assert getattr(PlanSettings(**{field: v}), field) == canonical, v


@pytest.mark.parametrize("kw, match", [
    (dict(policy="fast"), r"^policy: unknown policy 'fast' \(expected one of undivided, "
                          r"powerOfTwo, all\)"),
    (dict(optimizer="greedy"), r"^optimizer: unknown optimizer 'greedy'"),
    (dict(optimizer=7), r"^optimizer: unknown optimizer 7"),
    (dict(math="fast"), r"^math: unknown math mode 'fast'"),
    (dict(dtype="int8"), r"^dtype: unknown dtype 'int8'"),
    (dict(search="greedy"), r"^search: unknown search 'greedy'"),
    (dict(engines="fastest"), r"^engines: unknown engine family 'fastest'"),
    (dict(layout="NCWH"), r"^layout: unknown layout 'NCWH'"),
    (dict(limit=-1), r"^limit: size must not be negative"),
    (dict(limit="lots"), r"^limit: cannot parse 'lots' as a byte size"),
    (dict(budget=-5), r"^budget: size must not be negative"),
    (dict(sizes=(0, 4)), r"^sizes: micro-batch sizes must be positive integers, got \[0, 4\]"),
    (dict(sizes=()), r"^sizes: micro-batch sizes must be positive integers, got \[\]"),
    (dict(sizes=(2.5,)), r"^sizes: micro-batch sizes must be positive integers"),
    (dict(repeats=0), r"^repeats: must be a positive integer, got 0"),
    (dict(repeats=True), r"^repeats: must be a positive integer, got True"),
])
def test_bad_values_name_the_field(kw, match):
    with pytest.raises(InputError, match=match):
        PlanSettings(**kw)


def test_values_are_normalised():
    s = PlanSettings(limit="64MiB", budget="1GiB", sizes=[64, 8, 8, 32], cache_path="",
                     exclude_winograd=1)
    assert (s.limit, s.budget, s.sizes, s.cache_path, s.exclude_winograd) == (
        64 * MiB, 1 << 30, (8, 32, 64), None, True)
    assert PlanSettings(budget=0).budget == 0          # a set budget is that many bytes
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.limit = 1
    # replace() checks again
    assert s.replace(policy="ALL").policy == "all"
    with pytest.raises(InputError, match="^policy: unknown"):
        s.replace(policy="fast")


def test_budget_and_net_wide_optimizers():
    """Note [Workspace budget]: unset, limit x calls; set, that many bytes (0 included)."""
    assert PlanSettings(limit=8 * MiB).budget_for(23) == 23 * 8 * MiB
    assert PlanSettings(budget=5).budget_for(23) == 5
    assert PlanSettings(budget=0).budget_for(23) == 0
    assert not PlanSettings().netwide
    assert PlanSettings(optimizer="ilp").netwide and PlanSettings(optimizer="shared").netwide


def test_candidate_sizes():
    assert candidate_sizes("undivided", 12) == [12]
    assert candidate_sizes("powerOfTwo", 12) == [1, 2, 4, 8, 12]
    assert candidate_sizes("powerOfTwo", 16) == [1, 2, 4, 8, 16]
    assert candidate_sizes("all", 5) == [1, 2, 3, 4, 5]
    assert candidate_sizes("all", 5, sizes=[3, 1]) == [1, 3, 5]            # N always
    assert candidate_sizes("POWER_OF_TWO", 1) == [1]
    assert PlanSettings(sizes=(2, 4)).candidate_sizes(8) == [2, 4, 8]
    assert PlanSettings(policy="undivided").candidate_sizes(8) == [8]


def test_explicit_size_larger_than_the_batch_is_refused():
    """An explicit size above the mini-batch is an error naming where, not a size left
    out silently."""
    with pytest.raises(PlanError, match=r"^layer 'c': micro_batch_size 9 is larger than the "
                                        r"mini-batch \(5\)"):
        candidate_sizes("all", 5, sizes=[3, 9, 1], where="layer 'c'")
    with pytest.raises(PlanError, match=r"^micro_batch_size 16 is larger than the mini-batch"):
        PlanSettings(sizes=(16, 32)).candidate_sizes(8)
    with pytest.raises(PlanError, match="batch: mini-batch size must be a positive integer"):
        candidate_sizes("all", 0)
    with pytest.raises(PlanError, match=r"sizes must be positive integers, got \[0\]"):
        candidate_sizes("all", 4, sizes=[0, 2])
