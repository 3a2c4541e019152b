"""Validation of predicted energy and average power against published power measurements, unfitted.

Each row of ``hwmodels/measurements/published_energy.csv`` names a workload (a micro-workload or a
zoo model with batch/seq/phase/context), its dtype and catalog device (``NAME@MODE`` allowed), and
what a source measured: the average power (W) over a run of the workload, the energy (J) of one
unit of it (one execution, one inference, one token), and the latency where the source gives it.
:func:`validate_energy` predicts every scored row with :func:`simulator.evaluate` under the run
conditions the row states (:func:`~simulator.calibration.predict.run_options`, the same rules the
latency validation uses) with the catalog's sourced energy coefficients as they are, and compares
energy, average power and latency side by side, per device and per kind (``gemm``,
``elementwise``, ``llm``, ``cnn``, ...). Nothing is fitted to these rows.

Only device-level power is scored (``power_covers`` ``gpu-board``: NVML / nvidia-smi board power;
``module``: a module's input rail). A row whose power covers more than the device (``system-ac``:
wall power of a whole system) is listed but not scored, with the reason in its notes: the model
predicts one device and no cited rule converts system power to device power.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.calibration.measurements import Measurement, MeasurementError

__all__ = ["ENERGY_DATASET", "ENERGY_COLUMNS", "POWER_COVERS", "ENERGY_UNITS", "EnergyRow", "load_energy_rows",
           "predict_energy_row", "validate_energy", "error_stats", "cancellation"]

ENERGY_DATASET = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "published_energy.csv"
#: Columns of the energy dataset (hwmodels/measurements/README.md describes each).
ENERGY_COLUMNS = ("id", "kind", "workload", "batch", "seq", "phase", "context", "dtype", "train", "device",
                  "framework", "latency_s", "energy_j", "energy_per", "power_w", "power_stat", "power_covers",
                  "in_score", "metric_reported", "source", "notes")
#: What a row's measured power covers -> whether the device model predicts it (device-level).
POWER_COVERS = {"gpu-board": True, "module": True, "system-ac": False}
#: Unit of ``energy_j`` -> how many of them one execution of the row's graph produces.
ENERGY_UNITS = ("execution", "inference", "token")
#: Relative tolerance of ``energy_j = power_w x latency_s`` when a row gives all three.
CONSISTENCY_RTOL = 0.005
_PHASES = ("forward", "prefill", "decode", "train")


@dataclass(frozen=True)
class EnergyRow:
    """One published power/energy measurement (SI units) and how to predict it."""

    id: str
    kind: str
    workload: str
    batch: int | None
    seq: int | None
    phase: str | None
    context: int | None
    dtype: str
    train: bool
    device: str
    framework: str
    latency_s: float | None
    energy_j: float | None
    energy_per: str
    power_w: float | None
    power_stat: str
    power_covers: str
    in_score: bool
    metric_reported: str
    source: str
    notes: str
    where: str = ""

    def measurement(self) -> Measurement:
        """The row as a latency :class:`Measurement` (for the shared graph cache and run-condition rules)."""
        return Measurement(id=self.id, workload=self.workload, device=self.device.split("@")[0], dtype=self.dtype,
                           median_s=self.latency_s or 1.0, category=self.kind, batch=self.batch, seq=self.seq,
                           phase=self.phase, context=self.context, train=self.train, framework=self.framework,
                           metric_reported=self.metric_reported, source=self.source, notes=self.notes,
                           where=self.where)

    def units_per_execution(self) -> int:
        """Units of ``energy_per`` one execution of the graph yields (a decode step yields ``batch`` tokens)."""
        if self.energy_per == "execution":
            return 1
        return self.batch or 1


def _number(text: str, where: str, col: str, problems: list[str], *, required: bool = False) -> float | None:
    s = (text or "").strip()
    if not s:
        if required:
            problems.append(f"{where}: {col}: empty value; got ''; expected a positive number")
        return None
    try:
        v = float(s)
    except ValueError:
        problems.append(f"{where}: {col}: not a number; got {s!r}; expected a positive number")
        return None
    if not (math.isfinite(v) and v > 0):
        problems.append(f"{where}: {col}: not a positive number; got {s!r}; expected a positive number")
        return None
    return v


def _int(text: str, where: str, col: str, problems: list[str]) -> int | None:
    s = (text or "").strip()
    if not s:
        return None
    if not s.isdigit() or int(s) < 1:
        problems.append(f"{where}: {col}: not a positive integer; got {s!r}; expected a positive integer or empty")
        return None
    return int(s)


def load_energy_rows(path: str | Path | None = None) -> list[EnergyRow]:
    """Rows of the energy dataset, checked; every problem is collected and raised once.

    Raises
    ------
    MeasurementError
        Lines ``<file>:<line>: <column>: <problem>; got <value>; expected <form>[; did you mean <x>?]``:
        a missing column, duplicate id, unknown device or dtype, non-positive number, no measured
        figure, an unknown ``energy_per`` / ``power_covers``, a scored row whose power covers more
        than the device, an empty source, or ``energy_j`` disagreeing with ``power_w x latency_s``.
    """
    from nodeperf.files import read_csv_text
    from nodeperf.suggest import did_you_mean, format_problems
    from simulator.hardware import known_devices
    from workloads.dtypes import parse_dtype

    p = Path(path) if path is not None else ENERGY_DATASET
    text = read_csv_text(p, what="an energy-measurement CSV", error=MeasurementError)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = list(reader.fieldnames or [])
    raw = list(reader)
    missing = [c for c in ENERGY_COLUMNS if c not in header]
    if missing:
        raise MeasurementError(f"{p}:1: header: missing columns; got {header}; expected also {', '.join(missing)}")
    devices = known_devices()
    problems: list[str] = []
    rows: list[EnergyRow] = []
    seen: set[str] = set()
    for i, r in enumerate(raw, start=2):
        where = f"{p}:{i}"
        n0 = len(problems)
        rid = (r["id"] or "").strip()
        if not rid or rid in seen:
            problems.append(f"{where}: id: {'duplicate' if rid else 'empty'} id; got {rid!r}; expected a unique "
                            "row id (energy-NNN)")
        seen.add(rid)
        for col in ("kind", "workload", "source"):
            if not (r[col] or "").strip():
                what = "a citation (where the number is)" if col == "source" else "a value"
                problems.append(f"{where}: {col}: empty value; got ''; expected {what}")
        device = (r["device"] or "").strip().lower()
        base = device.split("@")[0]
        if base not in devices:
            hint = did_you_mean(base, devices)
            problems.append(f"{where}: device: unknown device; got {device!r}; expected a catalog device "
                            f"(NAME or NAME@MODE){hint}")
        dtype = ""
        try:
            dtype = parse_dtype((r["dtype"] or "").strip(), where=f"{where}: dtype").value
        except ValueError as exc:
            problems.append(str(exc))
        phase = (r["phase"] or "").strip() or None
        if phase is not None and phase not in _PHASES:
            problems.append(f"{where}: phase: unknown phase; got {phase!r}; expected one of {', '.join(_PHASES)} "
                            f"or empty{did_you_mean(phase, _PHASES)}")
        train_text = (r["train"] or "").strip()
        if train_text not in ("", "0", "1"):
            problems.append(f"{where}: train: invalid value; got {train_text!r}; expected 1, 0 or empty")
        lat = _number(r["latency_s"], where, "latency_s", problems)
        energy = _number(r["energy_j"], where, "energy_j", problems)
        power = _number(r["power_w"], where, "power_w", problems)
        if energy is None and power is None and not (r["energy_j"] or r["power_w"] or "").strip():
            problems.append(f"{where}: energy_j/power_w: no measured figure; got both empty; expected an energy "
                            "(J per energy_per) or an average power (W)")
        per = (r["energy_per"] or "").strip()
        if per not in ENERGY_UNITS:
            problems.append(f"{where}: energy_per: unknown unit; got {per!r}; expected one of "
                            f"{', '.join(ENERGY_UNITS)}{did_you_mean(per, ENERGY_UNITS)}")
        covers = (r["power_covers"] or "").strip()
        if covers not in POWER_COVERS:
            problems.append(f"{where}: power_covers: unknown coverage; got {covers!r}; expected one of "
                            f"{', '.join(POWER_COVERS)}{did_you_mean(covers, list(POWER_COVERS))}")
        score_text = (r["in_score"] or "").strip()
        if score_text not in ("0", "1"):
            problems.append(f"{where}: in_score: invalid value; got {score_text!r}; expected 1 (scored) or 0 "
                            "(the notes say why not)")
        scored = score_text == "1"
        if scored and covers in POWER_COVERS and not POWER_COVERS[covers]:
            problems.append(f"{where}: in_score: a scored row whose power covers more than the device; got "
                            f"power_covers {covers!r}; expected in_score 0 (no cited rule converts it to device "
                            "power)")
        if scored and per in ENERGY_UNITS and per != "execution" and not (r["batch"] or "").strip():
            problems.append(f"{where}: batch: empty value; got ''; expected the batch that one execution serves "
                            f"(energy_per {per!r})")
        if energy is not None and power is not None and lat is not None and per == "execution":
            if abs(energy - power * lat) > CONSISTENCY_RTOL * energy:
                problems.append(f"{where}: energy_j: disagrees with power_w x latency_s; got {energy!r}; expected "
                                f"{power * lat!r} within {CONSISTENCY_RTOL:.1%}")
        batch = _int(r["batch"], where, "batch", problems)
        seq = _int(r["seq"], where, "seq", problems)
        context = _int(r["context"], where, "context", problems)
        if len(problems) > n0:
            continue
        rows.append(EnergyRow(
            id=rid, kind=r["kind"].strip(), workload=r["workload"].strip(), batch=batch, seq=seq, phase=phase,
            context=context, dtype=dtype, train=train_text == "1", device=device,
            framework=(r["framework"] or "").strip(), latency_s=lat, energy_j=energy, energy_per=per, power_w=power,
            power_stat=(r["power_stat"] or "").strip(), power_covers=covers, in_score=scored,
            metric_reported=r["metric_reported"] or "", source=r["source"].strip(), notes=r["notes"] or "",
            where=where))
    if problems:
        raise MeasurementError(format_problems(str(p), problems, "the energy dataset"))
    return rows


def predict_energy_row(row: EnergyRow, graphs: Any = None) -> dict[str, Any]:
    """Predicted latency (s), energy per ``energy_per`` unit (J) and average power (W) of one row.

    The graph is built like a latency measurement's (:class:`~simulator.calibration.predict.GraphCache`)
    and evaluated by the analytical engine on the row's catalog device (power mode included) under
    the run conditions its source and notes state (:func:`~simulator.calibration.predict.run_options`:
    fusion and CUDA graphs for TensorRT / torch.compile, a stated power limit replaces the TDP).
    """
    from hwmodels.spec import DeviceSpec, replace_path
    from simulator.calibration.predict import GraphCache, quiet_engine, run_options
    from simulator.engines.analytical import evaluate
    from simulator.hardware import load_hardware

    graphs = GraphCache() if graphs is None else graphs
    m = row.measurement()
    graph = graphs.get(m)
    opts, overrides = run_options({"source": row.source, "notes": row.notes, "metric_reported": row.metric_reported,
                                   "dtype": row.dtype})
    system = load_hardware(row.device)
    for path, value in overrides.items():
        system = replace_path(system, path if isinstance(system, DeviceSpec) else f"device.{path}", value)
    with quiet_engine():
        rep = evaluate(graph, system, opts)
    t = rep.totals
    units = row.units_per_execution()
    return {"latency_s": float(t.latency_s), "energy_j": float(t.energy_j) / units,
            "avg_power_w": float(t.avg_power_w), "dynamic_energy_j": float(t.dynamic_energy_j) / units,
            "static_energy_j": float(t.static_energy_j) / units,
            "power_capped": any(r.power_capped for r in rep.records), "units_per_execution": units}


def error_stats(predicted: Any, measured: Any) -> dict[str, Any]:
    """n, MAPE, median, p90 and max absolute percentage error and bias (percent) of paired values.

    ``bias`` is the geometric mean of ``predicted / measured`` minus one (positive: predictions high),
    as in :class:`~simulator.calibration.errors.ErrorSummary`. Empty input gives n 0 and NaNs.

    Examples
    --------
    >>> s = error_stats([110.0, 90.0], [100.0, 100.0])
    >>> s["n"], round(s["mape"], 6), round(s["bias"], 3)
    (2, 10.0, -0.501)
    """
    p = np.asarray(predicted, dtype=float)
    m = np.asarray(measured, dtype=float)
    if p.size == 0:
        nan = float("nan")
        return {"n": 0, "mape": nan, "median_ape": nan, "p90_ape": nan, "max_ape": nan, "bias": nan}
    ape = 100.0 * np.abs(p - m) / m
    return {"n": int(p.size), "mape": float(ape.mean()), "median_ape": float(np.median(ape)),
            "p90_ape": float(np.percentile(ape, 90)), "max_ape": float(ape.max()),
            "bias": float(100.0 * (math.exp(float(np.mean(np.log(p / m)))) - 1.0))}


def _reason(notes: str, limit: int = 110) -> str:
    """The first sentence of an unscored row's notes (after ``Not scored:``), shortened to ``limit`` characters."""
    text = notes.removeprefix("Not scored:").strip().split(". ")[0]
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


_METRICS = (("energy", "energy_j", "energy_j"), ("power", "power_w", "avg_power_w"), ("latency", "latency_s", "latency_s"))


def _group(recs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(recs)}
    for name, meas_key, _ in _METRICS:
        sel = [r for r in recs if r[f"{name}_error_pct"] is not None]
        out[name] = error_stats([r[f"predicted_{meas_key}"] for r in sel], [r[f"measured_{meas_key}"] for r in sel])
    sel = [r for r in recs if r.get("energy_at_measured_latency_j") is not None and r["measured_energy_j"] is not None]
    out["energy_at_measured_latency"] = error_stats([r["energy_at_measured_latency_j"] for r in sel],
                                                    [r["measured_energy_j"] for r in sel])
    out["cancellation"] = cancellation(out)
    return out


def cancellation(group: dict[str, Any]) -> dict[str, Any]:
    """Whether a group's energy error is latency and power errors that cancel.

    Energy is average power times latency, so its bias (geometric) is ``(1 + latency bias) x (1 +
    power bias) - 1`` on rows that give all three. The errors *cancel* when the latency and power
    biases have opposite signs and the energy bias is smaller in size than the larger of them: the
    energy figure then hides part of the error of the model that produced it.

    Examples
    --------
    >>> c = cancellation({"energy": {"n": 2, "bias": -15.0}, "latency": {"n": 2, "bias": 17.2},
    ...                   "power": {"n": 2, "bias": -27.5}})
    >>> c["cancel"], round(c["implied_energy_bias"], 1)
    (True, -15.0)
    """
    e, lat, pw = group["energy"], group["latency"], group["power"]
    if not (e["n"] and lat["n"] and pw["n"]):
        return {"cancel": False, "latency_bias": math.nan, "power_bias": math.nan, "implied_energy_bias": math.nan}
    lb, pb = float(lat["bias"]), float(pw["bias"])
    implied = 100.0 * ((1.0 + lb / 100.0) * (1.0 + pb / 100.0) - 1.0)
    cancel = lb * pb < 0 and abs(float(e["bias"])) < max(abs(lb), abs(pb))
    return {"cancel": bool(cancel), "latency_bias": lb, "power_bias": pb, "implied_energy_bias": implied}


def _energy_at_measured_latency(pred: dict[str, Any], measured_latency_s: float | None) -> float | None:
    """The predicted energy with the static part over the *measured* latency instead of the predicted one.

    ``dynamic + static x measured / predicted latency`` (the static energy is the idle power times
    the time): the energy model scored apart from the latency model. None without a measured latency.
    """
    if measured_latency_s is None or not pred["latency_s"] > 0:
        return None
    return pred["dynamic_energy_j"] + pred["static_energy_j"] * measured_latency_s / pred["latency_s"]


def validate_energy(path: str | Path | None = None) -> dict[str, Any]:
    """Predict every scored row; energy, average-power and latency errors side by side (percent, unfitted).

    Returns
    -------
    dict
        ``dataset``; ``rows`` (per row: id, kind, device, workload, dtype, in_score, energy_per,
        power_covers, measured_* / predicted_* for energy_j, power_w and latency_s, the signed
        ``*_error_pct`` where both exist, power_capped, ``energy_at_measured_latency_j``; unscored
        rows carry ``note``, the first sentence of their notes); ``all``, ``by_device`` and
        ``by_kind`` (each ``{"n", "energy", "power", "latency", "energy_at_measured_latency"}`` with
        :func:`error_stats` of the scored rows, and ``cancellation`` from :func:`cancellation`);
        ``not_scored`` (count).
    """
    from simulator.calibration.predict import GraphCache

    rows = load_energy_rows(path)
    graphs = GraphCache()
    recs: list[dict[str, Any]] = []
    for r in rows:
        rec: dict[str, Any] = {"id": r.id, "kind": r.kind, "device": r.device, "workload": r.workload,
                               "dtype": r.dtype, "batch": r.batch, "in_score": r.in_score,
                               "energy_per": r.energy_per, "power_covers": r.power_covers,
                               "measured_energy_j": r.energy_j, "measured_power_w": r.power_w,
                               "measured_latency_s": r.latency_s}
        if r.in_score:
            pred = predict_energy_row(r, graphs)
            rec.update(predicted_energy_j=pred["energy_j"], predicted_power_w=pred["avg_power_w"],
                       predicted_latency_s=pred["latency_s"], power_capped=pred["power_capped"])
            for name, meas_key, _ in _METRICS:
                meas = rec[f"measured_{meas_key}"]
                rec[f"{name}_error_pct"] = (None if meas is None
                                            else 100.0 * (rec[f"predicted_{meas_key}"] - meas) / meas)
            rec["energy_at_measured_latency_j"] = _energy_at_measured_latency(pred, r.latency_s)
        else:
            rec.update(predicted_energy_j=None, predicted_power_w=None, predicted_latency_s=None,
                       power_capped=None, energy_at_measured_latency_j=None, energy_error_pct=None, power_error_pct=None, latency_error_pct=None,
                       note=_reason(r.notes))
        recs.append(rec)
    scored = [x for x in recs if x["in_score"]]
    return {
        "dataset": str(Path(path) if path is not None else ENERGY_DATASET),
        "rows": recs,
        "all": _group(scored),
        "by_device": {d: _group([x for x in scored if x["device"] == d]) for d in sorted({x["device"] for x in scored})},
        "by_kind": {k: _group([x for x in scored if x["kind"] == k]) for k in sorted({x["kind"] for x in scored})},
        "not_scored": len(recs) - len(scored),
    }
