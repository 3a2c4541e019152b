"""Joins workloads to hardware: lowering rules, engines, results, calibration, sweeps and the CLI."""

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.engines.discrete_event import simulate
from simulator.report import CostReport, OpCost

__all__ = ["evaluate", "simulate", "EvalOptions", "CostReport", "OpCost"]
