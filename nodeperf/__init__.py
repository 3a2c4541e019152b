"""nodeperf: predict latency, energy and memory of deep-learning work on accelerator nodes.

This package is the documented public API: it re-exports the stable entry points of the three
layers — :mod:`workloads` (what is computed), :mod:`hwmodels` (what computes it) and
:mod:`simulator` (engines, reports, calibration) — so a notebook never needs the internal layout.

The leaf layers import :mod:`nodeperf.suggest` and :mod:`nodeperf.errors`, so this module imports
nothing eagerly: each name is resolved on first use (PEP 562 ``__getattr__``) from the table
:data:`_EXPORTS`. ``import nodeperf.errors`` therefore loads neither :mod:`workloads`,
:mod:`hwmodels` nor :mod:`simulator`.

Examples
--------
>>> import nodeperf as npf
>>> g = npf.load_workload("llama-2-7b", phase="decode", batch=8, context=2048)
>>> r = npf.evaluate(g, npf.load_hardware("h100-sxm5-80gb"))
>>> r.latency_s > 0
True
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> (module, attribute) it is re-exported from.
_EXPORTS: dict[str, tuple[str, str]] = {
    # the root exception and warning classes (every located error is a NodeperfError)
    "NodeperfError": ("nodeperf.errors", "NodeperfError"),
    "NodeperfWarning": ("nodeperf.errors", "NodeperfWarning"),
    # workloads: graphs and how to get them
    "load_workload": ("workloads.resolve", "load_workload"),
    "build_model": ("workloads.zoo", "build_model"),
    "list_models": ("workloads.zoo", "list_models"),
    "OpGraph": ("workloads.ir", "OpGraph"),
    "GraphBuilder": ("workloads.ir", "GraphBuilder"),
    "Op": ("workloads.ir", "Op"),
    "TensorSpec": ("workloads.ir", "TensorSpec"),
    "GraphError": ("workloads.ir", "GraphError"),
    "UnsupportedOpError": ("workloads.ir", "UnsupportedOpError"),
    "DType": ("workloads.dtypes", "DType"),
    "training_graph": ("workloads.training", "training_graph"),
    "load_graph": ("workloads.serialize", "load_graph"),
    "save_graph": ("workloads.serialize", "save_graph"),
    # hwmodels: specs and the catalog
    "load_device": ("hwmodels.catalog", "load_device"),
    "load_system": ("hwmodels.catalog", "load_system"),
    "list_devices": ("hwmodels.catalog", "list_devices"),
    "list_systems": ("hwmodels.catalog", "list_systems"),
    "DeviceSpec": ("hwmodels.spec", "DeviceSpec"),
    "SystemSpec": ("hwmodels.spec", "SystemSpec"),
    "SpecError": ("hwmodels.spec", "SpecError"),
    "get_path": ("hwmodels.spec", "get_path"),
    "replace_path": ("hwmodels.spec", "replace_path"),
    # simulator: hardware names, engines, reports
    "load_hardware": ("simulator.hardware", "load_hardware"),
    "known_devices": ("simulator.hardware", "known_devices"),
    "apply_calibration": ("simulator.hardware", "apply_calibration"),
    "CalibrationError": ("simulator.hardware", "CalibrationError"),
    "evaluate": ("simulator.front", "evaluate"),
    "EvalOptions": ("simulator.engines.analytical", "EvalOptions"),
    "simulate": ("simulator.engines.discrete_event", "simulate"),
    "CostReport": ("simulator.report.report", "CostReport"),
    "OpCost": ("simulator.report.report", "OpCost"),
    # simulator: measurements and calibration
    "Measurement": ("simulator.calibration.measurements", "Measurement"),
    "MeasurementSet": ("simulator.calibration.measurements", "MeasurementSet"),
    "MeasurementError": ("simulator.calibration.measurements", "MeasurementError"),
    "Calibrator": ("simulator.calibration.fit", "Calibrator"),
    "ErrorSummary": ("simulator.calibration.errors", "ErrorSummary"),
    "summarize_errors": ("simulator.calibration.errors", "summarize_errors"),
    "validate_published": ("simulator.calibration.validation", "validate_published"),
    "validate_edge": ("simulator.calibration.validation", "validate_edge"),
    # hwmodels: heterogeneous nodes and power modes
    "load_node": ("hwmodels.node", "load_node"),
    "list_nodes": ("hwmodels.node", "list_nodes"),
    "NodeSpec": ("hwmodels.node", "NodeSpec"),
    "NodeDevice": ("hwmodels.node", "NodeDevice"),
    "NodeLink": ("hwmodels.node", "NodeLink"),
    "node_from_spec": ("hwmodels.node", "node_from_spec"),
    "load_node_or_device": ("simulator.hardware", "load_node_or_device"),
    "apply_power_mode": ("hwmodels.loader", "apply_power_mode"),
    "list_power_modes": ("hwmodels.loader", "list_power_modes"),
    # simulator: device sharing in the discrete-event engine
    "share": ("simulator.engines.contention", "share"),
    "run_concurrent": ("simulator.engines.contention", "run_concurrent"),
    "KernelDemand": ("simulator.engines.contention", "KernelDemand"),
    "DeviceCapacity": ("simulator.engines.contention", "DeviceCapacity"),
    # simulator: design-space sweeps and tuning
    "run_sweep": ("simulator.sweep", "run_sweep"),
    "load_experiment": ("simulator.sweep", "load_experiment"),
    "load_results": ("simulator.sweep", "load_results"),
    "pareto_front": ("simulator.sweep", "pareto_front"),
    "SweepSummary": ("simulator.sweep", "SweepSummary"),
    "ExperimentError": ("simulator.sweep", "ExperimentError"),
    "evaluate_variants": ("simulator.front", "evaluate_variants"),
    "VariantResult": ("simulator.engines.vectorized", "VariantResult"),
    "with_overrides": ("hwmodels.paths", "with_overrides"),
    "known_paths": ("hwmodels.paths", "known_paths"),
    "systolic_network_variants": ("simulator.sweep.systolic", "systolic_network_variants"),
    "tune": ("simulator.sweep.tune", "tune"),
    "TuneResult": ("simulator.sweep.tune", "TuneResult"),
    "TuneError": ("simulator.sweep.tune", "TuneError"),
    "parse_constraint": ("simulator.sweep.tune", "parse_constraint"),
    "Constraint": ("simulator.sweep.tune", "Constraint"),
    "ModelProblem": ("simulator.sweep.tune_model", "ModelProblem"),
    "load_prices": ("simulator.sweep.tune_model", "load_prices"),
    "SystolicProblem": ("simulator.sweep.tune_systolic", "SystolicProblem"),
    # workloads + simulator: a model split over a system's devices by a parallel plan
    "ParallelPlan": ("workloads.parallel", "ParallelPlan"),
    "PlanError": ("workloads.parallel", "PlanError"),
    "evaluate_plan": ("simulator.parallel.compose", "evaluate_plan"),
    "generate_request": ("simulator.parallel.compose", "generate_request"),
    "ParallelResult": ("simulator.parallel.compose", "ParallelResult"),
    # simulator: figures (matplotlib is imported only when one of these is used)
    "save_figure": ("simulator.report.figures", "save_figure"),
    "roofline_figure": ("simulator.report.figures", "roofline_figure"),
    "breakdown_figure": ("simulator.report.figures", "breakdown_figure"),
    "pareto_figure": ("simulator.report.figures", "pareto_figure"),
    "heatmap_figure": ("simulator.report.figures", "heatmap_figure"),
    # simulator: real-time scenarios and heterogeneous placement
    "load_scenario": ("simulator.realtime", "load_scenario"),
    "run_realtime": ("simulator.realtime", "run_realtime"),
    "RealtimeResult": ("simulator.realtime", "RealtimeResult"),
    "ScenarioError": ("simulator.realtime", "ScenarioError"),
    "partition": ("simulator.realtime.partition", "partition"),
    "PartitionResult": ("simulator.realtime.partition", "PartitionResult"),
    # simulator: serving (requests over time on an engine scheduler)
    "ServeConfig": ("simulator.serving.config", "ServeConfig"),
    "ServeResult": ("simulator.serving.config", "ServeResult"),
    "ServingError": ("simulator.serving.config", "ServingError"),
    "simulate_serving": ("simulator.serving.simulate", "simulate_serving"),
}


def _version() -> str:
    """The installed distribution's version, or ``"0+unknown"`` from a never-installed source tree."""
    from simulator.version import package_version  # reads the dist-info without importlib.metadata

    return package_version() or "0+unknown"


__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    """Resolve a public name (or ``__version__``) on first use and cache it in the module namespace."""
    if name == "__version__":  # lazy too: importlib.metadata costs more than the leaf layers should pay
        globals()[name] = value = _version()
        return value
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        from nodeperf.suggest import did_you_mean

        raise AttributeError(f"nodeperf: {name}: no such name; got {name!r}; expected one of the public names "
                             f"(see nodeperf.__all__){did_you_mean(name, __all__)}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
