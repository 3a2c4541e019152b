"""Composition engines with one contract: ``(graph, system, options) -> CostReport``.

:mod:`~simulator.engines.analytical` (:func:`evaluate`) sums per-op costs in dependency order with
fusion, L2 residency, launch floors and the power cap; :mod:`~simulator.engines.discrete_event`
(:func:`simulate`) runs the same kernels as SimPy processes on streams, a host launch queue and
links. With one stream the two agree exactly (a test enforces it).
"""

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.engines.discrete_event import simulate

__all__ = ["EvalOptions", "evaluate", "simulate"]
