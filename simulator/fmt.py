"""Human-readable formatting of SI quantities for CLI output (the only place human units appear)."""

from __future__ import annotations

__all__ = ["si", "binary_bytes", "seconds", "table"]


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """``si(1.5e12, 'FLOP')`` -> ``'1.5 TFLOP'`` (decimal prefixes)."""
    v = float(value)
    for p, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= f:
            return f"{v / f:.{digits}g} {p}{unit}"
    return f"{v:.{digits}g} {unit}".rstrip()


def binary_bytes(n: float, digits: int = 3) -> str:
    """``binary_bytes(8 * 2**30)`` -> ``'8 GiB'``."""
    v = float(n)
    for p, f in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= f:
            return f"{v / f:.{digits}g} {p}"
    return f"{v:.0f} B"


def seconds(t: float) -> str:
    """``seconds(0.00123)`` -> ``'1.23 ms'``."""
    a = abs(t)
    if a >= 1:
        return f"{t:.3g} s"
    if a >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    if a >= 1e-6:
        return f"{t * 1e6:.3g} us"
    return f"{t * 1e9:.3g} ns"


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
