"""Results and their writers: per-op :class:`OpCost` records (:class:`ScheduledOpCost` with its place in
a simulated schedule), the :class:`CostReport`, the memory check, number formatting for tables, and the
Chrome trace writer (:mod:`simulator.report.trace`)."""

from __future__ import annotations

from simulator.lazy import lazy_exports

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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
