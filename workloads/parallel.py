"""Parallel plans: how one model's work is split over many devices, and the per-device graphs that result.

A :class:`ParallelPlan` names the degrees of tensor (``tp``), pipeline (``pp``), data (``dp``) and
expert (``ep``) parallelism, sequence parallelism, the microbatching of a training step, the
pipeline schedule and the ZeRO / FSDP sharding of optimizer state, gradients and weights.
:func:`plan_graphs` turns a transformer (a zoo name, a Hugging Face config or a
:class:`~workloads.zoo.transformer.TransformerConfig`) into the graph of ONE device of each pipeline
stage, with the collectives inserted where Megatron-LM puts them (see
:func:`workloads.zoo.transformer.build`): all-reduces after the row-parallel projections (or
all-gather / reduce-scatter pairs with sequence parallelism), vocabulary-parallel embedding and
LM head, send/recv between stages. Data-parallel gradient synchronisation and the pipeline schedule
are composed by :mod:`simulator.parallel`, which knows the fabric.

Every rank of a stage runs the same graph (the split is symmetric), so one graph per stage suffices.
What must divide, as the frameworks require: heads, KV heads (or ``tp`` a multiple of them), the
MLP width by ``tp``; layers by ``pp`` (times ``interleave`` for interleaved schedules) unless the
plan states an uneven split (``stage_layers``: the layers of each stage, or ``pipeline_split``: a
framework's own rule, :data:`PIPELINE_SPLITS`); the global
batch by ``dp * microbatch``; experts by ``ep``. A plan that does not divide is a
:class:`PlanError` naming the dimension, the sizes and the nearest valid values.

Example
-------
>>> plan = ParallelPlan(tp=8, pp=2, dp=4, microbatch=1, global_batch=64)
>>> plan.devices, plan.microbatches
(64, 16)
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from nodeperf.errors import NodeperfError
from workloads.ir import Attrs, OpGraph

__all__ = ["ParallelPlan", "PlanError", "StageGraph", "SCHEDULES", "plan_graphs", "stage_layer_ranges",
           "plan_problems", "OFFLOAD_TARGETS", "PIPELINE_SPLITS", "split_layers", "plan_stage_layers",
           "request_context_problem", "resolve_config"]

#: Pipeline schedules: GPipe (all forwards, then all backwards), 1F1B (PipeDream-Flush, Narayanan et
#: al. 2021) and interleaved 1F1B (virtual stages, ibid.).
SCHEDULES = ("gpipe", "1f1b", "interleaved")
#: ZeRO stages (Rajbhandari et al. 2020): 1 shards optimizer state, 2 also gradients, 3 also weights.
ZERO_STAGES = (0, 1, 2, 3)
#: What a plan may keep in host memory (``ParallelPlan.offload``, ``--offload``).
OFFLOAD_TARGETS = ("activations", "optimizer", "params")
#: dtypes the data-parallel gradients are accumulated and reduced in (``ParallelPlan.grad_reduce_dtype``;
#: '': the stack's default, fp32 main gradients for a 16-bit Megatron-Core model)
GRAD_REDUCE_DTYPES = ("", "fp32", "bf16")
#: dtypes a stack may store the parameters in (``ParallelPlan.param_dtype``; '': the stack's default, e.g.
#: MaxText's ``weight_dtype: float32``)
PARAM_DTYPES = ("", "fp32", "bf16")
#: How a framework splits the decoder layers over pipeline stages when the plan names no counts
#: (``ParallelPlan.pipeline_split``, ``--pipeline-split``; :func:`split_layers`):
#:
#: * ``even``: ``layers / (pp v)`` each (every framework's split when it divides);
#: * ``megatron-embedding-loss``, ``megatron-embedding``, ``megatron-loss``: Megatron-Core with
#:   ``account_for_embedding_in_pipeline_split`` and/or ``account_for_loss_in_pipeline_split``: the
#:   embedding (loss) counts as one layer of the first (last) virtual stage, so ``layers + 2`` (+1)
#:   split evenly and the first (last) stage builds one decoder layer fewer
#:   (megatron/core/transformer/transformer_block.py ``get_num_layers_to_build``, NVIDIA/Megatron-LM
#:   @ d98e8a64ddf34856e74b24714e3bedb2f5a39553);
#: * ``torchtitan``: torchtitan's generated split points when none are configured: ``layers // stages``
#:   on the first stage, one more on each middle stage while the remainder lasts, the rest on the last
#:   (torchtitan/parallelisms/pipelining_utils.py ``generate_split_points``, pytorch/torchtitan @ 9dec370,
#:   2024-12);
#: * ``automodel``: NeMo AutoModel's ``generate_hf_model_fqn_per_model_part``: ``layers // stages`` each, one
#:   more on each of the first ``layers % stages`` stages (nemo_automodel/components/distributed/pipelining/
#:   functional.py, NVIDIA-NeMo/Automodel @ cb9765441e5127b8100879ca1f7ff5920f825887).
PIPELINE_SPLITS = ("even", "megatron-embedding-loss", "megatron-embedding", "megatron-loss", "torchtitan", "automodel")


class PlanError(NodeperfError, ValueError):
    """A parallel plan that does not fit the model or the system; the message locates the dimension."""


@dataclass(frozen=True)
class ParallelPlan:
    """Degrees of parallelism and the training-step structure.

    Attributes
    ----------
    tp, pp, dp, ep, cp
        Tensor, pipeline, data, expert and context parallel degrees. Devices used:
        ``tp * pp * dp * cp`` (expert parallelism reuses the data-parallel ranks, as in Megatron-LM).
    sequence_parallel
        Megatron sequence parallelism with ``tp`` (Korthikanti et al. 2022).
    microbatch
        Sequences per microbatch (per data-parallel rank).
    global_batch
        Sequences per training step over all data-parallel ranks (None: ``dp * microbatch``, one
        microbatch per step).
    schedule, interleave
        Pipeline schedule (:data:`SCHEDULES`) and virtual stages per device for ``interleaved``.
    zero_stage, fsdp
        ZeRO stage (0-3) over the data-parallel ranks; ``fsdp`` is PyTorch FSDP's full sharding
        (ZeRO-3 semantics).
    shard_group
        With ``fsdp``: hybrid sharding (FSDP ``HYBRID_SHARD``, FSDP2 HSDP): parameters, gradients and
        optimizer state sharded over groups of this many data-parallel ranks and replicated across
        groups (0: over all ``dp`` ranks, full sharding).
    offload
        What lives in host memory between its uses (:data:`OFFLOAD_TARGETS`): ``activations`` (the
        tensors saved for the backward pass), ``optimizer`` (optimizer state, ZeRO-Offload / FSDP's
        optimizer on the host) or ``params`` (FSDP2 ``CPUOffloadPolicy``: sharded parameters,
        gradients and optimizer state); transfers are priced on the device's host link.
    capacity_factor
        MoE expert capacity factor (tokens each expert takes, over an even share; tokens beyond it
        are dropped); None: the model's (dropless, as Megatron-Core's default ``--moe-expert-capacity-factor None``).
    stage_layers
        Decoder layers of each pipeline stage in model order, ``pp * interleave`` counts (model chunk
        ``c`` on stage ``c % pp``), e.g. ``(15, 16, 16, 16, 16, 16, 16, 15)``; as Megatron-Core's
        ``--decoder-first-pipeline-num-layers``/``--decoder-last-pipeline-num-layers`` or torchtitan's
        split points state it. Empty: the ``pipeline_split`` rule.
    pipeline_split
        The split rule when ``stage_layers`` is empty (:data:`PIPELINE_SPLITS`; default ``even``).
    moe_dispatch
        How tokens reach their experts (:data:`workloads.zoo.transformer.MOE_DISPATCH_MODES`): ``sparse``
        (routed rows gathered and scattered) or ``einsum`` (MaxText's dense one-hot dispatch and combine
        einsums over capacity-padded expert buffers; needs a ``capacity_factor``) or ``deepep`` (the sparse
        dispatch over DeepEP's kernels: a token crosses the fabric once per rank, or node, holding its experts)
        or ``hybridep`` (the sparse dispatch as Megatron-Core's flex dispatcher runs it with the HybridEP
        backend: the permutation into local-expert order is fused into the dispatch, so a stack's chunk sort,
        :attr:`workloads.frameworks.FrameworkProfile.moe_sort_chunks`, is not run).
    moe_routing
        How the router spreads a token's experts (:data:`workloads.zoo.transformer.MOE_ROUTINGS`): ``uniform``
        (a learned or randomly forced gate) or ``round-robin`` (NeMo AutoModel's ``FakeBalancedGate``).
    moe_host_sync
        The dispatcher moves its token counts to the host and waits for them in every MoE layer's forward
        pass (Megatron-Core's dropless dispatchers: the all-to-all splits and the grouped GEMM's ``m_splits``
        are host lists): the ``moe_dispatch`` op carries ``host_sync`` and the step is priced per sync
        interval (:func:`simulator.parallel.host_sync.sync_interval_excess`). Refused with ``cuda_graph``
        ``full_iteration`` (a captured graph holds no host wait) and with ``moe_rank_capacity_factor`` (HybridEP's
        static budget reads no counts on the host).
    grad_reduce_dtype
        Without FSDP, the dtype of the gradient buffer the backward accumulates into and the data-parallel
        ranks reduce (:data:`GRAD_REDUCE_DTYPES`): ``fp32`` is Megatron-Core's ``grad_reduce_in_fp32=True``
        (``--accumulate-allreduce-grads-in-fp32``, 4 bytes per parameter), ``bf16`` its
        ``grad_reduce_in_fp32=False`` (the parameters' 2 bytes); '' the default (fp32 for 16-bit weights).
    fp8_param
        Transformer Engine fp8 parameters (Megatron-Core ``--fp8-param-gather``, Megatron-Bridge
        ``fp8_param_gather``/``fp8_param``): the linear weights the model computes with are TE's fp8
        tensors, with their transpose or columnwise copy, in place of the 16-bit weights, so no separate
        fp8 weight cache is kept across microbatches; the fp32 master copy stays in the optimizer.
    fsdp_fp8_all_gather
        With ``fsdp`` and torchao's ``tensorwise`` fp8 linears: FSDP2 gathers the fp8 linear weights in fp8
        (torchao ``Float8LinearConfig.enable_fsdp_float8_all_gather`` with
        ``precompute_float8_dynamic_scale_for_fsdp``, torchtitan's ``[float8]`` settings of those names): each
        weight is a ``WeightWithDynamicFloat8CastTensor`` whose ``fsdp_pre_all_gather`` casts the local shard to
        fp8 with a per-tensor scale computed once a step for every weight (one amax all-reduce after the
        optimizer step), and ``fsdp_post_all_gather`` wraps the gathered bytes as the ``Float8Tensor`` the GEMMs
        read (torchao/float8/fsdp_utils.py @ pytorch/ao eab345c). The gathered linear weights are 1 byte each;
        norms, embedding and the output projection (which torchtitan leaves in 16 bits) are gathered as before;
        the gradients' reduce-scatter is unchanged. See docs/training_memory.md.
    param_dtype
        The dtype the stack stores the parameters in (:data:`PARAM_DTYPES`; '' the stack's default):
        MaxText's ``weight_dtype`` (``float32`` in its base.yml; a recipe setting ``bfloat16`` keeps the
        parameters, their gradients and AdamW's moments in bf16). Costed by the XLA memory model
        (simulator/report/memory_xla.py) and, for ``bf16``, by FSDP2 plans (NeMo AutoModel's bf16 model: bf16
        sharded parameters, gradients and Adam moments, no master copy); other stacks keep their own rules.
    loss_chunks
        The loss computed over this many chunks of the batch-sequence axis, one chunk's logits live at a
        time, forward and backward (MaxText ``num_vocab_tiling``), so the backward computes the logits again
        (:func:`_chunked_loss_recompute`); 1: the whole logits at once.
    etp
        Expert tensor parallelism (Megatron-Core ``expert_tensor_parallel_size``); 0: ``tp`` (its default,
        ``None`` -> tensor_model_parallel_size), the experts' widths split over the tensor-parallel ranks and
        ``ep`` taken from the data-parallel ranks. ``1`` with ``tp > 1`` folds the tensor-parallel ranks into
        the expert layer as Megatron-Core does (megatron/core/parallel_state.py @ core_v0.15.0: the expert
        groups are ``ETP x EP x EDP`` over the ``tp x cp x dp`` ranks, order ``tp-ep-dp``, so ``ep`` need only
        divide ``tp x dp / etp``): whole experts per rank, each rank's own sequence-parallel tokens dispatched
        over ``ep`` consecutive ranks (needs ``sequence_parallel``, as Megatron-Core requires for MoE with TP).
    pipeline_microbatches
        With pipeline stages: the microbatches one run of the pipeline schedule takes, when the stack
        accumulates gradients over several runs, each with its own fill and drain (torch.distributed.pipelining:
        one ``schedule.step`` per local batch, NeMo AutoModel's training loop calling it once per gradient
        accumulation step); 0: every microbatch of the step in one schedule (Megatron-Core's). A divisor of
        :attr:`microbatches`.
    moe_a2a_overlap
        Megatron-Core's ``overlap_moe_expert_parallel_comm`` (Megatron-Bridge ``moe_a2a_overlap``): the combined
        1F1B schedule runs one microbatch's forward with another's backward, the expert-parallel all-to-alls on
        a communication stream beside the other microbatch's compute (megatron/core/pipeline_parallel/
        combined_1f1b.py @ core_v0.15.0), one extra warm-up forward before the steady phase (schedules.py);
        its memory beyond the plain schedule's peak is one paired layer's attention side (docs/training_memory.md).
        Needs ``ep > 1`` and, with pipeline stages, the interleaved schedule (transformer_config.py: "VP must be
        specified when PP > 1").
    grad_sync_per_step
        With ``fsdp`` and several schedule runs a step (:attr:`pipeline_microbatches`): the stack holds FSDP2's
        gradient reduce-scatter and reshard to the optimizer step's last run (NeMo AutoModel's
        ``patched_backward_maybe_with_nosync``, components/moe/fsdp_mixin.py @ cb97654, syncing on the step's
        last backward only). False: ``torch.distributed.pipelining``'s own, each run's last backward
        reduce-scatters and reshards (``backward_one_chunk(last_backward=bwd_mb_index == self._n_microbatches - 1)``
        in every ``step()``, torch/distributed/pipelining/schedules.py), so every run pays them and gathers again.
    p2p_host_sync
        With pipeline stages: every stage-to-stage exchange is followed by ``torch.cuda.synchronize()``, the host
        waiting for all the device's queued work (Megatron-Core's ``batch_p2p_comm`` with ``batch_p2p_sync``, both
        True by default, megatron/core/pipeline_parallel/p2p_communication.py ``_communicate`` and
        model_parallel_config.py @ core_v0.15.0; Megatron-Bridge sets ``batch_p2p_comm`` for pipelines without
        virtual stages, src/megatron/bridge/training/comm_overlap.py @ v0.2.0): each ``send`` of a stage graph
        ends a host-sync interval (:mod:`simulator.parallel.host_sync`), the forward's and the backward's.
    cuda_graph
        ``full_iteration``: Megatron-Core's ``cuda_graph_impl="full_iteration"`` captures the whole
        forward-backward of the step, every microbatch, into one CUDA graph (megatron/core/full_cuda_graph.py
        ``FullCudaGraphWrapper``); memory only (docs/training_memory.md). ``transformer_engine``: Megatron-Core's
        ``cuda_graph_impl="transformer_engine"``, one Transformer Engine graph per graphed layer and captured
        microbatch (``TECudaGraphHelper``, megatron/core/transformer/cuda_graphs.py), of the part of each layer
        ``cuda_graph_scope`` names; memory only: the static buffers the graphs keep beside what the eager step
        holds (docs/training_memory.md, "Transformer Engine's per-layer CUDA graphs"). ``""``: none.
    cuda_graph_scope
        With ``cuda_graph`` ``transformer_engine``: the parts of a layer each graph captures, Megatron-Core's
        ``cuda_graph_scope`` names (:data:`CUDA_GRAPH_SCOPES`: ``attn``, ``mlp`` (a dense MLP), ``moe``,
        ``moe_router``, ``moe_preprocess``, ``mamba``); empty: the whole layer (megatron/core/transformer/
        cuda_graphs.py ``_layer_is_graphable``). Refused with another ``cuda_graph``.
    moe_rank_capacity_factor
        Megatron-Core's ``moe_expert_rank_capacity_factor``: HybridEP's static per-rank budget of permuted tokens,
        ``local tokens x top-k x factor`` rows (token_dispatcher.py ``_HybridEPManager.setup_metadata``); memory
        only, the tokens computed stay the routed ones. None: sized per step from the routed count. Needs
        ``moe_dispatch`` ``hybridep`` (Megatron-Core refuses it with any other backend but NCCL EP).
    recompute_output_copy
        Training with Megatron-Core's ``recompute_modules`` (``modules:NAME,...``): each recomputed output of a
        ``CheckpointWithoutOutput`` module (``layernorm``, ``moe_act``, ``mla_up_proj``) is copied back into the
        storage the forward released, one device copy per output before the backward reads it
        (``output.untyped_storage().copy_(recomputation_output.untyped_storage())``, ``CheckpointWithoutOutput._recompute``,
        megatron/core/tensor_parallel/random.py at NVIDIA/Megatron-LM core_v0.14.0 (23e00ed0, the NeMo 25.09
        container), 0d8e0714 (25.11) and 5455f0a0; f54403492e, #3649, 2026-03-11, shares the recomputed storage
        instead, so 580d53a8 (26.04) copies nothing). False: no copy (the later code, or no such module).
    nccl_nvls
        NCCL's NVLink SHARP (``NCCL_NVLS_ENABLE``, default on where the system has it): False is
        ``NCCL_NVLS_ENABLE=0``, as Megatron-Bridge's performance scripts set it ("Disable NVLink SHARP to save
        memory", scripts/performance/utils/executors.py ``PERF_ENV_VARS``); memory only: the communicators' NVLS
        buffers (docs/training_memory.md, "NCCL's own memory").
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    sequence_parallel: bool = False
    microbatch: int = 1
    global_batch: int | None = None
    schedule: str = "1f1b"
    interleave: int = 1
    zero_stage: int = 0
    fsdp: bool = False
    shard_group: int = 0
    offload: tuple[str, ...] = ()
    capacity_factor: float | None = None
    stage_layers: tuple[int, ...] = ()
    pipeline_split: str = "even"
    moe_dispatch: str = "sparse"
    moe_routing: str = "uniform"
    moe_host_sync: bool = False
    grad_reduce_dtype: str = ""
    fp8_param: bool = False
    fsdp_fp8_all_gather: bool = False
    param_dtype: str = ""
    loss_chunks: int = 1
    etp: int = 0
    pipeline_microbatches: int = 0
    grad_sync_per_step: bool = False
    moe_a2a_overlap: bool = False
    p2p_host_sync: bool = False
    cuda_graph: str = ""
    moe_rank_capacity_factor: float | None = None
    cuda_graph_scope: tuple[str, ...] = ()
    nccl_nvls: bool = True
    recompute_output_copy: bool = False

    def __post_init__(self) -> None:
        for f in ("stage_layers", "cuda_graph_scope"):  # a list from Python or JSON reads as the tuple it is
            if isinstance(getattr(self, f), list):
                object.__setattr__(self, f, tuple(getattr(self, f)))
        problems = []
        for f in ("tp", "pp", "dp", "ep", "cp", "microbatch", "interleave"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                problems.append(f"{f}: got {v!r}; expected a positive integer")
        gb = self.global_batch
        if gb is not None and (not isinstance(gb, int) or isinstance(gb, bool) or gb < 1):
            problems.append(f"global_batch: got {gb!r}; expected a positive integer")
        if self.schedule not in SCHEDULES:
            from nodeperf.suggest import did_you_mean

            problems.append(f"schedule: got {self.schedule!r}; expected one of {', '.join(SCHEDULES)}"
                            + did_you_mean(str(self.schedule), SCHEDULES))
        if self.zero_stage not in ZERO_STAGES:
            problems.append(f"zero_stage: got {self.zero_stage!r}; expected one of 0, 1, 2, 3")
        problems += _recipe_problems(self)
        if problems:
            raise PlanError("plan: " + "; ".join(problems))
        if self.interleave > 1 and self.schedule != "interleaved":
            raise PlanError(f"plan: interleave: got {self.interleave} with schedule {self.schedule!r}; expected "
                            "schedule 'interleaved' (virtual stages need the interleaved 1F1B schedule)")
        if self.schedule == "interleaved" and self.interleave < 2:
            raise PlanError(f"plan: schedule 'interleaved' with interleave {self.interleave}; expected interleave >= 2 "
                            "(--interleave N: virtual stages per device; with 1 the schedule is 1F1B)")
        if self.schedule == "interleaved" and self.pp == 1:
            raise PlanError("plan: schedule 'interleaved' with pp 1; expected pp > 1")
        if self.sequence_parallel and self.tp == 1:
            raise PlanError("plan: sequence_parallel: got it with tp 1; expected tp > 1 (it splits the "
                            "tensor-parallel ranks' activations)")
        if gb is not None and gb % (self.dp * self.microbatch):
            step = self.dp * self.microbatch
            lo, hi = (gb // step) * step, (gb // step + 1) * step
            near = " or ".join(str(v) for v in (lo, hi) if v > 0)
            raise PlanError(f"plan: global_batch: {gb} is not a multiple of dp x microbatch = {self.dp} x "
                            f"{self.microbatch} = {step}; expected a multiple (nearest: {near})")

    @property
    def devices(self) -> int:
        """Devices the plan occupies."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def microbatches(self) -> int:
        """Microbatches per data-parallel rank per step."""
        if self.global_batch is None:
            return 1
        return self.global_batch // (self.dp * self.microbatch)

    @property
    def zero(self) -> int:
        """Effective ZeRO stage (FSDP full sharding is stage 3)."""
        return 3 if self.fsdp else self.zero_stage

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if not self.stage_layers:  # an even split reads as it always has
            del out["stage_layers"]
        if self.pipeline_split == "even":
            del out["pipeline_split"]
        if self.moe_dispatch == "sparse":  # the routed dispatch reads as it always has
            del out["moe_dispatch"]
        for k, default in (("grad_reduce_dtype", ""), ("fp8_param", False), ("fsdp_fp8_all_gather", False),
                           ("param_dtype", ""),
                           ("loss_chunks", 1), ("moe_routing", "uniform"), ("etp", 0),
                           ("moe_host_sync", False), ("pipeline_microbatches", 0),
                           ("grad_sync_per_step", False), ("moe_a2a_overlap", False),
                           ("p2p_host_sync", False), ("cuda_graph", ""),
                           ("moe_rank_capacity_factor", None), ("cuda_graph_scope", ()),
                           ("nccl_nvls", True), ("recompute_output_copy", False)):  # read as before
            if out[k] == default:
                del out[k]
        out["devices"] = self.devices
        out["microbatches"] = self.microbatches
        return out


def _a2a_overlap_problems(plan: ParallelPlan) -> list[str]:
    """What Megatron-Core refuses of ``overlap_moe_expert_parallel_comm`` (transformer_config.py @ core_v0.15.0:
    expert parallelism, the ``alltoall`` or ``flex`` token dispatcher, virtual pipeline stages when pp > 1), a
    value that is not a boolean, and several pipeline schedule runs a step (torch's pipelining, not Megatron-Core's)."""
    if not isinstance(plan.moe_a2a_overlap, bool):
        return [f"moe_a2a_overlap: got {plan.moe_a2a_overlap!r}; expected true or false"]
    if not plan.moe_a2a_overlap:
        return []
    if plan.moe_dispatch == "einsum":  # Megatron-Core: "supported with alltoall/flex token dispatcher"
        return ["moe_a2a_overlap: got it with moe_dispatch 'einsum'; expected moe_dispatch 'sparse', 'deepep' or "
                "'hybridep' (Megatron-Core's alltoall or flex token dispatcher)"]
    if plan.ep < 2:
        return [f"moe_a2a_overlap: got it with ep {plan.ep}; expected ep > 1 (it overlaps the expert-parallel "
                "all-to-alls)"]
    if plan.pp > 1 and plan.schedule != "interleaved":
        return [f"moe_a2a_overlap: got it with pp {plan.pp} and schedule {plan.schedule!r}; expected schedule "
                "'interleaved' (Megatron-Core needs virtual pipeline stages for it when pp > 1)"]
    if plan.pipeline_microbatches:  # Megatron-Core runs one schedule a step; several runs are torch pipelining's
        return [f"moe_a2a_overlap: got it with pipeline_microbatches {plan.pipeline_microbatches}; expected "
                "pipeline_microbatches 0 (Megatron-Core's combined 1F1B runs every microbatch in one schedule; "
                "several schedule runs a step are torch.distributed.pipelining's)"]
    return []


#: :attr:`ParallelPlan.cuda_graph` values: none, Megatron-Core's ``cuda_graph_impl="full_iteration"`` or its
#: ``cuda_graph_impl="transformer_engine"`` (per-layer graphs, :attr:`ParallelPlan.cuda_graph_scope`)
CUDA_GRAPHS = ("", "full_iteration", "transformer_engine")
#: :attr:`ParallelPlan.cuda_graph_scope` names: Megatron-Core's ``CudaGraphScope`` but ``full_iteration``, which
#: ``TECudaGraphHelper`` refuses (megatron/core/transformer/enums.py, cuda_graphs.py @ NVIDIA/Megatron-LM 3758b54b2)
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")


def _cuda_graph_problems(plan: ParallelPlan) -> list[str]:
    """What is wrong with ``cuda_graph`` and ``moe_rank_capacity_factor`` (each item names the field), and a
    ``moe_host_sync`` that either of them rules out."""
    from nodeperf.suggest import did_you_mean

    out: list[str] = []
    if plan.cuda_graph not in CUDA_GRAPHS:
        out.append(f"cuda_graph: got {plan.cuda_graph!r}; expected one of 'full_iteration', 'transformer_engine' or "
                   "'' (none)" + did_you_mean(str(plan.cuda_graph), CUDA_GRAPHS[1:]))
    scope = plan.cuda_graph_scope
    if not isinstance(scope, tuple) or not all(isinstance(x, str) for x in scope):
        out.append(f"cuda_graph_scope: got {scope!r}; expected a list of scope names ({', '.join(CUDA_GRAPH_SCOPES)})")
    elif scope and plan.cuda_graph != "transformer_engine":
        out.append(f"cuda_graph_scope: got {list(scope)} with cuda_graph {plan.cuda_graph!r}; expected cuda_graph "
                   "'transformer_engine' (the scope of Transformer Engine's per-layer graphs)")
    else:
        for x in scope:
            if x not in CUDA_GRAPH_SCOPES:
                out.append(f"cuda_graph_scope: got {x!r}; expected one of {', '.join(CUDA_GRAPH_SCOPES)}"
                           + did_you_mean(x, CUDA_GRAPH_SCOPES))
        # TransformerConfig.__post_init__ (transformer_config.py lines 1972-1979 @ NVIDIA/Megatron-LM 3758b54b2)
        if {"moe", "moe_router"} <= set(scope):
            out.append("cuda_graph_scope: got both 'moe' and 'moe_router'; expected one of them (Megatron-Core: "
                       "'cuda_graph_scope must not contain both moe and moe_router')")
        if "moe_preprocess" in scope and "moe_router" not in scope:
            out.append("cuda_graph_scope: got 'moe_preprocess' without 'moe_router'; expected 'moe_router' with it "
                       "(Megatron-Core: 'moe_preprocess cuda graph is only supported with moe_router cuda graph')")
    rf = plan.moe_rank_capacity_factor
    if rf is not None and (isinstance(rf, bool) or not isinstance(rf, (int, float)) or not 0 < rf < float("inf")):
        out.append(f"moe_rank_capacity_factor: got {rf!r}; expected a number > 0 (e.g. 1.5; none: dropless, "
                   "sized per step)")
    elif rf is not None and plan.moe_dispatch != "hybridep":
        # Megatron-Core: "moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep' or
        # 'ncclep'" (TransformerConfig.__post_init__, transformer_config.py @ NVIDIA/Megatron-LM 6513e3e23)
        out.append(f"moe_rank_capacity_factor: got {rf:g} with moe_dispatch {plan.moe_dispatch!r}; expected "
                   "moe_dispatch 'hybridep' (Megatron-Core sets the rank budget for the flex dispatcher's HybridEP "
                   "backend only)")
    if plan.moe_host_sync is True and (plan.cuda_graph == "full_iteration" or rf is not None):
        # a captured graph holds no host wait (CUDA: synchronising a capturing stream is invalid); HybridEP with a
        # rank budget sizes its buffers statically and the op fuser's grouped MLP takes the counts on the device
        # (token_dispatcher.py _HybridEPManager.setup_metadata/dispatch, experts.py @ 6513e3e23)
        why = (f"cuda_graph {plan.cuda_graph!r}" if plan.cuda_graph == "full_iteration"
               else f"moe_rank_capacity_factor {rf!r}")
        out.append(f"moe_host_sync: got true with {why}; expected false (a full-iteration CUDA graph captures no "
                   "host sync, and HybridEP with a rank capacity factor reads no token counts on the host)")
    return out


def _recipe_problems(plan: ParallelPlan) -> list[str]:
    """What is wrong with the plan's sharding, offload and MoE settings (each item names the field)."""
    from nodeperf.suggest import did_you_mean

    out: list[str] = []
    for t in plan.offload:
        if t not in OFFLOAD_TARGETS:
            out.append(f"offload: got {t!r}; expected one of {', '.join(OFFLOAD_TARGETS)}"
                       + did_you_mean(str(t), OFFLOAD_TARGETS))
    if plan.fsdp and plan.zero_stage in (1, 2):  # fsdp is full sharding: the stage was dropped without a word
        out.append(f"zero_stage: got {plan.zero_stage} with fsdp; expected zero_stage 0 or 3 (fsdp is full "
                   "sharding, ZeRO-3; without fsdp for ZeRO-1 or ZeRO-2)")
    sg = plan.shard_group
    if not isinstance(sg, int) or isinstance(sg, bool) or sg < 0:
        out.append(f"shard_group: got {sg!r}; expected a positive integer (0: all data-parallel ranks)")
    elif sg and (not plan.fsdp or plan.dp % sg):
        out.append(f"shard_group: got {sg} with dp {plan.dp}{'' if plan.fsdp else ' and no fsdp'}; expected fsdp "
                   "and a divisor of dp (hybrid sharding shards within groups of data-parallel ranks)")
    cf = plan.capacity_factor
    if cf is not None and (isinstance(cf, bool) or not isinstance(cf, (int, float)) or not 0 < cf < float("inf")):
        out.append(f"capacity_factor: got {cf!r}; expected a number > 0 (e.g. 1.25; none: dropless)")
    modes = ("sparse", "einsum", "deepep", "hybridep")  # workloads.zoo.transformer.MOE_DISPATCH_MODES (zoo loads late)
    routings = ("uniform", "round-robin")  # workloads.zoo.transformer.MOE_ROUTINGS
    if plan.moe_routing not in routings:
        out.append(f"moe_routing: got {plan.moe_routing!r}; expected one of {', '.join(routings)}"
                   + did_you_mean(str(plan.moe_routing), routings))
    out += _a2a_overlap_problems(plan) + _cuda_graph_problems(plan)
    if plan.moe_dispatch not in modes:
        out.append(f"moe_dispatch: got {plan.moe_dispatch!r}; expected one of {', '.join(modes)}"
                   + did_you_mean(str(plan.moe_dispatch), modes))
    elif plan.moe_dispatch == "einsum" and cf is None:
        out.append("moe_dispatch: 'einsum' with no capacity_factor; expected a capacity factor (the einsum "
                   "dispatch fills capacity-padded expert buffers)")
    if plan.grad_reduce_dtype not in GRAD_REDUCE_DTYPES:
        out.append(f"grad_reduce_dtype: got {plan.grad_reduce_dtype!r}; expected fp32 or bf16 (or empty: the "
                   "stack's default)" + did_you_mean(str(plan.grad_reduce_dtype), GRAD_REDUCE_DTYPES[1:]))
    if not isinstance(plan.fp8_param, bool):
        out.append(f"fp8_param: got {plan.fp8_param!r}; expected true or false")
    if not isinstance(plan.fsdp_fp8_all_gather, bool):
        out.append(f"fsdp_fp8_all_gather: got {plan.fsdp_fp8_all_gather!r}; expected true or false")
    elif plan.fsdp_fp8_all_gather and not plan.fsdp:
        # torchtitan enables it only with FSDP sharding (``parallel_dims.dp_shard_enabled and
        # float8_config.enable_fsdp_float8_all_gather``, torchtitan/float8.py @ 9dec370)
        out.append("fsdp_fp8_all_gather: got true without fsdp; expected fsdp (FSDP2 gathers the fp8 weights; "
                   "without FSDP sharding nothing is gathered)")
    if not isinstance(plan.moe_host_sync, bool):
        out.append(f"moe_host_sync: got {plan.moe_host_sync!r}; expected true or false")
    if not isinstance(plan.recompute_output_copy, bool):
        out.append(f"recompute_output_copy: got {plan.recompute_output_copy!r}; expected true or false")
    if not isinstance(plan.nccl_nvls, bool):
        out.append(f"nccl_nvls: got {plan.nccl_nvls!r}; expected true or false")
    if not isinstance(plan.p2p_host_sync, bool):
        out.append(f"p2p_host_sync: got {plan.p2p_host_sync!r}; expected true or false")
    elif plan.p2p_host_sync and isinstance(plan.pp, int) and plan.pp < 2:
        out.append(f"p2p_host_sync: got true with pp {plan.pp}; expected pp > 1 (the sync follows a pipeline "
                   "stage's send; a plan without stages sends nothing)")
    if plan.param_dtype not in PARAM_DTYPES:
        out.append(f"param_dtype: got {plan.param_dtype!r}; expected fp32 or bf16 (or empty: the stack's "
                   "default)" + did_you_mean(str(plan.param_dtype), PARAM_DTYPES[1:]))
    lc = plan.loss_chunks
    if not isinstance(lc, int) or isinstance(lc, bool) or lc < 1:
        out.append(f"loss_chunks: got {lc!r}; expected a positive integer (1: the whole logits at once)")
    return out + _etp_problems(plan) + _split_problems(plan) + _flush_problems(plan)


def _flush_problems(plan: ParallelPlan) -> list[str]:
    """What is wrong with ``pipeline_microbatches`` (the microbatches of one pipeline schedule run)."""
    k = plan.pipeline_microbatches
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        return [f"pipeline_microbatches: got {k!r}; expected a positive integer (0: every microbatch in one "
                "schedule run)"]
    m = plan.microbatches
    if k and plan.global_batch is not None and m % k:
        near = [d for d in range(1, m + 1) if m % d == 0]
        best = min(near, key=lambda d: abs(d - k))
        return [f"pipeline_microbatches: got {k} for {m} microbatches a step; expected a divisor of {m} "
                f"(nearest: {best})"]
    return []


def _etp_problems(plan: ParallelPlan) -> list[str]:
    """What is wrong with the plan's expert tensor parallelism (``etp``), without the model."""
    e = plan.etp
    if not isinstance(e, int) or isinstance(e, bool) or e < 0:
        return [f"etp: got {e!r}; expected 0 (tp, Megatron-Core's default), 1 or tp"]
    if e in (0, plan.tp):
        return []
    if e != 1:
        return [f"etp: got {e} with tp {plan.tp}; expected 1 or tp (0: tp); an expert tensor parallelism between "
                "them is not modelled"]
    if not plan.sequence_parallel:
        return [f"etp: 1 with tp {plan.tp} and no sequence_parallel; expected sequence_parallel (Megatron-Core "
                "requires it for MoE with tensor parallelism)"]
    if plan.cp > 1:
        return [f"etp: 1 with tp {plan.tp} and cp {plan.cp}; expected cp 1 (the fold over context-parallel "
                "ranks is not modelled)"]
    if plan.moe_dispatch == "einsum":
        return ["etp: 1 with tp > 1 and moe_dispatch 'einsum'; expected the sparse or deepep dispatch"]
    return []


def _split_problems(plan: ParallelPlan) -> list[str]:
    """What is wrong with the plan's stage split, without the model (each item names the field)."""
    from nodeperf.suggest import did_you_mean

    out: list[str] = []
    sl = plan.stage_layers
    if not isinstance(sl, tuple) or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in sl):
        out.append(f"stage_layers: got {sl!r}; expected positive layer counts, one per stage")
    elif sl and len(sl) != plan.pp * plan.interleave:
        out.append(f"stage_layers: got {len(sl)} counts; expected pp x interleave = {plan.pp} x {plan.interleave} = "
                   f"{plan.pp * plan.interleave} (one per stage and virtual stage)")
    if plan.pipeline_split not in PIPELINE_SPLITS:
        out.append(f"pipeline_split: got {plan.pipeline_split!r}; expected one of {', '.join(PIPELINE_SPLITS)}"
                   + did_you_mean(str(plan.pipeline_split), PIPELINE_SPLITS))
    return out


def split_layers(layers: int, pp: int, interleave: int = 1, rule: str = "even") -> tuple[int, ...]:
    """Decoder layers of each of the ``pp * interleave`` model chunks under split ``rule`` (:data:`PIPELINE_SPLITS`).

    Raises ValueError (the rule's own condition) when the rule cannot split ``layers`` so.

    Examples
    --------
    >>> split_layers(126, 8, rule="torchtitan")
    (15, 16, 16, 16, 16, 16, 16, 15)
    >>> split_layers(126, 8, 8, rule="megatron-embedding-loss")[:3], split_layers(126, 8, 8, "megatron-embedding-loss")[-1]
    ((1, 2, 2), 1)
    """
    chunks = pp * interleave
    if rule == "torchtitan":  # generate_split_points: first base, middles base + 1 while the remainder lasts
        if chunks > layers:
            raise ValueError(f"torchtitan split: {chunks} stages for {layers} layers; expected at most one stage a layer")
        base, extra = divmod(layers, chunks)
        counts = [base] + [base + 1 if k < extra else base for k in range(chunks - 2)] if chunks > 1 else []
        return (*counts, layers - sum(counts))
    if rule == "automodel":  # generate_hf_model_fqn_per_model_part: the remainder on the first stages
        if chunks > layers:
            raise ValueError(f"automodel split: {chunks} stages for {layers} layers; expected at most one stage a layer")
        base, extra = divmod(layers, chunks)
        return tuple(base + (1 if k < extra else 0) for k in range(chunks))
    emb = rule in ("megatron-embedding-loss", "megatron-embedding")
    loss = rule in ("megatron-embedding-loss", "megatron-loss")
    total = layers + emb + loss  # the embedding (loss) counted as one layer of the first (last) chunk
    if total % chunks:
        what = f"layers{' + embedding' if emb else ''}{' + loss' if loss else ''} = {total}"
        raise ValueError(f"{rule} split: {what} is not divisible by pp x interleave = {chunks}")
    per = total // chunks
    counts = [per] * chunks
    counts[0] -= emb
    counts[-1] -= loss
    if min(counts) < 1:
        raise ValueError(f"{rule} split: {per} layers a chunk leave the first or last chunk without a decoder layer")
    return tuple(counts)


def plan_stage_layers(cfg_layers: int, plan: ParallelPlan) -> tuple[int, ...]:
    """The plan's decoder layers per model chunk: its ``stage_layers``, else its ``pipeline_split`` rule."""
    if plan.stage_layers:
        return tuple(plan.stage_layers)
    return split_layers(cfg_layers, plan.pp, plan.interleave, plan.pipeline_split)


@dataclass(frozen=True)
class StageGraph:
    """The work of one device of pipeline stage ``stage`` (virtual chunk ``chunk`` when interleaved).

    ``forward_ops``: the graph's first ``forward_ops`` ops are the forward pass (a training step's
    graph continues with the backward pass and the optimizer update, group ``optimizer``).
    Stages of the same shape (the same number of layers, neither first nor last) share one graph,
    built for the layers ``built_layers``; its op names carry those layer indices.
    """

    stage: int
    chunk: int
    layers: tuple[int, int]
    graph: OpGraph
    forward_ops: int
    built_layers: tuple[int, int] = (0, 0)


def _nearest(valid: list[int], k: int) -> str:
    lo = max((v for v in valid if v < k), default=None)
    hi = min((v for v in valid if v > k), default=None)
    return " or ".join(str(v) for v in (lo, hi) if v is not None) or "none"


def plan_problems(cfg: Any, plan: ParallelPlan, *, phase: str, seq: int) -> list[str]:
    """What prevents ``plan`` on transformer ``cfg`` (empty: nothing); each item names the dimension."""
    from workloads.zoo.transformer import tensor_parallel_problems

    out = tensor_parallel_problems(cfg, plan.tp, sequence_parallel=plan.sequence_parallel, phase=phase, seq=seq)
    if plan.cp > 1:
        unit = 2 * plan.cp * (plan.tp if plan.sequence_parallel else 1)
        if not cfg.is_decoder_lm or phase == "decode":
            out.append(f"cp {plan.cp}: context parallelism splits a decoder's prompt or training sequence; got phase "
                       f"{phase!r}; expected prefill, forward or train of a decoder-only model")
        elif seq % unit:
            valid = list(range(unit, seq + unit + 1, unit))
            out.append(f"cp {plan.cp}: seq {seq} is not divisible by {unit} (2 x cp"
                       f"{' x tp' if plan.sequence_parallel else ''}); expected a multiple of {unit} (nearest: "
                       f"{_nearest([u for u in valid], seq)})")
    chunks = plan.pp * plan.interleave
    if plan.pp > 1:
        if not cfg.is_decoder_lm:
            out.append(f"pp {plan.pp}: pipeline parallelism is modelled for decoder-only language models; "
                       "expected pp 1")
        elif plan.pp > cfg.layers:
            out.append(f"pp {plan.pp} is larger than the {cfg.layers} layers; expected at most {cfg.layers}")
        elif plan.stage_layers:
            if sum(plan.stage_layers) != cfg.layers:
                out.append(f"stage_layers {','.join(map(str, plan.stage_layers))} sum to {sum(plan.stage_layers)}; "
                           f"expected the model's layers={cfg.layers}")
        elif plan.pipeline_split != "even":
            try:
                split_layers(cfg.layers, plan.pp, plan.interleave, plan.pipeline_split)
            except ValueError as exc:
                out.append(str(exc))
        elif cfg.layers % chunks:
            valid = [d for d in range(1, cfg.layers + 1) if cfg.layers % (d * plan.interleave) == 0]
            what = f"pp x interleave = {plan.pp} x {plan.interleave}" if plan.interleave > 1 else f"pp {plan.pp}"
            out.append(f"{what} does not divide layers={cfg.layers}; expected a divisor (nearest pp: "
                       f"{_nearest(valid, plan.pp)}) or an uneven split (stage_layers, --stage-layers)")
    if plan.ep > 1:
        if not cfg.experts:
            out.append(f"ep {plan.ep}: the model has no experts; expected ep 1")
        elif cfg.experts % plan.ep:
            valid = [d for d in range(1, cfg.experts + 1) if cfg.experts % d == 0]
            out.append(f"ep {plan.ep} does not divide experts={cfg.experts}; expected a divisor (nearest: "
                       f"{_nearest(valid, plan.ep)})")
        elif (plan.dp if (plan.etp or plan.tp) == plan.tp else plan.tp * plan.dp) % plan.ep:
            fold = (plan.etp or plan.tp) != plan.tp
            out.append(f"ep {plan.ep} does not divide {'tp x dp ' + str(plan.tp * plan.dp) if fold else 'dp ' + str(plan.dp)}; "
                       "expected expert-parallel ranks taken from the data-parallel replicas (as Megatron-LM takes "
                       "them)" + ("" if fold or plan.tp == 1 or (plan.tp * plan.dp) % plan.ep else
                                  f", or from tp x dp = {plan.tp * plan.dp} with etp 1 (--etp 1)"))
    return out


def stage_layer_ranges(layers: int, pp: int, interleave: int = 1,
                       counts: tuple[int, ...] = ()) -> list[list[tuple[int, int]]]:
    """Layers of each pipeline stage: ``ranges[stage][chunk] = (first, last)``.

    Layers are split into ``pp * interleave`` chunks, evenly or ``counts[c]`` layers in chunk ``c``;
    chunk ``c`` of the model goes to stage ``c % pp`` (Megatron-LM's interleaved assignment: stage 0
    holds chunks 0, pp, 2 pp, ...).
    """
    chunks = pp * interleave
    sizes = list(counts) if counts else [layers // chunks] * chunks
    out: list[list[tuple[int, int]]] = [[] for _ in range(pp)]
    lo = 0
    for c, k in enumerate(sizes):
        out[c % pp].append((lo, lo + k))
        lo += k
    return out


def plan_graphs(model: Any, plan: ParallelPlan, *, phase: str = "prefill", seq: int | None = None,
                context: int | None = None, dtype: str | None = None, train: bool = False,
                optimizer: str = "adamw", recompute: str = "none", attention: str | None = None,
                batch: int | None = None, fp8_linears: str | None = None, framework: str = "",
                weight_dtype: str | None = None, kv_dtype: str | None = None) -> list[StageGraph]:
    """Per-device graphs of ``model`` under ``plan``: one per pipeline stage (and virtual chunk).

    Parameters
    ----------
    model
        A zoo transformer name, a path to a Hugging Face ``config.json``, or a
        :class:`~workloads.zoo.transformer.TransformerConfig`.
    plan
        The parallel plan.
    phase, seq, context, dtype, attention
        As for :func:`workloads.zoo.transformer.build` (``seq``: the zoo entry's; ``attention``: the profile's).
    train, optimizer, recompute
        Derive the training step of one microbatch (:func:`workloads.training.training_graph`);
        the batch of each graph is ``plan.microbatch``.
    framework
        A software-stack profile of :mod:`workloads.frameworks` whose graph every stage is built with
        (``compile``: the Hugging Face model code under torch.compile, ``eager`` / ``sdpa`` run op by op,
        :data:`OP_BY_OP_PROFILES`; ``""``: the default graph).
    fp8_linears
        Training only: the layers' linear GEMMs in fp8 under this scaling recipe
        (:func:`workloads.precision.fp8_linears`: ``tensorwise``, ``rowwise``, ``delayed``).
    batch
        Inference only: sequences per step on each data-parallel replica (default 1).
    weight_dtype, kv_dtype
        Inference only: every stage's graph with quantised linear-layer weights and/or a narrow KV cache,
        as serving stacks run them (:func:`workloads.precision.apply_precision`; None keeps 16 bits).

    Raises
    ------
    PlanError
        The plan does not divide the model (every problem listed), or the model is not a transformer.
    """
    from workloads.zoo.transformer import TransformerConfig, build

    cfg, defaults, where = resolve_config(model)
    if not isinstance(cfg, TransformerConfig):  # pragma: no cover - resolve_config guarantees it
        raise PlanError(f"{where}: not a transformer")
    phase = "train" if train else (phase or defaults.get("phase", "prefill"))
    seq = int(seq or defaults.get("seq", 2048))
    dtype = dtype or defaults.get("dtype", "bf16")
    problems = plan_problems(cfg, plan, phase=phase, seq=seq)
    if problems:
        head = f"{where}: plan tp={plan.tp} pp={plan.pp} dp={plan.dp} ep={plan.ep}"
        raise PlanError(head + ": " + "; ".join(problems))
    mb = plan.microbatch if train else int(batch or 1)
    if train and (weight_dtype or kv_dtype):
        raise PlanError(f"{where}: weight_dtype/kv_dtype: serving precision of an inference step; got a training step")
    _check_stack(plan, fp8_linears, framework, where)
    if train:
        _check_training_recipe(cfg, plan, recompute, fp8_linears, dtype, where)
    cfg = _recipe_config(cfg, plan, where, phase if fp8_linears and not train else "")
    if phase in ("train", "prefill"):
        _check_capacity(cfg, plan, where, mb, seq)
    ranges = (stage_layer_ranges(cfg.layers, plan.pp, plan.interleave, plan_stage_layers(cfg.layers, plan))
              if plan.pp > 1 else [[(0, cfg.layers)]])
    out: list[StageGraph] = []
    built: dict[tuple[bool, bool, int], tuple[OpGraph, int, tuple[int, int]]] = {}
    for stage, chunks in enumerate(ranges):
        for chunk, rng in enumerate(chunks):
            # only the first and last layers differ (embedding, head); every other same-sized stage
            # is the same work, so it is built once (MoE layer patterns repeat with moe_every)
            key = (rng[0] == 0, rng[1] == cfg.layers, rng[1] - rng[0], rng[0] % max(1, cfg.moe_every))
            if key not in built:
                g = build(cfg, batch=mb, seq=seq, phase=phase, context=context, dtype=dtype, attention=attention,
                          tp=plan.tp, sequence_parallel=plan.sequence_parallel,
                          stage_layers=rng if plan.pp > 1 else None, name=cfg.name,
                          pipeline_stride=plan.tp * plan.cp * plan.dp, ep=plan.ep, cp=plan.cp,
                          **({"etp": plan.etp} if plan.etp else {}),
                          **_stack(model, framework))
                built[key] = (*_stage_step(g, plan, train, optimizer, recompute, framework, fp8_linears, dtype,
                                           weight_dtype, kv_dtype, where), rng)
            g, n_fwd, rep = built[key]
            out.append(StageGraph(stage, chunk, rng, g, n_fwd, rep))
    return out


def _stage_step(g: OpGraph, plan: ParallelPlan, train: bool, optimizer: str, recompute: str, framework: str,
                fp8_linears: str | None, dtype: str, weight_dtype: str | None, kv_dtype: str | None,
                where: str) -> tuple[OpGraph, int]:
    """One stage's forward graph ``g`` as the step runs it, with its count of forward ops: the training step of one
    microbatch (chunked-loss recompute, the recipe's backward and optimizer, the stack's main-gradient accumulation),
    or the inference pass at the serving precision."""
    if train:
        g = _chunked_loss_recompute(g) if plan.loss_chunks > 1 else g
        g, n_fwd = _training_step(g, optimizer, recompute, framework, fp8_linears, plan.fsdp_fp8_all_gather,
                                  plan.fp8_param, plan.recompute_output_copy)
        return _main_grad_step(g, plan, framework, dtype), n_fwd
    g = _serving_precision(g, weight_dtype, kv_dtype, where)
    return g, len(g.ops)


#: Profiles of the Hugging Face model code run op by op (``workloads.frameworks``: ``eager``, ``sdpa``). Pipeline
#: stages (``torch.distributed.pipelining`` splits the unchanged ``nn.Module``) and data-parallel replicas (DDP,
#: FSDP wrap it) run that code as one device does; a split of its layers over ranks is the model code's own
#: (transformers' ``tp_plan`` of DTensor layouts), which these graphs do not state.
OP_BY_OP_PROFILES = ("eager", "sdpa")


def _check_op_by_op_split(plan: ParallelPlan, framework: str, where: str) -> None:
    """PlanError for a plan that splits layers over ranks (tensor, context or expert parallelism) under a profile of
    :data:`OP_BY_OP_PROFILES`: the Hugging Face code's own tensor parallelism is not modelled."""
    if framework not in OP_BY_OP_PROFILES:
        return
    split = [f"{k} {v}" for k, v in (("tp", plan.tp), ("cp", plan.cp), ("ep", plan.ep)) if v > 1]
    if split:
        raise PlanError(f"{where}: --framework {framework} with a parallel plan that splits layers over ranks: the "
                        "Hugging Face model code's own split (transformers' tp_plan, DTensor) is not modelled; got "
                        f"{', '.join(split)}; expected tp 1, cp 1 and ep 1 (pipeline and data parallelism), or a stack "
                        "that splits layers (e.g. --framework megatron-lm)")


def _check_training_recipe(cfg: Any, plan: ParallelPlan, recompute: str, fp8_linears: str | None, dtype: str,
                           where: str) -> None:
    """PlanError for fp8 linears in an 8-bit step (the layers the recipe keeps at the step's dtype would run in 8
    bits too) and, under pipeline stages, for recompute modules the whole model has no layers of (a stage's graph
    holds some layers only: :func:`workloads.recompute.check_modules_present`)."""
    from workloads.dtypes import dtype_bytes

    if fp8_linears and dtype_bytes(dtype) < 2:
        raise PlanError(f"{where}: fp8_linears {fp8_linears}: the other layers keep the step's dtype; got dtype "
                        f"{dtype}; expected a 16- or 32-bit dtype (bf16, fp16, fp32)")
    if plan.pp > 1:
        from workloads.recompute import check_modules_present, config_layers_held

        try:
            check_modules_present(config_layers_held(cfg), recompute, cfg.name)
        except ValueError as exc:
            raise PlanError(f"{where}: {exc}") from None


def _check_stack(plan: ParallelPlan, fp8_linears: str | None, framework: str, where: str) -> None:
    """PlanError for fp8 or int8 linears under a stack that does not run the recipe
    (:func:`workloads.precision.fp8_stack_problem`), or for a plan that splits layers under an op-by-op profile
    (:func:`_check_op_by_op_split`)."""
    from workloads.precision import fp8_stack_problem

    problem = fp8_stack_problem(fp8_linears, framework)
    if problem:
        raise PlanError(problem)
    _check_op_by_op_split(plan, framework, where)


def _chunked_loss_recompute(g: OpGraph) -> OpGraph:
    """``g`` with its LM head's logits GEMM run again in the backward (``recompute_in_backward``), as a loss over
    chunks of the tokens with one chunk's logits live at a time (``ParallelPlan.loss_chunks``) must: MaxText's
    ``get_vocab_tiling_loss_linen`` (src/MaxText/maxtext_utils.py @ 50bafeb98 and 3eb77db3c) keeps only the hidden
    states as the ``custom_vjp``'s residuals, and its backward scan recomputes each chunk's logits
    (``_single_chunk_loss_fn`` under ``jax.vjp``) before their gradient: the GEMM and the views to the loss form one
    recomputation segment (``recompute_in_backward`` naming it), re-run before the loss's backward. Unchanged
    without an LM head (an earlier pipeline stage)."""
    from workloads.training import LOSS_KINDS

    def again(op: Any) -> bool:  # the logits GEMM and the views between it and the loss
        top = op.group.split(".")[0]
        return (top == "lm_head" and op.kind == "matmul") or (top == "loss" and op.kind not in LOSS_KINDS)

    if not any(op.kind == "matmul" and op.group.split(".")[0] == "lm_head" for op in g.ops):
        return g
    ops = [dataclasses.replace(op, attrs=Attrs({**op.attrs, "recompute_in_backward": "loss_chunks"}))
           if again(op) else op for op in g.ops]
    return OpGraph(g.name, ops, g.meta)


def _training_step(g: OpGraph, optimizer: str, recompute: str, framework: str,
                   fp8_linears: str | None, gathered_weights: bool = False,
                   fp8_params: bool = False, output_copy: bool = False) -> tuple[OpGraph, int]:
    """The training step of the forward graph ``g`` (:func:`workloads.training.training_graph`), with the stack's
    optimizer passes and fp8 linears when asked (``gathered_weights``: the linear weights gathered in fp8,
    :attr:`ParallelPlan.fsdp_fp8_all_gather`; ``fp8_params``: Transformer Engine's fp8 parameters,
    :attr:`ParallelPlan.fp8_param`, read by the GEMMs without a cast; ``output_copy``:
    :attr:`ParallelPlan.recompute_output_copy`), and the number of its forward ops."""
    from workloads.training import training_graph

    n_fwd = len(g.ops)
    g = training_graph(g, optimizer=optimizer, recompute=recompute, output_copy=output_copy)
    n_fwd = int(g.meta.get("forward_ops", n_fwd))  # a policy may split fused projections
    g = _framework_step(g, framework) if framework else g
    if fp8_linears:
        from workloads.precision import TE_QUANTIZE_RECIPES
        from workloads.precision import fp8_linears as to_fp8

        # fp8 parameters read without a cast: the Transformer Engine recipes, whose activation quantize is priced as
        # TE runs it (TE_QUANTIZE_RECIPES; docs/training.md, "Transformer Engine's MXFP8 quantisation" and "... current
        # and delayed scaling")
        g = _with_fp8(g, n_fwd, fp8_linears, partial(to_fp8, gathered_weights=gathered_weights,
                                                     fp8_params=fp8_params and fp8_linears in TE_QUANTIZE_RECIPES))
        n_fwd = int(g.meta["forward_ops"])
    return g, n_fwd


def _main_grad_step(g: OpGraph, plan: ParallelPlan, framework: str, dtype: str) -> OpGraph:
    """The training step ``g`` with its weight-gradient GEMMs accumulating into the main-gradient buffer where the
    stack's linears do (``FrameworkProfile.wgrad_accumulation``, :func:`workloads.frameworks.main_grad_accumulation`),
    over the plan's microbatches, the buffer in the plan's ``grad_reduce_dtype``:

    * Megatron-Core (``"te-fused"``): '' is fp32 (:attr:`ParallelPlan.grad_reduce_dtype`); not under FSDP
      (Megatron-Bridge v0.2.0 training/config.py lines 1259-1261 turn ``gradient_accumulation_fusion`` off with
      Megatron FSDP);
    * Megatron-LM (``"megatron-fused-fp32"``): fused only when the gradients accumulate in fp32 (``--bf16`` forces it,
      or ``grad_reduce_dtype`` ``fp32``: ``--accumulate-allreduce-grads-in-fp32``); an fp16 run's gradients are added
      to an fp16 buffer by a kernel of their own.

    Unchanged without such a profile."""
    if not framework:
        return g
    from workloads.frameworks import get_profile, main_grad_accumulation

    mode = get_profile(framework).wgrad_accumulation
    if not mode or plan.fsdp:
        return g
    if mode == "megatron-fused-fp32":
        fp32 = plan.grad_reduce_dtype == "fp32" or (not plan.grad_reduce_dtype and dtype == "bf16")
        return main_grad_accumulation(g, mode, "fp32" if fp32 else dtype, plan.microbatches)
    return main_grad_accumulation(g, mode, plan.grad_reduce_dtype or "fp32", plan.microbatches)

def _serving_precision(g: OpGraph, weight_dtype: str | None, kv_dtype: str | None, where: str) -> OpGraph:
    """The inference graph ``g`` with quantised weights and/or a narrow KV cache (unchanged when neither is asked);
    a dtype the pass refuses is a PlanError naming the model."""
    if not (weight_dtype or kv_dtype):
        return g
    from workloads.precision import apply_precision

    try:
        return apply_precision(g, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    except ValueError as e:
        raise PlanError(f"{where}: {e}") from None


def _recipe_config(cfg: Any, plan: ParallelPlan, where: str, fp8_phase: str) -> Any:
    """``cfg`` with the plan's MoE capacity factor; a located PlanError for a capacity factor on a dense
    model or fp8 linears outside training (``fp8_phase``: the phase they were asked for)."""
    if fp8_phase:
        raise PlanError(f"{where}: fp8_linears: a training recipe; got phase {fp8_phase!r}; expected a training step")
    moe = (plan.moe_dispatch, plan.moe_routing, plan.moe_host_sync)
    if not cfg.experts and plan.moe_rank_capacity_factor is not None:
        raise PlanError(f"{where}: moe_rank_capacity_factor {plan.moe_rank_capacity_factor}: the model has no experts; "
                        "expected no MoE options")
    if not cfg.experts and moe != ("sparse", "uniform", False):
        given = [f"{k} {v}" for k, v, d in zip(("moe_dispatch", "moe_routing", "moe_host_sync"), moe,
                                               ("sparse", "uniform", False), strict=True) if v != d]
        raise PlanError(f"{where}: {', '.join(given)}: the model has no experts; expected no MoE options")
    if plan.capacity_factor is None:
        if cfg.experts and moe != ("sparse", "uniform", False):
            return dataclasses.replace(cfg, moe_dispatch=plan.moe_dispatch, moe_routing=plan.moe_routing,
                                       moe_host_sync=plan.moe_host_sync)
        return cfg
    if not cfg.experts:
        raise PlanError(f"{where}: capacity_factor {plan.capacity_factor}: the model has no experts; expected no "
                        "capacity factor")
    most = cfg.experts / max(1, cfg.top_k)
    if plan.capacity_factor > most:
        raise PlanError(f"{where}: capacity_factor {plan.capacity_factor:g}: above experts / top_k = {cfg.experts} / "
                        f"{cfg.top_k}, where each expert's buffer already holds every token of the batch; expected at "
                        f"most {most:g}")
    return dataclasses.replace(cfg, capacity_factor=float(plan.capacity_factor), moe_dispatch=plan.moe_dispatch,
                               moe_routing=plan.moe_routing, moe_host_sync=plan.moe_host_sync)


def _check_capacity(cfg: Any, plan: ParallelPlan, where: str, mb: int, seq: int) -> None:
    """A located PlanError for a capacity factor under one slot per expert: the sparse buffers'
    ``F x tokens x top_k / experts`` rows (``tokens``: a microbatch's on one rank, ``mb x seq / cp``, over ``tp``
    too when ``etp`` keeps whole experts on sequence-parallel ranks) below 1, which rounds up to one row and drops
    nearly every token, or MaxText's einsum slots ``int(max(ceil(S x top_k / E) x F, F))`` at 0 (``generate_masks``,
    MaxText/layers/linears.py @ 449b4fe), which drop every one."""
    f = plan.capacity_factor
    if f is None or not cfg.experts:
        return
    e, k, s = cfg.experts, max(1, cfg.top_k), max(1, seq // plan.cp)
    if cfg.moe_dispatch == "einsum":
        per = math.ceil(s * k / e)
        if per * f < 1:
            raise PlanError(f"{where}: capacity_factor {f:g}: no expert slot; got int(max(ceil({s} x {k} / {e}) x {f:g}, "
                            f"{f:g})) = 0 slots per expert of a {s}-token sequence (MaxText generate_masks), every "
                            f"token dropped; expected at least {1 / per:.3g}")
        return
    tokens = mb * s // (plan.tp if plan.etp and plan.etp != plan.tp else 1)
    rows = f * tokens * k / e
    if rows < 1:
        raise PlanError(f"{where}: capacity_factor {f:g}: under one row per expert; got {f:g} x {tokens} tokens x top_k "
                        f"{k} / {e} experts = {rows:.3g} rows, nearly every token dropped; expected at least "
                        f"{e / (tokens * k):.3g} (one row per expert)")


def _framework_step(g: OpGraph, framework: str) -> OpGraph:
    """The training step ``g`` as ``framework``'s profile runs it: its recomputation pruned of dead code when the
    stack traces it (``traced_remat``: :func:`workloads.training.prune_dead_recompute`), with Megatron-LM's
    mixed-precision optimizer passes when the profile says so (``megatron_optimizer``:
    :func:`workloads.frameworks.megatron_optimizer_passes`)."""
    from workloads.frameworks import get_profile, megatron_optimizer_passes
    from workloads.training import prune_dead_recompute

    profile = get_profile(framework)
    g = prune_dead_recompute(g) if profile.traced_remat else g
    return megatron_optimizer_passes(g) if profile.megatron_optimizer else g


def _stack(model: Any, framework: str) -> dict[str, str]:
    """The builder's framework arguments: the profile and the model family whose code it runs."""
    if not framework:
        return {}
    family = ""
    if isinstance(model, str) and not model.lower().endswith(".json"):
        from workloads.zoo import get_entry

        family = get_entry(model).family
    return {"framework": framework, "hf_family": family}


#: the suffix of an op :func:`workloads.precision.fp8_linears` inserts in front of the GEMM it names (an amax
#: reduction, a cast, MXFP8's columnwise copy, a K-major layout copy, a view of a quantised operand)
_FP8_INSERTED = re.compile(r"\.(?:(?:amax|scale|cast|columnwise|transpose|k_major)_[^.]*|fp8_\d+\.view)$")


def _with_fp8(g: OpGraph, n_fwd: int, recipe: str, to_fp8: Any) -> OpGraph:
    """``g`` through :func:`workloads.precision.fp8_linears`, with ``meta['forward_ops']`` counting the
    casts it inserts before the forward pass's GEMMs."""
    fwd = {op.name for op in g.ops[:n_fwd]}
    out = to_fp8(g, recipe)
    n = 0
    for op in out.ops:
        base = _FP8_INSERTED.sub("", op.name)
        if op.name in fwd or base in fwd:
            n += 1
        else:
            break
    meta = dict(out.meta)
    meta["forward_ops"] = n
    return OpGraph(out.name, list(out.ops), meta)


def request_context_problem(model: Any, input_len: int, output_len: int) -> str | None:
    """:func:`workloads.zoo.transformer.request_context_problem` of what the user named (a zoo name, a
    ``config.json`` path or a config): a generation request beyond the model's context, else None."""
    from workloads.zoo.transformer import request_context_problem as problem

    return problem(resolve_config(model)[0], input_len, output_len)


def resolve_config(model: Any) -> tuple[Any, dict[str, Any], str]:
    """(TransformerConfig, zoo defaults, name for messages) of what the user named."""
    from workloads.zoo.transformer import TransformerConfig

    if isinstance(model, TransformerConfig):
        return model, {}, model.name
    name = str(model)
    if name.lower().endswith(".json"):
        from workloads.hf import config_to_transformer, torch_dtype_of

        dt = torch_dtype_of(name)
        return config_to_transformer(name), ({"dtype": dt} if dt else {}), name
    from workloads.zoo import get_entry
    from workloads.zoo.transformer import zoo_config

    entry = get_entry(name)  # unknown name: a located error with near matches
    if not _is_transformer_entry(entry.name):
        raise PlanError(f"model {entry.name!r}: parallel plans split transformers; got a {entry.family} model; "
                        "expected a transformer from the zoo or a Hugging Face config")
    return zoo_config(entry.name), dict(entry.defaults), entry.name


def _is_transformer_entry(name: str) -> bool:
    from workloads.zoo import load_data

    return name in load_data("transformers.toml").get("models", {})
