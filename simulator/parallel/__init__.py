"""Multi-device composition (reserved): pipeline schedules, per-stage and per-device reports of a
parallel plan. The plan's graph transform belongs in :mod:`workloads`, collective algorithms in
:mod:`hwmodels`; this package composes them into a node- or cluster-level ``CostReport``."""
