"""The public ``evaluate``: one graph on one device, or a model split over a system by a parallel plan.

``simulator.evaluate`` (and ``nodeperf.evaluate``) is this module's :func:`evaluate`. Options without a
plan go to the analytical engine (:func:`simulator.engines.analytical.evaluate`); options with one
(``EvalOptions(plan=...)``) go to :func:`simulator.parallel.evaluate_graph_with_plan`, which calls
the engine per stage. The dispatch lives here, above both, so that the engines never import
:mod:`simulator.parallel` (the engines refuse a plan with a clear error). :func:`evaluate_variants`
does the same for hardware variants: a plan is evaluated variant by variant through :func:`evaluate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hwmodels.spec import DeviceSpec, SystemSpec
from simulator.engines import analytical, vectorized
from simulator.engines.options import EvalOptions
from simulator.report import CostReport
from workloads.ir import OpGraph

__all__ = ["evaluate", "evaluate_variants"]


def evaluate(graph: OpGraph, system: DeviceSpec | SystemSpec, options: EvalOptions | None = None) -> CostReport:
    """Predict latency, energy and memory of ``graph`` on ``system``.

    Without a plan this is :func:`simulator.engines.analytical.evaluate` (same parameters, same
    report). With ``options.plan`` (a :class:`workloads.parallel.ParallelPlan`) the model the graph
    was built from (named in its ``meta``) is split over the system's devices and the report is the
    whole step, with its ``parallel`` view (:func:`simulator.parallel.evaluate_graph_with_plan`).
    """
    if options is not None and options.plan is not None:
        from simulator.parallel import evaluate_graph_with_plan

        return evaluate_graph_with_plan(graph, system, options)
    return analytical.evaluate(graph, system, options)


def evaluate_variants(graph: OpGraph, base_spec: DeviceSpec | SystemSpec, overrides: Mapping[str, Any] | None = None,
                      options: EvalOptions | None = None, *, per_op: bool = False, dedupe: bool = True,
                      chunk: int = vectorized.CHUNK_VARIANTS) -> vectorized.VariantResult:
    """:func:`simulator.engines.vectorized.evaluate_variants` (same parameters, same result), with a
    parallel plan in ``options`` evaluated variant by variant through :func:`evaluate`."""
    if options is not None and options.plan is not None:
        return vectorized.per_variant(graph, base_spec, overrides, options, evaluate, per_op=per_op,
                                      reason="a multi-device plan is evaluated per variant")
    return vectorized.evaluate_variants(graph, base_spec, overrides, options, per_op=per_op, dedupe=dedupe,
                                        chunk=chunk)
