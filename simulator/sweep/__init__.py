"""Design-space exploration: experiment files, execution on a local pool or Dask, the resumable results
store, Pareto fronts, and tuning under constraints, built on the vectorised component models.

>>> from simulator.sweep import load_experiment, run_sweep, load_results, pareto_front
>>> # summary = run_sweep("studies/experiments/llm_decode_what_if.toml", "out/decode.sqlite")
>>> # front = pareto_front(load_results("out/decode.sqlite"), ["latency_s", "energy_j"])
"""

from __future__ import annotations

from simulator.sweep.execute import SweepError, SweepSummary, point_key, run_sweep
from simulator.sweep.experiment import (
    EXPERIMENT_SCHEMA,
    MODEL_METRICS,
    SYSTOLIC_METRICS,
    Axis,
    Experiment,
    ExperimentError,
    load_experiment,
    parse_experiment,
)
from simulator.sweep.pareto import pareto_front
from simulator.sweep.store import STORE_SCHEMA, StoreError, load_results

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
