"""Fit a device spec's empirical factors to measured timings, report errors honestly, and write/apply overlays.

The :class:`Calibrator` follows scikit-learn's contract: parameters are given at construction
(``params``: the dotted spec paths it may tune, with bounds), :meth:`Calibrator.fit` learns from a
:class:`~simulator.calibration.measurements.MeasurementSet` and a system spec and sets attributes ending in
``_``; :meth:`~Calibrator.predict` and :meth:`~Calibrator.error_summary` use the fitted spec.

The fit is a bounded least-squares problem (``scipy.optimize.least_squares``) over the log of each
parameter relative to its datasheet-derived default; residuals are ``log(predicted / measured)`` per
measurement (so a 2x over- and under-prediction weigh the same) plus a mild ridge
``sqrt(regularization * n / p) * log(value / default)`` per parameter (n rows, p parameters)
pulling towards the defaults.

The result is an overlay TOML (``[values]`` by dotted path, a ``source`` line, and a
``[calibration]`` table of provenance: measurement file and hash, date, bounds, defaults and error
summaries before/after) that :func:`simulator.hardware.apply_calibration` applies to any spec.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hwmodels.spec import DeviceSpec, SpecError, SystemSpec, get_path, replace_path
from simulator.calibration.errors import ErrorSummary, summarize_errors
from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import GraphCache, default_predict, quiet_engine
from simulator.hardware import OVERLAY_SCHEMA, CalibrationError, device_of

__all__ = [
    "Param",
    "Calibrator",
    "write_overlay",
    "overlay_text",
    "DEFAULT_PARAMS",
    "FIT_SETTINGS",
]

logger = logging.getLogger(__name__)

#: Points per parameter of the coarse log-grid search that seeds the least-squares fit.
_GRID_POINTS = 7
#: Finite-difference step of the Jacobian in log-parameter space (a 0.1 % change of each value).
_LOG_STEP = 1e-3


PredictFn = Callable[[Any, DeviceSpec | SystemSpec], float]


# ------------------------------------------------------------------------------------------------
# parameters


@dataclass(frozen=True)
class Param:
    """A tunable spec field: dotted path (device-relative) and absolute bounds (SI units)."""

    path: str
    lower: float
    upper: float
    linear: bool = False  # a field whose default is 0 (an additive time): fitted on a linear scale


#: Bounds of the CPU fields relative to their defaults (``"x"`` + factor) or absolute (plain numbers).
#: Peak rates may rise above the derived value: it uses the nominal /proc/cpuinfo clock, and the cores
#: boost above it. The main-memory bandwidth is a short NumPy copy probe and is refined itself (a
#: framework's streaming kernels may beat it, which a fraction <= 1 cannot express); so are the cache
#: levels' bandwidths (probes of one thread; a probe slower than the level behind it is clamped to that
#: level's value by hwmodels.host, so the true value may lie well above it), and a level the device
#: does not have (a host without an L3) is left out of the default list.
_CPU_BOUNDS: dict[str, tuple[float | str, float | str]] = {
    "compute.tensor_flops_per_s.fp32": ("x0.5", "x3"),
    "compute.tensor_flops_per_s.bf16": ("x0.5", "x3"),
    "cpu.gemm_peak_fraction": (0.05, 1.0),
    "cpu.dnn_peak_fraction": (0.05, 1.0),
    "cpu.gemm_half_m": (0.5, 256.0),
    "cpu.gemm_half_n": (0.5, 256.0),
    "cpu.gemm_half_k": (0.5, 256.0),
    "efficiency.vector_peak_fraction": (0.01, 1.0),
    "cpu.special_function_s.exp": ("x0.1", "x10"),
    "cpu.special_function_s.tanh": ("x0.1", "x30"),
    "cpu.strided_copy_run_s": ("x0.1", "x10"),
    "memory.dram.read_bandwidth_bytes_per_s": ("x0.5", "x2"),
    "memory.l3.read_bandwidth_bytes_per_s": ("x0.5", "x4"),
    "memory.l2.read_bandwidth_bytes_per_s": ("x0.5", "x4"),
    "efficiency.l2_bandwidth_fraction": (0.05, 1.0),
    "efficiency.launch_overhead_s": ("x0.1", "x100"),
    "cpu.library_call_overhead_s": ("x0.1", "x300"),
    # ATen's portable bf16/fp16 loops on a CPU without oneDNN's path for the dtype (hwmodels.host): their
    # rate spreads by a factor of ~2 either side of the measured median from shape to shape
    "cpu.reference_gemm_flops_per_s.bf16": ("x0.3", "x3"),
    "cpu.reference_gemm_flops_per_s.fp16": ("x0.3", "x3"),
    # a latency-bound chain: the clock it runs at (boost) and the compiler's scheduling move it
    "cpu.row_moments_s": ("x0.3", "x3"),
}


def _levels_present(spec: Mapping[str, Any], device: DeviceSpec) -> dict[str, Any]:
    """A default parameter mapping without the fields ``device`` lacks or never uses: the
    ``memory.<level>.*`` entries of levels it does not have, the ``cpu.reference_gemm_flops_per_s``
    entries of dtypes its library runs, and, for a dtype that runs the reference loops instead, the
    library path's ``compute.tensor_flops_per_s`` entry (no CPU rule prices a contraction with it), and
    ``cpu.row_moments_s`` where it is 0 (no separate figure)."""
    names = {lv.name for lv in device.memory}
    reference = set(device.cpu.reference_gemm_flops_per_s) if device.cpu is not None else set()

    def used(path: str) -> bool:
        parts = path.split(".")
        if parts[0] == "memory":
            return parts[1] in names
        if path.startswith("cpu.reference_gemm_flops_per_s."):
            return parts[-1] in reference
        if path.startswith("compute.tensor_flops_per_s."):
            return parts[-1] not in reference
        if path == "cpu.row_moments_s":  # 0: no separate figure, nothing to scale
            return device.cpu is not None and device.cpu.row_moments_s > 0
        return True

    return {p: b for p, b in spec.items() if used(p)}


#: Fields calibrated by default on a CPU spec without a ``cpu`` section (plain roofline).
_CPU_PLAIN_PARAMS = ("efficiency.tensor_peak_fraction", "efficiency.vector_peak_fraction",
                     "efficiency.dram_bandwidth_fraction", "efficiency.l2_bandwidth_fraction",
                     "efficiency.launch_overhead_s", "compute.tensor_flops_per_s.bf16")

#: Fields calibrated by default, by device kind (a mapping gives bounds; see :data:`_CPU_BOUNDS`).
DEFAULT_PARAMS: dict[str, tuple[str, ...] | dict[str, tuple[float | str, float | str]]] = {
    "cpu": _CPU_BOUNDS,
    "gpu": {"efficiency.tensor_peak_fraction": None, "efficiency.vector_peak_fraction": None,
            "efficiency.dram_bandwidth_fraction": None, "efficiency.launch_overhead_s": None,
            # additive device-side time per kernel: from 1% of its sourced default (a default of 0, a
            # device without a figure, is fitted on a linear scale from 0) up to 20 us
            "efficiency.kernel_device_time_s": ("x0.01", 20e-6)},
    "tpu": ("efficiency.tensor_peak_fraction", "efficiency.dram_bandwidth_fraction",
            "efficiency.launch_overhead_s"),
}


#: Fit settings by device kind. CPUs: many fields with probe-measured defaults and a clean suite
#: measured on the same machine, so plain least squares and a weak pull. Accelerators: a few fields
#: fitted to small, heterogeneous sets (published kernel and end-to-end rows, some of which include
#: work outside the graph), so a robust loss close to least absolute log error (what MAPE measures)
#: and a firmer pull towards the sourced defaults.
FIT_SETTINGS: dict[str, dict[str, Any]] = {
    "cpu": {"loss": "linear", "f_scale": 0.2, "regularization": 0.01},
    "gpu": {"loss": "soft_l1", "f_scale": 0.05, "regularization": 0.04},
    "tpu": {"loss": "soft_l1", "f_scale": 0.05, "regularization": 0.04},
}


def _default_bounds(path: str, value: float) -> tuple[float, float]:
    leaf = path.rsplit(".", 1)[-1]
    if leaf.endswith("_fraction"):
        return 0.01, 1.0
    if leaf.endswith("_s"):
        return value / 100.0, value * 100.0
    return value / 10.0, value * 10.0


def _bound(b: float | str, value: float, path: str) -> float:
    """An absolute bound, or ``"xF"``: F times the default ``value``."""
    try:
        if isinstance(b, str):
            if not b.startswith("x"):
                raise ValueError(b)
            out = float(b[1:]) * value
        else:
            out = float(b)
    except (TypeError, ValueError):
        raise SpecError(f"calibration params: {path}: bound; got {b!r}; expected a number or 'x<factor>'") from None
    if not math.isfinite(out):
        raise SpecError(f"calibration params: {path}: bound not finite; got {b!r}; expected a finite number or "
                        "'x<factor>'")
    return out


def _table_scale_bounds(device: DeviceSpec, path: str) -> tuple[float, float] | None:
    """Default bounds of a factor on a table-valued field (``X_scale`` scales every ratio of the table ``X``,
    ``efficiency.flash2_causal_fwd_ratio_scale``): 0.5 up to the factor that takes the table's largest ratio to 1;
    None for any other path. A device without the table has nothing to fit (a located error)."""
    base = path.removesuffix("_scale")
    if base == path:
        return None
    try:
        table = get_path(device, base)
    except SpecError:
        return None
    if not isinstance(table, tuple):
        return None
    if not table:
        raise SpecError(f"calibration params: {path}: nothing to scale on {device.name}; got an empty {base}; "
                        "expected a device whose catalog gives the table (Hopper)")
    return 0.5, 1.0 / max(r for _, r in table)


def _check_table_scale_upper(path: str, upper: float, most: float) -> None:
    """Refuse an upper bound on a table's scale above ``most`` (the factor that takes the table's largest ratio
    to 1): the scaled ratios are held at 1, so the fit would be flat above it."""
    if upper > most * (1.0 + 1e-12):
        base = path.removesuffix("_scale")
        raise SpecError(f"calibration params: {path}: upper bound; got {upper:.6g}; expected at most {most:.6g}, "
                        f"the factor that takes the largest ratio of {base} to 1 (the scaled ratios are held at 1, "
                        "so the fit is flat above it)")


def _params(spec: Iterable[str] | Mapping[str, tuple[float | str, float | str] | None] | Iterable[Param],
            device: DeviceSpec) -> list[Param]:
    out: list[Param] = []
    items: list[tuple[str, tuple[float, float] | None]] = []
    if isinstance(spec, Mapping):
        items = [(str(k), v) for k, v in spec.items()]
    else:
        for p in spec:
            if isinstance(p, Param):
                items.append((p.path, (p.lower, p.upper)))
            else:
                items.append((str(p), None))
    for path, bounds in items:
        try:
            v = get_path(device, path)
        except SpecError as exc:
            raise SpecError(f"calibration params: {exc}") from None
        table_bounds = _table_scale_bounds(device, path)  # (a device without the table: refused here)
        if bounds is not None and table_bounds is not None:
            _check_table_scale_upper(path, _bound(bounds[1], float(v), path), table_bounds[1])
        bounds = bounds if bounds is not None else table_bounds
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise SpecError(f"calibration params: {path}: not a numeric field; got {v!r}; expected a path to a number")
        if v == 0 and bounds is not None:  # an additive term not modelled by default: fit on a linear scale
            lo, hi = _bound(bounds[0], 0.0, path), _bound(bounds[1], 0.0, path)
            if not (lo == 0 < hi):
                raise SpecError(f"calibration params: {path}: bounds ({lo}, {hi}) for a field whose default is 0; "
                                "expected (0, upper) with upper > 0")
            out.append(Param(path, 0.0, float(hi), linear=True))
            continue
        if not v > 0:
            raise SpecError(f"calibration params: {path}: default must be positive to fit on a log scale (or 0 with "
                            f"bounds (0, upper)); got {v!r}")
        lo, hi = (_bound(bounds[0], float(v), path), _bound(bounds[1], float(v), path)) if bounds is not None \
            else _default_bounds(path, float(v))
        if not 0 < lo <= float(v) <= hi:
            lo, hi = min(lo, float(v)), max(hi, float(v))
            if lo <= 0:
                raise SpecError(f"calibration params: {path}: bounds ({lo}, {hi}); expected 0 < lower <= upper")
        out.append(Param(path, float(lo), float(hi)))
    if not out:
        raise SpecError("calibration params: none given; expected at least one dotted spec path")
    return out


def _with_values(system: DeviceSpec | SystemSpec, values: Mapping[str, float]) -> DeviceSpec | SystemSpec:
    dev = device_of(system)
    for path, v in values.items():
        cur = get_path(dev, path)
        dev = replace_path(dev, path, int(round(v)) if isinstance(cur, int) and not isinstance(cur, bool) else float(v))
    if isinstance(system, SystemSpec):
        return dataclasses.replace(system, device=dev)
    return dev


# ------------------------------------------------------------------------------------------------
# the calibrator


def _located(where: str, msg: str) -> str:
    """``msg`` led by the row's location ``where``, once: :func:`default_predict` already names the row in the
    errors it raises from the row's notes (``<file>:<line>: notes: ...``)."""
    return msg if msg.startswith(f"{where}: ") else f"{where}: {msg}"


class Calibrator:
    """Least-squares calibration of named spec fields against measurements.

    Parameters
    ----------
    params
        Dotted device paths to tune: a list (default bounds: fractions in [0.01, 1], times within
        100x, other quantities within 10x of the default), a mapping ``path -> (lower, upper)`` in
        SI units, or :class:`Param` objects. None: :data:`DEFAULT_PARAMS` of the device kind.
    regularization
        Weight of the pull towards the defaults: scaled by the number of rows and shared among the
        fitted parameters (so adding a field does not stiffen the fit).
    predict
        ``predict(graph, system) -> seconds``; default :func:`default_predict` (the analytical engine).
    max_nfev
        Evaluation budget of the optimiser.
    loss, f_scale
        Loss of ``scipy.optimize.least_squares`` on the log ratios: ``"linear"`` (plain least
        squares) or a robust one such as ``"soft_l1"`` with scale ``f_scale`` (0.05 is about 5%),
        which lets cases the model cannot represent pull less. None (with ``regularization`` None):
        the device kind's entry of :data:`FIT_SETTINGS`.

    Attributes (after :meth:`fit`)
    ------------------------------
    params_ : dict[str, float]
        Fitted values by path.
    defaults_ : dict[str, float]
        Values before calibration.
    bounds_ : dict[str, tuple[float, float]]
    system_ : DeviceSpec | SystemSpec
        The calibrated spec.
    before_, after_ : ErrorSummary
        Errors on the training measurements with the default and the fitted spec.
    result_ : dict
        Optimiser outcome (success, status, message, nfev, cost).
    measurements_hash_ : str
        Content hash of the training set.
    """

    def __init__(
        self,
        params: Iterable[str] | Mapping[str, tuple[float, float] | None] | Iterable[Param] | None = None,
        *,
        regularization: float | None = None,
        predict: PredictFn | None = None,
        max_nfev: int = 200,
        loss: str | None = None,
        f_scale: float | None = None,
    ) -> None:
        if regularization is not None and (isinstance(regularization, bool)
                                           or not isinstance(regularization, int | float)
                                           or not math.isfinite(regularization) or regularization < 0):
            raise ValueError(f"Calibrator: regularization; got {regularization!r}; expected a finite number >= 0")
        self.params = params
        self.regularization = regularization
        self.predict_fn = predict
        self.max_nfev = max_nfev
        self.loss = loss
        self.f_scale = f_scale
        self._graphs = GraphCache()

    # --- prediction ------------------------------------------------------------------------------
    def _predict_with(self, measurements: MeasurementSet, system: DeviceSpec | SystemSpec) -> np.ndarray:
        out = np.empty(len(measurements))
        with quiet_engine():
            for i, m in enumerate(measurements):
                graph = self._graphs.get(m)
                try:  # the default knows how to honour each measurement's run conditions
                    out[i] = (default_predict(graph, system, m) if self.predict_fn is None
                              else self.predict_fn(graph, system))
                except (ValueError, NotImplementedError) as exc:  # located: which row could not be predicted
                    raise type(exc)(_located(m.where or m.id, str(exc))) from None
        bad = np.flatnonzero(~(np.isfinite(out) & (out > 0)))
        if bad.size:
            m = measurements[int(bad[0])]
            raise CalibrationError(f"{m.where or m.id}: prediction; got {out[bad[0]]!r} s; expected a positive finite time")
        return out

    def predict(self, measurements: MeasurementSet, system: DeviceSpec | SystemSpec | None = None) -> np.ndarray:
        """Predicted times (s) of the measured cases, with ``system`` or else the fitted spec."""
        if system is None:
            self._check_fitted()
            system = self.system_
        return self._predict_with(measurements, system)

    def error_summary(self, measurements: MeasurementSet, system: DeviceSpec | SystemSpec | None = None) -> ErrorSummary:
        """:class:`ErrorSummary` of :meth:`predict` against the measurements."""
        return summarize_errors(self.predict(measurements, system), measurements)

    def _check_fitted(self) -> None:
        if not hasattr(self, "system_"):
            raise CalibrationError("Calibrator: not fitted; expected fit(measurements, system) first")

    # --- fitting ------------------------------------------------------------------------------------
    def fit(self, measurements: MeasurementSet, system: DeviceSpec | SystemSpec, *,
            progress: bool | None = None) -> Calibrator:
        """Fit the parameters to ``measurements`` (all rows must be of ``system``'s device).

        ``progress``: a counter of model evaluations (each predicts every row) on standard error
        (None: see :func:`simulator.report.progress.progress_enabled`).

        Raises
        ------
        CalibrationError
            No rows, the optimiser failed to converge, or the fitted spec predicts the training
            set worse than the defaults (nothing is fitted then).
        """
        from scipy.optimize import least_squares

        dev = device_of(system)
        if len(measurements) == 0:
            raise CalibrationError(f"{measurements.source}: no measurements to fit; expected rows for {dev.name!r}")
        others = sorted({m.device for m in measurements} - {dev.name.lower()})
        if others:
            raise CalibrationError(f"{measurements.source}: rows of other devices {', '.join(others)}; expected only "
                                   f"{dev.name!r} (filter the set by device first)")
        params = _params(self._param_spec(dev), dev)
        kind_settings = FIT_SETTINGS.get(dev.kind, FIT_SETTINGS["gpu"])
        self.loss_ = self.loss if self.loss is not None else kind_settings["loss"]
        self.f_scale_ = self.f_scale if self.f_scale is not None else kind_settings["f_scale"]
        self.regularization_ = (self.regularization if self.regularization is not None
                                else kind_settings["regularization"])
        v0 = np.array([float(get_path(dev, p.path)) for p in params])
        lin = np.array([p.linear for p in params])
        # log-scale parameters: x = log(value / default); linear ones (default 0): x = value / upper
        scale = np.where(lin, [p.upper for p in params], 1.0)
        safe_v0 = np.where(lin, 1.0, v0)
        lo = np.where(lin, 0.0, np.log(np.array([p.lower if not p.linear else 1.0 for p in params]) / safe_v0))
        hi = np.where(lin, 1.0, np.log(np.array([p.upper for p in params]) / safe_v0))
        meas = measurements.median_s
        logm = np.log(meas)
        # the prior's total weight does not grow with the number of fitted fields
        reg = math.sqrt(self.regularization_ * len(measurements) / len(params))
        # warm the graph cache (and fail early, located, on a bad workload)
        base_pred = self._predict_with(measurements, system)

        def values(x: np.ndarray) -> dict[str, float]:
            vals = np.where(lin, x * scale, safe_v0 * np.exp(np.where(lin, 0.0, x)))
            return {p.path: float(v) for p, v in zip(params, vals, strict=True)}

        from simulator.report.progress import progress_bar

        bar = progress_bar(None, desc=f"calibrate {dev.name}", unit="eval", enabled=progress)

        def residuals(x: np.ndarray) -> np.ndarray:
            pred = self._predict_with(measurements, _with_values(system, values(x)))
            bar.update(1)
            return np.concatenate([np.log(pred) - logm, reg * x])

        def jacobian(x: np.ndarray) -> np.ndarray:
            return _forward_jacobian(residuals, x, hi)

        try:
            x0 = self._coarse_start(residuals, lo, hi, self.loss_, self.f_scale_)
            try:
                res = least_squares(residuals, x0, jac=jacobian, bounds=(lo, hi), method="trf", x_scale=1.0,
                                    loss=self.loss_, f_scale=self.f_scale_, max_nfev=self.max_nfev)
            except (ValueError, FloatingPointError) as exc:
                raise CalibrationError(f"{measurements.source}: calibration failed; got {exc}; "
                                       "expected a solvable fit") from None
        finally:
            bar.close()
        self.result_ = {"success": bool(res.success), "status": int(res.status), "message": str(res.message),
                        "nfev": int(res.nfev), "cost": float(res.cost)}
        if not res.success or not np.all(np.isfinite(res.x)):
            raise CalibrationError(f"{measurements.source}: the fit did not converge; got status {res.status} "
                                   f"({res.message}); expected convergence within {self.max_nfev} evaluations")
        fitted = values(res.x)
        new_system = _with_values(system, fitted)
        before = summarize_errors(base_pred, measurements)
        after = summarize_errors(self._predict_with(measurements, new_system), measurements)
        if after.mape > before.mape * (1 + 1e-9):
            raise CalibrationError(f"{measurements.source}: calibration made the training error worse; got MAPE "
                                   f"{after.mape:.2f}% after vs {before.mape:.2f}% before; expected an improvement")
        self.params_ = fitted
        self.defaults_ = values(np.zeros(len(params)))
        self.bounds_ = {p.path: (p.lower, p.upper) for p in params}
        self.system_ = new_system
        self.before_ = before
        self.after_ = after
        self.measurements_hash_ = measurements.content_hash()
        self.device_name_ = dev.name
        self.device_kind_ = dev.kind
        self.fitted_at_ = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
        return self

    def _param_spec(self, dev: DeviceSpec):  # noqa: ANN202 - the spec forms _params accepts
        """The parameters to fit on ``dev``: the user's, else the defaults of its kind."""
        if self.params is not None:
            return self.params
        if dev.kind == "cpu" and dev.cpu is None:  # a CPU without kernel-library fields: the plain roofline's
            return _CPU_PLAIN_PARAMS
        spec = DEFAULT_PARAMS.get(dev.kind, DEFAULT_PARAMS["gpu"])
        if isinstance(spec, Mapping):  # a default list names levels a host may lack (no L3 detected)
            spec = _levels_present(spec, dev)
        return spec

    @staticmethod
    def _coarse_start(residuals: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray,
                      self_loss: str, f_scale: float) -> np.ndarray:
        """A starting point from two passes of coordinate search over a log grid of each parameter.

        Roofline models take the larger of compute and memory time, so a factor whose term is
        nowhere the larger has a zero gradient at the defaults; a coarse search finds the basin
        the local least-squares solver then refines.
        """
        x = np.clip(np.zeros(lo.size), lo, hi)
        best = float(np.sum(_robust(residuals(x), self_loss, f_scale)))
        for _ in range(2):
            for i in range(lo.size):
                for cand in np.linspace(lo[i], hi[i], _GRID_POINTS):
                    if cand == x[i]:
                        continue
                    trial = x.copy()
                    trial[i] = cand
                    c = float(np.sum(_robust(residuals(trial), self_loss, f_scale)))
                    if c < best:
                        best, x = c, trial
        return x

    # --- overlay ------------------------------------------------------------------------------------
    def overlay(self, *, measurements_file: str = "", extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The calibration overlay as a mapping (see :func:`write_overlay`)."""
        self._check_fitted()
        from hwmodels.loader import field_unit

        dev = device_of(self.system_)
        src = (f"measured: calibrated by nodeperf calibrate on {measurements_file or 'measurements'} "
               f"(sha256 {self.measurements_hash_[:16]}), {self.fitted_at_}")
        vals: dict[str, Any] = {}
        for path, v in self.params_.items():
            unit = field_unit(type(dev), path) or "1"
            vals[path] = v if unit == "1" else f"{v!r} {unit}"
        info: dict[str, Any] = {
            "device": self.device_name_, "device_kind": self.device_kind_, "measurements": measurements_file,
            "measurements_sha256": self.measurements_hash_, "date": self.fitted_at_,
            "regularization": self.regularization_, "loss": self.loss_, "f_scale": self.f_scale_,
            "optimizer": dict(self.result_),
            "defaults": dict(self.defaults_), "bounds": {k: list(v) for k, v in self.bounds_.items()},
            "errors": {"train": {"before": self.before_.to_json(classes=False),
                                 "after": self.after_.to_json(classes=False)}},
        }
        if extra:
            for k, v in extra.items():
                if k == "errors":
                    info["errors"].update(v)
                else:
                    info[k] = v
        return {"schema": OVERLAY_SCHEMA, "source": src, "values": vals, "calibration": info}


def _robust(r: np.ndarray, loss: str, f_scale: float) -> np.ndarray:
    """Per-residual cost as scipy's least_squares defines it (linear or soft_l1; others as linear)."""
    z = (r / f_scale) ** 2
    if loss == "soft_l1":
        return 2 * f_scale**2 * (np.sqrt(1 + z) - 1)
    return r**2


# ------------------------------------------------------------------------------------------------
# TOML output and application


def overlay_text(overlay: Mapping[str, Any]) -> str:
    """The TOML text of an overlay mapping (from :meth:`Calibrator.overlay`), checked to read back.

    Written by ``tomli_w``; floats keep their ``repr`` (a fitted value reads back bit for bit)."""
    import tomli_w

    header = ("# nodeperf calibration overlay: apply with `--calibration FILE` (predict, validate).\n"
              "# [values] are dotted device paths; [calibration] records where they came from.\n")
    body = {"schema": overlay["schema"], "source": overlay["source"], "values": overlay["values"],
            "calibration": overlay["calibration"]}
    try:
        text = header + tomli_w.dumps(body)
    except TypeError as exc:
        raise TypeError(f"overlay: cannot write it as TOML: {exc}") from None
    tomllib.loads(text)  # never write a file we could not read back
    return text


def write_overlay(overlay: Mapping[str, Any], path: str | Path) -> None:
    """Write an overlay mapping (from :meth:`Calibrator.overlay`) as TOML (:func:`overlay_text`)."""
    Path(path).write_text(overlay_text(overlay), encoding="utf-8")


def _forward_jacobian(residuals: Callable[[np.ndarray], np.ndarray], x: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Forward-difference Jacobian of ``residuals`` at ``x`` with an absolute step in log space.

    scipy's relative ``diff_step`` would take a vanishing step for a parameter sitting at its default
    (x = 0) and freeze it there.
    """
    r0 = residuals(x)
    jac = np.empty((r0.size, x.size))
    for i in range(x.size):
        h = _LOG_STEP if x[i] + _LOG_STEP <= hi[i] else -_LOG_STEP
        xi = x.copy()
        xi[i] += h
        jac[:, i] = (residuals(xi) - r0) / h
    return jac
