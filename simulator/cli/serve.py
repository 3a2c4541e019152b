"""`nodeperf serve MODEL --hardware SYSTEM`: requests arriving over time on a serving engine (latency
percentiles, throughput, goodput under SLOs, KV use, energy, cost); see docs/serving.md."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from simulator.cli.common import finite_float, nonempty, nonnegative_int, one_of, positive_int

#: Help of ``--lengths``.
LENGTHS_HELP = ("fixed:in=I,out=O | uniform:in=A-B,out=C-D | lognormal:in_mean=..,in_sigma=..,out_mean=..,out_sigma=.. "
                "| a data set's name (sharegpt) | FILE.csv; add prefix=P for a shared system prompt (',prefix=P' after "
                "parameters, ':prefix=P' after a name or file; default fixed:in=512,out=128)")


def _duration(text: str) -> float:
    """``"1 h"``, ``"90 s"``, ``"30 min"`` or seconds -> seconds."""
    units = {"s": 1.0, "ms": 1e-3, "min": 60.0, "h": 3600.0}
    t = text.strip()
    num, _, unit = t.partition(" ")
    if not unit:
        for u in sorted(units, key=len, reverse=True):
            if t.endswith(u) and t[: -len(u)].strip():
                num, unit = t[: -len(u)], u
                break
    u = unit.strip() or "s"
    if u not in units:
        from nodeperf.suggest import did_you_mean

        spelt = {"sec": "s", "secs": "s", "second": "s", "seconds": "s", "msec": "ms", "minute": "min", "minutes": "min",
                 "mins": "min", "hr": "h", "hrs": "h", "hour": "h", "hours": "h"}.get(u.lower())
        hint = f"; did you mean {spelt!r}?" if spelt else did_you_mean(u, units, prefix=True)
        raise argparse.ArgumentTypeError(f"unit {u!r}; got {text!r}; expected a duration such as '1 h', '90 s' or "
                                         f"'30 min' (units {', '.join(units)}){hint}")
    try:
        v = float(num) * units[u]
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a duration such as '1 h', '90 s' or '30 min'") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a positive finite duration")
    return v


def _fp8_accumulations() -> tuple[str, ...]:
    from simulator.engines.options import FP8_ACCUMULATIONS

    return FP8_ACCUMULATIONS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="simulate serving a model: requests over time, engine scheduler, KV cache, replicas, cost",
        description="Simulate requests arriving at a serving deployment of MODEL (an engine scheduler with a paged "
                    "KV cache, each iteration priced by the engines). Prints latency percentiles, throughput, "
                    "goodput and cost; --json prints one JSON object.",
    )
    p.add_argument("model", metavar="MODEL", help="zoo transformer (see `nodeperf models`) or config.json")
    p.add_argument("--hardware", required=True, metavar="NAME", help="catalog device or system, or a TOML path")
    p.add_argument("--tp", type=positive_int, help="tensor-parallel degree of one replica")
    p.add_argument("--pp", type=positive_int, help="pipeline stages of one replica")
    p.add_argument("--arrival", type=nonempty, default="poisson:qps=1",
                   help="poisson:qps=Q | gamma:qps=Q,cv=C | concurrency:n=N | burst | trace:FILE.csv (default poisson:qps=1)")
    p.add_argument("--lengths", type=nonempty, help=LENGTHS_HELP)
    p.add_argument("--scheduler", choices=("vllm", "sarathi", "orca", "static"), default="vllm",
                   help="engine scheduler (default vllm: vLLM V1 continuous batching with chunked prefill)")
    p.add_argument("--max-num-seqs", type=positive_int, help="sequences per iteration (default: the engine's)")
    p.add_argument("--max-batched-tokens", type=positive_int, help="token budget per iteration (default: the engine's)")
    p.add_argument("--chunk", type=positive_int, help="Sarathi-Serve chunk size (--scheduler sarathi; default 512)")
    p.add_argument("--scheduler-steps", type=positive_int, default=1,
                   help="decode steps per scheduling pass (vLLM 0.6 --num-scheduler-steps; default 1)")
    p.add_argument("--no-mixed-prefill", action="store_true",
                   help="prompts run in iterations of their own, decodes wait (vLLM V0, SGLang <= 0.3)")
    p.add_argument("--block-size", type=positive_int, default=16,
                   help="KV-cache block size in tokens, at most the model's context (default 16; vLLM takes 8, 16, 32, "
                        "64 or 128)")
    p.add_argument("--gpu-memory-utilization", type=finite_float(0.0, 1.0, low_open=True), default=0.9,
                   help="fraction of device memory the engine takes (default 0.9, as vLLM)")
    p.add_argument("--free-gpu-memory-fraction", type=finite_float(0.0, 1.0, low_open=True, high_open=True),
                   default=None,
                   help="fraction of the memory free after loading that the KV cache takes, for the frameworks that "
                        "size it so (trt-llm, trt-llm-pytorch: TensorRT-LLM's --kv_cache_free_gpu_mem_fraction; "
                        "default 0.9)")
    p.add_argument("--admission", choices=("max-utilization", "no-evict"), default="max-utilization",
                   help="KV admission: max-utilization (default: admit on free blocks now, preempt when short; vLLM) or "
                        "no-evict (admit only when the whole output's blocks fit; TensorRT-LLM's GUARANTEED_NO_EVICT)")
    p.add_argument("--preemption", choices=("recompute", "swap"), default="recompute",
                   help="what happens to a preempted request's KV cache (default recompute)")
    p.add_argument("--prefix-cache", action="store_true", help="reuse the shared prompt prefix of --lengths ...,prefix=P")
    add_kv_window_layout(p)
    p.add_argument("--speculative", type=nonempty, metavar="DRAFT,k=K,accept=A", help="speculative decoding: a draft model DRAFT proposes K tokens a step, each "
                        "accepted with probability A (Leviathan et al. 2023; expected accepted tokens a step)")
    p.add_argument("--replicas", type=positive_int, default=1,
                   help="copies of the deployment (default 1): each a copy of the --hardware system with its own "
                        "tp x pp devices, so N is not bounded by that system's device count")
    p.add_argument("--router", choices=("round-robin", "least-loaded"), default="round-robin",
                   help="how requests are spread over replicas (default round-robin)")
    p.add_argument("--disaggregate", type=nonempty, metavar="prefill=P,decode=D",
                   help="separate prefill and decode replicas of tp x pp devices each, KV caches sent over the "
                        "system's peer fabric: all (P + D) x tp x pp devices in one node of --hardware (a system "
                        "of 2 or more devices)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--requests", type=positive_int, help="requests to simulate (default 1000)")
    g.add_argument("--duration", type=_duration, help="arrival window, e.g. '1 h' (open-loop arrivals)")
    p.add_argument("--warmup-requests", type=nonnegative_int, default=0, metavar="N",
                   help="N requests first, all finished before the measured ones start, left out of the summary "
                        "(a benchmark client's --warmup-request-count; default 0)")
    p.add_argument("--measurement-interval", type=_duration, metavar="'100 s'",
                   help="average only the requests a time-window client counts (genai-perf / perf_analyzer "
                        "--measurement-interval): windows of 1.2 x this, each counting the requests finishing in it, "
                        "until 3 agree within --stability-percentage (default: every request counts)")
    p.add_argument("--stability-percentage", type=finite_float(0.0), default=999.0, metavar="PCT",
                   help="with --measurement-interval: how far 3 windows may differ (default 999, genai-perf's)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the random draws (default 0)")
    p.add_argument("--slo", type=nonempty, action="append", default=[], metavar="'ttft_p99<=2 s'",
                   help="service-level objective (repeatable): ttft|tpot|e2e|itl _pN|_mean|_max <= VALUE UNIT, pN any "
                        "percentile above 0 and at most 100 (p50, p95, p99.9; none given: p99), computed for the SLO "
                        "and reported in its --json 'slo' entry (the summary's own percentiles are p50, p90, p99) "
                        "(itl: the gaps between a request's streamed chunks, pooled over requests)")
    p.add_argument("--framework", type=nonempty, default="vllm", help="serving stack profile (default vllm)")
    p.add_argument("--dtype", type=nonempty, help="model dtype (default: the model's)")
    _add_precision(p)
    p.add_argument("--iteration-host-s", type=finite_float(0.0), help="host time per iteration in seconds (default: the profile's)")
    p.add_argument("--graph-launch", choices=("pre-12.6", "12.6", "none"),
                   help="CUDA driver form of a decode-graph replay's launch: pre-12.6 (2 us + 200 ns per kernel node), "
                        "12.6 (2.5 us + 1 ns per node), none (default: the profile's; none where no driver is stated)")
    p.add_argument("--fp8-accumulation", type=one_of(_fp8_accumulations, "unknown fp8 accumulation"),
                   metavar="fast|split",
                   help="how fp8 GEMMs accumulate: fast (cuBLASLt FAST_ACCUM = 1) or split (FAST_ACCUM = 0: FP32 "
                        "promotions every efficiency.fp8_promotion_interval K elements, DeepSeek-V3 s.3.3.2; priced "
                        "on Hopper only); default: the --framework profile's (not stated: fast)")
    from simulator.cli.pricing import add_price_arguments

    add_price_arguments(p)
    p.add_argument("--json", action="store_true", help="print exactly one JSON object (the summary)")
    p.add_argument("--csv", metavar="FILE", help="write one row per request to FILE")
    p.add_argument("--trace", metavar="FILE.json", help="write the iteration timeline as a Chrome trace")
    p.set_defaults(func=run)


def _kv_window_layouts() -> tuple[str, ...]:
    from simulator.serving.kvcache import KV_WINDOW_LAYOUTS

    return ("auto", *KV_WINDOW_LAYOUTS)


def add_kv_window_layout(p: Any) -> None:
    """``--kv-window-layout``: how the KV cache holds sliding-window layers (``ServeConfig.kv_window_layout``)."""
    p.add_argument("--kv-window-layout", type=one_of(_kv_window_layouts, "unknown KV window layout"), default="auto",
                   metavar="LAYOUT",
                   help="how the KV cache holds sliding-window layers: full (every layer at the full context; vLLM's "
                        "--disable-hybrid-kv-cache-manager, SGLang's --disable-hybrid-swa-memory), vllm-hybrid (vLLM "
                        "V1's hybrid KV cache manager), sglang-swa (SGLang's full and window token pools); default "
                        "auto: the --framework profile's")


def kv_window_layout_arg(args: argparse.Namespace) -> str | None:
    """``ServeConfig.kv_window_layout`` from ``--kv-window-layout`` (``auto``: None, the profile's)."""
    v = getattr(args, "kv_window_layout", "auto")
    return None if v in (None, "auto") else v


def _add_precision(p: argparse.ArgumentParser) -> None:
    """``--weight-dtype`` / ``--kv-dtype``: the serving precision (``ServeConfig.weight_dtype`` / ``kv_dtype``)."""
    p.add_argument("--weight-dtype", type=nonempty, metavar="DTYPE",
                   help="linear-layer weight dtype (int8, int4, fp8: W8A8 fp8 GEMMs; the LM head, embeddings, norms and "
                        "all-reduces stay at --dtype, as a ModelOpt fp8 checkpoint runs in TensorRT-LLM; mxfp4: the MoE "
                        "experts only; bf16: 16-bit weights); default: the published checkpoint's format (mxfp4 "
                        "experts for gpt-oss-*) with bf16, else --dtype")
    p.add_argument("--kv-dtype", type=nonempty, metavar="DTYPE",
                   help="KV-cache storage dtype (fp8, fp8_e4m3, fp8_e5m2); default: --dtype")


def config_from_args(args: argparse.Namespace) -> Any:
    from simulator.serving.config import ServeConfig, ServingError

    _check_trace_lengths(args.arrival, args.lengths)
    lengths = ServeConfig.lengths if args.lengths is None else args.lengths
    if args.router != "round-robin" and args.replicas == 1 and not args.disaggregate:
        raise ServingError(f"--router: spreads requests over replicas; got --router {args.router} with one replica; "
                           "expected --replicas N > 1 or --disaggregate prefill=P,decode=D (or no --router)")
    if args.prefix_cache:
        from simulator.serving.lengths import parse_lengths
        from simulator.serving.setup import check_prefix_cache

        check_prefix_cache(True, parse_lengths(lengths, "--lengths").prefix, lengths, ("--prefix-cache", "--lengths"))
    return ServeConfig(arrival=args.arrival, lengths=lengths, scheduler=args.scheduler,
                       max_num_seqs=args.max_num_seqs, max_batched_tokens=args.max_batched_tokens, chunk=args.chunk,
                       scheduler_steps=args.scheduler_steps, mixed_prefill=not args.no_mixed_prefill,
                       block_size=args.block_size, gpu_memory_utilization=args.gpu_memory_utilization,
                       free_gpu_memory_fraction=args.free_gpu_memory_fraction, admission=args.admission, preemption=args.preemption, prefix_cache=args.prefix_cache, speculative=args.speculative,
                       replicas=args.replicas, router=args.router, disaggregate=args.disaggregate,
                       requests=args.requests, duration_s=args.duration, warmup_requests=args.warmup_requests,
                       measurement_interval_s=args.measurement_interval, stability_percentage=args.stability_percentage, seed=args.seed, slo=tuple(args.slo),
                       framework=args.framework, dtype=args.dtype, weight_dtype=args.weight_dtype,
                       kv_dtype=args.kv_dtype, iteration_host_s=args.iteration_host_s,
                       graph_launch=args.graph_launch, fp8_accumulation=args.fp8_accumulation,
                       kv_window_layout=kv_window_layout_arg(args))


def _check_trace_lengths(arrival: str, lengths: str | None) -> None:
    """A trace gives every request's lengths, so a ``--lengths`` beside it counts only for its ``prefix=P`` (the
    shared system prompt ``--prefix-cache`` reuses); one without a prefix would be dropped without a word (the run
    had priced the trace's lengths under a ``--lengths fixed:in=10,out=10`` it never read): refused."""
    if lengths is None or not str(arrival).strip().lower().startswith("trace"):
        return
    from simulator.serving.config import ServingError
    from simulator.serving.lengths import parse_lengths

    if not parse_lengths(lengths, "--lengths").prefix:
        raise ServingError(f"--lengths: got {lengths!r} with --arrival {arrival}, whose rows give every request's "
                           "lengths; expected no --lengths (or one ending in prefix=P to declare a shared prompt "
                           "prefix for --prefix-cache)")


def _check_draft(text: str | None) -> None:
    """``--speculative``'s draft model, resolved before the run so a bad name is located under the flag."""
    if text is None:
        return
    from simulator.serving.config import ServingError
    from simulator.serving.iteration import resolve_config
    from simulator.serving.setup import parse_speculative

    try:
        resolve_config(parse_speculative(text)[0])  # type: ignore[index]
    except (ValueError, KeyError) as exc:  # an unknown zoo name is a KeyError
        msg = (exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)).splitlines()[0]
        raise ServingError(f"--speculative: {msg.removeprefix('speculative: ')}") from None


def run(args: argparse.Namespace) -> int:
    import json
    import logging

    from simulator.cli.output import check_outputs, to_stdout, write_output
    from simulator.hardware import load_hardware
    from simulator.serving import simulate_serving
    from workloads.parallel import ParallelPlan

    if not args.verbose:
        logging.getLogger("simulator").setLevel(logging.ERROR)
    check_outputs(("--csv", args.csv), ("--trace", args.trace), json_flag=args.json)
    from simulator.serving.metrics import check_slos

    check_slos(args.slo, where="--slo")  # located under the flag the user typed (the Python API says ``slo``)
    from simulator.cli.common import checkpoint_weights

    note = checkpoint_weights(args, inference=True)
    config = config_from_args(args)
    _check_draft(args.speculative)
    hw = load_hardware(args.hardware)
    from simulator.cli.pricing import pricing_from_args
    from simulator.engines.analytical import spec_of

    pricing = pricing_from_args(args, [str(spec_of(hw)[0].name)])  # before the run: a bad price input is exit 2 now
    from workloads.frameworks import check_profile_hardware, get_profile

    # located under the flag (serve always runs a stack: its default is vllm, so "no --framework" is no way out)
    check_profile_hardware(get_profile(args.framework, where="--framework"), hw, where="--framework", optional=False)
    plan = ParallelPlan(tp=args.tp or 1, pp=args.pp or 1)
    res = simulate_serving(args.model, hw, config, plan)
    sys.stderr.write(note + _trace_shortfall(args))
    if pricing.mode != "cloud" or pricing.prices is not None:
        from simulator.serving.metrics import reprice

        res.summary["cost"] = reprice(res.summary, pricing)
    if args.csv is not None:
        write_output("--csv", args.csv, res.requests_csv())
    if args.trace is not None:
        write_output("--trace", args.trace, json.dumps(res.chrome_trace(), sort_keys=True) + "\n")
    if to_stdout(args.csv, args.trace):
        return 0
    if args.json:
        sys.stdout.write(json.dumps(res.summary, sort_keys=True) + "\n")
        return 0
    from simulator.cli.parallel import mode_suffix

    print(format_summary(res.summary, mode_suffix(args.hardware)))
    return 0


def _stack(s: dict[str, Any]) -> str:
    """`` on the vllm stack``: the serving stack (``--framework``) whose costs priced the run ("" in a summary
    written before the key was kept)."""
    stack = s.get("config", {}).get("framework")
    return f" on the {stack} stack" if stack else ""


def _trace_shortfall(args: argparse.Namespace) -> str:
    """A warning line (or "") when ``--arrival trace:FILE`` holds fewer rows than ``--requests`` (with the
    warm-up) asks for, or its last request arrives before the end of ``--duration``: the run takes the rows
    the trace has, a legitimate truncation that had gone unsaid."""
    from simulator.serving.arrivals import parse_arrival, read_trace

    arrival = parse_arrival(args.arrival)
    if arrival.kind != "trace" or (args.requests is None and args.duration is None):
        return ""
    times, _ins, _outs = read_trace(arrival.path, "arrival trace")
    warm = args.warmup_requests or 0
    if args.requests is not None and len(times) < args.requests + warm:
        what = f" after {warm} warm-up rows" if warm else ""
        return (f"nodeperf: warning: --requests {args.requests}: {arrival.path} holds {len(times)} requests; "
                f"running the {max(0, len(times) - warm)} it has{what}, not {args.requests}\n")
    if args.duration is not None and float(times[-1]) < args.duration:
        return (f"nodeperf: warning: --duration {args.duration:g} s: the last request of {arrival.path} arrives at "
                f"{float(times[-1]):g} s; running its {len(times)} requests, arrivals over {float(times[-1]):g} s, "
                f"not {args.duration:g} s\n")
    return ""


def format_summary(s: dict[str, Any], mode: str = "") -> str:
    """The text summary of a run (``mode``: the ``@MODE`` of ``--hardware``, :func:`simulator.cli.parallel.mode_suffix`:
    a spec keeps its catalog name in a power mode or under a board power limit, so the header names it)."""
    from simulator.report.formatting import si

    split = s.get("config", {}).get("disaggregate")  # the replicas' roles: the line had read as a colocated run
    roles = f" disaggregated {split}" if split else ""
    lines = [f"{s['model']} on {s['hardware']}{mode} (tp {s['plan']['tp']}, pp {s['plan']['pp']}) x {s['replicas']} "
             f"replica(s){roles}, {s['config']['scheduler']} scheduler{_stack(s)}: {s['requests']} requests over "
             f"{si(s['makespan_s'], 's')}"]
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        if key not in s:  # a summary written before ITL was reported
            continue
        d = s[key]
        if key in ("tpot_s", "itl_s") and s.get("output_tokens", 1) <= s.get("requests", 0):
            # every request has one output token: no TPOT, no gap between tokens (the JSON keeps its zeros)
            lines.append(f"  {key[:-2].upper():5s} n/a (no request has more than one output token)")
            continue
        lines.append(f"  {key[:-2].upper():5s} p50 {si(d['p50'], 's')}, p90 {si(d['p90'], 's')}, p99 {si(d['p99'], 's')}, "
                     f"mean {si(d['mean'], 's')}, max {si(d['max'], 's')}")
    lines.append(f"  throughput {s['output_tokens_per_s']:.1f} output tokens/s, {s['requests_per_s']:.3f} requests/s; "
                 f"goodput {s['goodput_requests_per_s']:.3f} requests/s (SLO attainment {100 * s['slo_attainment']:.1f}%)")
    for h in s["slo"]:
        lines.append(f"  SLO {h['slo']}: {h['metric']} = {si(h['value_s'], 's')} ({'met' if h['met'] else 'missed'})")
    lines.append(_limits_line(s))
    kv = s["kv_cache"]
    pool = (f" (full-attention layers; the window layers' pool {kv['swa_blocks']} blocks, window {kv['swa_window']})"
            if kv.get("swa_blocks") else "")
    lines.append(f"  KV cache {kv['blocks']} blocks of {kv['block_size']} tokens{pool}, {100 * s['kv_cache_utilization']:.1f}% "
                 f"used on average; {s['preemptions']} preemption(s); mean {s['batch_tokens']['mean']:.1f} tokens per iteration")
    c = s["cost"]
    basis = f"; purchase basis {c['purchase_basis']}" if c.get("purchase_basis") else ""
    cost = (f"${c['usd_per_million_tokens']:.3f} per million output tokens ({c['priced_by']}{basis})"
            if c.get("usd_per_million_tokens") is not None else c["priced_by"])
    lines.append(f"  energy {si(s['energy_j'], 'J')} ({s['energy_per_token_j']:.3f} J per output token); {cost}")
    return "\n".join(lines)


def _limits_line(s: dict[str, Any]) -> str:
    """The limits the run's scheduler applies (the summary's ``limits``; a limit it does not apply is None there and
    not printed): ``static`` batches whole requests with no token budget."""
    lim = s.get("limits") or {}
    shown = []
    for key in ("max_num_seqs", "max_batched_tokens", "chunk", "block_size", "scheduler_steps", "mixed_prefill",
                "admission"):
        v = lim.get(key)
        if v is None:
            continue
        shown.append(f"{key} {('on' if v else 'off') if isinstance(v, bool) else v}")
    note = "; no token budget: whole requests" if s["config"]["scheduler"] == "static" else ""
    return f"  limits of the {s['config']['scheduler']} scheduler: {', '.join(shown)}{note}"
