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

__all__ = ["EvalOptions", "evaluate", "simulate", "CLOCK_SPAN_S"]

#: Longest span of simulated time (s) an event clock of float64 seconds keeps in 1 ns steps: 2**52 ns (about 52
#: days); beyond it an event's microseconds vanish into the clock's rounding. The one bound the serving and
#: real-time simulators hold their spans, periods and horizons to.
CLOCK_SPAN_S = 2.0**52 * 1e-9

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
