"""Human formatting of SI quantities: one decimal-prefix formatter for the CLI and the report table."""

from __future__ import annotations

import pytest

from simulator.report import format_si
from simulator.report.formatting import binary_bytes, si, table


@pytest.mark.parametrize(("value", "unit", "text"), [
    (1.5e12, "FLOP", "1.5 TFLOP"),
    (0.00123, "s", "1.23 ms"),
    (4.2e-7, "s", "420 ns"),
    (7e9, "", "7 G"),
    (0, "s", "0 s"),
    (0, "", "0"),
    (float("inf"), "s", "inf s"),
    (-2.5e6, "B/s", "-2.5 MB/s"),
    # a value rounding up to 1000 at its prefix takes the next prefix
    (999_999, "B", "1 MB"),
    (0.9999999, "s", "1 s"),
])
def test_si_prefixes(value: float, unit: str, text: str) -> None:
    assert si(value, unit) == text


def test_report_uses_the_same_formatter() -> None:
    assert format_si is si


def test_binary_bytes_and_table() -> None:
    assert binary_bytes(8 * 2**30) == "8 GiB"
    assert binary_bytes(512) == "512 B"
    assert table([["a", "1"], ["bb", "22"]], ["k", "v"]) == "k    v\n--  --\na    1\nbb  22"
