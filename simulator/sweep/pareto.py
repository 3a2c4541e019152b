"""Pareto fronts of sweep results over two or more metrics (each minimised, or maximised with ``max:``).

A row is on the front when no other row is at least as good in every metric and strictly better in
one. Rows with a missing (NaN) metric are left out; rows that tie exactly in every metric are all kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nodeperf.suggest import did_you_mean

__all__ = ["pareto_front", "parse_metric", "pareto_mask"]


def parse_metric(spec: str, columns: Sequence[str]) -> tuple[str, float]:
    """``("latency_s", +1)`` for ``"latency_s"`` or ``"min:latency_s"``, ``(name, -1)`` for ``"max:name"``."""
    text = str(spec).strip()
    sign = 1.0
    for prefix, s in (("max:", -1.0), ("min:", 1.0)):
        if text.lower().startswith(prefix):
            text, sign = text[len(prefix):].strip(), s
            break
    if text not in columns:
        raise ValueError(f"metric; got {spec!r}; expected a column of the results "
                         f"({', '.join(columns)}), optionally prefixed max: or min:{did_you_mean(text, columns)}")
    return text, sign


def pareto_mask(values: np.ndarray) -> np.ndarray:
    """Boolean mask of the non-dominated rows of ``values`` (shape ``(n, d)``, every column minimised).

    Rows are visited in lexicographic order; a row is kept unless a kept row dominates it (a row can
    only be dominated by one that sorts before it), so the cost is ``O(n * front size)``.
    """
    x = np.asarray(values, dtype=float)
    n = x.shape[0]
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    order = np.lexsort(tuple(x[:, j] for j in reversed(range(x.shape[1]))))
    if x.shape[1] == 2:  # a running minimum of the second metric over the sorted first one
        best = np.inf
        i = 0
        while i < n:
            j = i
            a0 = x[order[i], 0]
            while j < n and x[order[j], 0] == a0:
                j += 1
            # within a tie of the first metric only the smallest second metric (and its exact ties) survive
            grp = order[i:j]
            bmin = x[grp, 1].min()
            if bmin < best:
                keep[grp[x[grp, 1] == bmin]] = True
                best = bmin
            i = j
        return keep
    front: list[np.ndarray] = []
    for idx in order:
        row = x[idx]
        if front:
            f = np.asarray(front)
            if np.any(np.all(f <= row, axis=1) & np.any(f < row, axis=1)):
                continue
        front.append(row)
        keep[idx] = True
    return keep


def pareto_front(df: Any, metrics: Sequence[str]) -> Any:
    """The rows of ``df`` on the Pareto front of ``metrics``, sorted by the first metric.

    Parameters
    ----------
    df
        A pandas DataFrame (e.g. from :func:`simulator.sweep.load_results`).
    metrics
        Two or more column names; each is minimised unless prefixed ``max:`` (``"max:throughput_per_s"``).

    Returns
    -------
    pandas.DataFrame
        The non-dominated rows (rows with a missing metric excluded), first metric best first.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"latency_s": [1.0, 2.0, 3.0, 2.5], "energy_j": [5.0, 3.0, 1.0, 4.0]})
    >>> pareto_front(df, ["latency_s", "energy_j"]).index.tolist()
    [0, 1, 2]
    """
    if isinstance(metrics, str):
        metrics = [m for m in metrics.split(",") if m.strip()]
    if len(metrics) < 2:
        raise ValueError(f"pareto: metrics; got {list(metrics)!r}; expected two or more metric names "
                         "(e.g. latency_s,energy_j)")
    cols = [str(c) for c in df.columns]
    try:
        parsed = [parse_metric(m, cols) for m in metrics]
    except ValueError as exc:  # parse_metric names no caller: it orders sweep show's --sort too
        raise ValueError(f"pareto: {exc}") from None
    names = [n for n, _ in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"pareto: metrics; got {list(metrics)!r}; expected each metric once")
    sub = df[names].apply(lambda c: c.astype(float))
    ok = sub.notna().all(axis=1).to_numpy()
    vals = sub.to_numpy(dtype=float)[ok] * np.array([s for _, s in parsed])
    mask = np.zeros(len(df), dtype=bool)
    mask[np.flatnonzero(ok)[pareto_mask(vals)]] = True
    out = df[mask]
    first, sign = parsed[0]
    return out.sort_values(first, ascending=sign > 0, kind="stable")
