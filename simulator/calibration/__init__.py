"""Measurement and calibration: the measurement format, the timing harness and graph executor, the
fit of a spec's empirical factors, error summaries and validation against published data.

Modules, leaves first: :mod:`~simulator.calibration.measurements` (rows and files),
:mod:`~simulator.calibration.errors` (:class:`ErrorSummary`), :mod:`~simulator.calibration.predict`
(the run conditions a row states and how it is predicted), :mod:`~simulator.calibration.fit`
(:class:`Calibrator`, overlays), :mod:`~simulator.calibration.validation` (the published set),
:mod:`~simulator.calibration.executor` and :mod:`~simulator.calibration.harness` (measuring with
torch, imported lazily). Overlays are read and applied by :mod:`simulator.hardware`.
"""

from __future__ import annotations

from simulator.lazy import lazy_exports

#: Public name -> the module it is re-exported from (imported on first use, PEP 562).
_EXPORTS: dict[str, str] = {
    "ErrorSummary": "simulator.calibration.errors",
    "summarize_errors": "simulator.calibration.errors",
    "DEFAULT_PARAMS": "simulator.calibration.fit",
    "FIT_SETTINGS": "simulator.calibration.fit",
    "Calibrator": "simulator.calibration.fit",
    "Param": "simulator.calibration.fit",
    "write_overlay": "simulator.calibration.fit",
    "Measurement": "simulator.calibration.measurements",
    "MeasurementError": "simulator.calibration.measurements",
    "MeasurementSet": "simulator.calibration.measurements",
    "default_predict": "simulator.calibration.predict",
    "run_options": "simulator.calibration.predict",
    "OVERLAY_SCHEMA": "simulator.hardware",
    "CalibrationError": "simulator.hardware",
    "apply_calibration": "simulator.hardware",
    "load_calibration": "simulator.hardware",
}

__all__ = [
    "Calibrator",
    "CalibrationError",
    "Param",
    "DEFAULT_PARAMS",
    "FIT_SETTINGS",
    "ErrorSummary",
    "summarize_errors",
    "Measurement",
    "MeasurementError",
    "MeasurementSet",
    "default_predict",
    "run_options",
    "write_overlay",
    "load_calibration",
    "apply_calibration",
    "OVERLAY_SCHEMA",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
