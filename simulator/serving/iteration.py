"""The time and energy of one serving iteration (a mixed batch of prefill chunks and decode tokens),
priced by the existing engines at shape buckets and interpolated in between.

What an iteration stands for, per replica (all ``tp x pp`` devices; the stages run one after another):

* **token-wise work** of its ``T`` tokens: embedding, QKV / output projections, norms, RoPE, KV
  appends, MLP, tensor-parallel all-reduces, pipeline hand-offs and the final norm: the
  :func:`simulator.parallel.evaluate_plan` prefill step of ``T`` tokens (``batch 1 x seq T``; ``batch
  2^j x seq T / 2^j`` past the model's context), minus its ``attention`` and ``lm_head`` records;
* **the LM head** of the ``n`` sequences that sample a token: the ``lm_head`` records of the prefill
  step of ``batch n x seq 1``;
* **attention per sequence**: each prefill chunk of ``q`` tokens over ``c`` earlier tokens is one
  causal ``attention`` op of ``q`` queries and ``c + q`` keys (:func:`workloads.serving.attention_graph`,
  priced by :func:`simulator.engines.analytical.evaluate`, times the layers; a local sliding-window layer
  over the keys its window holds, with the op's ``window``, as the transformer builder emits it); the
  decode tokens are one op of ``B`` sequences at their mean context (one batched decode kernel, as paged
  attention runs them: its K/V traffic the sequences' sum), its longest sequence's context setting the
  kernel's splits and heaviest CTA (the op's ``kv_tokens_max``: :func:`hwmodels.gpu.attention_grid`), at the
  bucket point at or above it (:meth:`IterationPricer.longest_bound`);
* **host time** of the engine step (scheduling, input preparation, sampling), a named field of the
  framework profile (:attr:`workloads.frameworks.FrameworkProfile.iteration_host_s`).

Where the stack replays CUDA graphs for decode-only iterations only
(:attr:`workloads.frameworks.FrameworkProfile.graphs_decode_only`: vLLM V0, SGLang, TensorRT-LLM's PyTorch
backend), an iteration carrying a prompt chunk is priced with ``eager_options`` (no graph: each kernel
launched, each op dispatched by the framework from its module) by a second pricer of the same replica.

Buckets: every token count up to 16, then 8 points per octave (``m * 2^e``, ``m = 8..15``); contexts
the same with 0. Between bucket points the engines' values are interpolated linearly (bilinearly for
attention), so an hour of traffic needs a few hundred engine calls. At a bucket point the sum of the
parts is exactly the engine's prefill / decode prediction for that batch.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["IterationPricer", "bucket", "bucket_bounds", "eager_decode_host_s", "resolve_config", "sampler_call_host_s"]


def bucket(x: int) -> int:
    """The largest bucket point <= ``x`` (``x >= 1``): ``x`` itself up to 16, else ``m * 2^e``, ``m`` in 8..15."""
    if x <= 16:
        return x
    e = x.bit_length() - 4
    return (x >> e) << e


def bucket_bounds(x: float) -> tuple[int, int]:
    """(lower, upper) bucket points around ``x >= 0`` (equal when ``x`` is one; 0 is a point)."""
    xi = int(x)
    if xi == x and (xi <= 16 or bucket(xi) == xi):
        return xi, xi
    if x < 1:
        return 0, 1
    lo = bucket(xi)
    hi = lo + (1 if lo < 16 else 1 << (lo.bit_length() - 4))
    return lo, hi


def eager_decode_host_s(ops: int, syncs: int, efficiency: Any) -> float:
    """Host time (s) of ``ops`` eager ops and ``syncs`` host synchronisations a synchronous engine runs around a
    decode graph replay, at the device's ``efficiency.framework_op_overhead_s`` and ``efficiency.host_sync_s``."""
    return ops * float(efficiency.framework_op_overhead_s) + syncs * float(efficiency.host_sync_s)


def sampler_call_host_s(sampler_host: tuple[float, float], seqs: int) -> float:
    """Host time (s) of a stack's sampler call over ``seqs`` sequences: ``(s, s per sequence)`` of the profile's
    ``sampler_host_s`` and ``sampler_host_per_seq_s``."""
    return sampler_host[0] + sampler_host[1] * seqs


def resolve_config(model: Any) -> tuple[Any, str | None]:
    """(TransformerConfig, default dtype or None) of a zoo name, a Hugging Face config.json path or a config;
    a located ServingError for a model that generates no tokens (a CNN, a micro-workload, an encoder)."""
    from workloads.zoo.transformer import TransformerConfig

    if isinstance(model, TransformerConfig):
        return _decoder_lm(model, model.name), None
    name = str(model)
    if name.lower().endswith(".json"):
        from workloads.hf import config_to_transformer, torch_dtype_of

        return _decoder_lm(config_to_transformer(name), name), torch_dtype_of(name)
    from workloads.zoo import get_entry, load_data
    from workloads.zoo.transformer import zoo_config

    entry = None if ":" in name else get_entry(name)  # a micro-workload (gemm:...) generates no tokens
    if entry is None or entry.name not in load_data("transformers.toml")["models"]:
        _not_served(name, "a micro-workload" if entry is None else f"a {entry.family} model")
    return _decoder_lm(zoo_config(entry.name), name), entry.defaults.get("dtype")


def _decoder_lm(cfg: Any, name: str) -> Any:
    if not cfg.is_decoder_lm:
        _not_served(name, "an encoder-decoder" if cfg.is_encoder_decoder else "an encoder")
    return cfg


def _not_served(name: str, got: str) -> None:
    from simulator.serving.config import ServingError

    raise ServingError(f"model {name!r}: not a decoder language model; got {got}; expected a zoo decoder (such as "
                       "llama-2-7b, see `nodeperf models`) or its config.json")


class IterationPricer:
    """Prices iterations of one replica of ``model`` on ``system`` under ``plan`` (see the module docstring).

    Parameters
    ----------
    host_s, host_per_seq_s
        Host time of an iteration (s): ``host_s + host_per_seq_s x`` the sequences it runs
        (:meth:`host_time`).
    sampler_host
        ``(s, s per sequence)``: the host time of the stack's sampler call (the profile's ``sampler_host_s``,
        ``sampler_host_per_seq_s``), added to :meth:`host_time` for the sequences the iteration runs; its kernels
        stay device time (``sampler``). ``(0, 0)``: not modelled.
    eager_options
        Costing options of the iterations that carry a prompt chunk (None: ``options`` for every iteration).
    sampler
        The stack's sampler kernels after the LM head (:func:`workloads.serving.sampler_graph` names; the
        profile's ``sampler_kernels``), priced with the LM head of every iteration that samples.
    graph_launch
        The CUDA driver form of the host time of one decode-graph replay (a key of
        :data:`workloads.frameworks.GRAPH_LAUNCH_FORMS`; ``""``: not modelled): ``base + per node x`` the
        kernels of one device's step (:meth:`graph_nodes`), added to every iteration this pricer replays
        from a graph (with CUDA graphs, no prompt chunk when a prefill pricer runs those), serial with the
        step as the host time is (:meth:`step_host_time`).
    decode_host
        ``(ops, syncs)``: the eager framework ops and host synchronisations a synchronous engine runs around
        each decode-graph replay (the profile's ``decode_host_ops``, ``decode_host_syncs``), charged with the
        host time of every iteration replayed from a graph (:meth:`decode_host_time`).
    prompt_host
        ``(ops, syncs, ops per prompt)``: the eager framework ops and host synchronisations a synchronous engine
        runs outside the model's forward in a step that carries prompts (the profile's ``prompt_host_ops``,
        ``prompt_host_syncs``, ``prompt_host_ops_per_seq``), charged with the host time of every iteration with a
        prompt chunk (:meth:`prompt_host_time`).
    step_broadcasts
        The NCCL broadcasts that carry each step's model input from the driver rank to the other
        tensor-parallel ranks (the profile's ``step_broadcasts``), device time of every step
        (:meth:`step_broadcast_time`); 0: none.
    weight_dtype, kv_dtype
        Serving precision (:func:`workloads.precision.apply_precision`, as ``predict --weight-dtype`` /
        ``--kv-dtype``): quantised linear-layer weights (``fp8``: W8A8 fp8 GEMMs, the LM head, embeddings,
        norms, residual stream and all-reduces at ``dtype``) and the KV cache's storage dtype; None: ``dtype``.
    graph_sizes
        The captured decode-graph batch sizes (the profile's ``graph_batch_sizes``): a decode-only iteration's
        token-wise work runs at the padded batch (:func:`workloads.serving.graph_batch`); the LM head, the
        sampler and the attention at the real one.
    """

    def __init__(self, model: Any, system: Any, plan: Any, options: Any = None, *, dtype: str | None = None,
                 host_s: float = 0.0, host_per_seq_s: float = 0.0, eager_options: Any = None,
                 sampler: tuple[str, ...] = (), graph_sizes: tuple[int, ...] = (), graph_launch: str = "",
                 weight_dtype: str | None = None, kv_dtype: str | None = None,
                 decode_host: tuple[int, int] = (0, 0), sampler_host: tuple[float, float] = (0.0, 0.0),
                 step_broadcasts: int = 0, prompt_host: tuple[int, int, int] = (0, 0, 0)) -> None:
        from simulator.engines.analytical import EvalOptions, spec_of

        self.model, self.system, self.plan = model, system, plan
        self.options = options or EvalOptions()
        if getattr(self.options, "plan", None) is not None:
            self.options = replace(self.options, plan=None)
        self.cfg, default_dtype = resolve_config(model)
        self.dtype = dtype or default_dtype or "bf16"
        self.weight_dtype, self.kv_dtype = weight_dtype, kv_dtype
        self.device = spec_of(system)[0]
        self.host_s = float(host_s)
        self.host_per_seq_s = float(host_per_seq_s)
        self.sampler_host = (float(sampler_host[0]), float(sampler_host[1]))
        self.sampler = tuple(sampler)
        self.graph_sizes = tuple(sorted(int(x) for x in graph_sizes))
        self.graph_launch = graph_launch if getattr(self.options, "cuda_graphs", False) else ""
        self.decode_host = (int(decode_host[0]), int(decode_host[1]))
        self.prompt_host = (int(prompt_host[0]), int(prompt_host[1]), int(prompt_host[2]))
        self.step_broadcasts = int(step_broadcasts)
        self._bcast: dict[int, float] = {}
        self._nodes = 0
        from workloads.serving import layer_windows

        self.windows = layer_windows(self.cfg)  # {window: layers}; {0: layers} without sliding windows
        self.devices = plan.tp * plan.pp
        self._dense: dict[int, tuple[float, float]] = {}
        self._head: dict[int, tuple[float, float]] = {}
        self._attn: dict[tuple[int, int, int, int], tuple[float, float]] = {}
        self._calls = 0
        self.prefill_pricer: IterationPricer | None = None
        if eager_options is not None:
            self.prefill_pricer = IterationPricer(model, system, plan, eager_options, dtype=self.dtype, host_s=host_s,
                                                  host_per_seq_s=host_per_seq_s, sampler=sampler,
                                                  weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                                  sampler_host=sampler_host, step_broadcasts=step_broadcasts,
                                                  prompt_host=prompt_host)
        self._memo: dict[tuple[str, int], tuple[float, float]] = {}
        self._segments: dict[tuple[int, int, int], tuple[float, float, float, float, float]] = {}
        #: attention (s, J) of a prefill chunk by (query tokens, earlier context), and step host times by
        #: (sequences, graphed): the values the interpolation gives, kept (the hot path of a mixed batch)
        self._chunks: dict[tuple[int, int], tuple[float, float]] = {}
        self._host: dict[tuple[int, bool], float] = {}
        self.max_positions = int(getattr(self.cfg, "max_positions", 0) or 0)

    @property
    def engine_calls(self) -> int:
        """Engine calls made so far (this pricer's and its prefill pricer's)."""
        return self._calls + (self.prefill_pricer.engine_calls if self.prefill_pricer is not None else 0)

    # --- engine calls at bucket points ------------------------------------------------------------
    def prefill_step(self, batch: int, seq: int) -> Any:
        """The :func:`simulator.parallel.evaluate_plan` prefill step of ``batch x seq`` tokens (one engine call):
        what a bucket point's token-wise work and LM head are read from (every stage's report; stages in turn)."""
        from simulator.parallel.compose import evaluate_plan

        self._calls += 1
        return evaluate_plan(self.model, self.system, self.plan, self.options, phase="prefill", seq=seq,
                             batch=batch, dtype=self.dtype, weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype)

    def _parts(self, res: Any) -> tuple[float, float, float, float, float, float]:
        """(total, attention, head) seconds and energies (J, whole replica) of a prefill step result."""
        att_t = att_e = head_t = head_e = tot_e = 0.0
        if not self._nodes:
            self._nodes = max(sum(int(r.kernels or 0) for r in rep.records) for rep in res.reports)
        for rep in res.reports:
            for r in rep.records:
                e = float(r.energy_j)
                tot_e += e
                if r.kind == "attention":
                    att_t += float(r.time_s)
                    att_e += e
                elif r.name.startswith("lm_head"):
                    head_t += float(r.time_s)
                    head_e += e
        tp = self.plan.tp
        return float(res.latency_s), att_t, head_t, tot_e * tp, att_e * tp, head_e * tp

    def dense_point(self, tokens: int) -> tuple[float, float]:
        """Token-wise (s, J) of ``tokens`` tokens at a bucket point."""
        hit = self._dense.get(tokens)
        if hit is None:
            batch, seq = 1, tokens
            while self.max_positions and seq > self.max_positions and seq % 2 == 0:
                batch, seq = batch * 2, seq // 2
            t, at, ht, e, ae, he = self._parts(self.prefill_step(batch, seq))
            hit = self._dense[tokens] = (t - at - ht, e - ae - he)
        return hit

    def head_point(self, n: int) -> tuple[float, float]:
        """LM head (s, J) of ``n`` sampled sequences at a bucket point."""
        hit = self._head.get(n)
        if hit is None:
            _t, _at, ht, _e, _ae, he = self._parts(self.prefill_step(n, 1))
            st, se = self._sampler_point(n)
            hit = self._head[n] = (ht + st, he + se)
        return hit

    def _sampler_point(self, n: int) -> tuple[float, float]:
        """(s, J) of the stack's sampler kernels over ``n`` rows of logits (one device; none: zero). They
        run eagerly after the graph replay, each its own kernel (no fusion)."""
        if not self.sampler:
            return 0.0, 0.0
        from simulator.engines.analytical import evaluate
        from workloads.serving import sampler_graph

        self._calls += 1
        rep = evaluate(sampler_graph(self.cfg, n=n, kernels=self.sampler, dtype=self.dtype), self.device,
                       replace(self.options, fusion=False))
        return sum(float(r.time_s) for r in rep.records), sum(float(r.energy_j) for r in rep.records)

    def eager_decode(self, batch: int) -> bool:
        """Whether a decode-only step of ``batch`` sequences runs the model eagerly on a stack that replays
        graphs for decode-only batches (a prefill pricer): above its largest captured batch no graph exists
        (SGLang 0.3.0 ``CudaGraphRunner.can_run``: ``bs <= max_bs``, else ``ModelRunner.forward_decode`` calls
        the module), so the prefill pricer's eager options price it."""
        return self.prefill_pricer is not None and bool(self.graph_sizes) and batch > self.graph_sizes[-1]

    def padded(self, batch: int) -> int:
        """The batch a decode-only step of ``batch`` sequences replays (the captured graph sizes)."""
        from workloads.serving import graph_batch

        return graph_batch(batch, self.graph_sizes) if self.graph_sizes else batch

    def attention_point(self, batch: int, query: int, context: int, longest: int = 0) -> tuple[float, float]:
        """Attention (s, J) over all layers of ``batch`` sequences of ``query`` new tokens after ``context``; a
        decode batch's ``longest`` context (above ``context``, the mean; 0: every sequence at ``context``)."""
        longest = longest if batch > 1 and longest > context else 0
        key = (batch, query, context, longest)
        hit = self._attn.get(key)
        if hit is None:
            from simulator.engines.analytical import evaluate
            from workloads.serving import attention_graph, window_kv_tokens

            t = e = 0.0
            for window, layers in self.windows.items():  # global layers; local ones over their window
                self._calls += 1
                g = attention_graph(self.cfg, batch=batch, query_tokens=query, tp=self.plan.tp, dtype=self.dtype,
                                    kv_dtype=self.kv_dtype,
                                    kv_tokens=window_kv_tokens(query, context, window), window=window,
                                    kv_tokens_max=window_kv_tokens(query, longest, window) if longest else 0)
                rep = evaluate(g, self.device, self.options)
                t += layers * sum(float(r.time_s) for r in rep.records)
                e += layers * sum(float(r.energy_j) for r in rep.records)
            hit = self._attn[key] = (t, e * self.plan.tp)
        return hit

    # --- interpolation ----------------------------------------------------------------------------
    @staticmethod
    def _lerp(f: Any, x: float) -> tuple[float, float]:
        lo, hi = bucket_bounds(x)
        a = f(lo)
        if hi == lo:
            return a
        b = f(hi)
        w = (x - lo) / (hi - lo)
        return a[0] + (b[0] - a[0]) * w, a[1] + (b[1] - a[1]) * w

    def dense(self, tokens: int) -> tuple[float, float]:
        hit = self._memo.get(("d", tokens))
        if hit is None:
            hit = self._memo[("d", tokens)] = self._lerp(self.dense_point, tokens) if tokens > 0 else (0.0, 0.0)
        return hit

    def head(self, n: int) -> tuple[float, float]:
        hit = self._memo.get(("h", n))
        if hit is None:
            hit = self._memo[("h", n)] = self._lerp(self.head_point, n) if n > 0 else (0.0, 0.0)
        return hit

    def attention(self, batch: int, query: int, context: float, longest: int = 0) -> tuple[float, float]:
        """Attention (s, J) of ``batch`` sequences of ``query`` tokens after a mean ``context``: bilinear in
        (query, context) at a fixed batch for prefill chunks (batch 1), in (batch, context) for decodes, these
        at the bucket point at or above their ``longest`` context (:meth:`longest_bound`; 0: none)."""
        if batch <= 0:
            return 0.0, 0.0
        if query == 1:
            top = self.longest_bound(longest, context) if batch > 1 else 0

            def f(b: int) -> tuple[float, float]:
                return self._lerp(lambda c: self.attention_point(b, 1, c, top), context)

            return self._lerp(f, batch)

        def g(q: int) -> tuple[float, float]:
            return self._lerp(lambda c: self.attention_point(batch, q, c), context)

        return self._lerp(g, query)

    def iteration(self, chunks: list[tuple[int, int]], decodes: int, decode_context: float,
                  sampled: int, verify: int = 1, longest: int = 0) -> tuple[float, float]:
        """(s, J) of one iteration: prefill ``chunks`` of (query tokens, earlier context), ``decodes``
        decode sequences at mean context ``decode_context`` (tokens before the new ones), each with
        ``verify`` query tokens (1; ``k + 1`` when a speculative step verifies ``k`` draft tokens, each
        position sampled), and ``sampled`` other sequences sampling a token (the LM head rows). With prompt
        chunks and a prefill pricer (``eager_options``), that pricer prices the whole iteration, and a decode-only
        one above the largest captured graph (:meth:`eager_decode`). ``longest``: the decodes' longest context
        (0: all at the mean; :meth:`decode_segment`)."""
        if self.prefill_pricer is not None and (chunks or (verify == 1 and self.eager_decode(decodes))):
            return self.prefill_pricer.iteration(chunks, decodes, decode_context, sampled, verify, longest)
        tokens = decodes * verify + sum(q for q, _ in chunks)
        if not chunks and verify == 1:
            tokens = self.padded(decodes)
        t, e = self.dense(tokens)
        ht, he = self.head(sampled + decodes * (verify - 1))
        t, e = t + ht, e + he
        for chunk in chunks:
            hit = self._chunks.get(chunk)
            if hit is None:
                hit = self._chunks[chunk] = self.attention(1, *chunk)
            t, e = t + hit[0], e + hit[1]
        if decodes and verify == 1:
            _hi, at, _st, ae, _se = self.decode_segment(decodes, decode_context, longest)
            t, e = t + at, e + ae
        elif decodes:
            at, ae = self.attention(decodes, verify, decode_context)
            t, e = t + at, e + ae
        seqs = len(chunks) + decodes
        return t + self.step_broadcast_time(seqs) + self.prompt_host_time(len(chunks)) + self.step_host_time(
            seqs, self.replays_graph(decodes, len(chunks), verify)), e

    def step_broadcast_time(self, seqs: int) -> float:
        """Device time (s) of the step's input broadcasts from the driver rank to the other tensor-parallel ranks
        (``step_broadcasts``, the profile's count), serial with every step: each one small NCCL broadcast over
        the plan's ``tp`` devices as the fabric model prices it (:func:`hwmodels.collectives.select_algorithm`),
        of ``8 x seqs`` bytes (one int64 a sequence; every such message up to a few KB costs the protocol's
        latency floor); 0 on one device, without a count or without a fabric model of the system."""
        tp = int(getattr(self.plan, "tp", 1))
        if self.step_broadcasts <= 0 or tp <= 1:
            return 0.0
        hit = self._bcast.get(seqs)
        if hit is None:
            from hwmodels.collectives import select_algorithm
            from simulator.lowering.collectives import collective_system_for

            csys = collective_system_for(self.system)
            one = 0.0 if csys is None else float(select_algorithm("broadcast", 8 * max(seqs, 1), tp, csys).time_s)
            hit = self._bcast[seqs] = self.step_broadcasts * one
        return hit

    def host_time(self, seqs: int) -> float:
        """Host time (s) of an iteration of ``seqs`` sequences (the framework profile's fields, the sampler call's
        host time included: ``sampler_host``)."""
        return self.host_s + self.host_per_seq_s * seqs + sampler_call_host_s(self.sampler_host, seqs)

    def graph_nodes(self) -> int:
        """Kernel nodes of one device's captured step: the kernels of one device's report of a step
        (every kernel the forward launches after fusion, the LM head and the collectives included; the
        sampler runs outside the graph). The same at every batch (the graph's structure does not depend
        on it)."""
        if not self._nodes:
            self.head_point(1)
        return self._nodes

    def graph_launch_time(self) -> float:
        """Host time (s) of one replay of the step's CUDA graph (``graph_launch``; 0 when not modelled)."""
        if not self.graph_launch:
            return 0.0
        from workloads.frameworks import graph_launch_s

        return graph_launch_s(self.graph_launch, self.graph_nodes())

    def decode_host_time(self) -> float:
        """Host time (s) of the eager ops and host synchronisations a synchronous engine runs outside its decode
        graph every step (``decode_host``: the profile's ``decode_host_ops`` and ``decode_host_syncs``), at the
        device's ``efficiency.framework_op_overhead_s`` and ``efficiency.host_sync_s``; 0 without graphs."""
        ops, syncs = self.decode_host
        if not (ops or syncs) or not getattr(self.options, "cuda_graphs", False):
            return 0.0
        return eager_decode_host_s(ops, syncs, self.device.efficiency)

    def prompt_host_time(self, prompts: int) -> float:
        """Host time (s) of the eager ops and host synchronisations a synchronous engine runs outside the forward of
        an iteration carrying ``prompts`` prompt chunks (``prompt_host``: ``ops + ops_per_prompt x prompts`` at the
        device's ``efficiency.framework_op_overhead_s``, ``syncs`` at ``efficiency.host_sync_s``); 0 without
        prompts or without a count."""
        ops, syncs, per = self.prompt_host
        if prompts <= 0 or not (ops or syncs or per):
            return 0.0
        return eager_decode_host_s(ops + per * prompts, syncs, self.device.efficiency)

    def replays_graph(self, decodes: int, chunks: int = 0, verify: int = 1) -> bool:
        """Whether an iteration is replayed from a captured graph: a decode-only step (no prompt chunk, one query
        token a sequence) of at most the largest captured batch (a larger one runs eagerly: :meth:`padded`)."""
        return not chunks and verify == 1 and (not self.graph_sizes or decodes <= self.graph_sizes[-1])

    def step_host_time(self, seqs: int, graphed: bool | None = None) -> float:
        """Host time (s) serial with an iteration of ``seqs`` sequences this pricer prices: the profile's
        :meth:`host_time` and, for an iteration replayed from a graph (``graphed``; None: a decode-only step of
        ``seqs`` sequences, :meth:`replays_graph`), the launch of the step's graph (:meth:`graph_launch_time`) and
        the eager ops and synchronisations around the replay (:meth:`decode_host_time`)."""
        if graphed is None:
            graphed = self.replays_graph(seqs)
        hit = self._host.get((seqs, graphed))
        if hit is None:
            hit = self._host[(seqs, graphed)] = self.host_time(seqs) + (
                self.graph_launch_time() + self.decode_host_time() if graphed else 0.0)
        return hit

    def draft_steps(self, batch: int, context: float, k: int) -> tuple[float, float]:
        """(s, J) of ``k`` decode steps of ``batch`` sequences on this (draft) model, from mean ``context``
        (host time excluded: the draft runs inside the target's engine step)."""
        ft, fe = self.decode_fixed(batch)
        t, e = k * (ft - self.step_host_time(batch)), k * fe
        for i in range(k):
            _hi, at, _st, ae, _se = self.decode_segment(batch, context + i)
            t, e = t + at, e + ae
        return t, e

    def decode_fixed(self, batch: int) -> tuple[float, float]:
        """(s, J) of a decode-only step of ``batch`` sequences without its attention (host time included)."""
        if self.eager_decode(batch):
            return self.prefill_pricer.decode_fixed(batch)  # type: ignore[union-attr]
        hit = self._memo.get(("f", batch))
        if hit is None:
            t, e = self.dense(self.padded(batch))
            ht, he = self.head(batch)
            hit = self._memo[("f", batch)] = (t + ht + self.step_broadcast_time(batch) + self.step_host_time(batch),
                                              e + he)
        return hit

    def longest_bound(self, longest: float, context: float = 0.0) -> int:
        """The bucket point at or above a decode batch's ``longest`` context that its attention is priced at
        (0 when it is not above the mean ``context``: every sequence alike); a run of decode steps keeps a
        segment (:meth:`decode_segment`) while its longest context stays at or below it."""
        if longest <= context:
            return 0
        lo, hi = bucket_bounds(longest)
        return hi

    def decode_segment(self, batch: int, context: float, longest: int = 0
                       ) -> tuple[float, float, float, float, float]:
        """The piece of the decode attention line around mean ``context``: (upper context bound, s at
        ``context``, s per unit of context, J at ``context``, J per unit of context); valid while the
        mean context stays below the bound and the ``longest`` context (0: none) at or below its
        :meth:`longest_bound`."""
        if self.eager_decode(batch):
            return self.prefill_pricer.decode_segment(batch, context, longest)  # type: ignore[union-attr]
        lo, hi = bucket_bounds(context)
        if hi == lo:
            hi = bucket_bounds(lo + 0.5)[1]
        top = self.longest_bound(longest, context) if batch > 1 else 0
        seg = self._segments.get((batch, lo, top))
        if seg is None:
            a, b = self.attention(batch, 1, lo, top), self.attention(batch, 1, hi, top)
            seg = self._segments[(batch, lo, top)] = (float(hi), a[0], (b[0] - a[0]) / (hi - lo), a[1],
                                                      (b[1] - a[1]) / (hi - lo))
        top, a0, st, e0, se = seg
        return top, a0 + st * (context - lo), st, e0 + se * (context - lo), se
