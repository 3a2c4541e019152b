"""The serving simulation: requests arriving over time on replicas of a deployment (filled in below)."""

from __future__ import annotations

from typing import Any

from simulator.serving.config import ServeConfig, ServeResult

__all__ = ["simulate_serving", "ROUTERS"]

ROUTERS = ("round-robin", "least-loaded")


def simulate_serving(model: Any, system: Any, config: ServeConfig, plan: Any = None, options: Any = None) -> ServeResult:
    """Simulate serving ``model`` on ``system`` (a device, a system spec or a catalog name)."""
    raise NotImplementedError
