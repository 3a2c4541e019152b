"""What the study tests share: the check that a committed CSV is what today's model gives."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

#: Relative tolerance between a committed number and a fresh one: the CSVs keep 6 significant digits.
RTOL = 2e-5


def _same(committed: str, fresh: str) -> bool:
    if committed == fresh:
        return True
    try:
        a, b = float(committed), float(fresh)
    except ValueError:
        return False
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-300)


def check_committed(rows: Sequence[dict[str, Any]], committed: Path, write: Callable[[Sequence[dict[str, Any]], Path], Any],
                    keys: Sequence[str], tmp: Path, *, columns: Sequence[str] | None = None, refresh: str) -> int:
    """Assert that every row of a fresh (reduced) run is in the committed CSV with the same values.

    ``write`` writes ``rows`` as the study does (same formatting); rows are matched on ``keys``; every
    column is compared (or only ``columns``: those that do not depend on the reduced configuration's
    size), text exactly and numbers to :data:`RTOL`. Returns the number of rows compared.
    """
    fresh_path = tmp / f"fresh-{committed.name}"
    write(rows, fresh_path)
    with open(fresh_path, newline="") as f:
        fresh = list(csv.DictReader(f))
    with open(committed, newline="") as f:
        old = list(csv.DictReader(f))
    index = {tuple(r[k] for k in keys): r for r in old}
    assert len(index) == len(old), f"{committed}: rows are not unique on {keys}"
    problems = []
    for r in fresh:
        key = tuple(r[k] for k in keys)
        if key not in index:
            problems.append(f"{dict(zip(keys, key, strict=True))}: no such row")
            continue
        for col in columns or r.keys():
            if not _same(index[key][col], r[col]):
                problems.append(f"{dict(zip(keys, key, strict=True))}: {col}: committed {index[key][col]!r}, "
                                f"model {r[col]!r}")
    assert not problems, (f"{committed.name} is stale ({len(problems)} differences; refresh with `{refresh}`):\n  "
                          + "\n  ".join(problems[:12]))
    assert fresh
    return len(fresh)


@pytest.fixture
def committed_csv(tmp_path) -> Callable[..., int]:
    """:func:`check_committed` with a temporary folder for the fresh CSV."""
    def check(rows: Sequence[dict[str, Any]], committed: Path, write: Callable[..., Any], keys: Sequence[str],
              **kw: Any) -> int:
        return check_committed(rows, committed, write, keys, tmp_path, **kw)

    return check
