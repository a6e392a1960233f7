"""Byte sizes with units."""
import pytest

from ucudnn import vocab
from ucudnn.vocab import UNLIMITED, format_size, parse_size


@pytest.mark.parametrize("text, value", [
    ("64MiB", 64 << 20), ("8 MiB", 8 << 20), ("1GiB", 1 << 30), ("1.5KiB", 1536),
    ("512", 512), ("0", 0), ("2kB", 2048), ("3MB", 3 << 20), ("64M", 64 << 20), ("1gb", 1 << 30),
    ("7b", 7),
    (" 4 mib ", 4 << 20), ("unlimited", UNLIMITED), ("none", UNLIMITED), ("inf", UNLIMITED),
    ("0.5MiB", 512 << 10), (123, 123),
])
def test_parse(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text, match", [
    ("64XB", "cannot parse '64XB'"), ("", "cannot parse"), ("MiB", "cannot parse"),
    ("-1", "must not be negative"), ("-8MiB", "must not be negative"), (-5, "must not be negative"),
    ("0.3B", "not a whole number"), (True, "expected a byte size"), ("1e3", "cannot parse"),
])
def test_parse_errors_name_the_field(text, match):
    with pytest.raises(ValueError, match=match) as e:
        parse_size(text, "--limit")
    assert str(e.value).startswith("--limit: ")


@pytest.mark.parametrize("n, text", [
    (0, "0B"), (1023, "1023B"), (1024, "1.0KiB"), (64 << 20, "64.0MiB"), (3 << 29, "1.5GiB"),
    (UNLIMITED, "unlimited"),
])
def test_format(n, text):
    assert format_size(n) == text


# -- enumerations (Note [Enum spellings]) -------------------------------------------------------

def test_choices_codes_and_proto_spellings():
    from ucudnn.vocab import DTYPE, DTYPE_CODES, MATH, MATH_NAMES, OPTIMIZER, POLICY
    assert [POLICY(i) for i in range(3)] == ["undivided", "powerOfTwo", "all"]
    assert POLICY.code("POWER_OF_TWO") == 1 and OPTIMIZER.code("Shared") == 2
    assert POLICY.proto["powerOfTwo"] == "POWER_OF_TWO" and MATH.proto["fma"] == "FMA"
    assert MATH.code("FMA") == 3 and MATH_NAMES[3] == "fma"
    assert DTYPE("double") == "float64" and DTYPE_CODES[9] == "bfloat16"
    with pytest.raises(ValueError, match=r"^--optimizer: unknown optimizer 'greedy' \(expected "
                                         r"one of dp, ilp, shared\)"):
        OPTIMIZER("greedy", "--optimizer")
    with pytest.raises(ValueError, match="unknown policy True"):
        POLICY(True)                       # a bool is no code


def test_normalise_policy_is_a_plan_error_naming_the_field():
    from ucudnn.vocab import PlanError, normalise_policy
    assert normalise_policy("power_of_two") == "powerOfTwo" and normalise_policy(2) == "all"
    with pytest.raises(PlanError, match="^ucudnn_param.policy: unknown policy 'FOO'"):
        normalise_policy("FOO", "ucudnn_param.policy")


def test_operands_follow_the_ops():
    from ucudnn.vocab import OP_CODES, OPERANDS, OPS
    assert list(OPERANDS) == list(OPS) == ["fwd", "bwd_data", "bwd_filter"]
    assert OPERANDS["bwd_data"] == ("w", "dy", "dx") and OP_CODES["bwd_filter"] == 2


@pytest.mark.parametrize("engine, knobs, text", [
    (12, [(7, 0), (3, 1)], "eng12[k3=1,k7=0]"), (0, [], "eng0"), (5, [(2, -1)], "eng5[k2=-1]")])
def test_engine_text_round_trips(engine, knobs, text):
    from ucudnn.vocab import engine_text, parse_engine
    assert engine_text(engine, knobs) == text
    assert parse_engine(text) == (engine, tuple(sorted(knobs)))


@pytest.mark.parametrize("text", ["", "eng", "engX", "eng1[]", "eng1[k=1]", "eng1[k1=1,]",
                                  "IMPLICIT_GEMM", "eng1[k1=1] "])
def test_engine_text_errors_name_the_field(text):
    from ucudnn.vocab import InputError, parse_engine
    with pytest.raises(InputError, match="field 'engine': .* is not an engine config"):
        parse_engine(text)


def test_a_slab_choice_is_its_config_over_pieces():
    """Note [Choices]: ``<config>/P`` runs the config over P slabs; its engine is the
    config's, and P lies in 2..MAX_SLABS."""
    from ucudnn.vocab import (MAX_SLABS, InputError, parse_engine, slab_choice,
                              split_slabs)
    assert slab_choice("eng22[k2=16,k13=0]", 4) == "eng22[k2=16,k13=0]/4"
    assert split_slabs("eng22[k2=16,k13=0]/4") == ("eng22[k2=16,k13=0]", 4)
    assert split_slabs("eng3") == ("eng3", 1)
    assert parse_engine("eng22[k2=16]/4") == parse_engine("eng22[k2=16]") == (22, ((2, 16),))
    for bad in ("eng3/1", "eng3/0", f"eng3/{MAX_SLABS + 1}", "eng3/x", "eng3/2/2", "/2"):
        with pytest.raises(InputError, match="field 'engine'"):
            split_slabs(bad)
    with pytest.raises(InputError, match="over 1 slabs"):
        slab_choice("eng3", 1)
    with pytest.raises(InputError, match="over 2 slabs"):
        slab_choice("eng3/2", 2)


def test_numerical_notes_by_name():
    from ucudnn.vocab import WINOGRAD_NOTES, note_names
    assert note_names(0) == ()
    assert note_names(1 | 1 << 3) == ("TENSOR_CORE", "FFT")
    assert note_names(WINOGRAD_NOTES) == ("WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6",
                                          "WINOGRAD_TILE_13x13")
    assert note_names(1 << 12) == ("note 12",)


def test_half_precision_defaults_to_tensor_op_math():
    from ucudnn.vocab import MATH_MODES, default_math
    assert default_math("float16") == default_math("bfloat16") == "tensor_op"
    assert default_math("float32") == default_math("float64") == "default"
    assert all(default_math(d) in MATH_MODES for d in ("float16", "float32"))


def _build_from(ws):
    """A build over ``ws`` (engine -> workspace bytes, None: fails), recording the calls."""
    calls = []

    def build(engine):
        calls.append(engine)
        return ws[engine]
    return build, calls


def test_configs_within_the_cap_walk_the_ranking_past_what_does_not_fit():
    """Note [Graph choices within the cap]: the six fastest-ranked need more than the cap;
    the search goes on to the ones that fit, keeps a failed build as its record, and stops
    once enough fit, in the cap and in each tier below it."""
    MiB = 1 << 20
    ranked = [f"eng{i}" for i in range(14)]
    ws = {e: 512 * MiB for e in ranked[:6]}
    ws.update({"eng6": None, "eng7": 0, "eng8": 300 * MiB, "eng9": 64 * MiB,
               "eng10": 256 * MiB, "eng11": 0, "eng12": 1, "eng13": 1})
    build, calls = _build_from(ws)
    got = vocab.configs_within(ranked, build, 3, 256 * MiB, tiers=(0, 64 * MiB), per_tier=1)
    assert got == [("eng6", None), ("eng7", 0), ("eng9", 64 * MiB), ("eng10", 256 * MiB)]
    assert calls == ranked[:11]                     # what follows eng10 was not needed
    build, calls = _build_from(ws)                  # two in the 0-byte tier: eng7, eng11
    got = vocab.configs_within(ranked, build, 3, 256 * MiB, tiers=(0,), per_tier=2)
    assert [e for e, _ in got] == ["eng6", "eng7", "eng9", "eng10", "eng11"]
    build, calls = _build_from(ws)
    assert vocab.configs_within(ranked, build, 2, 8 << 30, tiers=()) == [
        ("eng0", 512 * MiB), ("eng1", 512 * MiB)]
    assert calls == ["eng0", "eng1"]                # without a binding cap: the first two


def test_configs_within_the_cap_stop_after_six_times_the_configs_built():
    ranked = [f"eng{i}" for i in range(30)]
    build, calls = _build_from({e: 10 for e in ranked})
    assert vocab.configs_within(ranked, build, 2, 5) == [] and len(calls) == 12
    build, calls = _build_from({e: 10 for e in ranked})
    assert len(vocab.configs_within(ranked, build, 0, 10)) == 30    # 0: no limit


@pytest.mark.parametrize("seed", range(40))
def test_configs_within_the_cap_as_brute_force(seed):
    """Against the rule read as sets: within the walked prefix, the union over the cap and
    each tier below it of the first configs (as many as its quota) that fit it, with the
    failed builds; the prefix ends where the last quota fills, or at the build bound."""
    import random
    rng = random.Random(seed)
    ranked = [f"e{i}" for i in range(rng.randint(0, 40))]
    ws = {e: rng.choice([None, 0, 10, 100, 1000]) for e in ranked}
    cap, most = rng.choice([0, 10, 100, 1000]), rng.randint(0, 6)
    tiers, per = sorted(rng.sample([0, 5, 10, 50, 100], rng.randint(0, 3))), rng.randint(1, 3)
    quota = {t: per for t in tiers if t < cap}
    quota[cap] = most

    def firsts(seq, t):
        return [e for e in seq if ws[e] is not None and ws[e] <= t][:quota[t]]
    prefix = ranked
    if most:
        for n in range(len(ranked) + 1):
            if n == 6 * most or all(len(firsts(ranked[:n], t)) == q for t, q in quota.items()):
                prefix = ranked[:n]
                break
        chosen = set().union(*(firsts(prefix, t) for t in quota))
    else:
        chosen = {e for e in prefix if ws[e] is not None and ws[e] <= cap}
    want = [(e, ws[e]) for e in prefix if ws[e] is None or e in chosen]
    build, calls = _build_from(ws)
    assert vocab.configs_within(ranked, build, most, cap, tiers, per) == want
    assert calls == prefix
