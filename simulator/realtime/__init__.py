"""Real-time and heterogeneous nodes: periodic, sporadic and data-driven model tasks with deadlines
(:mod:`~simulator.realtime.scenario`), their kernels and input transfers costed on the node's devices
(:mod:`~simulator.realtime.costing`), simulated under fixed-priority scheduling with preemption at
kernel boundaries and shared-DRAM contention between the devices of a memory pool
(:mod:`~simulator.realtime.simulate`) beside a worst-case response-time bound
(:mod:`~simulator.realtime.rta`), and partitioning of a graph over devices
(:mod:`~simulator.realtime.partition`). ``nodeperf realtime`` runs :func:`run_realtime`; the scenario
schema and the semantics are in ``docs/realtime.md``.
"""

from simulator.realtime.costing import MemoryPool, cost_scenario, memory_pools
from simulator.realtime.rta import Analysis, analyse, response_time
from simulator.realtime.scenario import Scenario, ScenarioError, load_scenario
from simulator.realtime.simulate import RealtimeResult, run_realtime, simulate_scenario

__all__ = ["Scenario", "ScenarioError", "load_scenario", "Analysis", "analyse", "response_time", "RealtimeResult",
           "run_realtime", "simulate_scenario", "MemoryPool", "cost_scenario", "memory_pools"]
