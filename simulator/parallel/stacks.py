"""Plan-level behaviour of training stacks: what a stack launches per sharding unit and what it overlaps.

A :class:`~workloads.frameworks.FrameworkProfile` with a ``stack`` names how its data-parallel sharding
runs beyond the per-op costs of the stage graphs. :func:`sharded_step` prices the tail of a fully
sharded (ZeRO-3 / FSDP) training step for such a stack; :func:`simulator.parallel.compose.evaluate_plan`
calls :func:`apply_stack` when it is given a framework whose profile names a stack.

``"fsdp2"`` -- PyTorch FSDP2 (``fully_shard``) as torchtitan runs it
    (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``, ``_fsdp_param_group.py``):

    * every unit's parameters are all-gathered before its forward and, with ``reshard_after_forward``
      (torchtitan's default for the blocks), again before its backward: two all-gathers of the whole
      model per microbatch, each prefetched on the all-gather stream while the previous unit computes;
    * ``foreach_all_gather_copy_out`` then splits the gathered flat buffer into the unsharded
      parameters with ``split_with_sizes_copy`` **on the compute stream** (after waiting for the
      all-gather): a memory-bound kernel that reads and writes every gathered byte, serial with the
      layer's kernels (the copy-in of the local shard runs on the copy-in stream and is not charged);
    * ``foreach_reduce`` reduce-scatters the gradients in ``reduce_dtype`` (torchtitan: float32), so
      the reduce-scatter moves ``reduce bytes / parameter bytes`` times the gradient bytes; its
      ``_chunk_cat`` copy runs on the reduce-scatter stream, overlapped with backward (not charged);
    * exposed: the first unit's all-gather (nothing to overlap it with), the last unit's
      reduce-scatter, and whatever part of the collectives the step's compute cannot cover.

``"xla-spmd"`` -- MaxText on TPUs: XLA's SPMD partitioner issues the same all-gathers and
    reduce-scatters as asynchronous collectives that its latency-hiding scheduler overlaps with the
    layer's matmuls; the gathered weights are consumed in place (no copy-out kernel). MaxText keeps its
    parameters in float32 (``weight_dtype: float32`` in ``configs/base.yml``) but casts each kernel to
    ``dtype: bfloat16`` before its ``lax.dot_general`` (``DenseGeneral``, MaxText/layers/linears.py), so the
    weight gradient is a bfloat16 dot whose partial sums the SPMD partitioner reduces where the dot is
    partitioned, before the transpose of the cast widens them to float32: the reduce-scatter moves bf16
    (MaxText's sharding guide counts the gradient all-reduce as bf16 too), the profile's ``grad_reduce_dtype``.
    The all-gather is likewise priced at the compute dtype (the cast is elementwise on the local shard,
    ahead of the gather). Exposed as for FSDP2. On a TPU the overlap is what XLA:TPU's defaults and the run's
    flags enable: the all-gathers asynchronous and fused with compute by default (``maxtext``), the gradient
    reduce-scatters and all-reduces synchronous unless a flag makes them asynchronous or offloads them to the
    SparseCore (libtpu's dumped defaults, ``workloads.frameworks`` ``_LIBTPU_DEFAULTS``): a profile without
    ``reduce_overlap`` exposes every reduction in full; ``maxtext-sc`` overlaps them; a profile without
    ``collective_overlap`` (``maxtext-serial``) prices every collective serial.

``"megatron-core"`` -- Megatron-Core's distributed optimizer (ZeRO-1) and its overlapped gradient
    buckets are the plan's generic composition. With ``tp_comm_overlap`` (Transformer Engine userbuffers,
    ``--tp-comm-overlap``, which needs sequence parallelism) every sequence-parallel all-gather feeding a
    GEMM and every reduce-scatter fed by one is decomposed into ``tp`` chunks pipelined with that GEMM
    (Wang et al., ASPLOS 2023): :func:`tp_overlap_hidden` hides ``min(collective x (tp - 1) / tp, GEMM)``
    of each such pair; the first chunk's transfer stays exposed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["check_stack_device", "SHARDED_STACKS", "ShardedStep", "sharded_step", "tp_overlap_hidden", "ring_overlap_hidden", "ring_traced",
           "apply_stack", "stack_step", "profile_options", "get_stack_profile", "pipelined_reduce_exposed", "hbm_contention_s",
           "COLLECTIVE_HBM_PASSES", "vpu_reduce_s"]

#: Stacks whose fully sharded data parallelism :func:`sharded_step` prices.
SHARDED_STACKS = ("fsdp2", "xla-spmd")

@dataclass(frozen=True)
class ShardedStep:
    """The tail of a fully sharded training step under one stack (seconds).

    ``copy_s``: the all-gather copy-out kernels on the compute stream; ``gather_s`` / ``reduce_s``:
    every all-gather / reduce-scatter of the step; ``exposed_s``: the part of them not hidden behind
    compute; ``tail_s = copy_s + exposed_s + contention_s + vpu_reduce_s`` is what the step adds to the
    pipeline's compute (the optimizer update is added by the caller). ``replicas_s`` / ``replicas_exposed_s``: the part of
    ``reduce_s`` / ``exposed_s`` that all-reduces the gradient shards across replicated FSDP groups (MaxText
    over several slices: the data-centre network); zero without replicas. ``contention_s``: what the hidden
    collectives' HBM traffic adds to the compute they overlap (:func:`hbm_contention_s`; ``xla-spmd`` only);
    ``vpu_reduce_s``: the hidden reduce-scatters' additions on the TensorCore's vector unit
    (:func:`vpu_reduce_s`; ``xla-spmd`` only).
    """

    copy_s: float
    gather_s: float
    reduce_s: float
    exposed_s: float
    replicas_s: float = 0.0
    replicas_exposed_s: float = 0.0
    contention_s: float = 0.0
    vpu_reduce_s: float = 0.0

    @property
    def tail_s(self) -> float:
        return self.copy_s + self.exposed_s + self.contention_s + self.vpu_reduce_s


def sharded_step(stack: str, *, weight_bytes: float, units: int, microbatches: int, compute_s: float,
                 gather_once_s: float, reduce_once_s: float, reduce_scale: float,
                 copy_bytes_per_s: float, reshard_after_forward: bool = True, overlap: bool = True,
                 reduce_overlap: bool = True) -> ShardedStep:
    """The tail of one fully sharded step.

    Parameters
    ----------
    stack
        One of :data:`SHARDED_STACKS`.
    weight_bytes
        Unsharded parameter bytes one device gathers (its stage's trainable weights in the compute dtype).
    units
        Sharding units (FSDP2: one per ``fully_shard`` call, a block each plus the root module).
    microbatches
        Microbatches per step (each gathers and reduce-scatters again).
    compute_s
        The step's compute time on the device (what the collectives can hide behind).
    gather_once_s, reduce_once_s
        One all-gather of ``weight_bytes`` / one reduce-scatter of the gradients in the parameters' dtype.
    reduce_scale
        Reduce dtype bytes over parameter dtype bytes (2.0 for a float32 reduce of bf16 gradients).
    copy_bytes_per_s
        Achieved memory bandwidth of a streaming copy (read plus write bytes per second).
    reshard_after_forward
        Parameters freed after forward and gathered again for backward.
    overlap
        The collectives run concurrently with compute (the stack's ``collective_overlap``); False: every one
        of them is serial with compute and exposed in full.
    reduce_overlap
        With ``overlap``, the gradient reductions run concurrently with compute too (the stack's
        ``reduce_overlap``); False: the all-gathers overlap compute and every reduction is serial with it, as
        XLA:TPU runs a reduce-scatter or all-reduce that no flag makes asynchronous (``maxtext``).

    Examples
    --------
    >>> s = sharded_step("fsdp2", weight_bytes=1e9, units=4, microbatches=1, compute_s=1.0,
    ...                  gather_once_s=0.2, reduce_once_s=0.2, reduce_scale=2.0, copy_bytes_per_s=2e12)
    >>> round(s.copy_s, 6), round(s.exposed_s, 6)   # 2 gathers x 2e9 B / 2e12; 0.2/4 + 0.4/4
    (0.002, 0.15)
    >>> round(sharded_step("xla-spmd", weight_bytes=1e9, units=4, microbatches=1, compute_s=1.0, gather_once_s=0.2,
    ...                    reduce_once_s=0.2, reduce_scale=1.0, copy_bytes_per_s=2e12, overlap=False).exposed_s, 6)
    0.6
    >>> round(sharded_step("xla-spmd", weight_bytes=1e9, units=4, microbatches=1, compute_s=1.0, gather_once_s=0.2,
    ...                    reduce_once_s=0.2, reduce_scale=1.0, copy_bytes_per_s=2e12, reduce_overlap=False).exposed_s, 6)
    0.25
    """
    if stack not in SHARDED_STACKS:
        raise ValueError(f"stack: got {stack!r}; expected one of {', '.join(SHARDED_STACKS)}")
    if units < 1 or microbatches < 1 or copy_bytes_per_s <= 0:
        raise ValueError(f"stack {stack}: units {units}, microbatches {microbatches}, copy bandwidth "
                         f"{copy_bytes_per_s}; expected positive values")
    gathers = microbatches * (2 if reshard_after_forward else 1)
    copy_s = gathers * 2.0 * weight_bytes / copy_bytes_per_s if stack == "fsdp2" else 0.0
    gather_s = gathers * gather_once_s
    reduce_s = microbatches * reduce_once_s * reduce_scale
    if not overlap:
        return ShardedStep(copy_s=copy_s, gather_s=gather_s, reduce_s=reduce_s, exposed_s=gather_s + reduce_s)
    if not reduce_overlap:  # the first gather before any compute, the rest behind it; the reductions in full
        first = gather_once_s / units
        return ShardedStep(copy_s=copy_s, gather_s=gather_s, reduce_s=reduce_s,
                           exposed_s=reduce_s + first + max(0.0, gather_s - first - compute_s))
    first_last = (gather_once_s + reduce_once_s * reduce_scale) / units
    backlog = max(0.0, gather_s + reduce_s - first_last - compute_s)
    return ShardedStep(copy_s=copy_s, gather_s=gather_s, reduce_s=reduce_s, exposed_s=first_last + backlog)


#: ops between a sequence-parallel collective and the GEMM it feeds (or that feeds it) in a stage graph:
#: the backward's bias reduction and its reshapes sit between a GEMM and its reduce-scatter
_PAIR_WINDOW = 4


def tp_overlap_hidden(records: list[tuple[str, float]], forward_ops: int, tp: int,
                      kinds: tuple[str, ...] = ("all_gather", "reduce_scatter")) -> tuple[float, float]:
    """(forward, backward) seconds of tensor-parallel collectives hidden behind their GEMMs.

    ``records`` are ``(kind, seconds)`` of a stage graph's ops in order (the first ``forward_ops`` the
    forward pass). An ``all_gather`` pairs with the next ``matmul`` within :data:`_PAIR_WINDOW` ops of
    the same pass, a ``reduce_scatter`` with the previous one; each pair hides
    ``min(t_collective x (tp - 1) / tp, t_matmul)``. Only collectives of ``kinds`` are overlapped.

    Examples
    --------
    >>> tp_overlap_hidden([("all_gather", 4.0), ("matmul", 10.0), ("matmul", 2.0), ("reduce_scatter", 4.0)], 4, 4)
    (5.0, 0.0)
    """
    hidden = [0.0, 0.0]
    if tp <= 1:
        return 0.0, 0.0
    for i, (kind, t) in enumerate(records):
        if kind not in ("all_gather", "reduce_scatter") or kind not in kinds:
            continue
        fwd = i < forward_ops
        lo, hi = (0, forward_ops) if fwd else (forward_ops, len(records))
        span = (range(i + 1, min(hi, i + 1 + _PAIR_WINDOW)) if kind == "all_gather"
                else range(i - 1, max(lo, i - 1 - _PAIR_WINDOW), -1))
        gemm = next((records[j][1] for j in span if records[j][0] == "matmul"), None)
        if gemm is not None:
            hidden[0 if fwd else 1] += min(t * (tp - 1) / tp, gemm)
    return hidden[0], hidden[1]


#: the ops a low-precision recipe puts in front of a GEMM to quantise its operands, named after the GEMM
#: (:func:`workloads.precision.fp8_linears`: ``<gemm>.amax_<i>``, ``<gemm>.cast_<i>``, ``<gemm>.noise_<i>``,
#: ``<gemm>.columnwise_<i>``)
_OPERAND_QUANTISATION = re.compile(r"\.(?:amax|cast|noise|columnwise)_[01]$")


def _without_operand_quantisation(recs: list[tuple[str, str, float]],
                                  forward_ops: int) -> tuple[list[tuple[str, float]], int]:
    """``(kind, seconds)`` of ``recs`` (``(name, kind, seconds)``, the first ``forward_ops`` the forward pass)
    without the ops that quantise a GEMM's operands, and the forward pass's count of what is left: a
    sequence-parallel all-gather feeds its GEMM through the operand's amax and cast (AQT int8, fp8 recipes), which
    are the GEMM's own work on the gathered tensor, not ops between the two (:func:`tp_overlap_hidden`'s window).
    Source for GPU stacks: Transformer Engine quantises the local input and then fills the userbuffers all-gather
    its GEMM overlaps (``_Linear.forward``, transformer_engine/pytorch/module/linear.py @ d0067d0). For XLA stacks
    (MaxText's AQT int8 on TPU, its all-gathers overlapped by XLA:TPU's async collective / continuation fusion)
    this is an assumption: no XLA source read here states that the overlap of a gather with its dot reaches
    across the amax reduction, the rounding noise and the convert between them (XLA:TPU's scheduler and fusion
    passes are not published).

    >>> _without_operand_quantisation([("g", "all_gather", 1.0), ("l.qkv.amax_0", "reduction", 0.1),
    ...                                ("l.qkv.cast_0", "elementwise", 0.1), ("l.qkv", "matmul", 2.0)], 4)
    ([('all_gather', 1.0), ('matmul', 2.0)], 2)
    """
    keep = [(i, k, t) for i, (n, k, t) in enumerate(recs) if not _OPERAND_QUANTISATION.search(n)]
    return [(k, t) for _, k, t in keep], sum(1 for i, _, _ in keep if i < forward_ops)


def ring_overlap_hidden(records: list[tuple[str, str, float]], forward_ops: int) -> tuple[float, float]:
    """(forward, backward) seconds of context-parallel key/value exchanges hidden behind the ring's attention.

    ``records`` are ``(name, kind, seconds)`` of a stage graph's ops in order (the first ``forward_ops`` the
    forward pass). PyTorch's all-gather rotater issues one all-gather of the keys and values at step 0 and
    waits for it at step 1 (``_templated_ring_attention``): in each pass of a layer (forward, recomputed
    forward) the ``*.ring.gather_*`` collectives hide behind that pass's ``*.ring.step0`` attention. The
    backward (``_templated_ring_attention_backward``) gathers them again at its step 0
    (``*.ring.gather_*.bwd.regather``, hidden behind ``step0.bwd``) and sends the fp32 dK/dV accumulator
    on after each step (``*.ring.gather_*.bwd.dkv<i>``), waited on after the next step's kernels: exchange
    ``i`` hides behind ``step<i+1>.bwd``, and the last one, waited on at once, behind nothing. Any other
    backward exchange of a gather (``*.bwd``) hides behind the steps' backward kernels but the last.

    Examples
    --------
    >>> recs = [("l.ring.gather_k", "all_gather", 2.0), ("l.ring.gather_v", "all_gather", 2.0),
    ...         ("l.ring.step0", "attention", 3.0), ("l.ring.step1", "attention", 3.0),
    ...         ("l.ring.step1.bwd", "attention_bwd", 5.0), ("l.ring.step0.bwd", "attention_bwd", 5.0),
    ...         ("l.ring.gather_k.bwd.regather", "all_gather", 2.0),
    ...         ("l.ring.gather_k.bwd.dkv0", "all_to_all", 6.0), ("l.ring.gather_k.bwd.dkv1", "all_to_all", 6.0)]
    >>> ring_overlap_hidden(recs, 4)
    (3.0, 7.0)
    """
    comm: dict[tuple[str, bool, str], float] = {}
    cover: dict[tuple[str, bool, str], list[float]] = {}
    steps_bwd: dict[str, dict[int, float]] = {}
    for i, (name, kind, t) in enumerate(records):
        layer, sep, rest = name.partition(".ring.")
        if not sep:
            continue
        again = "@recompute" if "@recompute" in rest else ""
        if kind in ("all_gather", "reduce_scatter", "all_to_all") and rest.startswith("gather_"):
            key = (layer, i < forward_ops, _ring_exchange_slot(rest) if ".bwd" in rest else again)
            comm[key] = comm.get(key, 0.0) + t
        elif kind == "attention" and rest.startswith("step0"):
            cover.setdefault((layer, i < forward_ops, again), []).append(t)
        elif kind == "attention_bwd":
            cover.setdefault((layer, i < forward_ops, "bwd"), []).append(t)
            step = rest.split(".", 1)[0].removeprefix("step")
            if step.isdigit():
                steps_bwd.setdefault(layer, {})[int(step)] = t
    hidden = [0.0, 0.0]
    for key, t in comm.items():
        layer, slot = key[0], key[2]
        if slot.startswith("dkv") or slot == "regather":
            after = int(slot[3:]) + 1 if slot.startswith("dkv") else 0
            budget = steps_bwd.get(layer, {}).get(after, 0.0)
        else:
            steps = cover.get((layer, key[1], "bwd" if slot == "bwd" else slot), [])
            budget = sum(steps) - (min(steps) if slot == "bwd" and steps else 0.0)
        hidden[0 if key[1] else 1] += min(t, budget)
    return hidden[0], hidden[1]


def ring_traced(profile: Any) -> bool:
    """Whether ``profile`` runs PyTorch's ring attention traced into compiled code, where every key/value
    exchange is waited on where it is issued, so none hides behind the ring's attention.

    The FSDP2 profiles with ``fusion`` are torch.compile: torchtitan compiles every transformer block with
    ``fullgraph=True`` (``apply_compile``), so ``context_parallel``'s SDPA replacement and the ring it runs
    (``_templated_ring_attention`` and its backward) are traced into the block's graphs. A functional
    collective traced there is followed by its wait at once: ``_maybe_wrap_tensor`` in
    ``torch/distributed/_functional_collectives.py`` returns ``wait_tensor(self)`` whenever
    ``_are_we_tracing()`` (the module docstring: under compile "wait_tensor() op is immediately called",
    eager wraps an ``AsyncCollectiveTensor`` waited at first use). Inductor moves a wait later only with
    ``torch._inductor.config.reorder_for_compute_comm_overlap``, False by default (``torch/_inductor/config.py``),
    and torchtitan's compile path does not set it. So the all-gather rotater's gather, the backward's
    re-gather and each fp32 dK/dV permute run exposed; eager (``fusion`` False) overlaps them as
    :func:`ring_overlap_hidden` counts.
    """
    return profile.stack == "fsdp2" and bool(profile.fusion)


def _ring_exchange_slot(rest: str) -> str:
    """The wait point of a backward ring exchange named ``gather_<x>.bwd[.<what>]``: ``regather``,
    ``dkv<i>`` or ``bwd`` (any other)."""
    what = rest.split(".bwd", 1)[1].lstrip(".")
    return what if what == "regather" or (what.startswith("dkv") and what[3:].isdigit()) else "bwd"


def _tp_overlap(plan: Any, pipe: Any, per_stage: list[Any], latency: float,
                breakdown: dict[str, float], ring: bool = False,
                kinds: tuple[str, ...] = ("all_gather", "reduce_scatter"),
                bwd_hidden: Sequence[float] = ()) -> tuple[float, Any, dict[str, float]]:
    """The step with the tensor-parallel collectives (``ring``: the context-parallel exchanges) overlapped
    (pipeline schedule recomputed), each stage's backward less ``bwd_hidden`` (the seconds a microbatch's stage
    hides under the combined 1F1B schedule, ``ParallelPlan.moe_a2a_overlap``, which the plan's composition took
    off it). The breakdown's communication loses the busy seconds hidden and its bubble what the shorter stages
    take off the bubble, so its parts still add up to the step."""
    from simulator.parallel.schedule import pipeline_time

    fwd, bwd = [], []
    for stage in per_stage:
        f = b = 0.0
        for sg, gc in stage:
            recs = [(r.name, r.kind, r.time_s) for r in gc.report.records
                    if not (r.group == "optimizer" or r.group.startswith("optimizer."))]
            hf, hb = (ring_overlap_hidden(recs, sg.forward_ops) if ring else
                      tp_overlap_hidden(*_without_operand_quantisation(recs, sg.forward_ops), plan.tp, kinds))
            f += gc.split[0] - hf
            b += gc.split[1] - hb
        fwd.append(f)
        bwd.append(max(0.0, b - bwd_hidden[len(bwd)]) if bwd_hidden else b)
    new = pipeline_time(fwd, bwd, plan.microbatches, plan.schedule, plan.interleave)
    saved = pipe.step_s - new.step_s
    key = "cp_comm_hidden_s" if ring else "tp_comm_hidden_s"
    out = dict(breakdown, communication_s=breakdown["communication_s"] - (pipe.busy_s - new.busy_s),
               bubble_s=breakdown["bubble_s"] - (pipe.bubble_s - new.bubble_s), **{key: pipe.busy_s - new.busy_s})
    return latency - saved, new, out


def profile_options(profile: Any, options: Any = None) -> Any:
    """``options`` (default :class:`~simulator.engines.analytical.EvalOptions`) with ``profile``'s costing."""
    from dataclasses import replace

    from simulator.engines.analytical import EvalOptions

    return replace(options or EvalOptions(), **get_stack_profile(profile).cost_options())


def get_stack_profile(framework: Any) -> Any:
    """The :class:`~workloads.frameworks.FrameworkProfile` named by ``framework`` (a name or a profile)."""
    from workloads.frameworks import FrameworkProfile, get_profile

    return framework if isinstance(framework, FrameworkProfile) else get_profile(str(framework), where="framework")


def check_stack_device(profile: Any, system: Any) -> None:
    """Refuse ``profile`` on a system whose device it does not run on (MaxText on an H100): one located line
    (:func:`workloads.frameworks.check_profile_hardware`, under the option name ``framework``)."""
    from workloads.frameworks import check_profile_hardware

    check_profile_hardware(profile, system, where="framework")


def apply_stack(framework: Any, plan: Any, system: Any, pipe: Any, per_stage: list[Any], latency: float,
                breakdown: dict[str, float], collective_times: Any, bwd_hidden: Sequence[float] = ()
                ) -> tuple[float, dict[str, float]]:
    """(latency, breakdown) of a training step under ``framework``'s stack (a profile or its name):
    :func:`stack_step` without its pipeline."""
    latency, breakdown, _ = stack_step(framework, plan, system, pipe, per_stage, latency, breakdown,
                                          collective_times, bwd_hidden)
    return latency, breakdown


def stack_step(framework: Any, plan: Any, system: Any, pipe: Any, per_stage: list[Any], latency: float,
               breakdown: dict[str, float], collective_times: Any, bwd_hidden: Sequence[float] = ()
               ) -> tuple[float, dict[str, float], Any]:
    """(latency, breakdown, pipeline) of a training step under ``framework``'s stack (a profile or its name): the
    pipeline schedule is the one the step's time comes from (``pipe`` itself where the stack re-times no stage:
    a trace and ``bubble_fraction`` read it).

    The profile must run on the system's device (:func:`workloads.frameworks.check_profile_device`:
    one located line otherwise). The step is unchanged when the stack does not alter the plan's
    generic composition: no stack, ``megatron-core``, a plan that is not fully sharded, or a pipeline
    (FSDP with pipeline stages is composed generically). ``collective_times(wanted, n, system, stride)``
    prices the distinct ``(kind, bytes)`` collectives of ``wanted`` (the plan composition's own rule).
    ``bwd_hidden``: per stage, the backward seconds the combined 1F1B schedule hides (a stack that re-times the
    stages takes them off as the composition did).
    """
    from simulator.engines.analytical import spec_of

    profile = get_stack_profile(framework)
    check_stack_device(profile, system)
    dev = spec_of(system)[0]
    if profile.tp_comm_overlap and plan.tp > 1 and plan.sequence_parallel:
        latency, pipe, breakdown = _tp_overlap(plan, pipe, per_stage, latency, breakdown,
                                               kinds=tuple(profile.tp_overlap_collectives), bwd_hidden=bwd_hidden)
    if profile.stack == "fsdp2" and plan.cp > 1:  # PyTorch's ring: eager overlaps its exchanges, traced none
        if ring_traced(profile):
            breakdown = dict(breakdown, cp_comm_hidden_s=0.0)
        else:
            latency, pipe, breakdown = _tp_overlap(plan, pipe, per_stage, latency, breakdown, ring=True)
    if profile.stack not in SHARDED_STACKS or plan.zero != 3 or plan.dp * plan.cp <= 1 or plan.pp != 1:
        return latency, breakdown, pipe
    out = dict(breakdown)
    if profile.stack == "xla-spmd" and 1 < plan.shard_group < plan.dp * plan.cp:  # data parallel over FSDP groups
        step = _replicated_shard_step_of(profile, plan, system, dev, per_stage, breakdown["compute_s"],
                                         collective_times)
        # every replica updates its FSDP group's shard (the optimizer state is sharded over fsdp only, as the
        # parameters are): the generic composition's update over dp x cp ranks, times the replicas
        out["optimizer_s"] = breakdown["optimizer_s"] * (plan.dp * plan.cp / plan.shard_group)
    else:
        step = _sharded_step_of(profile, plan, system, dev, per_stage, breakdown["compute_s"], collective_times)
    comm_busy = pipe.busy_s - breakdown["compute_s"]  # collectives inside the stage graphs (tensor parallel)
    out.update(communication_s=comm_busy + step.exposed_s, dp_sync_s=step.reduce_s, dp_sync_exposed_s=step.exposed_s,
               fsdp_copy_out_s=step.copy_s, fsdp_gather_s=step.gather_s)
    if step.contention_s or step.vpu_reduce_s:
        out.update(fsdp_hbm_contention_s=step.contention_s, fsdp_vpu_reduce_s=step.vpu_reduce_s)
    if step.replicas_s:
        out.update(dp_sync_replicas_s=step.replicas_s, dp_sync_replicas_exposed_s=step.replicas_exposed_s)
    return pipe.step_s + step.tail_s + out["optimizer_s"], out, pipe


def _grad_reduce_dtype(profile: Any, graph: Any) -> str:
    """The dtype a stack reduce-scatters (and all-reduces) gradients in: the profile's ``grad_reduce_dtype``;
    under ``xla-spmd`` the graph's compute dtype, whatever the parameters' dtype (MaxText casts each weight to
    the compute dtype before its dot, ``DenseGeneral``: the weight gradient is a dot in that dtype, reduced
    before its cast back to ``weight_dtype``; a plan's ``param_dtype`` changes what is stored, not this)."""
    if profile.stack == "xla-spmd":
        return str(graph.meta.get("dtype", profile.grad_reduce_dtype))
    return profile.grad_reduce_dtype


def _sharded_step_of(profile: Any, plan: Any, system: Any, dev: Any, per_stage: list[Any], compute_s: float,
                     collective_times: Any) -> ShardedStep:
    """:func:`sharded_step` with the bytes, collectives and bandwidth of the plan's first stage."""
    # FSDP2's mesh is the data-parallel and context-parallel ranks together (torchtitan
    # parallelize_llama.py: ``dp_shard_cp``), ``tp`` ranks apart
    return _group_step_of(profile, plan, system, dev, per_stage, compute_s, collective_times,
                          plan.dp * plan.cp)[0]


def _fp8_gathered_numel(plan: Any, sgs: list[Any]) -> float:
    """Parameters FSDP2 gathers 1 byte each under ``plan.fsdp_fp8_all_gather`` (torchao's fp8 all-gather: the fp8
    linear weights, :func:`workloads.precision.fp8_weight_numel`); 0 without it. The gathered bytes are
    what the all-gather moves and the copy-out copies; the gradients' reduce-scatter keeps the compute dtype's."""
    if not getattr(plan, "fsdp_fp8_all_gather", False):
        return 0.0
    from workloads.precision import fp8_weight_numel

    return sum(sg.graph.memo("fp8_weight_numel", lambda g=sg.graph: fp8_weight_numel(g)) for sg in sgs)


def _group_step_of(profile: Any, plan: Any, system: Any, dev: Any, per_stage: list[Any], compute_s: float,
                   collective_times: Any, group: int) -> tuple[ShardedStep, float, float, int]:
    """:func:`sharded_step` over FSDP groups of ``group`` ranks (``tp`` ranks apart) with the bytes,
    collectives and bandwidth of the plan's first stage; with the gradient bytes, the reduce dtype's
    scale over the parameters' dtype and the step's units (layers + 1)."""
    from workloads.dtypes import dtype_bytes
    from workloads.ir import Role

    sgs = [sg for sg, _ in per_stage[0]]
    g0 = sgs[0].graph
    # the gradients are one per trainable parameter in the compute dtype: the bytes FSDP2 gathers under
    # MixedPrecisionPolicy(param_dtype=bf16), which casts the fp32 shard in the copy-in before the all-gather
    grads = sum(float(sg.graph.role_bytes(Role.GRADIENT)) for sg in sgs)
    param = dtype_bytes(str(g0.meta.get("dtype") or "bf16"))  # fp8_e4m3 graphs: 1 byte
    scale = dtype_bytes(_grad_reduce_dtype(profile, g0), param) / param
    gathered = grads - (param - 1.0) * _fp8_gathered_numel(plan, sgs)
    coll = collective_times([("all_gather", gathered), ("reduce_scatter", grads)], group, system, plan.tp)
    layers = sum(sg.layers[1] - sg.layers[0] for sg in sgs)
    units = max(1, layers) + 1
    bw = float(dev.main_memory.read_bandwidth_bytes_per_s) * float(dev.efficiency.dram_bandwidth_fraction)
    step = sharded_step(profile.stack, weight_bytes=gathered, units=units, microbatches=plan.microbatches,
                        compute_s=compute_s, gather_once_s=coll[("all_gather", gathered)],
                        reduce_once_s=coll[("reduce_scatter", grads)], reduce_scale=scale, copy_bytes_per_s=bw,
                        overlap=profile.collective_overlap, reduce_overlap=profile.reduce_overlap)
    if profile.stack == "xla-spmd" and profile.collective_overlap:  # the TensorCore's HBM and VPU, shared
        vec = float(dev.compute.vector_flops_per_s.get("fp32", 0.0)) * float(dev.efficiency.vector_peak_fraction)
        # serial reductions overlap no compute: neither their HBM traffic nor their sums slow it
        step = replace(step, contention_s=_overlap_contention_s(
            per_stage, plan.microbatches, step, compute_s, bw, grads, group, coll[("all_gather", grads)],
            coll[("reduce_scatter", grads)], reduce_overlap=profile.reduce_overlap),
            vpu_reduce_s=plan.microbatches * vpu_reduce_s(grads / param, group, vec) * _hidden_share(step)
            if vec > 0 and profile.reduce_overlap else 0.0)
    return step, grads, scale, units


def pipelined_reduce_exposed(reduce_s: float, units: int, backward_s: float) -> float:
    """Seconds of a data-parallel all-reduce that the backward pass cannot hide when XLA pipelines it
    across the iterations of the scanned layers (each layer's all-reduce started in its backward
    iteration and finished during the next ones): the last unit's share, which has no backward left
    behind it, plus whatever the rest needs beyond the backward pass.

    >>> pipelined_reduce_exposed(0.4, 4, 1.0)   # 0.1 after the loop; 0.3 hidden behind 1.0 s
    0.1
    >>> round(pipelined_reduce_exposed(4.0, 4, 1.0), 6)   # 1.0 + the 2.0 s backlog
    3.0
    """
    if units < 1:
        raise ValueError(f"units: got {units}; expected 1 or more")
    last = reduce_s / units
    return last + max(0.0, reduce_s - last - backward_s)


#: HBM bytes a chip reads or writes per byte a ring collective delivers to it (:func:`hbm_contention_s`): an
#: all-gather writes each received shard to HBM and reads it again to send it on (2); a reduce-scatter reads its
#: own partial chunk, writes the partial sum and reads that sum to send it on (3; the received chunk is counted as
#: added on chip, as it streams in). A MaxText layer's gathered weights (2.0 GB for the 64B) are far beyond the
#: TensorCore's VMEM (128 MiB on v5e; "How to Think About TPUs", jax-ml/scaling-book tpus.md @ 0819a7d: "Data in
#: HBM needs to be copied into VMEM before the TensorCore can do any computation with it"), so they pass through HBM.
COLLECTIVE_HBM_PASSES: dict[str, float] = {"all_gather": 2.0, "reduce_scatter": 3.0}


def hbm_contention_s(ops: Sequence[tuple[float, float]], windows: Sequence[tuple[float, float]]) -> float:
    """Seconds that compute ops lose to collectives overlapping them on the same HBM.

    ``ops``: each compute op's (work seconds, HBM seconds): its standalone time less its fixed overhead, and
    what its HBM traffic takes at the full rate. ``windows``: per collective, (the fraction of every op's time it
    overlaps, its HBM demand as a fraction of the rate: bytes it reads and writes over its own time and the
    rate). While a collective streams ``phi`` of the bandwidth, an op keeps the max-min fair share of it
    (:func:`simulator.engines.contention.share`: equal shares unless one needs less), ``max(1 - phi, 1/2)``, so
    its HBM part takes ``hbm_s / share``; it is slowed by what that exceeds its work. A GEMM whose HBM time fits
    in that share of its work (one far above the ridge point) loses nothing; a memory-bound fusion loses
    ``hbm_s (1 / share - 1)`` of each second overlapped.

    >>> round(hbm_contention_s([(1.0, 1.0), (2.0, 0.5)], [(0.5, 0.25)]), 6)  # the copy at 3/4; the GEMM unslowed
    0.166667
    >>> round(hbm_contention_s([(1.0, 1.0)], [(0.2, 0.9), (0.1, 0.25)]), 6)  # 0.2 x (2 - 1) + 0.1 x (4/3 - 1)
    0.233333
    """
    extra = 0.0
    for frac, phi in windows:
        if frac <= 0.0 or phi <= 0.0:
            continue
        avail = max(1.0 - phi, 0.5)
        extra += frac * sum(max(0.0, h / avail - w) for w, h in ops)
    return extra


def vpu_reduce_s(elements: float, group: int, vector_flops_per_s: float) -> float:
    """Seconds a TensorCore's vector unit spends adding one reduce-scatter over ``group`` ranks of ``elements``
    gradient values: a ring step adds each received partial chunk to the local one, ``(group - 1) / group`` of the
    elements, one addition each. On a TPU the sums run on the TensorCore's VPU ("Reductions (sums) are also
    performed here", jax-ml/scaling-book tpus.md @ 0819a7d), and with ``xla_tpu_enable_async_collective_fusion``
    the collective's steps run inside the compute fusions scheduled between its start and done ("overlap of
    compute and communication on a single TensorCore", MaxText src/maxtext/configs/README.md @ e591f30): the
    additions take the cycles of the core whose compute hides the transfer.

    >>> round(vpu_reduce_s(1e9, 4, 6e12) * 1e3, 6)   # 0.75e9 additions at 6 TFLOP/s
    0.125
    """
    if group < 2 or elements <= 0.0:
        return 0.0
    if vector_flops_per_s <= 0.0:
        raise ValueError(f"vector_flops_per_s: got {vector_flops_per_s}; expected a positive rate")
    return elements * (group - 1) / group / vector_flops_per_s


#: Op kinds that are communication: :data:`simulator.parallel.compose.COMMUNICATION_KINDS` (which imports this
#: module), the same set.
_COMMUNICATION_KINDS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send",
                                  "recv"})


def _compute_ops(per_stage: list[Any], bw: float) -> list[tuple[float, float]]:
    """(work seconds, HBM seconds) of the first stage's compute ops, one microbatch: every record but the
    collectives and the optimizer update (which runs after the backward, beside no FSDP collective)."""
    ops = []
    for _, gc in per_stage[0]:
        for r in gc.report.records:
            if r.kind in _COMMUNICATION_KINDS or r.group == "optimizer" or r.group.startswith("optimizer."):
                continue
            hbm = r.memory_s if not getattr(r, "memory_level", "") else r.dram_bytes / bw
            ops.append((max(0.0, r.time_s - r.overhead_s), hbm))
    return ops


def _hidden_share(step: ShardedStep) -> float:
    """The share of a sharded step's collective seconds hidden behind compute (``(busy - exposed) / busy``): the
    exposed part already counts in ``exposed_s``, so only the hidden part adds its reductions to the TensorCore.

    >>> _hidden_share(ShardedStep(copy_s=0.0, gather_s=3.0, reduce_s=1.0, exposed_s=1.0))
    0.75
    """
    busy = step.gather_s + step.reduce_s
    return max(0.0, busy - step.exposed_s) / busy if busy > 0.0 else 0.0


def _overlap_contention_s(per_stage: list[Any], microbatches: int, step: ShardedStep, compute_s: float, bw: float,
                          grads: float, group: int, gather_once_s: float, reduce_once_s: float,
                          reduce_overlap: bool = True) -> float:
    """:func:`hbm_contention_s` of a sharded step's hidden all-gathers and reduce-scatters (``group`` ranks,
    ``grads`` bytes gathered) over its compute: each overlaps the share of the compute its hidden seconds cover
    (the hidden time split between the two by their seconds), at its HBM demand
    (:data:`COLLECTIVE_HBM_PASSES` x the ``(group - 1) / group`` of the bytes a chip receives, over the
    collective's time and ``bw``). The reduce-scatter's demand is the same in any reduce dtype (bytes and time
    scale alike). Without ``reduce_overlap`` the reductions run serial and every hidden second is a gather's."""
    busy = step.gather_s + step.reduce_s if reduce_overlap else step.gather_s
    hidden = busy - (step.exposed_s if reduce_overlap else step.exposed_s - step.reduce_s)
    if hidden <= 0.0 or compute_s <= 0.0 or group < 2 or bw <= 0.0:
        return 0.0
    recv = grads * (group - 1) / group
    phi_g = COLLECTIVE_HBM_PASSES["all_gather"] * recv / (gather_once_s * bw) if gather_once_s > 0 else 0.0
    phi_r = COLLECTIVE_HBM_PASSES["reduce_scatter"] * recv / (reduce_once_s * bw) if reduce_once_s > 0 else 0.0
    cover = min(1.0, hidden / compute_s)
    windows = [(cover * step.gather_s / busy, phi_g), (cover * step.reduce_s / busy if reduce_overlap else 0.0, phi_r)]
    return microbatches * hbm_contention_s(_compute_ops(per_stage, bw), windows)


def _replicated_shard_step_of(profile: Any, plan: Any, system: Any, dev: Any, per_stage: list[Any], compute_s: float,
                              collective_times: Any) -> ShardedStep:
    """The tail of a MaxText step whose FSDP groups (``plan.shard_group`` chips, ``tp`` apart) are
    replicated ``dp x cp / shard_group`` times: ``ici_fsdp_parallelism`` inside a slice and
    ``dcn_data_parallelism`` across slices (``tpu-...xN``), or ``ici_data_parallelism``.

    MaxText shards the parameters over ``fsdp`` only (the ``data`` axis replicates them, base.yml
    ``logical_axis_rules`` @ 76bd53b0f), so the all-gathers and the reduce-scatters stay inside the
    group; XLA then all-reduces each chip's gradient shard across the replicas ("Reduce Scatter grads
    on fast network -> All Reduce across slow", MaxText docs/guides/optimization/sharding.md,
    'DP Arithmetic Intensity (Hierarchical)'), in the reduce-scatter's dtype. With
    ``xla_tpu_enable_data_parallel_all_reduce_opt`` and ``xla_tpu_data_parallel_opt_different_sized_ops``
    (set by every 2023 v5e/v5p script; "optimize DCN all-reduces used for data parallel sharding",
    "pipelining of data parallel ops across multiple iterations", MaxText benchmarks/xla_flags_library.py)
    those all-reduces are pipelined across the backward scan (:func:`pipelined_reduce_exposed`); the
    data-centre network and the ICI are separate links, so their exposed parts add. Under a stack without
    ``collective_overlap`` (``maxtext-serial``: no collective overlaps compute) the all-reduces run
    after the backward, exposed in full.
    """
    group = int(plan.shard_group)
    replicas = plan.dp * plan.cp // group
    inner, grads, scale, units = _group_step_of(profile, plan, system, dev, per_stage, compute_s,
                                                collective_times, group)
    shard = grads * scale / group
    ar_once = collective_times([("all_reduce", shard)], replicas, system, plan.tp * group)[("all_reduce", shard)]
    backward_s = plan.microbatches * sum(gc.split[1] for _, gc in per_stage[0])
    ar = plan.microbatches * ar_once
    ar_exposed = pipelined_reduce_exposed(ar, units, backward_s) if profile.collective_overlap else ar
    return ShardedStep(copy_s=inner.copy_s, gather_s=inner.gather_s, reduce_s=inner.reduce_s + ar,
                       exposed_s=inner.exposed_s + ar_exposed, replicas_s=ar, replicas_exposed_s=ar_exposed,
                       contention_s=inner.contention_s, vpu_reduce_s=inner.vpu_reduce_s)
