"""Quantities with units, parsed once at the YAML boundary into SI floats.

Everything inside kvsim is a plain float in SI units: seconds, bytes, FLOP, bytes/s,
FLOP/s, 1/s. Strings such as ``"96 GiB"``, ``"4 TB/s"``, ``"400 Gbit/s"``, ``"20/s"`` or
``"3 us"`` are accepted only in scenario and catalog files and converted here.

Binary (KiB, MiB, GiB, TiB = 2^10 ...) and decimal (kB, MB, GB, TB = 10^3 ...) prefixes are
different numbers, and bits are not bytes: ``"400 Gbit/s"`` is 50e9 bytes/s.

A byte quantity (a capacity, a reserve, an I/O size) always needs its unit: ``capacity: 96`` could
mean 96 bytes or 96 GB, so it is refused, and so is a bit unit (``"96 Gbit"``): capacities are
quoted in bytes. Bandwidths may be given in bits per second, as links are.
"""

from __future__ import annotations

import re

__all__ = ["Dimension", "UnitError", "parse_quantity", "format_quantity", "DIMENSIONS", "quantity_pattern",
           "EXAMPLES"]


class UnitError(ValueError):
    """A quantity string that cannot be read as the expected dimension."""


_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

_TIME = {
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9,
    "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    # Long spans (an amortisation period): a day is 86,400 s and a year 365 days (8,760 h), the
    # convention of hourly cost tables ("4 years" = 35,040 h); no leap days.
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "year": 365 * 86400.0, "years": 365 * 86400.0, "yr": 365 * 86400.0,
}


def _byte_units(bits: bool) -> dict[str, float]:
    table: dict[str, float] = {}
    for prefix, factor in {**_DECIMAL, **_BINARY}.items():
        table[f"{prefix}B"] = factor
        if bits:
            table[f"{prefix}bit"] = factor / 8.0
            if prefix and prefix not in _BINARY:
                table[f"{prefix}b"] = factor / 8.0  # "Gb" is gigabit, as in "400 Gb/s"
    return table


_BYTES = _byte_units(bits=False)
_BITS = {unit: factor for unit, factor in _byte_units(bits=True).items() if unit not in _BYTES}
"""Bit units: accepted per second (a link's bandwidth), refused for a byte quantity."""


def _rate_units(base: dict[str, float], per: dict[str, float]) -> dict[str, float]:
    return {f"{u}/{t}": f / pt for u, f in base.items() for t, pt in per.items()}


_PER_TIME = {"s": 1.0, "ms": 1e-3, "min": 60.0, "h": 3600.0}
_FLOP = {f"{p}FLOP": f for p, f in _DECIMAL.items()} | {f"{p}FLOPs": f for p, f in _DECIMAL.items()}
_FLOPS = (
    {f"{p}FLOPS": f for p, f in _DECIMAL.items()}
    | {f"{p}FLOP/s": f for p, f in _DECIMAL.items()}
    | {f"{p}OPS": f for p, f in _DECIMAL.items()}  # integer TOPS, as datasheets quote INT8
)


class Dimension:
    """A physical dimension: its name, its SI unit and the unit strings that map to it."""

    def __init__(self, name: str, si_unit: str, units: dict[str, float], allow_bare: bool):
        self.name = name
        self.si_unit = si_unit
        self.units = units
        self.allow_bare = allow_bare

    def __repr__(self) -> str:
        return f"Dimension({self.name!r}, {self.si_unit!r})"


DIMENSIONS: dict[str, Dimension] = {
    "bytes": Dimension("bytes", "B", _BYTES, allow_bare=False),
    "bandwidth": Dimension(
        "bandwidth", "B/s",
        _rate_units(_BYTES | _BITS, _PER_TIME) | {f"{p}bps": f / 8.0 for p, f in _DECIMAL.items() if p},
        allow_bare=False,
    ),
    "time": Dimension("time", "s", _TIME, allow_bare=False),
    "rate": Dimension(
        "rate", "1/s",
        {"/s": 1.0, "/ms": 1e3, "/min": 1 / 60.0, "/h": 1 / 3600.0, "Hz": 1.0, "req/s": 1.0,
         "req/min": 1 / 60.0, "1/s": 1.0}
        # I/O operations per second, as drive datasheets quote them: "2.5M IOPS", "250 kIOPS"
        | {f"{p}IOPS": f for p, f in _DECIMAL.items()},
        allow_bare=False,
    ),
    "flops": Dimension("flops", "FLOP/s", _FLOPS, allow_bare=False),
    "flop": Dimension("flop", "FLOP", _FLOP, allow_bare=True),
    "power": Dimension("power", "W", {f"{p}W": f for p, f in _DECIMAL.items()}, allow_bare=False),
}

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*(\S*(?:\s*/\s*\S+|\s+IOPS)?)\s*$")  # "1M IOPS" as datasheets


def parse_quantity(value: object, dimension: str) -> float:
    """Convert ``value`` to an SI float of the given dimension.

    Parameters
    ----------
    value : str, int or float
        A unit string such as ``"96 GiB"`` or ``"50 ms"``. Plain numbers are accepted as SI
        values only for dimensions where a bare number is unambiguous (bytes, FLOP).
    dimension : str
        One of the keys of :data:`DIMENSIONS`.

    Returns
    -------
    float
        The value in SI units (seconds, bytes, bytes/s, 1/s, FLOP/s, FLOP, W).

    Raises
    ------
    UnitError
        If the string is malformed or its unit belongs to another dimension.
    """
    dim = DIMENSIONS[dimension]
    if isinstance(value, bool):
        raise UnitError(f"expected a {dim.name} quantity such as {_example(dim)}, got {value!r}")
    if isinstance(value, (int, float)):
        if dim.allow_bare:
            return float(value)
        if dimension == "bytes":
            raise UnitError(_bare_bytes(value))
        raise UnitError(
            f"a bare number is ambiguous here; write the unit, e.g. {_example(dim)} (got {value!r})"
        )
    if not isinstance(value, str):
        raise UnitError(f"expected a {dim.name} quantity such as {_example(dim)}, got {value!r}")
    match = _QUANTITY.match(value)
    if not match:
        raise UnitError(f"cannot read {value!r} as a {dim.name} quantity such as {_example(dim)}")
    number, unit = float(match.group(1)), re.sub(r"\s+", "", match.group(2))
    if unit == "":
        if dim.allow_bare:
            return number
        if dimension == "bytes":
            raise UnitError(_bare_bytes(value))
        raise UnitError(f"{value!r} has no unit; write e.g. {_example(dim)}")
    if unit not in dim.units and dimension == "bytes" and unit in _BITS:
        bytes_ = number * _BITS[unit]
        raise UnitError(f"{value!r} is in bits; a byte quantity is written in bytes, e.g. "
                        f"{format_quantity(bytes_, 'bytes')} or {bytes_ / 1e9:g} GB")
    if unit not in dim.units:
        other = [d.name for d in DIMENSIONS.values() if unit in d.units]
        hint = f" ({unit!r} is a {other[0]} unit)" if other else ""
        raise UnitError(f"unknown {dim.name} unit {unit!r} in {value!r}{hint}; e.g. {_example(dim)}")
    return number * dim.units[unit]


_EXAMPLES = {
    "bytes": "'96 GiB'", "bandwidth": "'4 TB/s' or '400 Gbit/s'", "time": "'50 ms'",
    "rate": "'20/s'", "flops": "'148 TFLOPS'", "flop": "'2 GFLOP'", "power": "'400 W'",
}


def _bare_bytes(value: object) -> str:
    number = value.strip() if isinstance(value, str) else f"{value:g}"
    return (f"a byte quantity needs its unit: {value!r} could be bytes, GB or GiB; write e.g. "
            f"'{number} GiB', '{number} GB' or '{number} B'")


EXAMPLES = {
    "bytes": ["96 GiB", "48 GB", "4 KiB"], "bandwidth": ["4 TB/s", "400 Gbit/s", "64 GiB/s"],
    "time": ["3 us", "50 ms", "300 s"], "rate": ["20/s", "2.5M IOPS"], "flops": ["148 TFLOPS"],
    "flop": ["2 GFLOP"], "power": ["400 W"],
}
"""Quantities as a scenario file writes them, per dimension (shown by editors from the JSON Schema)."""

_PREFIX = r"(?:[kKMGTPE]|[KMGTP]i)?"
_PER = r"\s*/\s*(?:s|ms|min|h)"
_UNIT_PATTERNS = {
    "bytes": _PREFIX + "B",
    "bandwidth": rf"(?:{_PREFIX}(?:B|bit)|[kKMGTPE]b){_PER}|[kKMGTPE]bps",
    "time": r"s|sec|seconds?|ms|us|µs|μs|ns|min|minutes?|h|hours?|d|days?|years?|yr",
    "rate": r"(?:1|req)?\s*/\s*(?:s|ms|min|h)|Hz|[kKMGTPE]?\s*IOPS",
    "flops": r"[kKMGTPE]?(?:FLOPS|FLOP\s*/\s*s|OPS)",
    "flop": r"[kKMGTPE]?FLOPs?",
    "power": r"[kKMGTPE]?W",
}


def quantity_pattern(dimension: str, signed: bool = True) -> str:
    """A regular expression (ECMA-262 and Python alike) for the strings :func:`parse_quantity`
    reads as ``dimension``: a number, optional spaces, a unit (tests check it against the unit table).
    ``signed=False``: no minus sign (a quantity a scenario field refuses below zero)."""
    unit = _UNIT_PATTERNS[dimension]
    bare = "?" if DIMENSIONS[dimension].allow_bare else ""
    number = _NUMBER if signed else _NUMBER.replace("[-+]?", r"\+?", 1)
    return rf"^\s*{number}\s*(?:{unit}){bare}\s*$"


def _example(dim: Dimension) -> str:
    return _EXAMPLES[dim.name]


def format_quantity(value_si: float, dimension: str, digits: int = 3) -> str:
    """Render an SI float with a readable unit (decimal prefixes; bytes in GiB/MiB/KiB)."""
    if dimension == "bytes":
        for unit, factor in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
            if abs(value_si) >= factor:
                return f"{value_si / factor:.{digits}g} {unit}"
        return f"{value_si:.{digits}g} B"
    if dimension == "time":
        for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
            if abs(value_si) >= factor:
                return f"{value_si / factor:.{digits}g} {unit}"
        return f"{value_si / 1e-9:.{digits}g} ns"
    base = {"bandwidth": "B/s", "flops": "FLOP/s", "rate": "/s", "flop": "FLOP", "power": "W"}[dimension]
    for prefix, factor in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value_si) >= factor and dimension != "rate":
            return f"{value_si / factor:.{digits}g} {prefix}{base}"
    return f"{value_si:.{digits}g} {base}"
