"""Joins workloads to hardware: lowering rules, engines, results, calibration, sweeps and the CLI."""
