"""The settings of a serving simulation (:class:`ServeConfig`), its result (:class:`ServeResult`) and
its error type: every knob of ``nodeperf serve`` in one frozen record, so a run is reproducible from it.

The string fields use the command line's spellings (``arrival="poisson:qps=8"``,
``lengths="sharegpt"``, ``slo=("ttft_p99<=2 s",)``); they are parsed and checked by
:func:`simulator.serving.simulate_serving`, which raises :class:`ServingError` with the field's name
on a bad value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from nodeperf.errors import NodeperfError

__all__ = ["ServeConfig", "ServeResult", "ServingError", "RequestRecord", "IterationRecord"]


class ServingError(NodeperfError, ValueError):
    """A bad serving setting or input file: one located line (field or file:line; got; expected)."""


#: Requests a run simulates when it states neither ``requests`` nor ``duration_s``.
DEFAULT_REQUESTS = 1000


@dataclass(frozen=True)
class ServeConfig:
    """Every setting of one serving simulation (the flags of ``nodeperf serve``).

    Attributes
    ----------
    arrival
        ``poisson:qps=Q``, ``gamma:qps=Q,cv=C``, ``concurrency:n=N`` (closed loop: N clients, each
        sends its next request when its previous one finishes), ``burst`` (every request at t = 0),
        or ``trace:FILE.csv`` (the Azure LLM inference trace columns ``TIMESTAMP, ContextTokens,
        GeneratedTokens`` or ``arrival_s, input_len, output_len``; a trace also gives the lengths).
    lengths
        ``fixed:in=I,out=O``, ``uniform:in=A-B,out=C-D``, ``lognormal:in_mean=..,in_sigma=..,out_mean=..,
        out_sigma=..``, a named data-set summary (:data:`simulator.serving.lengths.LENGTH_DATASETS`) or
        ``FILE.csv`` (``input_len, output_len`` rows, sampled with replacement). Any spec may add
        ``prefix=P``: the first P prompt tokens are a system prompt shared by every request.
    scheduler
        ``vllm`` (vLLM V1: continuous batching, chunked prefill mixed with decodes), ``sarathi``
        (Sarathi-Serve stall-free batching with a chunk of ``chunk`` tokens), ``orca`` (iteration-level,
        whole prefills) or ``static`` (fixed batches run to completion).
    max_num_seqs, max_batched_tokens, chunk
        Sequences per iteration, token budget per iteration, Sarathi chunk size; None: the engine's
        default (:data:`simulator.serving.scheduler.SCHEDULERS`).
    scheduler_steps
        Decode steps run per scheduling pass (vLLM 0.6's ``--num-scheduler-steps``, multi-step
        scheduling): a decode-only batch runs this many steps before anything joins it; 1 (default):
        the scheduler runs every iteration (:mod:`simulator.serving.scheduler`).
    mixed_prefill
        True (default): prompts join the running decodes in one iteration (continuous batching as
        vLLM V1, Sarathi-Serve and Orca run it). False: an iteration that admits prompts carries only
        prompts, as vLLM V0's default scheduler and SGLang up to v0.3 run them.
    block_size
        KV-cache block size in tokens (vLLM's default 16).
    gpu_memory_utilization
        Fraction of device memory the engine may use for weights, activations and KV cache (vLLM's
        ``gpu_memory_utilization``, default 0.9), where the framework profile sizes the KV cache as vLLM does
        (``kv_cache_sizing = "device"``, :mod:`simulator.serving.kvcache`).
    free_gpu_memory_fraction
        Fraction of the memory left free once the engine is loaded (weights, the activations of its profiling
        pass) that the KV cache takes, where the profile sizes it as TensorRT-LLM does (``kv_cache_sizing =
        "free"``: ``KvCacheConfig.free_gpu_memory_fraction``, trtllm-bench's ``--kv_cache_free_gpu_mem_fraction``);
        None: TensorRT-LLM's default 0.9. Given for a ``device`` profile it is an error.
    admission
        How waiting requests are admitted against the KV cache: ``max-utilization`` (default: a
        request is admitted when the blocks of the tokens it runs now are free; a running request that
        cannot get a block later preempts the last admitted one, as vLLM and TensorRT-LLM's
        ``MAX_UTILIZATION`` capacity scheduler do) or ``no-evict`` (TensorRT-LLM's default
        ``GUARANTEED_NO_EVICT``: a request is admitted only when the blocks of its whole prompt and
        output fit beside those every running request holds for its whole output, so nothing is ever
        preempted) (:mod:`simulator.serving.scheduler`).
    preemption
        ``recompute`` (free the victim's blocks, prefill it again later) or ``swap`` (copy its blocks to
        host memory over the host link and back).
    prefix_cache
        Reuse the KV blocks of the shared prompt prefix declared by ``lengths`` (``prefix=P``).
    speculative
        ``DRAFT,k=K,accept=A``: a draft model proposes K tokens per step, each accepted with
        probability A (Leviathan et al. 2023); None: off.
    replicas, router
        Copies of the deployment and how requests are spread over them (``round-robin``,
        ``least-loaded``).
    disaggregate
        ``prefill=P,decode=D``: P prefill replicas hand each request's KV cache to D decode replicas
        over the node's fabric; None: off (every replica does both).
    requests, duration_s
        Stop after this many requests arrive, or after this many seconds of arrivals (one of them;
        default 1,000 requests).
    warmup_requests
        Requests sent before the measured ones and left out of the summary, as a benchmark client's
        warm-up runs them (AIPerf's and genai-perf / perf_analyzer's ``--warmup-request-count``): they
        arrive under the same process (a closed loop's N clients at once, the open-loop gaps, a trace's
        first rows) and every one of them finishes before the measured requests start, which then arrive
        as from t = 0 (AIPerf waits for every warm-up credit to return before its profiling phase,
        ``aiperf/timing/credit_issuing_strategy.py`` ``_execute_phases``; perf_analyzer's
        ``ConcurrencyManager::PerformWarmup`` ends in ``WaitForWarmupAndCleanup``). A measured closed
        loop therefore starts from an idle deployment with its N clients sending at once, like a run
        without warm-up; what the warm-up leaves behind is the engine's state (a prefix cache filled by
        it). The summary covers the measured requests only, its makespan from the first measured
        arrival to the last measured finish. 0 (default): no warm-up; needs ``requests`` (not
        ``duration_s``).
    measurement_interval_s, stability_percentage
        Count the requests a time-window client counts (genai-perf / perf_analyzer ``--measurement-interval``,
        in seconds here; :mod:`simulator.serving.window`): windows of 1.2 x the interval from the load's start,
        each counting the requests that finish inside it, until the last 3 windows agree within
        ``stability_percentage`` (genai-perf's default 999: three windows that each count a request) or after
        10 windows; the latency and throughput keys cover those requests (throughput over first start to last
        finish among them), the energy, KV-cache and batch keys the whole simulated run, and the summary's
        ``measurement`` says how many windows ran. A run stopped by ``requests`` is extended (doubled, up to
        64 times) until its clients are still sending when the last window closes. None (default): every
        request counts.
    seed
        Seed of the random generators (same seed, byte-identical results).
    arrival_seed
        Draw the Poisson or gamma gaps as a benchmark client seeded with ``np.random.seed(arrival_seed)``
        draws them (:func:`simulator.serving.arrivals.client_arrival_times`: NumPy's legacy generator, the
        first request at t = 0, one gap after each request), so a short run has the arrival times the
        measured run had; None: the simulation's own generator (``seed``).
    slo
        Service-level objectives, e.g. ``("ttft_p99<=2 s", "tpot_p99<=100 ms")``.
    framework
        The serving stack's profile (:mod:`workloads.frameworks`) for the host time of an iteration.
    kv_window_layout
        How the KV cache holds sliding-window layers (:data:`simulator.serving.kvcache.KV_WINDOW_LAYOUTS`):
        ``full`` (every layer at the full context; vLLM's ``--disable-hybrid-kv-cache-manager``) or
        ``vllm-hybrid`` or ``sglang-swa`` (SGLang's full and window pools); None: the framework profile's ``kv_window_layout``.
    dtype
        Compute and KV dtype of the model (None: the model's).
    weight_dtype, kv_dtype
        Serving precision, as ``predict --weight-dtype`` / ``--kv-dtype``
        (:func:`workloads.precision.apply_precision`): the linear layers' weight dtype (``fp8``: W8A8 fp8
        GEMMs with ``dtype`` activations; the LM head, embeddings, norms, residual stream and all-reduces stay
        at ``dtype``, as a ModelOpt fp8 checkpoint runs in TensorRT-LLM) and the KV cache's storage dtype (it
        also sizes the cache); None: everything at ``dtype``.
    iteration_host_s
        Host time of one engine iteration in seconds (None: the framework profile's
        ``iteration_host_s``, ``iteration_host_per_seq_s``, decode-step host ops and the sampler call's host time;
        a value replaces all four).
    graph_launch
        The CUDA driver form of the host time of one decode-graph replay: ``"pre-12.6"`` (linear in the
        graph's kernels), ``"12.6"`` (near-constant for a straight-line graph), ``"none"`` (not modelled);
        None: the framework profile's ``graph_launch`` (:data:`workloads.frameworks.GRAPH_LAUNCH_FORMS`).
    fp8_accumulation
        How fp8 GEMMs accumulate, ``"fast"`` or ``"split"`` (``EvalOptions.fp8_accumulation``); None: the framework
        profile's (``fp8_gemm_accumulation``; not stated: fast).
    """

    arrival: str = "poisson:qps=1"
    lengths: str = "fixed:in=512,out=128"
    scheduler: str = "vllm"
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    chunk: int | None = None
    scheduler_steps: int = 1
    mixed_prefill: bool = True
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    free_gpu_memory_fraction: float | None = None
    admission: str = "max-utilization"
    preemption: str = "recompute"
    prefix_cache: bool = False
    speculative: str | None = None
    replicas: int = 1
    router: str = "round-robin"
    disaggregate: str | None = None
    requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    measurement_interval_s: float | None = None
    stability_percentage: float = 999.0
    seed: int = 0
    arrival_seed: int | None = None
    slo: tuple[str, ...] = ()
    framework: str = "vllm"
    dtype: str | None = None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    iteration_host_s: float | None = None
    graph_launch: str | None = None
    fp8_accumulation: str | None = None
    kv_window_layout: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["slo"] = list(self.slo)
        return out


@dataclass(frozen=True)
class RequestRecord:
    """One request, as it went: arrival, first token, finish (seconds from the start), lengths, replica."""

    id: int
    arrival_s: float
    input_len: int
    output_len: int
    first_token_s: float
    finish_s: float
    replica: int
    preemptions: int = 0
    cached_tokens: int = 0
    #: the gaps between the request's consecutive streamed chunks after the first, seconds (its inter-token
    #: latencies as a streaming client times them; a chunk carries every token handed over at once)
    itl_gaps_s: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first, ``(e2e - ttft) / (output_len - 1)`` (vLLM's benchmark)."""
        return (self.finish_s - self.first_token_s) / (self.output_len - 1) if self.output_len > 1 else 0.0

    @property
    def itl_mean_s(self) -> float:
        """The mean gap between its streamed chunks after the first (0 with one chunk): TPOT when every token
        is a chunk of its own, a multiple of it when tokens are handed over several at a time."""
        return float(self.itl_gaps_s.mean()) if len(self.itl_gaps_s) else 0.0


@dataclass(frozen=True)
class IterationRecord:
    """A run of identical engine iterations on one replica: ``steps`` iterations from ``start_s`` to ``end_s``,
    each with ``tokens`` tokens (``prefill_tokens`` of them prompt tokens) from ``seqs`` sequences."""

    replica: int
    start_s: float
    end_s: float
    steps: int
    tokens: int
    prefill_tokens: int
    seqs: int
    kv_blocks_used: int
    energy_j: float


@dataclass(frozen=True)
class ServeResult:
    """What :func:`simulator.serving.simulate_serving` returns.

    Attributes
    ----------
    summary
        The JSON document of ``nodeperf serve --json`` (latency percentiles, throughput, goodput,
        SLO attainment, KV use, preemptions, energy, cost, the settings and what was assumed).
    requests
        One :class:`RequestRecord` per finished request, in arrival order.
    iterations
        :class:`IterationRecord` runs in time order per replica.
    """

    summary: dict[str, Any]
    requests: tuple[RequestRecord, ...] = field(repr=False)
    iterations: tuple[IterationRecord, ...] = field(repr=False)

    def requests_csv(self) -> str:
        """The per-request CSV (``nodeperf serve --csv``)."""
        head = ("id,arrival_s,input_len,output_len,first_token_s,finish_s,ttft_s,tpot_s,e2e_s,replica,"
                "preemptions,cached_tokens,itl_mean_s")
        rows = [head]
        for r in self.requests:
            rows.append(f"{r.id},{r.arrival_s:.9g},{r.input_len},{r.output_len},{r.first_token_s:.9g},"
                        f"{r.finish_s:.9g},{r.ttft_s:.9g},{r.tpot_s:.9g},{r.e2e_s:.9g},{r.replica},"
                        f"{r.preemptions},{r.cached_tokens},{r.itl_mean_s:.9g}")
        return "\n".join(rows) + "\n"

    def chrome_trace(self) -> dict[str, Any]:
        """The iteration timeline as a Chrome trace (one row per replica; a run of identical iterations
        is one event with its step count)."""
        events = []
        for it in self.iterations:
            events.append({"name": f"{it.seqs} seqs, {it.tokens} tokens" + (f" x{it.steps}" if it.steps > 1 else ""),
                           "ph": "X", "pid": 0, "tid": it.replica, "ts": it.start_s * 1e6,
                           "dur": (it.end_s - it.start_s) * 1e6,
                           "args": {"steps": it.steps, "tokens": it.tokens, "prefill_tokens": it.prefill_tokens,
                                    "seqs": it.seqs, "kv_blocks_used": it.kv_blocks_used}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}
