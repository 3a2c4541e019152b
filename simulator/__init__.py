"""Joins workloads to hardware: lowering rules, engines, results, calibration, sweeps and the CLI.

The names below are resolved on first use (PEP 562 ``__getattr__``), so ``import simulator`` (and the
``nodeperf`` command, which starts here) loads no engine until one is asked for.
"""

from __future__ import annotations

from simulator.lazy import lazy_exports

#: Public name -> the module it is re-exported from.
_EXPORTS: dict[str, str] = {
    "evaluate": "simulator.front",
    "EvalOptions": "simulator.engines.options",
    "simulate": "simulator.engines.discrete_event",
    "CostReport": "simulator.report.report",
    "OpCost": "simulator.report.report",
}

__all__ = ["evaluate", "simulate", "EvalOptions", "CostReport", "OpCost"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
