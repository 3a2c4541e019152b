"""Multi-device composition: a model split by a :class:`~workloads.parallel.ParallelPlan` over a
system's devices. :mod:`~simulator.parallel.schedule` gives pipeline schedules in closed form,
:mod:`~simulator.parallel.pipeline_des` simulates them pass by pass, and
:mod:`~simulator.parallel.compose` adds data-parallel synchronisation, the optimizer step, ZeRO
sharding and activations in flight into one step (training iteration, inference step, or a whole
generation request). The plan's graph transform lives in :mod:`workloads.parallel`; collective
algorithms in :mod:`hwmodels.collectives`.
"""

from __future__ import annotations

from typing import Any

from simulator.lazy import lazy_exports

#: Public name -> the module it is re-exported from (imported on first use, PEP 562).
_EXPORTS: dict[str, str] = {
    "ParallelResult": "simulator.parallel.compose",
    "StageResult": "simulator.parallel.compose",
    "evaluate_plan": "simulator.parallel.compose",
    "generate_request": "simulator.parallel.compose",
    "simulate_pipeline": "simulator.parallel.pipeline_des",
    "PipelineTime": "simulator.parallel.schedule",
    "pipeline_time": "simulator.parallel.schedule",
}

__all__ = ["ParallelResult", "StageResult", "evaluate_plan", "generate_request", "evaluate_graph_with_plan",
           "pipeline_time", "PipelineTime", "simulate_pipeline"]


def evaluate_graph_with_plan(graph: Any, system: Any, options: Any) -> Any:
    """``evaluate(graph, system, EvalOptions(plan=...))``: the model the graph was built from, split by
    the plan, as a :class:`~simulator.report.CostReport` with its ``parallel`` view.

    The graph names its model and shape in ``meta`` (``model``, ``phase``, ``batch``, ``seq``,
    ``context``, ``dtype``; a training step also ``optimizer``, ``recompute`` and, where a sweep set
    it, ``fp8_linears``); the plan's
    ``microbatch`` and ``global_batch`` set a training step's batch.
    """
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import PlanError

    meta = dict(graph.meta)
    model = meta.get("model")
    if not model:
        raise PlanError(f"graph {graph.name!r}: a parallel plan needs the model the graph was built from; got a graph "
                        "without meta['model'] (an import or a micro-workload); expected a zoo transformer or a "
                        "Hugging Face config")
    plan = options.plan
    train = meta.get("phase") in ("train_step", "train")
    if meta.get("phase") == "train":
        raise PlanError(f"graph {graph.name!r}: the forward pass of a training step; expected the whole step "
                        "(training_graph) or an inference phase")
    res = evaluate_plan(model, system, plan, options, phase=None if train else meta.get("phase"), train=train,
                        seq=meta.get("seq"), context=meta.get("context"), dtype=meta.get("dtype"),
                        batch=None if train else meta.get("batch"), optimizer=meta.get("optimizer", "adamw"),
                        recompute=meta.get("recompute", "none"), fp8_linears=meta.get("fp8_linears"))
    return res.to_cost_report()

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
