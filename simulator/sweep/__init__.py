"""Design-space exploration: experiment files, execution on a local pool or Dask, the resumable results
store, Pareto fronts, and tuning under constraints, built on the vectorised component models.

>>> from simulator.sweep import load_experiment, run_sweep, load_results, pareto_front
>>> # summary = run_sweep("studies/experiments/llm_decode_what_if.toml", "out/decode.sqlite")
>>> # front = pareto_front(load_results("out/decode.sqlite"), ["latency_s", "energy_j"])
"""

from __future__ import annotations

from simulator.lazy import lazy_exports

#: Public name -> the module it is re-exported from (imported on first use, PEP 562).
_EXPORTS: dict[str, str] = {
    "SweepError": "simulator.sweep.execute",
    "SweepSummary": "simulator.sweep.execute",
    "point_key": "simulator.sweep.execute",
    "run_sweep": "simulator.sweep.execute",
    "EXPERIMENT_SCHEMA": "simulator.sweep.experiment",
    "MODEL_METRICS": "simulator.sweep.experiment",
    "SYSTOLIC_METRICS": "simulator.sweep.experiment",
    "Axis": "simulator.sweep.experiment",
    "Experiment": "simulator.sweep.experiment",
    "ExperimentError": "simulator.sweep.experiment",
    "load_experiment": "simulator.sweep.experiment",
    "parse_experiment": "simulator.sweep.experiment",
    "pareto_front": "simulator.sweep.pareto",
    "STORE_SCHEMA": "simulator.sweep.store",
    "StoreError": "simulator.sweep.store",
    "load_results": "simulator.sweep.store",
}

__all__ = [
    "EXPERIMENT_SCHEMA",
    "STORE_SCHEMA",
    "MODEL_METRICS",
    "SYSTOLIC_METRICS",
    "Axis",
    "Experiment",
    "ExperimentError",
    "StoreError",
    "SweepError",
    "SweepSummary",
    "load_experiment",
    "parse_experiment",
    "run_sweep",
    "point_key",
    "load_results",
    "pareto_front",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
