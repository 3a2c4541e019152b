"""Results and their writers: per-op :class:`OpCost` records, the :class:`CostReport`, the memory check,
number formatting for tables, and the Chrome trace writer (:mod:`simulator.report.trace`)."""

from simulator.report.report import (
    BOUNDS,
    BYTE_LEVELS,
    CostReport,
    MemoryCheck,
    OpCost,
    Totals,
    format_si,
)

__all__ = ["OpCost", "Totals", "MemoryCheck", "CostReport", "BOUNDS", "BYTE_LEVELS", "format_si"]
