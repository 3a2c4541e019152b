"""Human-readable formatting of SI quantities for CLI output (the only place human units appear)."""

from __future__ import annotations

import math

__all__ = ["si", "binary_bytes", "table"]


#: Decimal prefixes :func:`si` chooses among, largest first.
_PREFIXES: tuple[tuple[float, str], ...] = (
    (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n"),
)


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """Decimal-prefixed human string: ``si(1.5e12, 'FLOP')`` -> ``'1.5 TFLOP'``, ``si(0.00123, 's')`` -> ``'1.23 ms'``.

    ``digits`` significant digits; a value that rounds up to 1000 at its prefix takes the next one
    (``si(999_999, 'B')`` -> ``'1 MB'``). Zero and non-finite values print without a prefix.
    """
    v = float(value)
    if v == 0 or not math.isfinite(v):
        return f"{v:g} {unit}".rstrip()
    a = abs(v)
    for i, (scale, p) in enumerate(_PREFIXES):
        if a >= scale:
            if i > 0 and float(f"{a / scale:.{digits}g}") >= 1000:
                scale, p = _PREFIXES[i - 1]
            return f"{v / scale:.{digits}g} {p}{unit}".rstrip()
    return f"{v:.{digits}g} {unit}".rstrip()


def binary_bytes(n: float, digits: int = 3) -> str:
    """``binary_bytes(8 * 2**30)`` -> ``'8 GiB'``."""
    v = float(n)
    for p, f in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= f:
            return f"{v / f:.{digits}g} {p}"
    return f"{v:.0f} B"


def table(rows: list[list[str]], header: list[str], align: str | None = None) -> str:
    """A plain text table; ``align`` is one char per column (``l``/``r``), default left then right."""
    cols = len(header)
    align = align or ("l" + "r" * (cols - 1))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(cols)]

    def line(r: list[str]) -> str:
        cells = (str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(r, widths, align, strict=True))
        return "  ".join(cells).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)
