"""Results and their writers: per-op :class:`OpCost` records (:class:`ScheduledOpCost` with its place in
a simulated schedule), the :class:`CostReport`, the memory check, number formatting for tables, and the
Chrome trace writer (:mod:`simulator.report.trace`)."""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module it is re-exported from (imported on first use, PEP 562).
_EXPORTS: dict[str, str] = {
    "BOUNDS": "simulator.report.report",
    "BYTE_LEVELS": "simulator.report.report",
    "CostReport": "simulator.report.report",
    "MemoryCheck": "simulator.report.report",
    "OpCost": "simulator.report.report",
    "Totals": "simulator.report.report",
    "format_si": "simulator.report.report",
    "ScheduledOpCost": "simulator.report.scheduled",
}

__all__ = ["OpCost", "Totals", "MemoryCheck", "CostReport", "BOUNDS", "BYTE_LEVELS", "format_si", "ScheduledOpCost"]


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
