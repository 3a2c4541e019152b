"""Honest error summaries of predictions against measurements: MAPE, median, p90, max, bias, worst cases."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.calibration.measurements import MeasurementSet, case_label

__all__ = ["ErrorSummary", "summarize_errors"]


@dataclass(frozen=True)
class ErrorSummary:
    """Prediction errors over a set of measurements (percentages as plain numbers).

    ``ape`` is the absolute percentage error ``100 * |pred - meas| / meas``. ``bias`` is the geometric
    mean of ``pred / meas`` minus one, in percent (positive: predictions are high). ``worst`` lists the
    largest errors as (id, workload, predicted s, measured s, ape). ``by_class`` has one summary per op
    class (the measurements' ``category``).
    """

    n: int
    mape: float
    median_ape: float
    p90_ape: float
    max_ape: float
    bias: float
    worst: tuple[tuple[str, str, float, float, float], ...] = ()
    by_class: dict[str, ErrorSummary] = field(default_factory=dict)

    def to_json(self, *, classes: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {k: _round(getattr(self, k)) for k in ("n", "mape", "median_ape", "p90_ape", "max_ape", "bias")}
        out["worst"] = [{"id": i, "workload": w, "predicted_s": p, "measured_s": m, "ape": _round(a)}
                        for i, w, p, m, a in self.worst]
        if classes and self.by_class:
            out["by_class"] = {k: v.to_json(classes=False) for k, v in sorted(self.by_class.items())}
        return out


def _round(x: float | int) -> float | int:
    return x if isinstance(x, int) else float(f"{x:.6g}")


def summarize_errors(
    predicted_s: np.ndarray, measurements: MeasurementSet, *, worst: int = 5, by_class: bool = True
) -> ErrorSummary:
    """:class:`ErrorSummary` of ``predicted_s`` against the measurements' medians (row order)."""
    pred = np.asarray(predicted_s, dtype=float)
    meas = measurements.median_s
    if pred.shape != meas.shape:
        raise ValueError(f"error summary: {pred.size} predictions for {meas.size} measurements; expected equal counts")
    if pred.size == 0:
        return ErrorSummary(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    ape = 100.0 * np.abs(pred - meas) / meas
    bias = 100.0 * (math.exp(float(np.mean(np.log(pred / meas)))) - 1.0)
    order = np.argsort(-ape, kind="stable")[:worst]
    ms = measurements.measurements
    w = tuple((ms[i].id, case_label(ms[i].workload, ms[i].dtype, ms[i].batch, ms[i].seq, ms[i].phase),
               float(pred[i]), float(meas[i]), float(ape[i])) for i in order)
    classes: dict[str, ErrorSummary] = {}
    if by_class:
        cats = np.array([m.category for m in ms])
        for c in sorted(set(cats.tolist())):
            idx = np.flatnonzero(cats == c)
            sub = MeasurementSet(tuple(ms[i] for i in idx), measurements.source)
            classes[c] = summarize_errors(pred[idx], sub, worst=0, by_class=False)
    return ErrorSummary(
        n=int(pred.size), mape=float(ape.mean()), median_ape=float(np.median(ape)),
        p90_ape=float(np.percentile(ape, 90)), max_ape=float(ape.max()), bias=bias, worst=w, by_class=classes,
    )
