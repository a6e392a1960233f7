"""Byte sizes with units."""
import pytest

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
