"""Names the importers give to ops and tensors: unique within a graph."""

from __future__ import annotations

__all__ = ["unique_name"]


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``, ... if taken; the result is added to ``taken``.

    >>> taken = {"fc"}
    >>> unique_name("fc", taken), unique_name("fc", taken), sorted(taken)
    ('fc_1', 'fc_2', ['fc', 'fc_1', 'fc_2'])
    """
    base, n = name, 1
    while name in taken:
        name = f"{base}_{n}"
        n += 1
    taken.add(name)
    return name
