"""Strict unit parsing: decimal vs binary prefixes, dimensions, ambiguity and bare numbers."""

import pytest

from hwmodels.spec import SpecError
from hwmodels.units import UnitError, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("3.35 TB/s", "B/s", 3.35e12),
        ("900 GB/s", "B/s", 9.0e11),
        ("4529 GiB/s", "B/s", 4529 * 2**30),
        ("1600 Gbit/s", "B/s", 2.0e11),
        ("50 MiB", "B", 50 * 2**20),
        ("80 GB", "B", 8.0e10),
        ("96 KiB", "B", 98304.0),
        ("1.98 GHz", "Hz", 1.98e9),
        ("1410 MHz", "Hz", 1.41e9),
        ("700 W", "W", 700.0),
        ("989.4 TFLOP/s", "FLOP/s", 989.4e12),
        ("989.4 TFLOPS", "FLOP/s", 989.4e12),
        ("624 TOP/s", "FLOP/s", 624e12),
        ("1.5 us", "s", 1.5e-6),
        ("1.5 µs", "s", 1.5e-6),
        ("30 ns", "s", 30e-9),
        ("5 ms", "s", 5e-3),
        ("0.5 pJ/B", "J/B", 0.5e-12),
        ("0.5 pJ/bit", "J/B", 4.0e-12),
        ("3.97 pJ/bit", "J/B", 31.76e-12),
        ("0.546 pJ/FLOP", "J/FLOP", 0.546e-12),
        ("1e3 W", "W", 1000.0),
    ],
)
def test_parses_to_si(text, unit, expected):
    assert parse_quantity(text, unit) == pytest.approx(expected, rel=1e-12)


def test_decimal_and_binary_prefixes_differ():
    assert parse_quantity("1 GB", "B") == 1e9
    assert parse_quantity("1 GiB", "B") == 1073741824.0


def test_dimensionless_and_counts_accept_plain_numbers():
    assert parse_quantity(0.8, "1") == 0.8
    assert parse_quantity("80 %", "1") == pytest.approx(0.8)
    assert parse_quantity(132, "count") == 132.0


@pytest.mark.parametrize(("value", "unit"), [("132", "count"), (" 8 ", "count"), ("0.8", "1")])
def test_quoted_numbers_are_strings_not_coerced(value, unit):
    with pytest.raises(UnitError, match="a quoted number is a string; got .*expected .*not a string"):
        parse_quantity(value, unit)


def test_cycles_convert_at_the_clock():
    assert parse_quantity("834 cycles", "s", clock_hz=1.98e9) == pytest.approx(834 / 1.98e9)


@pytest.mark.parametrize(
    ("value", "unit", "fragment"),
    [
        ("50 KB", "B", "ambiguous unit 'KB'"),
        ("50 kb", "B", "ambiguous unit 'kb'"),
        ("10 Gb/s", "B/s", "ambiguous unit 'Gb/s'"),
        ("12", "B", "bare number"),
        (12, "B/s", "bare number"),
        (3.35e12, "B/s", "bare number"),
        ("3 GHz", "B/s", "wrong dimension (a frequency)"),
        ("700 W", "s", "wrong dimension (a power)"),
        ("3 TB/s", "B", "wrong dimension (a bandwidth)"),
        ("24 cycles", "B", "wrong dimension (a cycle count)"),
        ("24 cycles", "s", "needs a clock"),
        ("3 TBs", "B/s", "did you mean 'TB/s'?"),
        ("fast", "B/s", "cannot read a number"),
        (1.5, "count", "not a whole number"),
        (True, "1", "not a quantity"),
        ("132 SMs", "count", "unknown unit"),
    ],
)
def test_rejections(value, unit, fragment):
    with pytest.raises(UnitError) as exc:
        parse_quantity(value, unit)
    assert fragment in str(exc.value)
    assert "expected" in str(exc.value)


def test_unit_error_is_a_spec_error_and_value_error():
    with pytest.raises(SpecError):
        parse_quantity("1 KB", "B")
    with pytest.raises(ValueError):
        parse_quantity("1 KB", "B")


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (3.35e12, "B/s", "3.35 TB/s"),
        (50 * 2**20, "B", "50 MiB"),
        (80e9, "B", "80 GB"),
        (989.4e12, "FLOP/s", "989.4 TFLOP/s"),
        (1.5e-6, "s", "1.5 µs"),
        (700.0, "W", "700 W"),
    ],
)
def test_format_round_trips(value, unit, text):
    assert format_quantity(value, unit) == text
    assert parse_quantity(text, unit) == pytest.approx(value)
