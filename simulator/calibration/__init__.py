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

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    """A public name (or a submodule) imported on first use: importing the package loads none of them."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name.isidentifier() and not name.startswith("_"):
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
