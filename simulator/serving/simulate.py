"""The serving simulation's entry point: check the settings, run the event loop
(:mod:`simulator.serving.engine`) and summarise (:mod:`simulator.serving.metrics`)."""

from __future__ import annotations

from typing import Any

from simulator.serving.config import RequestRecord, ServeConfig, ServeResult
from simulator.serving.engine import ROUTERS, run_loop

__all__ = ["simulate_serving", "ROUTERS"]


def simulate_serving(model: Any, system: Any, config: ServeConfig, plan: Any = None, options: Any = None) -> ServeResult:
    """Simulate serving ``model`` on ``system`` under ``config`` (see :mod:`simulator.serving`).

    Parameters
    ----------
    model
        A zoo transformer name, a Hugging Face ``config.json`` path or a ``TransformerConfig``.
    system
        A device or system spec, or a catalog name / TOML path (:func:`simulator.hardware.load_hardware`).
    config
        Every serving setting (:class:`ServeConfig`).
    plan
        The parallel plan of one replica (``tp``, ``pp``; default one device).
    options
        :class:`~simulator.engines.analytical.EvalOptions` for the engines (default: the framework
        profile's costing options, ``config.framework``).

    Raises
    ------
    ServingError
        A bad setting or input (one located line).
    """
    from simulator.serving.setup import prepare

    setup = prepare(model, system, config, plan, options)
    finished = run_loop(setup.replicas, setup.decode_pool, config.router, setup.arrivals, setup.lengths,
                        setup.closed_loop, setup.total, setup.handoff_s)
    from simulator.serving.metrics import summarize

    finished.sort(key=lambda s: s.id)
    # the client receives every token ``lag`` after the engine sampled it (FrameworkProfile.output_lag_steps)
    records = tuple(RequestRecord(s.id, s.arrival, s.n_in, s.n_out, s.first_token + s.lag, s.finish + s.lag, s.replica,
                                  s.preemptions, s.cached * setup.shared_tokens) for s in finished)
    pools = setup.replicas + setup.decode_pool
    iterations = tuple(it for r in pools for it in r.iterations)
    summary = summarize(records, pools, setup, config)
    return ServeResult(summary=summary, requests=records, iterations=iterations)
