"""Byte sizes with units: ``64MiB``, ``8 MB``, ``512``, ``unlimited``.

Binary prefixes (KiB, MiB, GiB, TiB) are powers of 1024, SI prefixes (kB, MB, GB, TB)
powers of 1000, as ``nvidia-smi`` and cuDNN's documentation use them.
"""
from __future__ import annotations

import re

__all__ = ["parse_size", "format_size", "UNLIMITED"]

#: Workspace limit that admits every algorithm.
UNLIMITED = 2**62

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int, what: str = "size") -> int:
    """Parse a byte count; ``what`` names the field in the error message."""
    if isinstance(text, bool):
        raise ValueError(f"{what}: expected a byte size, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{what}: size must not be negative, got {text}")
        return text
    s = str(text).strip()
    if s.lower() in ("unlimited", "inf", "none"):
        return UNLIMITED
    if s.startswith("-"):
        raise ValueError(f"{what}: size must not be negative, got {text!r}")
    m = _SIZE_RE.match(s)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(
            f"{what}: cannot parse {text!r} as a byte size "
            "(examples: 8MiB, 512MiB, 1GiB, 1048576, unlimited)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value != int(value):
        raise ValueError(f"{what}: {text!r} is not a whole number of bytes")
    return int(value)


def format_size(n: int) -> str:
    """Short human form: ``64.0MiB``, ``1.5GiB``, ``0B``, ``unlimited``."""
    if n >= UNLIMITED:
        return "unlimited"
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"
