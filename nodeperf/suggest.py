"""Error-message helpers every layer uses: near matches ("did you mean") and lists of problems.

It depends on the standard library only, so the leaf layers (:mod:`workloads`, :mod:`hwmodels`) may
import it without importing each other or :mod:`simulator`.

Examples
--------
>>> near_match("h100", ["h100-sxm5-80gb", "h100-pcie-80gb", "a100-sxm4-80gb"], n=3, prefix=True)
['h100-sxm5-80gb', 'h100-pcie-80gb']
>>> near_match("h100", ["h100-sxm5-80gb", "h100-pcie-80gb", "a100-sxm4-80gb"], prefix=True)  # n=1: the first
['h100-sxm5-80gb']
>>> did_you_mean("bf61", ["bf16", "fp16", "fp32"])
"; did you mean 'bf16'?"
>>> did_you_mean("zzz", ["bf16"])
''
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

__all__ = ["near_match", "did_you_mean", "format_problems", "MAX_LISTED_PROBLEMS", "short_repr", "short_text"]

#: Located problem lines one message lists before ``... and N more`` (a spec with thousands of
#: problems reports in bounded time and length).
MAX_LISTED_PROBLEMS = 20

#: Similarity (difflib ratio) below which a name is not offered as a near match.
DEFAULT_CUTOFF = 0.6


def near_match(got: str, choices: Iterable[str], *, n: int = 1, cutoff: float = DEFAULT_CUTOFF,
               prefix: bool = False) -> list[str]:
    """Up to ``n`` of ``choices`` closest to ``got``, best first.

    With ``prefix``, names that start with what was typed (case-insensitive) come first, in the
    order given (``h100`` -> every H100); otherwise, and when none does, the closest spellings by
    :func:`difflib.get_close_matches` at ``cutoff``.
    """
    names = [str(c) for c in choices]
    key = str(got)
    if prefix and key.strip():
        low = key.strip().lower()
        starts = [c for c in names if c.lower().startswith(low)]
        if starts:
            return starts[:n]
    return difflib.get_close_matches(key, names, n=n, cutoff=cutoff)


def did_you_mean(got: str, choices: Iterable[str], *, cutoff: float = DEFAULT_CUTOFF, prefix: bool = False) -> str:
    """``"; did you mean 'x'?"`` for the nearest of ``choices``, or ``""`` when none is near."""
    m = near_match(got, choices, n=1, cutoff=cutoff, prefix=prefix)
    return f"; did you mean {m[0]!r}?" if m else ""


def format_problems(where: str, items: Sequence[str], what: str, count: int | None = None) -> str:
    """One error message for the located problems ``items`` of one input (``count`` in all).

    One problem is its own line; several are a count line (``<where>: N problems in <what>``), then
    the first :data:`MAX_LISTED_PROBLEMS` lines, indented, then ``... and M more`` when some are left
    out.

    >>> print(format_problems("f.toml", ["f.toml: a: bad", "f.toml: b: bad"], "hardware spec"))
    f.toml: 2 problems in hardware spec
      f.toml: a: bad
      f.toml: b: bad
    """
    n = len(items) if count is None else count
    if n == 1 and len(items) == 1:
        return items[0]
    shown = list(items[:MAX_LISTED_PROBLEMS])
    lines = [f"{where}: {n} problems in {what}", *shown]
    if n > len(shown):
        lines.append(f"... and {n - len(shown)} more")
    return "\n  ".join(lines)


def short_text(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters (ending in ``...``): a file's header quoted in a message (a JSON or binary
    file read as CSV has one of thousands of characters) stays one readable line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (ending in ``...``), so a message stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
