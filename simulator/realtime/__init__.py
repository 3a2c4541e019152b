"""Real-time and heterogeneous nodes: periodic, sporadic and data-driven model tasks with deadlines
(:mod:`~simulator.realtime.scenario`), their kernels and input transfers costed on the node's devices
(:mod:`~simulator.realtime.costing`), simulated under fixed-priority scheduling with preemption at
kernel boundaries and shared-DRAM contention between the devices of a memory pool
(:mod:`~simulator.realtime.simulate`) beside a worst-case response-time bound
(:mod:`~simulator.realtime.rta`), and partitioning of a graph over devices
(:mod:`~simulator.realtime.partition`). ``nodeperf realtime`` runs :func:`run_realtime`; the scenario
schema and the semantics are in ``docs/realtime.md``.
"""

from __future__ import annotations

from simulator.lazy import lazy_exports

#: Public name -> the module it is re-exported from (imported on first use, PEP 562).
_EXPORTS: dict[str, str] = {
    "MemoryPool": "simulator.realtime.costing",
    "cost_scenario": "simulator.realtime.costing",
    "memory_pools": "simulator.realtime.costing",
    "Analysis": "simulator.realtime.rta",
    "analyse": "simulator.realtime.rta",
    "response_time": "simulator.realtime.rta",
    "Scenario": "simulator.realtime.scenario",
    "ScenarioError": "simulator.realtime.scenario",
    "load_scenario": "simulator.realtime.scenario",
    "RealtimeResult": "simulator.realtime.simulate",
    "run_realtime": "simulator.realtime.simulate",
    "simulate_scenario": "simulator.realtime.simulate",
}

__all__ = ["Scenario", "ScenarioError", "load_scenario", "Analysis", "analyse", "response_time", "RealtimeResult",
           "run_realtime", "simulate_scenario", "MemoryPool", "cost_scenario", "memory_pools"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
