"""Joins workloads to hardware: lowering rules, engines, results, calibration, sweeps and the CLI."""

from simulator.engines.discrete_event import simulate
from simulator.engines.options import EvalOptions
from simulator.front import evaluate
from simulator.report import CostReport, OpCost

__all__ = ["evaluate", "simulate", "EvalOptions", "CostReport", "OpCost"]
