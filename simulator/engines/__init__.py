"""Composition engines with one contract: ``(graph, system, options) -> CostReport``.

:mod:`~simulator.engines.analytical` (:func:`evaluate`) sums per-op costs in dependency order with
fusion, L2 residency, launch floors and the power cap; :mod:`~simulator.engines.discrete_event`
(:func:`simulate`) runs the same kernels as SimPy processes on streams, a host launch queue and
links. With one stream the two agree exactly (a test enforces it).
"""

from __future__ import annotations

from simulator.lazy import lazy_exports

#: Public name -> the module it is re-exported from (imported on first use, PEP 562).
_EXPORTS: dict[str, str] = {
    "EvalOptions": "simulator.engines.analytical",
    "evaluate": "simulator.engines.analytical",
    "simulate": "simulator.engines.discrete_event",
}

__all__ = ["EvalOptions", "evaluate", "simulate"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
