"""A whole generation request priced as a serving stack runs it (``predict --phase generate --framework P`` and
``tune --phase generate --framework P``): the same requests through :func:`simulator.serving.simulate_serving`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

__all__ = ["served_generate"]


def served_generate(res: Any, model: Any, system: Any, plan: Any, options: Any, framework: str | None, *, batch: int,
                    input_len: int, output_len: int, dtype: str | None = None, weight_dtype: str | None = None,
                    kv_dtype: str | None = None) -> Any:
    """``res`` (a :func:`simulator.parallel.compose.generate_request` result) as ``nodeperf serve`` prices the
    request for the serving stack ``framework``: ``batch`` requests arriving at once, prefilled together and
    decoded together (``scheduler="static"``), so the stack's iteration host time, the prompt iterations it runs
    without CUDA graphs, its sampler's host time and its output hand-over count in TTFT and TPOT as they do in
    ``serve`` (at a trickle the two agree: docs/serving.md, "Checks and speed"). The GPU steps alone stay in
    ``extra`` as ``gpu_ttft_s``, ``gpu_tpot_s`` and ``gpu_e2e_latency_s``; the difference is the breakdown's
    ``host_s``. ``res`` unchanged without a framework, for a training stack, or for a plan beyond tensor and
    pipeline parallelism (``serve`` runs replicas of a tp x pp plan, not data parallelism); a request ``serve``
    refuses (its KV cache cannot hold the batch) keeps the GPU steps with a warning that says why."""
    from simulator.serving import ServeConfig, ServingError, simulate_serving
    from workloads.frameworks import get_profile
    from workloads.parallel import ParallelPlan

    served_plan = ParallelPlan(tp=plan.tp, pp=plan.pp)
    if not framework or get_profile(framework).stack or plan.devices != served_plan.devices:
        return res
    quant = {k: v for k, v in (("weight_dtype", weight_dtype), ("kv_dtype", kv_dtype)) if v}
    config = ServeConfig(arrival=f"concurrency:n={batch}", lengths=f"fixed:in={input_len},out={output_len}",
                         scheduler="static", requests=batch, framework=framework, dtype=dtype, seed=0, **quant)
    try:
        s = simulate_serving(model, system, config, served_plan, options).summary
    except ServingError as e:
        return replace(res, warnings=(*res.warnings, f"--framework {framework}: the engine's host costs are not "
                                                     f"added (serve refuses this request: {e})"))
    x = res.extra
    ttft, tpot, e2e = (float(s[k]["mean"]) for k in ("ttft_s", "tpot_s", "e2e_s"))
    extra = {**x, "gpu_ttft_s": x["ttft_s"], "gpu_tpot_s": x["tpot_s"], "gpu_e2e_latency_s": x["e2e_latency_s"],
             "ttft_s": ttft, "tpot_s": tpot, "e2e_latency_s": e2e, "output_tokens_per_s": batch * output_len / e2e}
    host = e2e - x["e2e_latency_s"]  # the same GPU steps summed in another order differ by rounding only
    breakdown = {**res.breakdown, "host_s": host if abs(host) > 1e-9 * e2e else 0.0}
    return replace(res, latency_s=e2e, extra=extra, breakdown=breakdown)
