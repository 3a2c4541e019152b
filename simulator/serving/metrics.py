"""The serving summary: latency percentiles, throughput, goodput under SLOs, KV use, energy and cost.

Definitions (as vLLM's ``benchmark_serving`` reports them): TTFT is first token minus arrival; TPOT
is ``(e2e - ttft) / (output_len - 1)`` over requests with more than one output token; ITL (inter-token
latency) is every gap between consecutive streamed chunks of a request after its first, the gaps of all
requests pooled into one list (its median is the "Median ITL"; ``sglang.bench_serving`` 0.3.0 and vLLM's
``benchmarks/benchmark_serving.py``: ``itls += outputs[i].itl``, each gap timed as a chunk with text
arrives); throughput is tokens over the makespan (first arrival to last finish). Goodput counts the
requests meeting every SLO per second of makespan; ``slo_attainment`` is their fraction. An SLO names a
metric and a percentile (``ttft_p99<=2 s``): it holds when that percentile over all requests (for ITL,
over all gaps) meets the bound, and a request meets it when its own value does (for ITL, the same
statistic of its own gaps).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from nodeperf.suggest import did_you_mean
from simulator.serving.config import ServingError

__all__ = ["parse_slo", "check_slos", "summarize", "SLO_METRICS", "percentiles"]

#: Metrics an SLO may bound (per-request values; ``itl``: the gaps between a request's streamed chunks).
SLO_METRICS = ("ttft", "tpot", "e2e", "itl")
_STATS = ("p50", "p90", "p99", "mean", "max")
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "h": 3600.0}  # the units --duration takes, and us
_SLO = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*?)(?:_(p\d+(?:\.\d+)?|mean|max))?\s*(<=|<)\s*([0-9.eE+-]+)\s*([a-z]*)\s*$")


def parse_slo(text: str, where: str = "slo") -> tuple[str, str, float]:
    """``"ttft_p99<=2 s"`` -> ``("ttft", "p99", 2.0)``; a located :class:`ServingError` otherwise."""
    m = _SLO.match(str(text))
    if not m:
        raise ServingError(f"{where}: got {text!r}; expected METRIC_STAT<=VALUE UNIT, e.g. 'ttft_p99<=2 s' or "
                           "'tpot_p90<=100 ms'")
    metric, stat, _op, value, unit = m.groups()
    metric = metric.lower()
    if metric not in SLO_METRICS:
        raise ServingError(f"{where}: unknown metric {metric!r}; got {text!r}; expected one of "
                           f"{', '.join(SLO_METRICS)}{did_you_mean(metric, SLO_METRICS)}")
    stat = stat or "p99"
    if stat.startswith("p") and not 0.0 < float(stat[1:]) <= 100.0:
        raise ServingError(f"{where}: percentile {stat!r}; got {text!r}; expected p followed by a number above 0 "
                           "and at most 100, e.g. p50, p99, p99.9")
    try:
        v = float(value)
    except ValueError:
        v = math.nan
    if unit not in _UNITS:
        raise ServingError(f"{where}: unit {unit!r}; got {text!r}; expected one of {', '.join(_UNITS)}")
    if not math.isfinite(v) or v <= 0:
        raise ServingError(f"{where}: bound {value!r}; got {text!r}; expected a positive number")
    return metric, stat, v * _UNITS[unit]


def check_slos(texts: Any, where: str = "slo") -> list[tuple[str, str, float]]:
    """Every SLO of ``texts`` parsed (:func:`parse_slo`); a located :class:`ServingError` for one that repeats an
    earlier one's metric and statistic (two bounds on ``ttft_p99``: which one holds would be left unsaid)."""
    out: list[tuple[str, str, float]] = []
    seen: dict[tuple[str, str], str] = {}
    for text in texts:
        metric, stat, bound = parse_slo(text, where=where)
        key = (metric, stat)
        if key in seen:
            raise ServingError(f"{where}: {metric}_{stat} given twice; got {seen[key]!r} and {text!r}; expected one "
                               "bound for each metric and statistic (keep the one you mean)")
        seen[key] = str(text)
        out.append((metric, stat, bound))
    return out


def percentiles(x: np.ndarray, *, overwrite: bool = False) -> dict[str, float]:
    """p50, p90, p99 (NumPy's linear interpolation, as the benchmark clients), mean and max of ``x`` (zeros when
    empty); ``overwrite``: ``x`` may be reordered in place (an array of the caller's own, spared a copy)."""
    if len(x) == 0:
        return {k: 0.0 for k in _STATS}
    p = np.percentile(x, [50, 90, 99], overwrite_input=overwrite)
    return {"p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2]), "mean": float(x.mean()), "max": float(x.max())}


def _stat(x: np.ndarray, stat: str) -> float:
    if len(x) == 0:
        return 0.0
    if stat == "mean":
        return float(x.mean())
    if stat == "max":
        return float(x.max())
    return float(np.percentile(x, float(stat[1:])))


def _slos(records: tuple[Any, ...], slo: tuple[str, ...], pooled: dict[str, np.ndarray]) -> tuple[np.ndarray, list]:
    """Which requests meet every SLO of ``slo``, and each SLO's figure over the run (``pooled``: the values
    of each metric the percentiles are taken over: TPOT over multi-token requests, ITL over all gaps).

    The pooled ITL gaps (one value per streamed chunk: the run's largest array) are not copied: an ITL
    percentile is left as None here and taken later in place (:func:`_itl_percentiles`, after the summary's
    own percentiles), where the reordering NumPy's selection leaves cannot change an order statistic."""
    parsed = [parse_slo(s) for s in slo]
    ok = np.ones(len(records), dtype=bool)
    held = []
    for (metric, stat, bound), text in zip(parsed, slo, strict=True):
        if metric in ("tpot", "itl") and records and len(pooled[metric]) == 0:
            raise ServingError(f"slo {text!r}: no request has more than one output token, so {metric.upper()} is "
                               f"undefined; got {len(records)} requests of one output token; expected outputs of 2 "
                               "tokens or more, or an SLO on ttft or e2e (it had been reported met at 0 s)")
        if metric == "itl":  # a request's own figure: the same statistic of its own gaps
            own = np.array([_stat(r.itl_gaps_s, stat) for r in records])
        else:
            own = np.array([getattr(r, f"{metric}_s") for r in records])
        ok &= own <= bound
        deferred = metric == "itl" and stat.startswith("p")
        got = None if deferred else _stat(pooled[metric], stat)
        held.append({"slo": text, "metric": f"{metric}_{stat}", "bound_s": bound, "value_s": got,
                     "met": None if deferred else got <= bound})
    return ok, held


def _itl_percentiles(held: list[dict[str, Any]], itl: np.ndarray) -> None:
    """The ITL percentiles :func:`_slos` deferred, taken over the pooled gaps in place (``itl`` is the
    summary's own array: an order statistic does not depend on the order NumPy's selection left it in)."""
    for h in held:
        if h["value_s"] is None:
            got = float(np.percentile(itl, float(h["metric"][len("itl_p"):]), overwrite_input=True)) if len(itl) else 0.0
            h["value_s"], h["met"] = got, got <= h["bound_s"]


def _config_json(config: Any, setup: Any) -> dict[str, Any]:
    """The run's ``ServeConfig`` as given; a trace run's ``lengths`` is null unless it declared a shared prefix
    (the trace's rows give the lengths: the summary's ``lengths``; the field had echoed the unused default)."""
    out = config.to_json()
    if setup.described["arrival"].kind == "trace" and not setup.described["lengths"].prefix:
        out["lengths"] = None
    return out


def _lengths_of(setup: Any) -> dict[str, Any]:
    """The summary's ``lengths``: the spec's description, or for a trace (whose rows give the lengths) the file
    and the mean prompt and output of the requests it gave, with the spec's shared prefix if one was declared
    (a trace run had reported the unused default ``fixed`` 512 / 128)."""
    if setup.described["arrival"].kind != "trace":
        from simulator.serving.lengths import describe

        return describe(setup.described["lengths"])
    ins, outs = setup.lengths
    out: dict[str, Any] = {"kind": "trace", "file": setup.described["arrival"].path,
                           "in_mean": float(np.mean(ins)), "out_mean": float(np.mean(outs))}
    if setup.described["lengths"].prefix:
        out["shared_prefix_tokens"] = setup.described["lengths"].prefix
    return out


def _cost(device: Any, devices: int, makespan: float, out_tokens: int, energy_j: float | None = None,
          pricing: Any = None) -> dict[str, Any]:
    """USD per million output tokens at the device's hourly price (all replicas' devices, the makespan),
    priced by :func:`hwmodels.cost.run_cost` (``pricing``: a :class:`hwmodels.cost.Pricing`, default cloud)."""
    from hwmodels.cost import run_cost

    return run_cost(str(device.name), devices, makespan, out_tokens, energy_j=energy_j, pricing=pricing)


def reprice(summary: Mapping[str, Any], pricing: Any) -> dict[str, Any]:
    """The ``cost`` object of a serving ``summary`` priced again by ``pricing`` (a :class:`hwmodels.cost.Pricing`):
    the same devices, makespan, output tokens and modelled energy, another way of pricing a device-hour."""
    from hwmodels.cost import run_cost

    return run_cost(summary["cost"]["device"], summary["devices"], summary["makespan_s"], summary["output_tokens"],
                    energy_j=summary["energy_j"], pricing=pricing)


def _measured(replicas: list[Any], before: list[dict[str, float]] | None) -> list[dict[str, Any]]:
    """Each replica's counters over the measured requests: all of them, or, after a warm-up, what was added
    since ``before`` (the counters when the warm-up drained, :attr:`ServeConfig.warmup_requests`)."""
    keys = ("busy_s", "energy_j", "kv_block_seconds", "preemptions")
    base = before or [{k: 0 for k in (*keys, "iterations")} for _ in replicas]
    return [{**{k: getattr(r, k) - b[k] for k in keys}, "iterations": r.iterations[int(b["iterations"]):]}
            for r, b in zip(replicas, base, strict=True)]


def summarize(records: tuple[Any, ...], replicas: list[Any], setup: Any, config: Any,
              before: list[dict[str, float]] | None = None) -> dict[str, Any]:
    """The JSON summary of a run (keys as ``nodeperf serve --json`` prints them); ``before``: each replica's
    counters when a warm-up drained (left out of the energy, KV use, preemptions and batch figures)."""
    from simulator.serving.arrivals import describe as arrival_describe
    from simulator.serving.scheduler import applied_limits

    ttft = np.array([r.ttft_s for r in records])
    e2e = np.array([r.e2e_s for r in records])
    multi = [r for r in records if r.output_len > 1]
    tpot = np.array([r.tpot_s for r in multi])
    itl = np.concatenate([r.itl_gaps_s for r in records]) if records else np.zeros(0)
    makespan = max((r.finish_s for r in records), default=0.0)
    out_tokens = int(sum(r.output_len for r in records))
    in_tokens = int(sum(r.input_len for r in records))
    ok, held = _slos(records, config.slo, {"ttft": ttft, "tpot": tpot, "e2e": e2e, "itl": itl})
    good = int(ok.sum())
    devices = setup.plan.tp * setup.plan.pp * len(replicas)
    phase = _measured(replicas, before)
    busy_energy = sum(m["energy_j"] for m in phase)
    idle_w = float(setup.device.power.idle_w)
    idle_energy = sum(max(0.0, makespan - m["busy_s"]) for m in phase) * idle_w * setup.plan.tp * setup.plan.pp
    energy = busy_energy + idle_energy
    kv_util = (sum(m["kv_block_seconds"] for m in phase) / (setup.kv.blocks * makespan * len(replicas))
               if makespan > 0 else 0.0)
    steps = np.array([it.steps for m in phase for it in m["iterations"]], dtype=float)
    toks = np.array([it.tokens for m in phase for it in m["iterations"]], dtype=float)
    batch = {"mean": float((steps * toks).sum() / steps.sum()) if steps.size else 0.0,
             "max": float(toks.max()) if toks.size else 0.0, "iterations": int(steps.sum())}
    itl_s = percentiles(itl, overwrite=True)
    _itl_percentiles(held, itl)
    return {
        "ttft_s": percentiles(ttft), "tpot_s": percentiles(tpot), "itl_s": itl_s, "e2e_s": percentiles(e2e),
        "requests": len(records), "warmup_requests": int(getattr(config, "warmup_requests", 0)),
        "input_tokens": in_tokens, "output_tokens": out_tokens, "makespan_s": makespan,
        "output_tokens_per_s": out_tokens / makespan if makespan > 0 else 0.0,
        "requests_per_s": len(records) / makespan if makespan > 0 else 0.0,
        "goodput_requests_per_s": good / makespan if makespan > 0 else 0.0,
        "slo_attainment": good / len(records) if records else 0.0, "slo": held,
        "kv_cache_utilization": kv_util, "preemptions": int(sum(m["preemptions"] for m in phase)),
        "batch_tokens": batch, "energy_j": energy, "energy_per_token_j": energy / out_tokens if out_tokens else 0.0,
        "energy_breakdown_j": {"iterations": busy_energy, "idle": idle_energy},
        "cost": _cost(setup.device, devices, makespan, out_tokens, energy),
        "kv_cache": setup.kv.to_json(), "limits": applied_limits(setup.limits, config.scheduler),
        "model": str(getattr(setup.pricer.cfg, "name", "")), "hardware": str(getattr(setup.described["hardware"], "name", "")),
        "plan": {"tp": setup.plan.tp, "pp": setup.plan.pp}, "replicas": len(replicas), "devices": devices,
        "arrival": arrival_describe(setup.described["arrival"]), "lengths": _lengths_of(setup),
        "config": _config_json(config, setup), "stack": config.framework, "iteration_host_s": setup.pricer.host_s,
        "iteration_host_per_seq_s": setup.pricer.host_per_seq_s,
        "sampler_host_s": setup.pricer.sampler_host[0], "sampler_host_per_seq_s": setup.pricer.sampler_host[1],
        "decode_host_s": setup.pricer.decode_host_time(), "prompt_host_s": setup.pricer.prompt_host_time(1),
        "engine_calls": setup.pricer.engine_calls,
    }
