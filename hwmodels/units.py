"""Strict parsing of human unit strings ("3.35 TB/s", "50 MiB", "1.5 us") into SI floats, and back.

A spec field declares the SI unit it stores (``field.metadata["unit"]`` in :mod:`hwmodels.spec`);
:func:`parse_quantity` accepts a string only if its unit has that field's dimension. Decimal
prefixes are decimal (``GB`` = 1e9 B), binary prefixes binary (``GiB`` = 2**30 B); ambiguous
spellings (``KB``, ``kb``, ``Gb``) and bare numbers for dimensional fields are rejected with a
message naming the accepted forms. Counts and dimensionless factors take TOML numbers (``132``,
``0.8``); a quoted number (``"132"``) is a string and is rejected rather than coerced, so every
field reads a number the same way (a factor may also be a percentage string, ``"80 %"``).

Examples
--------
>>> parse_quantity("3.35 TB/s", "B/s")
3350000000000.0
>>> parse_quantity("50 MiB", "B")
52428800.0
>>> parse_quantity("0.5 pJ/bit", "J/B")
4e-12
>>> format_quantity(3.35e12, "B/s")
'3.35 TB/s'
"""

from __future__ import annotations

import math
import re

from hwmodels.spec import SpecError
from nodeperf.suggest import near_match

__all__ = [
    "UnitError",
    "DIMENSIONS",
    "parse_quantity",
    "format_quantity",
    "unit_examples",
    "METRIC_UNITS",
]


class UnitError(SpecError):
    """A value's unit is missing, ambiguous, unknown or of the wrong dimension."""


# Dimension of each stored SI unit, with a human example used in error messages.
DIMENSIONS: dict[str, tuple[str, str]] = {
    "Hz": ("a frequency", "'1.98 GHz'"),
    "B": ("a size in bytes", "'80 GB' or '50 MiB'"),
    "B/s": ("a bandwidth", "'3.35 TB/s' or '900 GB/s'"),
    "s": ("a time", "'1.5 us', '30 ns' or '24 cycles'"),
    "W": ("a power", "'700 W'"),
    "J/B": ("an energy per byte", "'31.8 pJ/B' or '3.97 pJ/bit'"),
    "J/FLOP": ("an energy per operation", "'0.5 pJ/FLOP'"),
    "FLOP/s": ("a throughput", "'989.4 TFLOP/s'"),
    "count": ("a whole number", "132"),
    "1": ("a dimensionless factor", "0.8 or '80 %'"),
}

#: Unit spellings of result metrics (tune constraints such as ``energy_j<=300 mJ``) in the dimensions
#: :func:`parse_quantity` does not take (it parses s, B, W and the spec units above): dimension ->
#: spelling -> factor to the dimension's SI unit (``"1"``: a fraction, which ``%`` scales by 0.01).
METRIC_UNITS: dict[str, dict[str, float]] = {
    "J": {"J": 1.0, "mJ": 1e-3, "uJ": 1e-6, "µJ": 1e-6, "kJ": 1e3, "MJ": 1e6},
    "1/s": {"1/s": 1.0, "/s": 1.0, "samples/s": 1.0, "tokens/s": 1.0, "requests/s": 1.0, "k/s": 1e3,
            "ksamples/s": 1e3, "ktokens/s": 1e3},
    "USD/h": {"USD/h": 1.0, "$/h": 1.0, "/h": 1.0},
    "USD": {"USD": 1.0, "$": 1.0},
    "%": {"%": 1.0},
    "1": {"%": 0.01},
    "count": {},
    "cycles": {"cycles": 1.0, "cycle": 1.0, "kcycles": 1e3, "Mcycles": 1e6},
    "words": {"words": 1.0, "kwords": 1e3, "Mwords": 1e6},
}

_DEC = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_SMALL = {"": 1.0, "m": 1e-3, "u": 1e-6, "µ": 1e-6, "μ": 1e-6, "n": 1e-9, "p": 1e-12, "f": 1e-15}


def _build_table() -> dict[str, tuple[str, float]]:
    t: dict[str, tuple[str, float]] = {}
    for p in ("", "k", "M", "G"):
        t[f"{p}Hz"] = ("Hz", _DEC[p])
    for p, f in _DEC.items():
        if p in ("E",):
            continue
        t[f"{p}B"] = ("B", f)
        t[f"{p}B/s"] = ("B/s", f)
        t[f"{p}bit"] = ("B", f / 8.0)
        t[f"{p}bit/s"] = ("B/s", f / 8.0)
        t[f"{p}FLOP/s"] = ("FLOP/s", f)
        t[f"{p}FLOPS"] = ("FLOP/s", f)
        t[f"{p}OP/s"] = ("FLOP/s", f)
        t[f"{p}OPS"] = ("FLOP/s", f)
    for p, f in _BIN.items():
        t[f"{p}B"] = ("B", f)
        t[f"{p}B/s"] = ("B/s", f)
    for p in ("", "m", "u", "µ", "μ", "n", "p"):
        t[f"{p}s"] = ("s", _SMALL[p])
    for p, f in (("m", 1e-3), ("", 1.0), ("k", 1e3)):
        t[f"{p}W"] = ("W", f)
    for p in ("", "m", "u", "µ", "μ", "n", "p", "f"):
        t[f"{p}J/B"] = ("J/B", _SMALL[p])
        t[f"{p}J/byte"] = ("J/B", _SMALL[p])
        t[f"{p}J/bit"] = ("J/B", _SMALL[p] * 8.0)
        t[f"{p}J/FLOP"] = ("J/FLOP", _SMALL[p])
        t[f"{p}J/OP"] = ("J/FLOP", _SMALL[p])
    t["cycle"] = ("cycle", 1.0)
    t["cycles"] = ("cycle", 1.0)
    t["%"] = ("1", 0.01)
    return t


_TABLE = _build_table()

# Spellings that could mean two different things; each maps to the accepted alternatives.
_AMBIGUOUS: dict[str, str] = {}
for _suf in ("", "/s"):
    _AMBIGUOUS[f"KB{_suf}"] = f"'kB{_suf}' (10^3 B) or 'KiB{_suf}' (2^10 B)"
    _AMBIGUOUS[f"Kb{_suf}"] = f"'kbit{_suf}' (10^3 bit) or 'kB{_suf}' (10^3 B)"
    _AMBIGUOUS[f"kb{_suf}"] = f"'kbit{_suf}' (10^3 bit) or 'kB{_suf}' (10^3 B)"
    for _p in ("M", "G", "T", "P"):
        _AMBIGUOUS[f"{_p}b{_suf}"] = f"'{_p}bit{_suf}' (bits) or '{_p}B{_suf}' (bytes)"
        _AMBIGUOUS[f"{_p.lower()}b{_suf}"] = f"'{_p}bit{_suf}' (bits) or '{_p}B{_suf}' (bytes)"
_AMBIGUOUS["b"] = "'bit' or 'B' (byte)"
_AMBIGUOUS["b/s"] = "'bit/s' or 'B/s'"
_AMBIGUOUS["pJ/b"] = "'pJ/bit' or 'pJ/B'"
_AMBIGUOUS["GT/s"] = "a bandwidth in 'GB/s' (transfers per second do not fix the width)"

# A number (NaN and infinities are read so that they are refused as such, not as unreadable).
_NUM = re.compile(r"^\s*([+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|(?i:inf(?:inity)?|nan)(?![A-Za-z])))\s*(.*?)\s*$")


def unit_examples(unit: str) -> str:
    """Human description and example of the dimension stored in SI ``unit`` (for messages)."""
    name, ex = DIMENSIONS.get(unit, (f"a value in {unit!r}", repr(unit)))
    return f"{name} such as {ex}"


def _dimension_name(dim: str) -> str:
    if dim == "cycle":
        return "a cycle count"
    return DIMENSIONS.get(dim, (dim, ""))[0]


def parse_quantity(value: object, unit: str, *, clock_hz: float | None = None) -> float:
    """Parse ``value`` (a unit string, or a plain number where allowed) into SI ``unit``.

    Parameters
    ----------
    value
        ``"3.35 TB/s"``, ``"80 GiB"``, ``"700 W"``, ``"0.5 pJ/B"``, ``"24 cycles"``... Plain
        numbers (not quoted) are accepted only for ``unit`` ``"count"`` (whole numbers) and
        ``"1"``; a quoted plain number is an error for every unit.
    unit
        SI unit of the target field, as in the field's metadata (``"B/s"``, ``"s"``...).
    clock_hz
        Clock used to convert ``"N cycles"`` into seconds (only for ``unit == "s"``), Hz.

    Returns
    -------
    float
        The value in SI ``unit`` (bytes, B/s, s, W, J/B, J/FLOP, FLOP/s, Hz).

    Raises
    ------
    UnitError
        Bare number for a dimensional field, ambiguous or unknown unit, wrong dimension,
        non-finite value, or a cycle count without a clock. The message has the form
        ``problem; got X; expected Y[; did you mean Z?]`` (callers prefix the location).
    """
    expected = unit_examples(unit)
    if isinstance(value, bool):
        raise UnitError(f"not a quantity; got {value!r}; expected {expected}")
    if isinstance(value, (int, float)):
        if unit == "count":
            if isinstance(value, float) and not value.is_integer():
                raise UnitError(f"not a whole number; got {value!r}; expected {expected}")
            return float(value)
        if unit == "1":
            if not math.isfinite(value):
                raise UnitError(f"not a finite number; got {value!r}; expected {expected}")
            return float(value)
        raise UnitError(
            f"bare number without a unit; got {value!r}; expected {expected}"
        )
    if not isinstance(value, str):
        raise UnitError(f"not a quantity; got {value!r}; expected {expected}")
    m = _NUM.match(value)
    if not m:
        raise UnitError(f"cannot read a number; got {value!r}; expected {expected}")
    number = float(m.group(1))
    token = m.group(2)
    if not math.isfinite(number):
        raise UnitError(f"not a finite number; got {value!r}; expected {expected}")
    if token == "":
        if unit == "count":
            raise UnitError(f"a quoted number is a string; got {value!r}; expected an integer, not a string "
                            f"(value = {m.group(1)})")
        if unit == "1":
            raise UnitError(f"a quoted number is a string; got {value!r}; expected a number, not a string "
                            f"(value = {m.group(1)}) or a percentage such as '80 %'")
        raise UnitError(f"bare number without a unit; got {value!r}; expected {expected}")
    if token in _AMBIGUOUS:
        raise UnitError(
            f"ambiguous unit {token!r}; got {value!r}; expected {_AMBIGUOUS[token]}"
        )
    if token not in _TABLE:
        same_dim = [t for t, (d, _) in _TABLE.items() if d == unit or (unit == "s" and d == "cycle")]
        near = near_match(token, same_dim) or near_match(token, _TABLE)
        msg = f"unknown unit {token!r}; got {value!r}; expected {expected}"
        if near:
            msg += f"; did you mean {near[0]!r}?"
        raise UnitError(msg)
    dim, factor = _TABLE[token]
    if dim == "cycle":
        if unit != "s":
            raise UnitError(
                f"wrong dimension (a cycle count); got {value!r}; expected {expected}"
            )
        if clock_hz is None or not clock_hz > 0:
            raise UnitError(
                f"cycle count needs a clock to convert to seconds; got {value!r}; "
                f"expected a time such as '30 ns', or a device with clock.boost_hz"
            )
        return number / clock_hz
    if dim != unit:
        raise UnitError(
            f"wrong dimension ({_dimension_name(dim)}); got {value!r}; expected {expected}"
        )
    if unit == "count":
        raise UnitError(f"a count takes no unit; got {value!r}; expected {expected}")
    return number * factor


def _trim(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}"


_FMT_DEC = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
_FMT_SMALL = [(1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p"), (1e-15, "f")]
_FMT_BIN = [(2.0**40, "Ti"), (2.0**30, "Gi"), (2.0**20, "Mi"), (2.0**10, "Ki")]


def _scaled(x: float, scales: list[tuple[float, str]]) -> tuple[float, str]:
    ax = abs(x)
    for f, p in scales:
        if ax >= f * 0.9995:
            return x / f, p
    f, p = scales[-1]
    return x / f, p


def format_quantity(value: float, unit: str, digits: int = 4) -> str:
    """Human string of an SI ``value`` in ``unit`` (``3.35e12, "B/s"`` -> ``"3.35 TB/s"``).

    Byte sizes that are whole multiples of a binary unit (``50 MiB``) print in binary units,
    others in decimal ones. Only for display; :func:`parse_quantity` reads the result back.
    """
    if unit == "count":
        return f"{int(value)}" if float(value).is_integer() else f"{value}"
    if unit in ("1", ""):
        return _trim(value, digits)
    if value == 0:
        return f"0 {unit}"
    if unit == "B":
        x, p = _scaled(value, _FMT_DEC)
        dec = f"{_trim(x, digits)} {p}B"
        dec_exact = float(_trim(x, digits)) * (value / x if x else 1.0) == value
        for f, bp in _FMT_BIN:
            q = value / f
            if abs(value) >= f and q == int(q):
                binary = f"{int(q)} {bp}B"
                if not dec_exact or len(binary) < len(dec):
                    return binary
                break
        return dec
    if unit in ("B/s", "FLOP/s", "Hz", "W"):
        x, p = _scaled(value, _FMT_DEC)
        return f"{_trim(x, digits)} {p}{unit}"
    if unit == "s":
        x, p = _scaled(value, _FMT_SMALL)
        return f"{_trim(x, digits)} {p}s"
    if unit in ("J/B", "J/FLOP"):
        x, p = _scaled(value, _FMT_SMALL)
        return f"{_trim(x, digits)} {p}{unit}"
    return f"{_trim(value, digits)} {unit}"
