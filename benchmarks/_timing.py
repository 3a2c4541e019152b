"""Timing helper the benchmark scripts share (imported as a sibling module: run them as
``python benchmarks/bench_*.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_time(fn: Callable[[], Any], repeat: int, *, warm: bool = True) -> tuple[float, Any]:
    """(median wall time over ``repeat`` calls of ``fn``, its last result); ``warm`` makes one untimed call
    first (catalog, zoo and import caches)."""
    out = fn() if warm else None
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out
