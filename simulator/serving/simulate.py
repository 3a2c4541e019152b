"""The serving simulation's entry point: check the settings, run the event loop
(:mod:`simulator.serving.engine`) and summarise (:mod:`simulator.serving.metrics`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from simulator.serving.config import (
    DEFAULT_REQUESTS,
    RequestRecord,
    ServeConfig,
    ServeResult,
    ServingError,
)
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
    interval = _check_window(config)
    with _no_cyclic_gc():
        if interval is None:
            return _run(model, system, config, plan, options)[0]
        return _run_windows(model, system, config, plan, options, interval)


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused for a run (and restored after): the loop allocates millions of
    short-lived objects and keeps every request, so the collector's passes over the growing heap cost about a
    tenth of an hour's run and free nothing (the run's objects hold no reference cycles: its peak memory is the
    same either way); reference counting frees as before, and no result depends on it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: How many times a windowed run may double its request count to cover the measurement windows.
_MAX_DOUBLINGS = 6


def _check_window(config: ServeConfig) -> float | None:
    """``config.measurement_interval_s`` and ``stability_percentage`` checked (None: no windows)."""
    m, pct = config.measurement_interval_s, config.stability_percentage
    if m is None:
        if pct != 999.0:  # genai-perf's default; another value had been dropped without windows to compare
            raise ServingError(f"stability_percentage: got {pct!r} with no measurement_interval_s; expected a "
                               "measurement interval (--measurement-interval) whose windows it compares, or no "
                               "stability percentage")
        return None
    if isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0 or m != m or m == float("inf"):
        raise ServingError(f"measurement_interval_s: got {m!r}; expected a positive number of seconds")
    _check_window_span(float(m))
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not pct > 0 or pct == float("inf"):
        raise ServingError(f"stability_percentage: got {pct!r}; expected a positive percentage")
    return float(m)


def _check_window_span(m: float) -> None:
    """Up to ``MAX_WINDOWS`` windows of ``WINDOW_SLEEP_FACTOR`` x ``m`` must fit the simulated clock
    (``MAX_HORIZON_S``, the span the arrivals and ``iteration_host_s`` are held to)."""
    from simulator.serving.arrivals import MAX_HORIZON_S
    from simulator.serving.window import MAX_WINDOWS, WINDOW_SLEEP_FACTOR

    most = MAX_HORIZON_S / (MAX_WINDOWS * WINDOW_SLEEP_FACTOR)
    if m > most:
        raise ServingError(f"measurement_interval_s: got {m:g} s; {MAX_WINDOWS} windows of {WINDOW_SLEEP_FACTOR:g} x it "
                           f"span {m * MAX_WINDOWS * WINDOW_SLEEP_FACTOR:.3g} s; expected at most {most:.3g} s (the "
                           f"windows within {MAX_HORIZON_S:.3g} s, 2**52 ns: the simulated clock keeps 1 ns steps up "
                           "to there)")


def _run_windows(model: Any, system: Any, config: ServeConfig, plan: Any, options: Any, interval: float) -> ServeResult:
    """A run measured as perf_analyzer's windows count it (:mod:`simulator.serving.window`): the whole run,
    extended while its last request was sent before the last window closed, then its counted requests."""
    from dataclasses import replace

    from simulator.serving.metrics import summarize
    from simulator.serving.window import measured_windows

    cfg = config
    for _ in range(_MAX_DOUBLINGS + 1):
        result, pools, setup = _run(model, system, cfg, plan, options)
        counted, info = measured_windows(result.requests, interval, float(config.stability_percentage))
        last_sent = max((r.arrival_s for r in result.requests), default=0.0)
        if cfg.duration_s is not None or last_sent >= info["end_s"]:
            break
        cfg = replace(cfg, requests=2 * (cfg.requests or DEFAULT_REQUESTS))
    if not counted:
        raise ServingError(f"measurement_interval_s: no request finished within {info['windows']} windows of "
                           f"{info['window_s']:g} s; expected a longer interval (got {interval:g} s)")
    t0 = min(r.arrival_s for r in counted)
    shifted = tuple(replace(r, arrival_s=r.arrival_s - t0, first_token_s=r.first_token_s - t0,
                            finish_s=r.finish_s - t0) for r in counted)
    win = summarize(shifted, pools, setup, config)
    keys = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "requests", "input_tokens", "output_tokens", "makespan_s",
            "output_tokens_per_s", "requests_per_s", "goodput_requests_per_s", "slo_attainment", "slo", "cost")
    info["simulated_requests"] = len(result.requests)
    summary = {**result.summary, **{k: win[k] for k in keys}, "measurement": info}
    return ServeResult(summary=summary, requests=shifted, iterations=result.iterations)


def _run(model: Any, system: Any, config: ServeConfig, plan: Any, options: Any) -> tuple[ServeResult, list[Any], Any]:
    """One run: every request of ``config`` simulated and summarised; with its replicas and set-up."""
    from dataclasses import replace

    from simulator.serving.setup import prepare

    warm = _check_warmup(config)
    setup = prepare(model, system, _with_warmup(config, warm), plan, options)
    base, start = None, 0.0
    if warm:
        _check_warmup_rows(config, warm, setup.total)
        setup, base, start = _run_warmup(setup, config.router, warm)
    finished = run_loop(setup.replicas, setup.decode_pool, config.router, setup.arrivals, setup.lengths,
                        setup.closed_loop, setup.total, setup.handoff_s)
    from simulator.serving.metrics import summarize

    finished.sort(key=lambda s: s.id)
    # the client receives every token ``lag`` after the engine sampled it (FrameworkProfile.output_lag_steps)
    # the measured requests' times count from their start (after a warm-up, the moment it drained)
    # the gaps between chunks are the engine's (read in place: a finished sequence's gaps no longer grow): an
    # approximation where there is a lag. Exact only for a constant lag; with vLLM V0's one-step output lag a
    # chunk reaches the client when the following iteration ends, so the client's gaps are the engine's shifted
    # by one iteration: they differ where consecutive iterations differ in length, first of all at the first
    # gap after a prompt iteration (engine: the iteration after the prompt; client: the one after that), and
    # the last chunk is taken to lag as the first (``finish + lag``)
    records = tuple(RequestRecord(s.id, s.arrival - start, s.n_in, s.n_out, s.first_token + s.lag - start,
                                  s.finish + s.lag - start, s.replica, s.preemptions, s.cached * setup.shared_tokens,
                                  np.frombuffer(s.gaps, dtype=float))
                    for s in finished)
    pools = setup.replicas + setup.decode_pool
    skip = [b["iterations"] for b in base] if base else [0] * len(pools)
    iterations = tuple(it if not start else replace(it, start_s=it.start_s - start, end_s=it.end_s - start)
                       for r, k in zip(pools, skip, strict=True) for it in r.iterations[k:])
    summary = summarize(records, pools, setup, config, before=base)
    return ServeResult(summary=summary, requests=records, iterations=iterations), pools, setup


def _check_warmup(config: ServeConfig) -> int:
    """``config.warmup_requests`` checked: a non-negative integer, with a request count to measure."""
    w = config.warmup_requests
    if isinstance(w, bool) or not isinstance(w, int) or w < 0:
        raise ServingError(f"warmup_requests: got {w!r}; expected a non-negative integer")
    if w and config.duration_s is not None:
        raise ServingError(f"warmup_requests: a warm-up of {w} requests with an arrival window; got duration_s "
                           f"{config.duration_s}; expected requests (a count to measure after the warm-up)")
    return w


def _with_warmup(config: ServeConfig, warm: int) -> ServeConfig:
    """The config that draws the warm-up's ``warm`` requests before the measured ones: ``requests`` raised by
    ``warm`` (the default count when none is given), except for a trace without ``requests``, whose every row
    runs (its first ``warm`` rows the warm-up; raising the default count had cut it at ``warm`` + 1000 rows)."""
    if not warm:
        return config
    from dataclasses import replace

    from simulator.serving.arrivals import parse_arrival

    if config.requests is None and parse_arrival(config.arrival, "arrival").kind == "trace":
        return config
    return replace(config, requests=warm + (config.requests or DEFAULT_REQUESTS))


def _check_warmup_rows(config: ServeConfig, warm: int, total: int) -> None:
    """A trace must hold more rows than the warm-up takes (a drawn arrival process always does: its count is
    raised by the warm-up); located ServingError (it had raised an IndexError)."""
    if total <= warm:
        raise ServingError(f"warmup_requests: got {warm} with a trace of {total} requests ({config.arrival}); "
                           f"expected fewer than {total}, so that some are measured")


def _run_warmup(setup: Any, router: str, warm: int) -> tuple[Any, list[dict[str, float]], float]:
    """Run the first ``warm`` requests to completion (the client's warm-up phase); return the setup with the
    measured requests' arrivals from the moment the last warm-up response reached the client, each replica's
    counters at that moment and that moment (:attr:`ServeConfig.warmup_requests`)."""
    from dataclasses import replace

    arrivals = setup.arrivals
    if setup.closed_loop:  # N clients at once in each phase, each sending its next request as one returns
        n = min(setup.closed_loop, warm)
        first = [(0.0, i) for i in range(n)]
    else:
        first = arrivals[:warm]
    done = run_loop(setup.replicas, setup.decode_pool, router, first, setup.lengths, setup.closed_loop, warm,
                    setup.handoff_s)
    start = max(s.finish + s.lag for s in done)
    pools = setup.replicas + setup.decode_pool
    base = [{"busy_s": r.busy_s, "energy_j": r.energy_j, "kv_block_seconds": r.kv_block_seconds,
             "preemptions": r.preemptions, "iterations": len(r.iterations)} for r in pools]
    if setup.closed_loop:
        rest = [(start, warm + i) for i in range(min(setup.closed_loop, setup.total - warm))]
    else:
        t0 = arrivals[warm][0]
        rest = [(start + t - t0, i) for t, i in arrivals[warm:]]
    return replace(setup, arrivals=rest), base, start
