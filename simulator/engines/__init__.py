"""Composition engines with one contract: ``(graph, system, options) -> CostReport``.

:mod:`~simulator.engines.analytical` (:func:`evaluate`) sums per-op costs in dependency order with
fusion, L2 residency, launch floors and the power cap; :mod:`~simulator.engines.discrete_event`
(:func:`simulate`) runs the same kernels as SimPy processes on streams, a host launch queue and
links. With one stream the two agree exactly (a test enforces it).
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module it is re-exported from (imported on first use, PEP 562).
_EXPORTS: dict[str, str] = {
    "EvalOptions": "simulator.engines.analytical",
    "evaluate": "simulator.engines.analytical",
    "simulate": "simulator.engines.discrete_event",
}

__all__ = ["EvalOptions", "evaluate", "simulate"]


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
