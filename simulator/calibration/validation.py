"""Validation of the analytical engine against published GPU measurements, with honest error summaries.

Each row of ``hwmodels/measurements/published_gpu.csv`` names a workload (a zoo model or a
micro-workload), its batch/sequence/phase/context/dtype, a catalog device and a measured time.
:func:`validate_published` predicts every row with :func:`simulator.evaluate` using the catalog's
sourced efficiency factors as they are (nothing is fitted to these rows) and summarises the
relative errors per category (``gemm``, ``attention``, ``bandwidth``, ``e2e_*``) and for the
op-level and end-to-end groups.

Run conditions are taken from what each source states about its software stack, never from the
measured value: engines built by TensorRT / TensorRT-LLM and ``torch.compile`` programs fuse
elementwise ops and replay CUDA graphs; eager PyTorch launches every kernel; a stated power limit
replaces the board TDP; tf32 rows enable the TF32 tensor path; the attention kernel a row names
(FlashAttention-2 versus FlashAttention-3/4 or cuDNN) selects ``EvalOptions.attention_kernel``; rows
run from eager PyTorch pay the framework's per-op host cost (``EvalOptions.eager_framework``).
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.calibration.errors import ErrorSummary, summarize_errors
from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import GraphCache, default_predict
from simulator.hardware import known_devices

__all__ = ["validate_published", "DEFAULT_DATASET", "OP_LEVEL", "EDGE_DATASET", "EdgeRow", "load_edge_rows",
           "predict_edge_row", "validate_edge"]

logger = logging.getLogger(__name__)

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "published_gpu.csv"
#: Categories that time one kernel (the rest are end-to-end model runs).
OP_LEVEL = frozenset({"gemm", "attention", "bandwidth", "elementwise", "norm", "softmax", "conv"})


def validate_published(path: str | Path | None = None, *, categories: set[str] | None = None
                       ) -> dict[str, ErrorSummary]:
    """Predict every row of the published dataset and summarise the errors.

    Parameters
    ----------
    path
        A published-measurements CSV (default: the shipped ``published_gpu.csv``); it is loaded and
        validated by :class:`~simulator.calibration.measurements.MeasurementSet` (a bad row is a located error).
    categories
        Only rows of these categories (default: all).

    Returns
    -------
    dict
        ``{name: ErrorSummary}`` (percentages) for every category, plus ``"op-level"``,
        ``"end-to-end"`` and ``"all"``. Each row runs under the conditions it states
        (:func:`run_options`); nothing is fitted.
    """
    from hwmodels.catalog import load_device

    ms = MeasurementSet.load(Path(path) if path is not None else DEFAULT_DATASET, devices=known_devices())
    if categories is not None:
        ms = MeasurementSet(tuple(m for m in ms if m.category in categories), ms.source)
    graphs = GraphCache()
    pred = np.array([default_predict(graphs.get(m), load_device(m.device), m) for m in ms], dtype=float)

    def subset(keep: Any) -> tuple[np.ndarray, MeasurementSet]:
        idx = [i for i, m in enumerate(ms) if keep(m)]
        return pred[idx], MeasurementSet(tuple(ms[i] for i in idx), ms.source)

    out: dict[str, ErrorSummary] = {}
    for cat in sorted({m.category for m in ms}):
        out[cat] = summarize_errors(*subset(lambda m, c=cat: m.category == c), worst=3, by_class=False)
    out["op-level"] = summarize_errors(*subset(lambda m: m.category in OP_LEVEL), worst=3, by_class=False)
    out["end-to-end"] = summarize_errors(*subset(lambda m: m.category not in OP_LEVEL), worst=3, by_class=False)
    out["all"] = summarize_errors(pred, ms, worst=3, by_class=False)
    return out


# ------------------------------------------------------------------------------------------------
# edge devices: published MLPerf Inference Edge results (hwmodels/measurements/published_edge.csv)

EDGE_DATASET = DEFAULT_DATASET.with_name("published_edge.csv")
#: Columns of the edge dataset (hwmodels/measurements/README.md describes each).
EDGE_COLUMNS = ("id", "benchmark", "scenario", "metric", "value", "unit", "workload", "batch", "seq", "dtype",
                "engines", "power_mode", "in_score", "round", "division", "submitter", "system", "result_id",
                "software", "source", "notes")
#: Metric -> its unit: the p90 latency of one sample, or samples per second over all engines.
EDGE_METRICS = {"latency_p90": "ms", "throughput": "samples/s"}


@dataclass(frozen=True)
class EdgeRow:
    """One published edge result: a benchmark run, its measured figure and how to predict it.

    ``engines`` lists ``device:batch`` terms joined by ``+``; every engine runs its own batches
    (MLPerf Offline on Jetson runs the GPU and each DLA side by side), so the predicted throughput is
    the sum of ``batch / latency`` over the engines, and a latency row has exactly one engine.
    """

    id: str
    benchmark: str
    scenario: str
    metric: str
    value: float
    unit: str
    workload: str
    seq: int | None
    dtype: str
    engines: tuple[tuple[str, int], ...]
    power_mode: str
    in_score: bool
    software: str
    source: str
    notes: str
    where: str


def _edge_problem(where: str, col: str, got: Any, expected: str) -> ValueError:
    return ValueError(f"{where}: {col}: invalid value; got {got!r}; expected {expected}")


def load_edge_rows(path: str | Path | None = None) -> list[EdgeRow]:
    """Rows of the edge dataset, checked (a bad row is a located ``ValueError``: ``file:line: column: ...``)."""
    p = Path(path) if path is not None else EDGE_DATASET
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in EDGE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{p}:1: header: missing columns; got {reader.fieldnames}; expected {', '.join(missing)}")
        raw = list(reader)
    out: list[EdgeRow] = []
    seen: set[str] = set()
    for i, r in enumerate(raw, start=2):
        where = f"{p}:{i}"
        rid = (r["id"] or "").strip()
        if not rid or rid in seen:
            raise _edge_problem(where, "id", rid, "a unique row id (edge-NNN)")
        seen.add(rid)
        if r["metric"] not in EDGE_METRICS:
            raise _edge_problem(where, "metric", r["metric"], " or ".join(EDGE_METRICS))
        if r["unit"] != EDGE_METRICS[r["metric"]]:
            raise _edge_problem(where, "unit", r["unit"], f"{EDGE_METRICS[r['metric']]} for metric {r['metric']}")
        try:
            value = float(r["value"])
        except ValueError:
            raise _edge_problem(where, "value", r["value"], "a positive number") from None
        if not value > 0:
            raise _edge_problem(where, "value", r["value"], "a positive number")
        if r["in_score"] not in ("0", "1"):
            raise _edge_problem(where, "in_score", r["in_score"], "1 (predicted and scored) or 0 (the notes say why not)")
        for col in ("source", "round", "submitter", "system", "software"):
            if not (r[col] or "").strip():
                raise _edge_problem(where, col, r[col], "a citation (every row names where its figure comes from)")
        engines: list[tuple[str, int]] = []
        for term in filter(None, (r["engines"] or "").split("+")):
            dev, _, b = term.partition(":")
            if not dev.strip() or not b.isdigit() or int(b) < 1:
                raise _edge_problem(where, "engines", r["engines"], "device:batch terms joined by + "
                                    "(jetson-agx-orin-64gb:256+orin-dla:2)")
            engines.append((dev.strip(), int(b)))
        scored = r["in_score"] == "1"
        if scored and (not r["workload"] or not engines):
            raise _edge_problem(where, "workload/engines", (r["workload"], r["engines"]),
                                "a zoo workload and its engines for a scored row")
        if scored and r["metric"] == "latency_p90" and len(engines) != 1:
            raise _edge_problem(where, "engines", r["engines"], "one engine for a single-stream latency row")
        seq_text = (r["seq"] or "").strip()
        if seq_text and (not seq_text.isdigit() or int(seq_text) < 1):
            raise _edge_problem(where, "seq", r["seq"], "a positive integer (image side or token length) or empty "
                                "for the workload's default")
        seq = int(seq_text) if seq_text else None
        out.append(EdgeRow(rid, r["benchmark"], r["scenario"], r["metric"], value, r["unit"], r["workload"], seq,
                           r["dtype"], tuple(engines), (r["power_mode"] or "").strip(), scored, r["software"],
                           r["source"], r["notes"], where))
    return out


def predict_edge_row(row: EdgeRow, graphs: dict[tuple[Any, ...], Any] | None = None) -> float:
    """The predicted figure of ``row`` in its unit (ms for a latency row, samples/s for throughput).

    Each engine is its catalog device in the row's power mode (``device@mode``), running the zoo
    workload at its batch under the run conditions the row's software names
    (:func:`~simulator.calibration.predict.run_options`: TensorRT fuses elementwise epilogues and
    replays CUDA graphs). Nothing is fitted.
    """
    from simulator.calibration.predict import quiet_engine, run_options
    from simulator.engines.analytical import evaluate
    from simulator.hardware import load_hardware
    from workloads.resolve import load_workload

    graphs = {} if graphs is None else graphs
    opts, overrides = run_options({"source": f"{row.software} {row.source}", "notes": row.notes,
                                   "metric_reported": "", "dtype": row.dtype})
    if overrides:
        raise ValueError(f"{row.where}: notes: a power limit in the notes; got {overrides}; expected the power "
                         "mode in the power_mode column")
    latencies: list[tuple[int, float]] = []
    for dev, batch in row.engines:
        spec = load_hardware(f"{dev}@{row.power_mode}" if row.power_mode else dev)
        key = (row.workload, batch, row.seq, row.dtype)
        if key not in graphs:
            graphs[key] = load_workload(row.workload, batch=batch, seq=row.seq, dtype=row.dtype)
        with quiet_engine():
            latencies.append((batch, float(evaluate(graphs[key], spec, opts).totals.latency_s)))
    if row.metric == "latency_p90":
        return latencies[0][1] * 1e3
    return sum(b / t for b, t in latencies)


def validate_edge(path: str | Path | None = None) -> dict[str, Any]:
    """Predict every scored row of the edge dataset; per-row errors and the MAPE (percent), unfitted.

    Returns
    -------
    dict
        ``rows`` (id, benchmark, scenario, metric, unit, measured, predicted, error_pct signed, in_score,
        note), ``n``, ``mape``, ``median_ape``, ``max_ape``, and ``by_benchmark`` / ``by_scenario``
        ``{name: {"n", "mape"}}`` over the scored rows; unscored rows are listed with the reason.
    """
    rows = load_edge_rows(path)
    graphs: dict[tuple[Any, ...], Any] = {}
    out_rows: list[dict[str, Any]] = []
    for r in rows:
        rec: dict[str, Any] = {"id": r.id, "benchmark": r.benchmark, "scenario": r.scenario, "metric": r.metric,
                               "unit": r.unit, "measured": r.value, "in_score": r.in_score,
                               "engines": "+".join(f"{d}:{b}" for d, b in r.engines), "power_mode": r.power_mode}
        if r.in_score:
            pred = predict_edge_row(r, graphs)
            rec.update(predicted=pred, error_pct=100.0 * (pred - r.value) / r.value)
        else:
            rec.update(predicted=None, error_pct=None, note=r.notes.split(";")[0].split(". ")[0])
        out_rows.append(rec)
    scored = [x for x in out_rows if x["in_score"]]

    def summary(sel: list[dict[str, Any]]) -> dict[str, Any]:
        ape = np.abs([x["error_pct"] for x in sel]) if sel else np.array([])
        return {"n": len(sel), "mape": float(ape.mean()) if sel else float("nan"),
                "median_ape": float(np.median(ape)) if sel else float("nan"),
                "max_ape": float(ape.max()) if sel else float("nan")}

    res: dict[str, Any] = {"dataset": str(Path(path) if path is not None else EDGE_DATASET), "rows": out_rows,
                           **summary(scored), "not_scored": len(out_rows) - len(scored)}
    res["by_benchmark"] = {b: summary([x for x in scored if x["benchmark"] == b])
                           for b in sorted({x["benchmark"] for x in scored})}
    res["by_scenario"] = {s: summary([x for x in scored if x["scenario"] == s])
                          for s in sorted({x["scenario"] for x in scored})}
    return res
