"""Tests for kvsim.units: unit strings at the YAML boundary -> SI floats, and back."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.units import UnitError, format_quantity, parse_quantity

# ---------------------------------------------------------------------------------------------
# bytes: decimal and binary prefixes are different numbers; a byte quantity needs its unit
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("96 GB", 96e9),
        ("96 GiB", 96 * 2**30),
        ("48GB", 48e9),  # no space between number and unit
        ("  2 TiB  ", 2 * 2**40),  # surrounding whitespace ignored
        ("3.84 TB", 3.84e12),
        ("1 kB", 1e3),
        ("1 KiB", 1024.0),
        ("1.5 MiB", 1.5 * 2**20),
        (".5 GiB", 0.5 * 2**30),
        ("1e3 GB", 1e12),  # scientific notation for the number
        ("512 B", 512.0),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_quantity(text, "bytes") == pytest.approx(expected, rel=1e-15)


def test_gb_and_gib_differ_by_the_binary_factor():
    # The classic capacity mistake: 96 GiB is 7.4% more than 96 GB.
    ratio = parse_quantity("96 GiB", "bytes") / parse_quantity("96 GB", "bytes")
    assert ratio == pytest.approx(2**30 / 1e9, rel=1e-15)


@pytest.mark.parametrize("value", [0, 1024, 96e9, 2.5, "96", " 1000 "])
def test_bare_numbers_of_bytes_are_refused(value):
    # "capacity: 96" once meant 96 bytes, silently; it could as well be meant as GB or GiB
    with pytest.raises(UnitError) as info:
        parse_quantity(value, "bytes")
    message = str(info.value)
    assert "needs its unit" in message and "GiB" in message and "GB" in message


@pytest.mark.parametrize("text, gb", [("96 Gbit", 12), ("8 Gb", 1), ("64 kbit", 8e-6), ("1 Tibit", 2**40 / 8e9)])
def test_bit_units_are_refused_for_bytes_with_the_byte_figure(text, gb):
    # a capacity is quoted in bytes; bits are the unit of links
    with pytest.raises(UnitError) as info:
        parse_quantity(text, "bytes")
    message = str(info.value)
    assert "bits" in message and f"{gb:g} GB" in message


@pytest.mark.parametrize("text", ["1M IOPS", "1 MIOPS", "1e6 IOPS", "1000 kIOPS"])
def test_iops_as_datasheets_write_them(text):
    assert parse_quantity(text, "rate") == 1e6


def test_bit_units_still_work_for_bandwidth():
    assert parse_quantity("96 Gbit/s", "bandwidth") == 12e9
    assert parse_quantity("8 Kibit/s", "bandwidth") == 1024.0


# ---------------------------------------------------------------------------------------------
# bandwidth
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4 TB/s", 4e12),
        ("4 TB / s", 4e12),
        ("864 GB/s", 864e9),
        ("64 GiB/s", 64 * 2**30),
        ("400 Gbit/s", 50e9),  # 400 / 8
        ("400 Gb/s", 50e9),
        ("100 Gbps", 12.5e9),
        ("13000 MB/s", 13e9),
        ("1 MB/ms", 1e9),  # per millisecond
        ("60 GB/min", 1e9),
    ],
)
def test_parse_bandwidth(text, expected):
    assert parse_quantity(text, "bandwidth") == pytest.approx(expected, rel=1e-15)


def test_gigabit_and_gigabyte_per_second_differ_by_eight():
    assert parse_quantity("400 GB/s", "bandwidth") == 8 * parse_quantity("400 Gb/s", "bandwidth")


# ---------------------------------------------------------------------------------------------
# time, rate, flops
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("50 ms", 0.05),
        ("3 us", 3e-6),
        ("3 µs", 3e-6),
        ("10 ns", 1e-8),
        ("2 min", 120.0),
        ("1.5 h", 5400.0),
        ("300 s", 300.0),
    ],
)
def test_parse_time(text, expected):
    assert parse_quantity(text, "time") == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("20/s", 20.0),
        ("20 /s", 20.0),
        ("60/min", 1.0),
        ("3600/h", 1.0),
        ("5 req/s", 5.0),
        ("2/ms", 2000.0),
    ],
)
def test_parse_rate(text, expected):
    assert parse_quantity(text, "rate") == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("148 TFLOPS", 148e12),
        ("119.5 TFLOPS", 119.5e12),
        ("1 PFLOPS", 1e15),
        ("989 TFLOP/s", 989e12),
        ("296 TOPS", 296e12),  # INT8 datasheet figures
    ],
)
def test_parse_flops(text, expected):
    assert parse_quantity(text, "flops") == pytest.approx(expected, rel=1e-15)


def test_flop_count_is_a_different_dimension_from_flop_rate():
    assert parse_quantity("2 GFLOP", "flop") == 2e9
    with pytest.raises(UnitError):
        parse_quantity("2 GFLOP", "flops")


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dimension", ["time", "rate", "bandwidth", "flops"])
@pytest.mark.parametrize("value", [5, 5.0, "5"])
def test_bare_numbers_refused_where_ambiguous(dimension, value):
    # "timeout: 5" could be seconds or milliseconds; the reader must say which.
    with pytest.raises(UnitError) as info:
        parse_quantity(value, dimension)
    message = str(info.value)
    # The message must show how to write it properly: each dimension's example unit.
    example = {"time": "ms", "rate": "/s", "bandwidth": "TB/s", "flops": "TFLOPS"}[dimension]
    assert example in message


@pytest.mark.parametrize(
    "value",
    ["fast", "", "GB 96", "1.2.3 GB", "96 GB extra", "1e GB", "ninety GB", None, [96, "GB"], True],
)
def test_malformed_values_raise_unit_error_naming_the_input(value):
    with pytest.raises(UnitError) as info:
        parse_quantity(value, "bytes")
    message = str(info.value)
    assert repr(value) in message  # the offending input is quoted back
    assert "GiB" in message  # and an example of the expected form is given


def test_unit_error_is_a_value_error():
    # Callers that catch ValueError (e.g. pydantic validators) see unit problems too.
    assert issubclass(UnitError, ValueError)


@pytest.mark.parametrize(
    "text, dimension, other_dimension",
    [
        ("50 ms", "bytes", "time"),
        ("96 GB", "bandwidth", "bytes"),
        ("4 TB/s", "bytes", "bandwidth"),
        ("20/s", "time", "rate"),
        ("148 TFLOPS", "bandwidth", "flops"),
        ("400 W", "flops", "power"),
    ],
)
def test_wrong_dimension_unit_names_the_dimension_it_belongs_to(text, dimension, other_dimension):
    with pytest.raises(UnitError) as info:
        parse_quantity(text, dimension)
    message = str(info.value)
    assert f"is a {other_dimension} unit" in message
    assert text in message


def test_unknown_unit_is_named():
    with pytest.raises(UnitError) as info:
        parse_quantity("5 parsecs", "time")
    assert "'parsecs'" in str(info.value)


# ---------------------------------------------------------------------------------------------
# format_quantity
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, dimension, expected",
    [
        (96 * 2**30, "bytes", "96 GiB"),
        (512.0, "bytes", "512 B"),
        (0.05, "time", "50 ms"),
        (3e-6, "time", "3 us"),
        (2.5e-9, "time", "2.5 ns"),
        (4e12, "bandwidth", "4 TB/s"),
        (148e12, "flops", "148 TFLOP/s"),
        (20.0, "rate", "20 /s"),
        (400.0, "power", "400 W"),
    ],
)
def test_format_quantity_readable(value, dimension, expected):
    assert format_quantity(value, dimension) == expected


def test_format_quantity_digits():
    # 96 GB = 89.40696... GiB
    assert format_quantity(96e9, "bytes", digits=3) == "89.4 GiB"
    assert format_quantity(96e9, "bytes", digits=6) == "89.407 GiB"


# The round trip loses only the rounding to `digits` significant digits: a relative error of at
# most half a unit in the 3rd digit, i.e. 0.5 / 100 = 5e-3 (the mantissa is >= 1.00).
_ROUND_TRIP_REL = 5e-3
_RANGES = {
    "bytes": (1e-3, 1e18),
    "bandwidth": (1e-3, 1e16),
    "time": (1e-12, 1e7),
    "rate": (1e-6, 1e9),
    "flops": (1.0, 1e19),
    "flop": (1.0, 1e20),
    "power": (1.0, 9.99e5),  # megawatts are tested separately below
}


@settings(derandomize=True, max_examples=300, deadline=None)
@given(data=st.data())
def test_format_then_parse_round_trips(data):
    dimension = data.draw(st.sampled_from(sorted(_RANGES)))
    low, high = _RANGES[dimension]
    value = data.draw(st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False))
    text = format_quantity(value, dimension)
    assert parse_quantity(text, dimension) == pytest.approx(value, rel=_ROUND_TRIP_REL)


@pytest.mark.parametrize("dimension", sorted(_RANGES))
def test_zero_round_trips(dimension):
    assert parse_quantity(format_quantity(0.0, dimension), dimension) == 0.0


@pytest.mark.parametrize("watts", [1.2e6, 30e6, 1.5e9])
def test_large_power_round_trips(watts):
    # A cluster of a few thousand 400-700 W cards draws megawatts, a fleet total can reach
    # gigawatts; whatever prefix format_quantity chooses must be one parse_quantity reads back.
    text = format_quantity(watts, "power")
    assert parse_quantity(text, "power") == pytest.approx(watts, rel=_ROUND_TRIP_REL)
