"""Turn a :class:`~simulator.serving.config.ServeConfig` into a ready simulation: checked settings,
hardware, plan, pricer, KV cache, replicas, arrival times and lengths (every problem one located line)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nodeperf.suggest import did_you_mean
from simulator.serving.config import DEFAULT_REQUESTS, ServeConfig, ServingError

__all__ = ["Setup", "prepare", "parse_disaggregate", "parse_speculative"]

#: Upper bound on requests one simulation takes (a typo guard: 100 million requests).
MAX_REQUESTS = 100_000_000


@dataclass
class Setup:
    """Everything the event loop and the summary need."""

    replicas: list[Any]
    decode_pool: list[Any]
    arrivals: list[tuple[float, int]]
    lengths: tuple[np.ndarray, np.ndarray]
    closed_loop: int
    total: int
    handoff_s: Any
    pricer: Any
    kv: Any
    device: Any
    plan: Any
    limits: dict[str, Any]
    shared_tokens: int
    described: dict[str, Any] = field(default_factory=dict)


def parse_disaggregate(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    from simulator.serving.arrivals import parse_params, positive_integer

    p = parse_params(str(text), "disaggregate", ("prefill", "decode"))
    if set(p) != {"prefill", "decode"}:
        raise ServingError(f"disaggregate: got {text!r}; expected prefill=P,decode=D")
    return positive_integer(p["prefill"], "disaggregate: prefill"), positive_integer(p["decode"], "disaggregate: decode")


def parse_speculative(text: str | None) -> tuple[str, int, float] | None:
    """``DRAFT,k=K,accept=A`` -> (draft model, K, A)."""
    if text is None:
        return None
    from simulator.serving.arrivals import parse_params, positive_integer

    draft, _, rest = str(text).partition(",")
    if not draft.strip() or "=" in draft or not rest.strip():
        raise ServingError(f"speculative: got {text!r}; expected DRAFT,k=4,accept=0.7 (a draft model name first)")
    p = parse_params(rest, "speculative", ("k", "accept"))
    if set(p) != {"k", "accept"}:
        raise ServingError(f"speculative: got {text!r}; expected DRAFT,k=4,accept=0.7")
    k = positive_integer(p["k"], "speculative: k")
    try:
        a = float(p["accept"])
    except ValueError:
        a = math.nan
    if not (0.0 <= a < 1.0):
        raise ServingError(f"speculative: accept: got {p['accept']!r}; expected a probability in [0, 1)")
    return draft.strip(), k, a


def _graph_launch(config: ServeConfig, profile: Any) -> str:
    """The graph-launch form a run prices: the setting's, else the profile's (``""``: not modelled)."""
    form = config.graph_launch if config.graph_launch is not None else getattr(profile, "graph_launch", "")
    if form in ("", "none"):
        return ""
    if not getattr(profile, "waits_each_step", False):
        raise ServingError(f"graph_launch: got {form!r} with framework {config.framework!r}, which launches each step "
                           "while the one before runs (the launch is hidden behind it); expected graph_launch none, "
                           "or a framework that waits for each step (vllm-v0, sglang-0.3)")
    return str(form)


def _decode_host(config: ServeConfig, profile: Any) -> tuple[int, int]:
    """(ops, syncs) the profile's engine runs around each decode-graph replay; none when ``iteration_host_s``
    sets the host time of a step (it replaces the profile's)."""
    if config.iteration_host_s is not None:
        return 0, 0
    return int(getattr(profile, "decode_host_ops", 0)), int(getattr(profile, "decode_host_syncs", 0))


def _prompt_host(config: ServeConfig, profile: Any) -> tuple[int, int, int]:
    """(ops, syncs, ops per prompt) the profile's engine runs outside the forward of a step that carries prompts;
    none when ``iteration_host_s`` sets the host time of a step (it replaces the profile's)."""
    if config.iteration_host_s is not None:
        return 0, 0, 0
    return (int(getattr(profile, "prompt_host_ops", 0)), int(getattr(profile, "prompt_host_syncs", 0)),
            int(getattr(profile, "prompt_host_ops_per_seq", 0)))


def _sampler_host(config: ServeConfig, profile: Any) -> tuple[float, float]:
    """(s, s per sequence) of the profile's host-bound sampler call; none when ``iteration_host_s`` sets the host
    time of a step (it replaces the profile's)."""
    if config.iteration_host_s is not None:
        return 0.0, 0.0
    return float(getattr(profile, "sampler_host_s", 0.0)), float(getattr(profile, "sampler_host_per_seq_s", 0.0))


def _check_config(config: ServeConfig) -> None:
    from simulator.serving.scheduler import ADMISSIONS, SCHEDULERS

    if config.scheduler not in SCHEDULERS:
        raise ServingError(f"scheduler: unknown scheduler {config.scheduler!r}; got {config.scheduler!r}; expected one of "
                           f"{', '.join(SCHEDULERS)}{did_you_mean(config.scheduler, SCHEDULERS)}")
    from simulator.serving.engine import check_router

    check_router(config.router)
    from simulator.serving.kvcache import KV_WINDOW_LAYOUTS

    if config.kv_window_layout is not None and config.kv_window_layout not in KV_WINDOW_LAYOUTS:
        raise ServingError(f"kv_window_layout: got {config.kv_window_layout!r}; expected one of "
                           f"{', '.join(KV_WINDOW_LAYOUTS)}{did_you_mean(str(config.kv_window_layout), KV_WINDOW_LAYOUTS)}")
    if config.preemption not in ("recompute", "swap"):
        raise ServingError(f"preemption: got {config.preemption!r}; expected recompute or swap"
                           f"{did_you_mean(config.preemption, ('recompute', 'swap'))}")
    if config.admission not in ADMISSIONS:
        raise ServingError(f"admission: got {config.admission!r}; expected one of {', '.join(ADMISSIONS)}"
                           f"{did_you_mean(str(config.admission), ADMISSIONS)}")
    _check_fp8_accumulation(config.fp8_accumulation)
    _check_precision(config)
    for name in ("max_num_seqs", "max_batched_tokens", "chunk", "scheduler_steps", "block_size", "replicas", "requests"):
        v = getattr(config, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ServingError(f"{name}: got {v!r}; expected a positive integer")
    a = config.arrival_seed
    if a is not None and (isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < 2**32):
        raise ServingError(f"arrival_seed: got {a!r}; expected an integer in [0, 2**32) or None")
    if config.requests is not None and config.requests > MAX_REQUESTS:
        raise ServingError(f"requests: got {config.requests}; expected at most {MAX_REQUESTS:,}")
    if config.requests is not None and config.duration_s is not None:
        raise ServingError("requests/duration_s: got both; expected one of them")
    d = config.duration_s
    if d is not None and (not isinstance(d, (int, float)) or not math.isfinite(d) or d <= 0):
        raise ServingError(f"duration_s: got {d!r}; expected a positive number of seconds")
    u = config.gpu_memory_utilization
    if not isinstance(u, (int, float)) or not (0 < u <= 1):
        raise ServingError(f"gpu_memory_utilization: got {u!r}; expected a fraction in (0, 1]")
    f = config.free_gpu_memory_fraction
    if f is not None and (isinstance(f, bool) or not isinstance(f, (int, float)) or not (0 < f < 1)):
        raise ServingError(f"free_gpu_memory_fraction: got {f!r}; expected a fraction in (0, 1) (TensorRT-LLM "
                           "requires it below 1)")
    if not isinstance(config.mixed_prefill, bool):
        raise ServingError(f"mixed_prefill: got {config.mixed_prefill!r}; expected True or False")
    _check_static_options(config)
    if config.chunk is not None and config.scheduler != "sarathi":
        raise ServingError(f"chunk: Sarathi-Serve's chunk size; got scheduler {config.scheduler!r}; expected "
                           "scheduler sarathi (vllm chunks by max_batched_tokens)")
    if config.chunk is not None and config.max_batched_tokens not in (None, config.chunk):
        raise ServingError(f"chunk/max_batched_tokens: Sarathi-Serve's token budget per iteration is its chunk; got "
                           f"chunk {config.chunk} and max_batched_tokens {config.max_batched_tokens}; expected one of "
                           "them (or both the same)")
    from simulator.serving.arrivals import MAX_HORIZON_S

    h = config.iteration_host_s
    if h is not None and (not math.isfinite(h) or not 0 <= h <= MAX_HORIZON_S):
        raise ServingError(f"iteration_host_s: got {h!r}; expected seconds >= 0 and at most {MAX_HORIZON_S:.3g} (2**52 "
                           "ns: the simulated clock's span)")
    if config.graph_launch is not None:
        from workloads.frameworks import GRAPH_LAUNCH_FORMS

        forms = (*GRAPH_LAUNCH_FORMS, "none")
        if config.graph_launch not in forms:
            raise ServingError(f"graph_launch: got {config.graph_launch!r}; expected one of {', '.join(forms)}"
                               f"{did_you_mean(str(config.graph_launch), forms)}")
    from simulator.serving.metrics import check_slos

    check_slos(config.slo)


def _check_static_options(config: ServeConfig) -> None:
    """Options that static batching (or no-evict admission) never reads, refused rather than dropped: static
    batching forms a batch of whole requests with no token budget, one step per pass and no admission policy; it
    and no-evict admission reserve every block a request will need when it starts, so neither preempts."""
    if config.scheduler == "static" and (config.scheduler_steps != 1 or not config.mixed_prefill):
        raise ServingError(f"scheduler_steps/mixed_prefill: options of the iteration-level schedulers; got scheduler "
                           f"'static' with scheduler_steps {config.scheduler_steps}, mixed_prefill "
                           f"{config.mixed_prefill}; expected scheduler vllm, sarathi or orca")
    if config.scheduler == "static" and config.max_batched_tokens is not None:
        raise ServingError(f"max_batched_tokens: got {config.max_batched_tokens} with scheduler 'static', which forms "
                           "a batch of up to max_num_seqs whole requests and has no token budget; expected none (or "
                           "scheduler vllm, sarathi or orca)")
    if config.scheduler == "static" and config.admission != "max-utilization":
        raise ServingError(f"admission: got {config.admission!r} with scheduler 'static', which reserves the blocks of "
                           "each request's prompt and output when its batch forms and has no admission policy; "
                           "expected max-utilization, the default (or scheduler vllm, sarathi or orca)")
    if config.preemption == "swap" and (config.scheduler == "static" or config.admission == "no-evict"):
        why = "scheduler 'static'" if config.scheduler == "static" else "admission 'no-evict'"
        raise ServingError(f"preemption: got 'swap' with {why}, which reserves every block a request will need when "
                           "it starts and so never preempts one; expected recompute, the default (or scheduler vllm, "
                           "sarathi or orca with admission max-utilization)")


def _check_window(arrival: Any, config: ServeConfig) -> None:
    """An open-loop arrival's expected request count (qps x duration) within :data:`MAX_REQUESTS` and its
    expected span (requests / qps, or the duration) within ``MAX_HORIZON_S`` (:mod:`simulator.serving.arrivals`; located ServingErrors)."""
    from simulator.serving.arrivals import MAX_HORIZON_S

    if arrival.kind not in ("poisson", "gamma"):
        return
    if config.duration_s is not None and config.duration_s * arrival.qps > MAX_REQUESTS:
        raise ServingError(f"arrival/duration_s: about {config.duration_s * arrival.qps:.3g} requests (qps "
                           f"{arrival.qps:g} x {config.duration_s:g} s); expected at most {MAX_REQUESTS:,}")
    count = config.requests if config.requests is not None else DEFAULT_REQUESTS
    span = config.duration_s if config.duration_s is not None else count / arrival.qps
    if span > MAX_HORIZON_S:
        where = "duration_s" if config.duration_s is not None else "requests"
        raise ServingError(f"arrival/{where}: a span of about {span:.3g} s (qps {arrival.qps:g}); expected at most "
                           f"{MAX_HORIZON_S:.3g} s (2**52 ns: the simulated clock keeps 1 ns steps up to there)")


def _check_fp8_accumulation(value: Any) -> None:
    from simulator.engines.options import FP8_ACCUMULATIONS

    if value is not None and value not in FP8_ACCUMULATIONS:
        raise ServingError(f"fp8_accumulation: got {value!r}; expected one of {', '.join(FP8_ACCUMULATIONS)} or None"
                           f"{did_you_mean(str(value).lower(), FP8_ACCUMULATIONS)}")


def _check_precision(config: ServeConfig) -> None:
    """``weight_dtype`` / ``kv_dtype``: names :mod:`workloads.precision` knows (a located ServingError)."""
    from workloads.precision import parse_kv_dtype, parse_weight_dtype

    for name, parse in (("weight_dtype", parse_weight_dtype), ("kv_dtype", parse_kv_dtype)):
        value = getattr(config, name)
        if value is None:
            continue
        try:
            parse(value, name)
        except ValueError as e:
            raise ServingError(str(e)) from None


def _hardware(system: Any) -> Any:
    if isinstance(system, (str,)):
        from simulator.hardware import load_hardware

        return load_hardware(system)
    return system


def _options(config: ServeConfig, options: Any) -> tuple[Any, Any]:
    from workloads.frameworks import get_profile

    profile = get_profile(config.framework, where="framework")
    if profile.stack:  # a training stack's kernels had priced every serving iteration (predict refuses the same)
        from workloads.frameworks import PROFILES

        serving = sorted(n for n, p in PROFILES.items() if not p.stack)
        raise ServingError(f"framework: got {config.framework!r}, a training stack (stack {profile.stack!r}); expected "
                           f"a serving or inference profile: {', '.join(serving)}")
    if options is not None:
        return options, profile
    from simulator.engines.options import options_from_settings

    # every cost option the profile states (fusion, norm_fusion, cuda_graphs, ...), as `predict --framework` prices
    # them: copied whole, so an option added to FrameworkProfile.cost_options cannot be left out here
    settings = dict(profile.cost_options())
    moe = {"fused_moe_configs": profile.fused_moe_configs}  # the stack's tuned fused-MoE kernels (not a setting)
    if config.fp8_accumulation is not None:  # stated for this run: wins over the profile's
        return options_from_settings({**settings, "fp8_accumulation": config.fp8_accumulation},
                                     where="config", **moe), profile
    return options_from_settings(settings, where="framework", **moe), profile


def _eager_options(profile: Any, opts: Any) -> Any:
    """Costing options of the iterations that carry a prompt where the stack replays CUDA graphs for decode-only
    iterations only (``profile.graphs_decode_only``): no graph, per-op dispatch from the model's modules; else None."""
    if not (getattr(profile, "graphs_decode_only", False) and getattr(opts, "cuda_graphs", False)):
        return None
    from dataclasses import replace

    return replace(opts, cuda_graphs=False, eager_framework=True, eager_modules=True)


def _limits(config: ServeConfig, device: Any, max_len: int) -> dict[str, Any]:
    from simulator.serving.scheduler import engine_defaults

    seqs, tokens, chunk = engine_defaults(config.scheduler, device)
    seqs = config.max_num_seqs or seqs
    if config.scheduler == "sarathi":
        tokens = config.chunk or config.max_batched_tokens or chunk
    else:
        tokens = config.max_batched_tokens or tokens
    if config.scheduler in ("orca", "static") and config.max_batched_tokens is None:
        tokens = max(tokens, max_len)  # whole prompts: the budget takes the longest one
    return {"max_num_seqs": seqs, "max_batched_tokens": tokens, "chunk": tokens if config.scheduler == "sarathi" else None,
            "block_size": config.block_size,
            "scheduler_steps": config.scheduler_steps, "mixed_prefill": config.mixed_prefill,
            "admission": config.admission}


def _disaggregate_of(config: ServeConfig) -> Any:
    """The config's disaggregated split (:func:`parse_disaggregate`), refusing ``replicas`` beside it: the split
    names every replica, so ``--replicas`` was dropped without a word."""
    disagg = parse_disaggregate(config.disaggregate)
    if disagg and config.replicas != 1:
        raise ServingError(f"replicas: got {config.replicas} with disaggregate prefill={disagg[0]},decode={disagg[1]}; "
                           f"expected replicas 1: a disaggregated deployment is its {disagg[0]} prefill and {disagg[1]} "
                           f"decode replicas (for more, raise P and D)")
    return disagg


def prepare(model: Any, system: Any, config: ServeConfig, plan: Any = None, options: Any = None) -> Setup:
    """Check ``config`` and build the simulation's parts (:class:`Setup`)."""
    if not isinstance(config, ServeConfig):
        raise ServingError(f"config: got a {type(config).__name__}; expected a ServeConfig")
    _check_config(config)
    from simulator.serving.arrivals import (
        arrival_times,
        client_arrival_times,
        parse_arrival,
    )
    from simulator.serving.lengths import parse_lengths, sample_lengths

    arrival = parse_arrival(config.arrival, "arrival")
    lspec = parse_lengths(config.lengths, "lengths")
    check_prefix_cache(config.prefix_cache, lspec.prefix, config.lengths)
    disagg = _disaggregate_of(config)
    spec = parse_speculative(config.speculative)
    rng = np.random.default_rng(config.seed)
    hw = _hardware(system)
    from workloads.parallel import ParallelPlan

    plan = plan or ParallelPlan()
    _check_disaggregate(disagg, hw, plan)
    from simulator.serving.iteration import IterationPricer, resolve_config

    cfg, _ = resolve_config(model)
    opts, profile = _options(config, options)
    from simulator.parallel.stacks import check_stack_device

    check_stack_device(profile, hw)  # a serving stack on a device it does not run on: refused, as by predict
    sizing = getattr(profile, "kv_cache_sizing", "device")
    if config.free_gpu_memory_fraction is not None and sizing != "free":
        raise ServingError(f"free_gpu_memory_fraction: got {config.free_gpu_memory_fraction} with framework "
                           f"{config.framework!r}, which sizes its KV cache as gpu_memory_utilization of the device; "
                           "expected gpu_memory_utilization, or a framework that sizes it from free memory "
                           "(trt-llm, trt-llm-pytorch)")
    host = profile.iteration_host_s if config.iteration_host_s is None else config.iteration_host_s
    per_seq = profile.iteration_host_per_seq_s if config.iteration_host_s is None else 0.0
    pricer = IterationPricer(model, hw, plan, opts, dtype=config.dtype, host_s=host, host_per_seq_s=per_seq,
                             eager_options=_eager_options(profile, opts),
                             sampler=getattr(profile, "sampler_kernels", ()),
                             graph_sizes=getattr(profile, "graph_batch_sizes", ()) if getattr(opts, "cuda_graphs", False) else (),
                             graph_launch=_graph_launch(config, profile),
                             weight_dtype=config.weight_dtype, kv_dtype=config.kv_dtype,
                             decode_host=_decode_host(config, profile), sampler_host=_sampler_host(config, profile),
                             step_broadcasts=int(getattr(profile, "step_broadcasts", 0)),
                             prompt_host=_prompt_host(config, profile))
    _check_window(arrival, config)
    # arrivals and lengths: drawn before the loop, one generator, one order
    if arrival.kind == "trace":
        times, ins, outs = _trace_requests(arrival.path, config, lspec.prefix)
        total = len(times)
    else:
        total = config.requests if config.requests is not None else (None if config.duration_s else DEFAULT_REQUESTS)
        if arrival.kind in ("poisson", "gamma") and config.arrival_seed is not None:
            times = client_arrival_times(arrival, config.arrival_seed, count=total, duration_s=config.duration_s)
            total = len(times)
        elif arrival.kind in ("poisson", "gamma"):
            times = arrival_times(arrival, rng, count=total, duration_s=config.duration_s)
            total = len(times)
        elif config.duration_s is not None:
            raise ServingError(f"duration_s: a closed loop or a burst has no arrival window; got arrival "
                               f"{config.arrival!r}; expected requests")
        else:
            times = np.zeros(min(total, arrival.n) if arrival.kind == "concurrency" else total)
        ins, outs = sample_lengths(lspec, total, rng, "lengths")
    if total < 1:
        raise ServingError(f"requests: no request arrives; got arrival {config.arrival!r} over "
                           f"{config.duration_s} s; expected at least one request")
    draft = None
    if spec is not None:
        draft = (IterationPricer(spec[0], hw, plan, opts, dtype=config.dtype, host_s=0.0), spec[1], spec[2])
        _check_draft_vocab(spec[0], draft[0].cfg, cfg)
        _check_draft_k(spec, draft[0].max_positions, pricer.max_positions, int(ins.min()))
    return _build(config, hw, plan, pricer, cfg, lspec, times, (ins, outs), total, arrival, disagg, draft,
                  output_lag=getattr(profile, "output_lag_steps", 0) > 0, kv_sizing=sizing,
                  kv_window=config.kv_window_layout or getattr(profile, "kv_window_layout", "full"))


def check_prefix_cache(prefix_cache: bool, prefix: int, lengths: str,
                       where: tuple[str, str] = ("prefix_cache", "lengths")) -> None:
    """A prefix cache reuses only the shared prompt prefix ``lengths`` declares (``prefix=P``); without one it reuses
    nothing and the run is the run without it (the flag was dropped without a word): a located ServingError naming
    ``where`` (the option and the lengths' own name)."""
    if prefix_cache and not prefix:
        raise ServingError(f"{where[0]}: no shared prompt prefix to reuse; got {where[1]} {lengths!r}; expected "
                           f"{where[1]} ending in prefix=P (e.g. fixed:in=512,out=128,prefix=256 or sharegpt:prefix=256), "
                           f"or no {where[0]}")


def _check_whole_prompts(config: ServeConfig, ins: np.ndarray) -> None:
    """Orca prefills a prompt whole, so a token budget below the longest prompt cannot schedule it: vLLM without
    chunked prefill limits a prompt to ``min(max_model_len, max_num_batched_tokens)`` and ignores a longer one
    (``vllm/core/scheduler.py`` ``Scheduler._get_prompt_limit``; ``_schedule_prefills`` marks it
    ``FINISHED_IGNORED``). The run had admitted it over the budget when nothing else ran."""
    budget = config.max_batched_tokens
    if config.scheduler == "orca" and budget is not None and int(ins.max()) > budget:
        i = int(np.argmax(ins))
        raise ServingError(f"max_batched_tokens: got {budget} with scheduler 'orca', which prefills each prompt "
                           f"whole; expected at least the longest prompt ({int(ins[i])} tokens, request {i}), or "
                           "scheduler vllm or sarathi, which chunk it")


def _trace_requests(path: str, config: ServeConfig, prefix: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_s, input_len, output_len) of a trace's requests: its first ``requests`` rows, or those arriving
    within ``duration_s``; a shared ``prefix`` is checked against their prompts (:func:`_check_trace_prefix`)."""
    from simulator.serving.arrivals import read_trace

    times, ins, outs = read_trace(path, "arrival trace")
    if config.requests is not None:
        times, ins, outs = times[: config.requests], ins[: config.requests], outs[: config.requests]
    if config.duration_s is not None:
        keep = times < config.duration_s
        times, ins, outs = times[keep], ins[keep], outs[keep]
    _check_trace_prefix(prefix, ins, path)
    return times, ins, outs


def _check_trace_prefix(prefix: int, ins: np.ndarray, path: str) -> None:
    """A shared prefix (``lengths`` ``prefix=P``) is part of every prompt, so a trace's prompts must be longer
    than it, as a lengths file's are (:func:`simulator.serving.lengths.sample_lengths`); a shorter one had left
    a negative number of prompt tokens to compute (``attention_graph: query_tokens: got -300``)."""
    if prefix and len(ins) and int(ins.min()) <= prefix:
        i = int(np.argmin(ins))
        raise ServingError(f"lengths: prefix: got {prefix}; expected fewer tokens than the shortest prompt of {path} "
                           f"({int(ins[i])}, request {i})")


def _check_disaggregate(disagg: tuple[int, int] | None, hw: Any, plan: Any) -> None:
    """Disaggregated replicas hand a KV cache over the ``--hardware`` system's peer fabric (:func:`_handoff`); a
    single device has none (its ``send`` has no lowering rule and would be priced as an on-device copy): refused.
    The hand-off is priced as one node's peer link (NVLink on dgx-h100), so the prefill and decode pools together,
    ``(P + D) x tp x pp`` devices, must fit in one node of the system: pools spread over more devices (copies of
    the system, or nodes of a cluster) would hand caches over the network between nodes, which is not priced."""
    if not disagg:
        return
    name = getattr(hw, "name", hw)
    if getattr(hw, "count", 1) < 2:
        raise ServingError(f"disaggregate: got prefill={disagg[0]},decode={disagg[1]} on {name!r}, "
                           "one device with no peer fabric for the KV cache hand-off; expected a --hardware system "
                           "of 2 or more devices (e.g. dgx-h100)")
    per_replica = int(getattr(plan, "tp", 1)) * int(getattr(plan, "pp", 1))
    need = (disagg[0] + disagg[1]) * per_replica
    node = int(getattr(hw, "devices_per_node", 0) or getattr(hw, "count", 1))
    if need > node:
        raise ServingError(f"disaggregate: prefill={disagg[0]},decode={disagg[1]} x tp {plan.tp} x pp {plan.pp} = "
                           f"{need} devices; got {name!r} with {node} devices per node; expected at most {node}: the "
                           "KV cache hand-off is priced over one node's peer fabric, which pools on more devices "
                           "do not share (fewer replicas, or a smaller tp x pp)")


def _check_draft_vocab(name: str, draft_cfg: Any, target_cfg: Any) -> None:
    """A draft proposes token ids the target verifies, so both share one vocabulary: vLLM asserts the draft's and
    the target's vocabulary sizes are equal (``vllm/spec_decode/spec_decode_worker.py``
    ``SpecDecodeWorker._vocab_size``: ``assert all(vocab_sizes[0] == vocab_size ...)``); a draft of another
    vocabulary (gpt2 drafting Llama 3.1 8B) is refused rather than priced."""
    dv, tv = int(getattr(draft_cfg, "vocab", 0) or 0), int(getattr(target_cfg, "vocab", 0) or 0)
    if dv and tv and dv != tv:
        raise ServingError(f"speculative: draft {name!r} has a vocabulary of {dv} tokens; got target "
                           f"{getattr(target_cfg, 'name', 'model')!r} with {tv}; expected a draft of the target's "
                           "vocabulary (its token ids are what the target verifies)")


def _check_draft_k(spec: tuple[str, int, float], draft_context: int, context: int, shortest: int) -> None:
    """A draft proposes ``k`` tokens for a sequence only while ``seq_len + k`` stays below the proposal limit, the
    draft's context capped by the target's (vLLM ``spec_decode/top1_proposer.py`` ``Top1Proposer._split_by_proposal_len``:
    ``seq_len + proposal_len >= max_proposal_len`` proposes nothing): a ``k`` with which even the ``shortest``
    prompt reaches that limit never speculates, and is refused."""
    limit = min(c for c in (draft_context, context) if c) if (draft_context or context) else 0
    if limit and shortest + spec[1] >= limit:
        raise ServingError(f"speculative: k: got {spec[1]}; expected at most {limit - 1 - shortest} (a proposal of k "
                           f"tokens needs seq_len + k below the proposal limit, {limit}: the context of draft "
                           f"{spec[0]!r} capped by the target's; the shortest prompt has {shortest} tokens)")


def _check_context(config: ServeConfig, pricer: Any, ins: np.ndarray, outs: np.ndarray) -> int:
    """The longest request (prompt + output tokens), refused beyond the model's context (``pricer.max_positions``;
    0: unbounded) by the rule ``predict --phase generate`` applies too, as is a
    KV block longer than that context (a block no sequence can fill). vLLM's own ``--block-size`` takes
    ``choices=[8, 16, 32, 64, 128]`` (``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args``), but SGLang's page and
    TensorRT-LLM's ``tokens_per_block`` are other engines' choices, so only the model's own bound is applied here."""
    context = pricer.max_positions
    if context and config.block_size > context:
        raise ServingError(f"block_size: got {config.block_size} tokens; expected at most the model's context of "
                           f"{context} (a KV block no sequence can fill)")
    from workloads.zoo.transformer import request_context_problem

    i = int(np.argmax(ins + outs))
    problem = request_context_problem(pricer.cfg, int(ins[i]), int(outs[i]))
    if problem:
        raise ServingError(f"request {i}: {problem}")
    return int(ins[i] + outs[i])


def _context_bytes(kv_sizing: str) -> float:
    """The CUDA context the ``free`` KV rule finds already taken (:mod:`simulator.serving.kvcache`); 0 for
    ``device``, whose budget is the engine's own allocations."""
    from simulator.report.memory import CUDA_CONTEXT_BYTES

    return float(CUDA_CONTEXT_BYTES) if kv_sizing == "free" else 0.0


def _build(config: ServeConfig, hw: Any, plan: Any, pricer: Any, cfg: Any, lspec: Any, times: np.ndarray,
           lengths: tuple[np.ndarray, np.ndarray], total: int, arrival: Any, disagg: tuple[int, int] | None,
           draft: tuple[Any, int, float] | None = None, output_lag: bool = False,
           kv_sizing: str = "device", kv_window: str = "full") -> Setup:
    from simulator.engines.analytical import spec_of
    from simulator.serving.engine import Replica
    from simulator.serving.kvcache import kv_cache_spec
    from simulator.serving.scheduler import Limits

    device = spec_of(hw)[0]
    ins, outs = lengths
    longest = _check_context(config, pricer, ins, outs)
    lim = _limits(config, device, int(ins.max()))
    _check_whole_prompts(config, ins)
    act_tokens = min(lim["max_batched_tokens"], pricer.max_positions or lim["max_batched_tokens"])
    from simulator.parallel.compose import evaluate_plan

    probe = evaluate_plan(pricer.model, hw, plan, pricer.options, phase="prefill", seq=act_tokens, batch=1,
                          dtype=pricer.dtype, weight_dtype=pricer.weight_dtype, kv_dtype=pricer.kv_dtype)
    worst = max(probe.stages, key=lambda s: s.weights_bytes + s.activations_bytes)
    weights = worst.weights_bytes
    spec = None
    if draft is not None:  # the draft model's weights share the devices
        dprobe = evaluate_plan(draft[0].model, hw, plan, pricer.options, phase="prefill", seq=16, batch=1,
                               dtype=draft[0].dtype)
        weights += max(s.weights_bytes for s in dprobe.stages)
        k, a = draft[1], draft[2]
        spec = (draft[0], k, (1.0 - a ** (k + 1)) / (1.0 - a))  # Leviathan et al. 2023, Eq. (1)
    kv = kv_cache_spec(cfg, plan, capacity_bytes=float(device.memory[0].usable),
                       weights_bytes=weights, activations_bytes=worst.activations_bytes,
                       block_size=config.block_size, gpu_memory_utilization=config.gpu_memory_utilization,
                       dtype=pricer.kv_dtype or pricer.dtype, sizing=kv_sizing, free_gpu_memory_fraction=config.free_gpu_memory_fraction,
                       context_bytes=_context_bytes(kv_sizing), window_layout=kv_window)
    if kv.swa_blocks:
        _check_swa_pools(config, kv, spec)
    if spec is not None:
        kv = _draft_share(kv, draft[0], plan, pricer.kv_dtype)
    shared = lspec.prefix // config.block_size if config.prefix_cache else 0
    need = -(-longest // config.block_size) if not kv.hybrid else _peak_blocks(kv, longest, int(ins.max()),
                                                                                lim["max_batched_tokens"])
    # the shared prefix's blocks are resident once (the pool starts at blocks - shared) and each request holds
    # need - shared of its own: it fits when need <= blocks (subtracting shared twice refused requests that fit)
    if need > kv.blocks:
        i = int(np.argmax(ins + outs))
        raise ServingError(f"request {i}: {longest} tokens need {need} KV blocks of {config.block_size}; got a cache of "
                           f"{kv.blocks} blocks ({kv.tokens} tokens); expected requests the KV cache can hold")
    if kv.swa_blocks:  # the window pool: the peak of its prompt's chunks and its last decode
        need = _peak_blocks(kv, longest, int(ins.max()), lim["max_batched_tokens"], ((kv.swa_window, 1),))
        if need > kv.swa_blocks:
            i = int(np.argmax(ins + outs))
            raise ServingError(f"request {i}: {longest} tokens need {need} window-pool KV blocks of "
                               f"{config.block_size}; got a window pool of {kv.swa_blocks} blocks; expected requests "
                               "the KV cache can hold")
    swap_s = 0.0
    if config.preemption == "swap":
        link = next((ln for ln in device.links if ln.name == "host"), None)
        if link is None:
            raise ServingError(f"preemption swap: device {device.name} has no host link; got none; expected a "
                               "[[links]] entry named host")
        swap_s = kv.bytes_per_block / link.bandwidth_bytes_per_s
    kind = config.scheduler
    n_pre, n_dec = disagg if disagg else (config.replicas, 0)

    def make(rid: int, prefill_only: bool) -> Replica:
        return Replica(rid, Limits(kind, lim["max_num_seqs"], lim["max_batched_tokens"], config.block_size, shared,
                                   config.preemption == "swap", spec[1] if spec else 0, config.scheduler_steps,
                                   config.mixed_prefill, config.admission == "no-evict", kv.groups,
                                   kv.swa_window if kv.swa_blocks else 0), kv.blocks, pricer,
                       prefill_only=prefill_only, swap_s_per_block=swap_s, speculative=spec, output_lag=output_lag,
                       swa_blocks=kv.swa_blocks)

    replicas = [make(i, bool(disagg)) for i in range(n_pre)]
    decode_pool = [make(n_pre + i, False) for i in range(n_dec)]
    handoff = _handoff(hw, cfg, plan, pricer.kv_dtype or pricer.dtype) if disagg else (lambda s: 0.0)
    arrivals = [(float(t), i) for i, t in enumerate(times)]
    closed = arrival.n if arrival.kind == "concurrency" else 0
    return Setup(replicas, decode_pool, arrivals, (ins, outs), closed, total, handoff, pricer, kv, device, plan, lim,
                 lspec.prefix if config.prefix_cache else 0,
                 described={"arrival": arrival, "lengths": lspec, "hardware": hw, "disaggregate": disagg})


def _check_swa_pools(config: ServeConfig, kv: Any, spec: Any) -> None:
    """Refuse what the ``sglang-swa`` layout does not model: swap preemption (SGLang retracts and recomputes),
    static batching, a shared-prefix cache, a speculative draft and disaggregated replicas."""
    unsupported = [name for name, on in (("preemption swap", config.preemption == "swap"),
                                         ("scheduler static", config.scheduler == "static"),
                                         ("prefix_cache", config.prefix_cache), ("speculative", spec is not None),
                                         ("disaggregate", bool(config.disaggregate))) if on]
    if unsupported:
        raise ServingError(f"kv_window_layout sglang-swa: got {', '.join(unsupported)}; expected none of preemption "
                           "swap, scheduler static, prefix_cache, speculative, disaggregate with SGLang's window "
                           f"pool (not modelled; kv_window_layout full models them)")


def _peak_blocks(kv: Any, longest: int, prompt: int, budget: int,
                 groups: tuple[tuple[int, int], ...] | None = None) -> int:
    """The most blocks one request of ``longest`` tokens (prompt at most ``prompt``) holds in a cache whose
    window groups free what their window left (:func:`simulator.serving.kvcache.held_blocks`): its prompt's
    chunks of ``budget`` tokens (each holding every block up to its end, less the blocks skipped before it),
    then its last decode."""
    from simulator.serving.kvcache import held_blocks

    bs, groups = kv.block_size, groups or kv.groups
    peak = held_blocks(longest, max(0, longest - 1), bs, groups)
    c = 0
    p = min(prompt, longest)
    while c < p:
        n = min(budget, p - c)
        peak = max(peak, held_blocks(c + n, c, bs, groups))
        c += n
    return peak


def _draft_share(kv: Any, draft: Any, plan: Any, kv_dtype: str | None) -> Any:
    """The target's KV blocks once the draft model's cache takes its part: vLLM gives the draft as many blocks as
    the target, sized so that both caches together use what the target's alone would have
    (``vllm/spec_decode/spec_decode_worker.py`` ``SpecDecodeWorker.determine_num_available_blocks`` and
    ``split_num_cache_blocks_evenly``: ``int(blocks x target_block_bytes / (draft_block_bytes +
    target_block_bytes))``); the draft's weights are already out of the budget (:func:`_build`). Both caches take
    the run's ``kv_dtype`` (one cache configuration serves both models), else the draft's own dtype."""
    from dataclasses import replace

    from workloads.serving import kv_bytes_per_token

    draft_block = kv.block_size * kv_bytes_per_token(draft.cfg, tp=plan.tp, pp=plan.pp,
                                                     dtype=kv_dtype or draft.dtype)
    blocks = int(kv.blocks * kv.bytes_per_block / (draft_block + kv.bytes_per_block))
    if blocks < 1:
        raise ServingError(f"KV cache: no block fits beside the draft's cache; got {kv.blocks} target blocks of "
                           f"{kv.bytes_per_block / 2**20:.2f} MiB and draft blocks of {draft_block / 2**20:.2f} MiB; "
                           "expected room for one block of each (more memory or a smaller draft)")
    return replace(kv, blocks=blocks, draft_bytes_per_block=draft_block)


def _handoff(hw: Any, cfg: Any, plan: Any, dtype: str) -> Any:
    """Seconds to move a request's KV cache from a prefill replica to a decode replica: each of the
    ``tp x pp`` devices sends its share over the node's peer fabric (one ``send`` of those bytes, priced
    by the engines' collective rule), all devices in parallel."""
    from simulator.engines.analytical import evaluate
    from workloads.ir import GraphBuilder
    from workloads.serving import kv_bytes_per_token

    per_token = kv_bytes_per_token(cfg, tp=plan.tp, pp=plan.pp, dtype=dtype)
    cache: dict[int, float] = {}

    def seconds(tokens: int) -> float:
        if tokens not in cache:
            b = GraphBuilder("kv_transfer", dtype="bf16")
            x = b.input("kv", (max(1, int(per_token * tokens // 2)),))
            b.op("send", [x], name="kv_send", group_size=2)
            cache[tokens] = float(sum(r.time_s for r in evaluate(b.build(), hw).records))
        return cache[tokens]

    def handoff(seq: Any) -> float:
        from simulator.serving.iteration import bucket_bounds

        lo, hi = bucket_bounds(seq.computed)
        if hi == lo:
            return seconds(lo)
        a, b = seconds(max(lo, 1)), seconds(hi)
        return a + (b - a) * (seq.computed - lo) / (hi - lo)

    return handoff
