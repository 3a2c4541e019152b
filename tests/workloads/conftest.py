"""Shared helpers of the workload tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture
def moe_counts() -> Callable[[str], tuple[int, int]]:
    """``counts(name)``: a zoo MoE model's (total, active) parameters, active keeping ``top_k / experts`` of the
    routed experts' weights (every tensor named ``*.experts.w_*``) and all the rest."""
    from workloads.zoo import build_model
    from workloads.zoo.transformer import zoo_config

    def counts(name: str) -> tuple[int, int]:
        g = build_model(name, seq=8, batch=1)
        cfg = zoo_config(name)
        routed = sum(t.numel for op in g.ops for t in op.inputs
                     if t.role.value == "weight" and ".experts.w_" in t.name)
        return g.params, g.params - routed + routed * cfg.top_k // cfg.experts

    return counts
