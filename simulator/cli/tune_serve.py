"""`nodeperf tune MODEL --serve ...`: capacity planning of serving deployments
(:mod:`simulator.sweep.tune_serving`): the highest Poisson rate meeting the SLOs of each candidate
(hardware x --tp x --dtype x --replicas x --max-num-seqs x --chunk), ranked by --objective max-qps or
min-cost, and why each rejected candidate failed."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_arguments", "run_serve"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    from simulator.cli.common import finite_float

    g = p.add_argument_group("serving capacity (--serve; also --hardware, --tp, --dtype, --seed, --json, --top, and "
                             "--framework: one serving stack profile, default vllm)")
    g.add_argument("--serve", action="store_true",
                   help="search serving deployments for the highest load meeting --slo (objective max-qps, "
                        "default) or the lowest cost per million tokens (min-cost)")
    g.add_argument("--slo", action="append", default=[], metavar="EXPR",
                   help="SLO as for `nodeperf serve` ('ttft_p99<=2 s', 'tpot_p99<=100 ms'); repeatable, at least one")
    g.add_argument("--lengths", default="sharegpt", help="length distribution as for `nodeperf serve` (default sharegpt)")
    g.add_argument("--scheduler", default="vllm", help="vllm | sarathi | orca | static (default vllm)")
    g.add_argument("--replicas", metavar="LIST", help="replica counts (default 1)")
    g.add_argument("--max-num-seqs", metavar="LIST", help="batch budgets in sequences (default the scheduler's)")
    g.add_argument("--chunk", metavar="LIST", help="prefill chunk sizes (default the scheduler's)")
    g.add_argument("--probe-requests", type=int, default=200, metavar="N",
                   help="requests simulated per rate probe at least (default 200)")
    g.add_argument("--probe-seconds", type=finite_float(0.0, low_open=True), default=30.0, metavar="S",
                   help="seconds of arrivals per probe at least (more requests at high rates; default 30)")
    g.add_argument("--qps-min", type=finite_float(0.0, low_open=True), default=0.25,
                   help="lowest rate probed, req/s (default 0.25)")
    g.add_argument("--qps-max", type=finite_float(0.0, low_open=True), default=1024.0,
                   help="highest rate probed, req/s (default 1024)")
    from simulator.cli.serve import add_kv_window_layout

    add_kv_window_layout(g)


def _axis(flag: str, text: str | None, conv: Any = int) -> list[Any]:
    from simulator.sweep.tune_serving import ServeTuneError

    if text is None:
        return [None]
    out = []
    for t in (x.strip() for x in text.split(",")):
        try:
            v = conv(t)
        except ValueError:
            v = None
        if v is None or (conv is int and v < 1):
            raise ServeTuneError(f"{flag}: {t!r} is not a positive integer; got {text!r}; expected e.g. 1,2")
        out.append(v)
    return out


def _check_names(model: str, hardware: list[str], framework: str | None) -> None:
    """An unknown device or stack name, or a model that generates no tokens, is one located line (exit 2), not
    every candidate rejected for it."""
    from simulator.hardware import load_hardware
    from simulator.serving.iteration import resolve_config
    from simulator.sweep.tune_serving import ServeTuneError
    from workloads.frameworks import get_profile

    for n in hardware:
        try:
            load_hardware(n)
        except ValueError as exc:
            raise ServeTuneError(f"--hardware {n!r}: {exc}") from None
    if framework and "," not in framework:
        get_profile(framework.strip(), where="--framework")
    resolve_config(model)


def _pricing(args: argparse.Namespace, names: list[str]) -> Any:
    """The ``--price`` options checked against every candidate's device (a TCO device without a purchase
    price is one located line, exit 2, before any probe)."""
    from simulator.cli.pricing import pricing_from_args
    from simulator.engines.analytical import spec_of
    from simulator.hardware import load_hardware

    return pricing_from_args(args, [str(spec_of(load_hardware(n))[0].name) for n in names])


def _warn_providers(pricing: Any, names: list[str]) -> None:
    """One warning line once the search has run when the candidates' hourly prices come from different providers."""
    from simulator.cli.pricing import warn_mixed_providers
    from simulator.engines.analytical import spec_of
    from simulator.hardware import load_hardware

    warn_mixed_providers(pricing, [str(spec_of(load_hardware(n))[0].name) for n in names])


def run_serve(args: argparse.Namespace) -> int:
    from simulator.cli.serve import kv_window_layout_arg
    from simulator.serving import ServeConfig
    from simulator.sweep.tune_serving import ServeTuneError, candidates, tune_serving

    if not args.hardware:
        raise ServeTuneError("--hardware: none given; got nothing; expected e.g. --hardware h100-sxm5-80gb,dgx-h100")
    if args.probe_requests < 1:
        raise ServeTuneError(f"--probe-requests: got {args.probe_requests}; expected a positive integer")
    if not 0 < args.qps_min < args.qps_max:
        raise ServeTuneError(f"--qps-min/--qps-max: got {args.qps_min:g}/{args.qps_max:g}; expected 0 < min < max")
    objective = args.objective or "max-qps"  # an explicit objective serving cannot rank by is refused by _check
    dtypes = [d.strip() for d in args.dtype.split(",")] if args.dtype else [None]
    names = [h.strip() for h in args.hardware.split(",") if h.strip()]
    _check_names(args.model, names, args.framework)
    cands = candidates(names,
                       [t for t in _axis("--tp", args.tp) if t] or [1], dtypes,
                       [r for r in _axis("--replicas", args.replicas) if r] or [1],
                       _axis("--max-num-seqs", args.max_num_seqs), _axis("--chunk", args.chunk))
    framework = (args.framework or "vllm").strip()
    if "," in framework:
        raise ServeTuneError(f"--framework: --serve searches one serving stack; got {args.framework!r}; expected one "
                             "profile name, e.g. vllm")
    from workloads.zoo import checkpoint_weight_dtype

    # the weights as the published checkpoint ships them (GPT-OSS: MXFP4 experts, bf16 activations only)
    ckpt = checkpoint_weight_dtype(args.model) if all(d in (None, "bf16") for d in dtypes) else None
    base = ServeConfig(lengths=args.lengths, scheduler=args.scheduler, framework=framework,
                       requests=args.probe_requests, seed=args.seed, slo=tuple(args.slo),
                       weight_dtype=ckpt[0] if ckpt else None, kv_window_layout=kv_window_layout_arg(args))
    if not args.probe_seconds > 0:
        raise ServeTuneError(f"--probe-seconds: got {args.probe_seconds:g}; expected seconds > 0")
    pricing = _pricing(args, names)
    result = tune_serving(args.model, cands, base, objective, args.qps_min, args.qps_max, probe_seconds=args.probe_seconds,
                          pricing=pricing)
    _warn_providers(pricing, names)
    if args.json:
        doc = result.to_json()
        doc["model"] = args.model
        sys.stdout.write(json.dumps(doc, sort_keys=True, indent=1) + "\n")
        return 0 if result.best else 1
    lines = [f"{args.model}: {len(cands)} serving deployments, objective {objective}, SLO {', '.join(args.slo)}; "
             f"each rate probe max({result.requests_per_probe}, qps x {args.probe_seconds:g} s) requests (Poisson, seed "
             f"{args.seed}), lengths {args.lengths}"]
    if result.ranked:
        lines.append(f"     {'deployment':<40} {'offered':>9} {'achieved':>9} {'achieved':>10} {'price':>9}  cost at the "
                     "achieved rate")
        lines.append(f"     {'':<40} {'req/s':>9} {'req/s':>9} {'out tok/s':>10} {'USD/h':>9}  USD/M output tokens")
    for i, o in enumerate(result.ranked[:args.top], 1):
        r = o.rates()
        usd = "n/a" if o.usd_per_million_tokens is None else f"{o.usd_per_million_tokens:.3g}"
        hourly = "n/a" if r.get("usd_per_hour") is None else f"{r['usd_per_hour']:.3g}"
        offered = f">={o.qps:.3g}" if o.capped else f"{o.qps:.3g}"
        lines.append(f"{i:>3}. {o.candidate.label():<40} {offered:>9} {r.get('achieved_requests_per_s', 0.0):9.3g} "
                     f"{r.get('achieved_output_tokens_per_s', 0.0):10.4g} {hourly:>9}  {usd}")
    if result.ranked:
        lines.append("offered: the Poisson arrival rate the SLOs hold at (the capacity); achieved: requests and output "
                     "tokens served over the run's makespan; USD/M tokens = USD/h / (achieved out tok/s x 3600) x 1e6")
    if any(o.capped for o in result.ranked[:args.top]):
        lines.append(f">=: every SLO held at --qps-max ({args.qps_max:g} req/s), the highest rate probed; the capacity "
                     "is at least that (raise --qps-max to find it)")
    if result.rejected:
        lines.append("rejected:")
        lines += [f"     {o.candidate.label():<40} {o.reason}" for o in result.rejected[:max(args.rejected, 0)]]
    print("\n".join(lines))
    return 0 if result.best else 1
