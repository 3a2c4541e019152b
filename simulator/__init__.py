"""Joins workloads to hardware: lowering rules, engines, results, calibration, sweeps and the CLI.

The names below are resolved on first use (PEP 562 ``__getattr__``), so ``import simulator`` (and the
``nodeperf`` command, which starts here) loads no engine until one is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module it is re-exported from.
_EXPORTS: dict[str, str] = {
    "evaluate": "simulator.front",
    "EvalOptions": "simulator.engines.options",
    "simulate": "simulator.engines.discrete_event",
    "CostReport": "simulator.report.report",
    "OpCost": "simulator.report.report",
}

__all__ = ["evaluate", "simulate", "EvalOptions", "CostReport", "OpCost"]


def __getattr__(name: str) -> Any:
    """A public name, or a subpackage (``simulator.engines``), imported on first use."""
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
