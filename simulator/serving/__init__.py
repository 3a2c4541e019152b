"""Serving: requests over time on a deployment (arrivals, lengths, engine schedulers, paged KV blocks,
replicas, cost), each iteration priced by the engines as the mixed batch it is.

Entry point: :func:`simulate_serving` (``nodeperf serve``) with a :class:`ServeConfig`; it returns a
:class:`ServeResult` whose ``summary`` is the JSON document of ``nodeperf serve --json``. The names
below are resolved on first use (PEP 562), so importing the package loads no engine.

Example
-------
>>> from simulator.serving import ServeConfig, simulate_serving
>>> cfg = ServeConfig(arrival="poisson:qps=0.05", lengths="fixed:in=128,out=16", requests=4)
>>> r = simulate_serving("llama-2-7b", "h100-sxm5-80gb", cfg)
>>> sorted(r.summary["ttft_s"])
['max', 'mean', 'p50', 'p90', 'p99']
"""

from __future__ import annotations

from simulator.lazy import lazy_exports

#: Public name -> the module it is re-exported from.
_EXPORTS: dict[str, str] = {
    "ServeConfig": "simulator.serving.config",
    "ServeResult": "simulator.serving.config",
    "ServingError": "simulator.serving.config",
    "RequestRecord": "simulator.serving.config",
    "simulate_serving": "simulator.serving.simulate",
    "parse_arrival": "simulator.serving.arrivals",
    "parse_lengths": "simulator.serving.lengths",
    "parse_slo": "simulator.serving.metrics",
    "SCHEDULERS": "simulator.serving.scheduler",
    "ROUTERS": "simulator.serving.simulate",
    "LENGTH_DATASETS": "simulator.serving.lengths",
}

__all__ = ["ServeConfig", "ServeResult", "ServingError", "RequestRecord", "simulate_serving", "parse_arrival",
           "parse_lengths", "parse_slo", "SCHEDULERS", "ROUTERS", "LENGTH_DATASETS"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
