"""Measurement and calibration: the measurement format, the timing harness and graph executor, the
fit of a spec's empirical factors, error summaries and validation against published data.

Modules, leaves first: :mod:`~simulator.calibration.measurements` (rows and files),
:mod:`~simulator.calibration.errors` (:class:`ErrorSummary`), :mod:`~simulator.calibration.predict`
(the run conditions a row states and how it is predicted), :mod:`~simulator.calibration.fit`
(:class:`Calibrator`, overlays), :mod:`~simulator.calibration.validation` (the published set),
:mod:`~simulator.calibration.executor` and :mod:`~simulator.calibration.harness` (measuring with
torch, imported lazily). Overlays are read and applied by :mod:`simulator.hardware`.
"""

from simulator.calibration.errors import ErrorSummary, summarize_errors
from simulator.calibration.fit import DEFAULT_PARAMS, FIT_SETTINGS, Calibrator, Param, write_overlay
from simulator.calibration.measurements import Measurement, MeasurementError, MeasurementSet
from simulator.calibration.predict import default_predict, run_options
from simulator.hardware import OVERLAY_SCHEMA, CalibrationError, apply_calibration, load_calibration

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
