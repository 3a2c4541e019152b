"""Joins workloads to hardware: lowering rules, engines, results, calibration, sweeps and the CLI."""

from simulator.des import simulate
from simulator.engine import EvalOptions, evaluate
from simulator.report import CostReport, OpCost

__all__ = ["evaluate", "simulate", "EvalOptions", "CostReport", "OpCost"]
