"""Compose per-device stage reports into a whole parallel step: iteration time, bubble, exposed
communication, memory per device, MFU, and for inference a whole request (TTFT, TPOT, tokens/s).

The graph of each pipeline stage (one device's work, collectives included: see
:mod:`workloads.parallel`) is costed by the analytical engine on the system; this module adds what
no single graph holds: the pipeline schedule (:mod:`simulator.parallel.schedule`), data-parallel
gradient synchronisation overlapped with the backward pass, the once-per-step optimizer update,
ZeRO / FSDP sharding of weights, gradients and optimizer state, and the activations each stage keeps
for the microbatches in flight.

Modelling choices (stated, not fitted):

* Tensor-parallel collectives and pipeline sends are on the critical path (Megatron-LM runs them on
  the compute stream); the data-parallel gradient all-reduce (reduce-scatter with ZeRO >= 1) runs
  in buckets of :data:`DDP_BUCKET_BYTES` on its own stream while the backward pass of the last
  microbatch runs: what exceeds that backward time, and at least the last bucket, is exposed
  (closed form). ``engine='des'`` simulates the step instead: sends on the links between stages,
  each bucket released when the backward has produced it (:mod:`simulator.parallel.pipeline_des`);
  a pipelined FSDP2 stage's accumulation and exposed float32 reduce-scatter are priced by both
  engines from :func:`_pipelined_fsdp`.
* With ZeRO >= 1 (Megatron's distributed optimizer) each rank updates ``1/dp`` of the parameters
  and all-gathers them afterwards; with ZeRO-3 / FSDP the parameters are also all-gathered before
  each forward and backward (exposed here: no prefetch model yet).
* Memory per device: the stage graph's weights, gradients and optimizer state divided by ``dp``
  as the ZeRO stage shards them, plus the activations one microbatch stashes for its backward
  pass times the microbatches in flight, plus the working set of one microbatch.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hwmodels.spec import DeviceSpec, SystemSpec
from simulator.parallel.schedule import PipelineTime, pipeline_time
from workloads.ir import GraphError, OpGraph, Role
from workloads.parallel import ParallelPlan, PlanError, StageGraph, plan_graphs
from workloads.precision import fp8_weight_numel as _fp8_weight_numel
from workloads.precision import fp8_weight_units as _fp8_weight_units
from workloads.precision import fp8_weights as _fp8_weights

__all__ = ["ParallelResult", "StageResult", "evaluate_plan", "generate_request", "DDP_BUCKET_BYTES",
           "DDP_FIRST_BUCKET_BYTES", "COMMUNICATION_KINDS"]

logger = logging.getLogger(__name__)

#: PyTorch DistributedDataParallel's default gradient bucket (``bucket_cap_mb=25``, torch.nn.parallel
#: DistributedDataParallel documentation).
DDP_BUCKET_BYTES = 25 * 2**20
#: ... whose first bucket is capped at 1 MiB so that the first all-reduce starts early
#: (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``, used by ``_compute_bucket_assignment_by_size``
#: in torch/nn/parallel/distributed.py: "Experiments showed 1MB is a reasonable value").
DDP_FIRST_BUCKET_BYTES = 2**20
#: Op kinds that are communication (the rest of a stage's time is computation).
COMMUNICATION_KINDS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send",
                                 "recv"})


@dataclass(frozen=True)
class StageResult:
    """One device of one pipeline stage: per-microbatch times and memory; ``optimizer_s`` is the device's
    update once a step (its shard's under ZeRO and FSDP, as the step's ``breakdown['optimizer_s']`` counts it)."""

    stage: int
    layers: tuple[tuple[int, int], ...]
    forward_s: float
    backward_s: float
    optimizer_s: float
    communication_s: float
    flops: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_state_bytes: float
    activations_bytes: float
    kv_cache_bytes: float
    in_flight: float
    buffers_bytes: float = 0.0
    reserve_bytes: float = 0.0
    host_bytes: float = 0.0
    #: (component, bytes) pairs of :func:`_stage_memory`
    memory_parts: tuple[tuple[str, float], ...] = ()

    @property
    def memory_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_state_bytes + self.activations_bytes
                + self.kv_cache_bytes + self.buffers_bytes + self.reserve_bytes)

    def memory_breakdown(self) -> dict[str, float]:
        """Bytes by component (parameters, gradients, optimizer, activations, kv_cache, buffers and
        each buffer, reserve, total, allocator_reserved, offloaded_to_host)."""
        return dict(self.memory_parts)

    def to_json(self) -> dict[str, Any]:
        out = {k: (list(map(list, v)) if k == "layers" else v) for k, v in self.__dict__.items() if k != "memory_parts"}
        out["memory_bytes"] = self.memory_bytes
        # the names the report's memory block uses: runtime buffers and the allocator's reserve apart
        out["runtime_buffers_bytes"] = self.buffers_bytes
        out["allocator_reserve_bytes"] = self.reserve_bytes
        out["memory_breakdown"] = self.memory_breakdown()
        return out


@dataclass(frozen=True)
class ParallelResult:
    """A parallel step (training iteration or inference step / request) and where its time goes."""

    model: str
    hardware: str
    plan: ParallelPlan
    phase: str
    latency_s: float
    breakdown: dict[str, float]
    stages: tuple[StageResult, ...]
    memory_capacity_bytes: float
    model_flops: float
    peak_flops_per_s: float
    tokens: float
    pipeline: PipelineTime | None = None
    extra: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    engine: str = "analytical"
    reports: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    #: per report: (stage, its layers, the layers its graph was built for)
    report_layers: tuple[tuple[int, tuple[int, int], tuple[int, int]], ...] = field(default=(), compare=False,
                                                                                   repr=False)
    #: per report: how many times one device runs it in the step (default: the microbatches); a
    #: request runs its prefill once and a decode step output_len - 1 times
    report_repeats: tuple[float, ...] = field(default=(), compare=False, repr=False)

    @property
    def memory_per_device_bytes(self) -> float:
        """The worst device's resident bytes."""
        return max(s.memory_bytes for s in self.stages)

    @property
    def allocator_reserved_per_device_bytes(self) -> float:
        """The most any device's caching allocator holds reserved (``torch.cuda.max_memory_reserved()``): each
        stage's ``allocator_reserved`` (its total less the CUDA context and NCCL's own allocations, which the
        allocator does not see); the total where a stage states none (a TPU's)."""
        return max(dict(s.memory_parts).get("allocator_reserved", s.memory_bytes) for s in self.stages)

    @property
    def worst_stage(self) -> int:
        return max(self.stages, key=lambda s: s.memory_bytes).stage

    @property
    def fits_in_memory(self) -> bool:
        return self.memory_per_device_bytes <= self.memory_capacity_bytes

    @property
    def model_flops_per_s_per_device(self) -> float:
        return self.model_flops / self.latency_s / self.plan.devices if self.latency_s > 0 else 0.0

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: model FLOPs (no recomputation) per second per device over its peak."""
        return self.model_flops_per_s_per_device / self.peak_flops_per_s if self.peak_flops_per_s else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.latency_s if self.latency_s > 0 else 0.0

    def to_cost_report(self, provenance: Mapping[str, Any] | None = None) -> Any:
        """The same prediction as a :class:`~simulator.report.CostReport` (the engines' contract).

        ``records``: one device's ops of each pipeline stage (names prefixed ``stage<k>/`` when
        there are several stages). ``totals``: the whole step on every device: latency the step's,
        energy the sum over devices of each op's dynamic energy times its repetitions (microbatches,
        data-parallel replicas, tensor-parallel ranks) plus every device's static power over the
        step. ``memory``: the worst device. ``parallel``: :meth:`to_json`.
        """
        from simulator.report import CostReport, MemoryCheck, Totals

        m = self.plan.microbatches if self.phase == "train" else 1
        ranks = self.plan.tp * self.plan.cp * self.plan.dp  # devices running each stage report
        recs: list[Any] = []
        dyn = flops = dram = l2 = smem = 0.0
        kernels = ops = 0
        static_w = 0.0
        multi = len(self.reports) > 1
        shard = self._update_shares()
        for k, rep in enumerate(self.reports):
            stage, layers, built = self.report_layers[k] if k < len(self.report_layers) else (0, (0, 0), (0, 0))
            shift = layers[0] - built[0]
            for r in rep.records:
                name = _shift_layers(r.name, shift) if shift else r.name
                group = _shift_layers(r.group, shift) if shift else r.group
                recs.append(replace(r, name=f"stage{stage}/{name}", group=group) if multi else r)
            t = rep.totals
            runs = self.report_repeats[k] if k < len(self.report_repeats) else m
            once = [r for r in rep.records if _is_optimizer(r)]
            # the optimizer updates once per step, each rank its shard (ZeRO, FSDP: ``shard``, as the step's time
            # counts it); everything else runs once per microbatch (or step)
            f = shard.get(stage, 1.0)

            def per_step(total: float, part: float) -> float:
                return ranks * ((total - part) * runs + part * f)  # noqa: B023 - used within the iteration

            dyn += per_step(t.dynamic_energy_j, sum(r.dynamic_energy_j for r in once))
            flops += per_step(t.flops, sum(r.flops for r in once))
            dram += per_step(t.dram_bytes, sum(r.dram_bytes for r in once))
            l2 += per_step(t.l2_bytes, sum(r.l2_bytes for r in once))
            smem += per_step(t.smem_bytes, sum(r.smem_bytes for r in once))
            o_kernels = sum(r.kernels for r in once)
            kernels += int(ranks * ((t.kernels - o_kernels) * runs + o_kernels))
            ops += t.ops
            if t.latency_s > 0:
                static_w = max(static_w, t.static_energy_j / t.latency_s)
        lat = self.latency_s
        static = static_w * self.plan.devices * lat
        energy = dyn + static
        peak = self.peak_flops_per_s * self.plan.devices
        totals = Totals(latency_s=lat, energy_j=energy, dynamic_energy_j=dyn, static_energy_j=static,
                        avg_power_w=energy / lat if lat > 0 else 0.0, flops=flops,
                        achieved_flops_per_s=flops / lat if lat > 0 else 0.0, peak_flops_per_s=peak,
                        mfu=self.mfu, dram_bytes=dram, l2_bytes=l2, smem_bytes=smem, kernels=int(kernels), ops=ops)
        worst = max(self.stages, key=lambda s: s.memory_bytes)
        mem = MemoryCheck(weights_bytes=int(worst.weights_bytes), activations_bytes=int(worst.activations_bytes),
                          kv_cache_bytes=int(worst.kv_cache_bytes), gradients_bytes=int(worst.gradients_bytes),
                          optimizer_state_bytes=int(worst.optimizer_state_bytes),
                          capacity_bytes=self.memory_capacity_bytes, device=f"stage {worst.stage}",
                          buffers_bytes=int(worst.buffers_bytes + worst.reserve_bytes),
                          allocator_reserve_bytes=int(worst.reserve_bytes))
        prov = dict(provenance or (self.reports[0].provenance if self.reports else {}))
        prov.update({"engine": f"parallel/{self.engine}", "devices": self.plan.devices, "plan": self.plan.to_json()})
        return CostReport(model=self.model, hardware=self.hardware, records=tuple(recs), totals=totals, memory=mem,
                          warnings=self.warnings, provenance=prov, parallel=self.to_json())

    def _update_shares(self) -> dict[int, float]:
        """Per pipeline stage, the share of its graphs' optimizer update one device runs: the stage's
        ``optimizer_s`` (its shard's under ZeRO and FSDP) over the graphs' whole update; none without sharding."""
        if not self.plan.zero:
            return {}
        whole: dict[int, float] = {}
        for k, rep in enumerate(self.reports):
            stage = self.report_layers[k][0] if k < len(self.report_layers) else 0
            whole[stage] = whole.get(stage, 0.0) + sum(r.time_s for r in rep.records if _is_optimizer(r))
        by_stage = {st.stage: st.optimizer_s for st in self.stages}
        return {s: by_stage[s] / w for s, w in whole.items() if w > 0.0 and s in by_stage}

    def memory_message(self) -> str:
        need, have = self.memory_per_device_bytes / 2**30, self.memory_capacity_bytes / 2**30
        verdict = "fits" if self.fits_in_memory else "does not fit"
        return (f"{verdict}: the worst device (stage {self.worst_stage}) needs {need:.2f} GiB of {have:.2f} GiB")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model, "hardware": self.hardware, "phase": self.phase, "engine": self.engine,
            "latency_s": self.latency_s,
            "mfu": self.mfu, "model_flops_per_s_per_device": self.model_flops_per_s_per_device,
            "tokens_per_s": self.tokens_per_s,
            "memory_per_device_bytes": self.memory_per_device_bytes, "fits_in_memory": self.fits_in_memory,
            "memory_breakdown": max(self.stages, key=lambda s: s.memory_bytes).memory_breakdown(),
            "breakdown": dict(self.breakdown), "plan": self.plan.to_json(),
            "stages": [s.to_json() for s in self.stages],
        }
        if self.phase == "train":
            out["iteration_time_s"] = self.latency_s
        elif self.phase == "prefill":
            out["ttft_s"] = self.latency_s
        elif self.phase == "decode":
            out["tpot_s"] = self.latency_s
        if self.pipeline is not None:
            out["bubble_fraction"] = self.pipeline.bubble_fraction
        out.update(self.extra)
        out["warnings"] = list(self.warnings)
        return out


def _check_fits_system(plan: ParallelPlan, system: DeviceSpec | SystemSpec) -> None:
    from simulator.engines.analytical import spec_of

    _, name, count, _ = spec_of(system)
    if plan.devices > count:
        raise PlanError(f"plan: tp x pp x dp x cp = {plan.tp} x {plan.pp} x {plan.dp} x {plan.cp} = {plan.devices} "
                        f"devices; got hardware {name!r} with {count}; expected a system with at least "
                        f"{plan.devices} devices")


_P2P = frozenset({"send", "recv"})


def _is_optimizer(r: Any) -> bool:
    return r.group == "optimizer" or r.group.startswith("optimizer.")


def _split(sg: StageGraph, records: tuple[Any, ...]) -> tuple[float, float, float, float]:
    """(forward, backward, optimizer, communication) seconds of one stage graph's records."""
    fwd = bwd = opt = comm = 0.0
    for i, r in enumerate(records):
        if r.group == "optimizer" or r.group.startswith("optimizer."):
            opt += r.time_s
        elif i < sg.forward_ops:
            fwd += r.time_s
        else:
            bwd += r.time_s
        if r.kind in COMMUNICATION_KINDS:
            comm += r.time_s
    return fwd, bwd, opt, comm


class _GraphCost:
    """What one stage graph costs, computed once however many stages share the graph: the engine's
    report, its (forward, backward, optimizer, communication) split, and (on first use) the bytes
    a microbatch stashes, the graph's FLOPs and its model FLOPs."""

    __slots__ = ("sg", "report", "split", "_stash", "_model_flops", "_links", "_buckets")

    def __init__(self, sg: StageGraph, report: Any, split: tuple[float, float, float, float]) -> None:
        self.sg, self.report, self.split = sg, report, split
        self._stash: tuple[float, float, float] | None = None
        self._model_flops: int | None = None
        self._links: tuple[float, float, float, float] | None = None
        self._buckets: list[tuple[float, float]] | None = None

    def links(self) -> tuple[float, float, float, float]:
        """(forward send, forward receive, backward send, backward receive) seconds of one
        microbatch: the pipeline's point-to-point transfers, as the engine priced them."""
        if self._links is None:
            fs = fr = bs = br = 0.0
            for i, r in enumerate(self.report.records):
                if r.kind not in _P2P or _is_optimizer(r):
                    continue
                fwd = i < self.sg.forward_ops
                if r.kind == "send":
                    fs, bs = (fs + r.time_s, bs) if fwd else (fs, bs + r.time_s)
                else:
                    fr, br = (fr + r.time_s, br) if fwd else (fr, br + r.time_s)
            self._links = (fs, fr, bs, br)
        return self._links

    def bucket_offsets(self) -> list[tuple[float, float]]:
        """(ready_s, bytes) of each gradient bucket of the backward pass, in the order the backward
        fills them. As PyTorch DDP assigns them (``_compute_bucket_assignment_by_size``): gradients
        join the open bucket in the order their ops produce them (DDP uses the reverse parameter
        order to approximate it), and a bucket closes once it holds at least its cap,
        :data:`DDP_FIRST_BUCKET_BYTES` for the first and :data:`DDP_BUCKET_BYTES` after. ``ready_s``
        is the backward's compute time (point-to-point transfers excluded) until the op producing
        the bucket's last gradient has run."""
        if self._buckets is None:
            out: list[tuple[float, float]] = []
            t, filled, ready = 0.0, 0.0, 0.0
            ops = self.sg.graph.ops
            for i in range(self.sg.forward_ops, len(ops)):
                r = self.report.records[i]
                if _is_optimizer(r):
                    continue
                if r.kind not in _P2P:
                    t += r.time_s
                for tn in ops[i].outputs:
                    if tn.role is not Role.GRADIENT:
                        continue
                    filled, ready = filled + float(tn.nbytes), t
                    if filled >= (DDP_FIRST_BUCKET_BYTES if not out else DDP_BUCKET_BYTES):
                        out.append((ready, filled))
                        filled = 0.0
            if filled > 0:
                out.append((ready, filled))
            self._buckets = out
        return self._buckets

    @property
    def flops(self) -> int:
        return self.sg.graph.flops

    def _stash_info(self) -> tuple[float, float, float]:
        if self._stash is None:
            self._stash = _stash_info(self.sg)
        return self._stash

    @property
    def stash_bytes(self) -> float:
        """Bytes of forward activations one microbatch keeps for its backward pass."""
        return self._stash_info()[0]

    @property
    def stash_tensors(self) -> float:
        """How many of them are large blocks for the caching allocator (over 1 MiB)."""
        return self._stash_info()[1]

    @property
    def offloaded_bytes(self) -> float:
        """Bytes of them a recomputation policy keeps in host memory."""
        return self._stash_info()[2]

    @property
    def model_flops(self) -> int:
        """FLOPs of the graph without communication, recomputation or the optimizer update."""
        if self._model_flops is None:
            self._model_flops = sum(op.flops for op in self.sg.graph.ops if op.kind not in COMMUNICATION_KINDS
                                    and "@recompute" not in op.name and op.kind != "optimizer_update")
        return self._model_flops


def _stash_bytes(sg: StageGraph) -> float:
    """Bytes of forward activations one microbatch keeps for its backward pass."""
    return _stash_info(sg)[0]


def _stash_info(sg: StageGraph) -> tuple[float, float, float]:
    """(bytes, large tensors, offloaded bytes) of the forward activations one microbatch keeps for its
    backward pass; offloaded: those the graph's recomputation policy keeps in host memory.

    A view (reshape, split, slice) keeps its base tensor alive, so a view read by the backward pass
    counts its base once, however many views of it are read.
    """
    g = sg.graph
    kept = _stash_kept(sg)
    offloaded = set(g.meta.get("offloaded_activations", ()))
    large = sum(1 for v in kept.values() if v > 2**20)
    return sum(kept.values()), float(large), sum(v for k, v in kept.items() if k in offloaded)


def _stash_kept(sg: StageGraph) -> dict[str, float]:
    """Name -> bytes of the forward tensors (a view's base once) the backward pass reads (kept with the
    stage graph, which never changes: callers only read it)."""
    return sg.graph.memo(f"stash_kept:{sg.forward_ops}", lambda: _stash_walk(sg))


def _stash_walk(sg: StageGraph) -> dict[str, float]:
    """:func:`_stash_kept`, and the keep-mask of every training dropout the forward runs and the backward
    does not re-run (``NAME:dropout_mask``; :func:`simulator.report.memory.dropout_mask_ranges`)."""
    g = sg.graph
    fwd = g.ops[: sg.forward_ops]
    fwd_names = {op.name for op in fwd}
    base: dict[str, Any] = {}
    for op in fwd:
        if op.kind in _VIEWS:
            root = base.get(op.inputs[0].name, op.inputs[0])
            for t in op.outputs:
                base[t.name] = root
    kept: dict[str, float] = {}
    for op in g.ops[sg.forward_ops:]:
        for t in op.inputs:
            if t.role is not Role.ACTIVATION:
                continue
            prod = g.producer(t.name)
            if prod is None or prod.name not in fwd_names:
                continue
            root = base.get(t.name, t)
            if root.role is Role.ACTIVATION and g.producer(root.name) is not None:
                kept[root.name] = float(root.nbytes)
    from simulator.report.memory import dropout_mask_ranges

    for a, b, m in dropout_mask_ranges(g):  # a forward dropout's keep-mask its backward reads
        if a < sg.forward_ops <= b:
            kept[f"{g.ops[a].name}:dropout_mask"] = float(m)
    return kept


_VIEWS = frozenset({"reshape", "split", "slice"})


def _collective_times(wanted: Sequence[tuple[str, float]], n: int, system: DeviceSpec | SystemSpec,
                      stride: int = 1, *, pad_to: int = 0) -> dict[tuple[str, float], float]:
    """Times of the distinct (kind, bytes) collectives in ``wanted`` over ``n`` devices ``stride``
    ranks apart, by the engine's collective rule: one graph of independent collectives, one engine
    call (each op's record is what the op alone would cost: no op feeds another, none fuses).

    A reduce-scatter's flat buffer is padded to a multiple of ``pad_to`` elements (0: of ``n``, as
    FSDP2 and XLA pad their shards), so that every rank gets an equal shard whatever the size."""
    out: dict[tuple[str, float], float] = {}
    todo: dict[tuple[str, float], None] = {}  # distinct, in first-asked order
    for key in wanted:
        if n <= 1 or key[1] <= 0:
            out[key] = 0.0
        else:
            todo.setdefault(key)
    if not todo:
        return out
    from simulator.engines.analytical import evaluate
    from workloads.ir import GraphBuilder

    b = GraphBuilder("dp_sync", dtype="bf16")
    for k, (kind, nbytes) in enumerate(todo):
        numel = max(1, int(nbytes // 2))
        if kind == "all_gather":
            numel = max(1, numel // n)
        elif kind == "reduce_scatter":  # padded to a multiple of the group (or of pad_to)
            numel = -(-numel // (pad_to or n)) * (pad_to or n)
        x = b.input(f"grads{k}", (numel,))
        b.op(kind, [x], name=f"sync{k}", group_size=n, stride=stride)
    with _no_graph_memory_verdicts():  # the collectives' buffers, not a device's memory
        recs = [r for r in evaluate(b.build(), system).records if r.name.startswith("sync")]
    for key, r in zip(todo, recs, strict=True):
        out[key] = float(r.time_s)
    return out


#: Stage graphs kept between calls (:func:`stage_graphs`): at most this many (model, plan, shape) keys,
#: least recently used dropped first.
STAGE_GRAPH_ENTRIES = 8
_STAGE_GRAPHS: dict[tuple[Any, ...], list[StageGraph]] = {}


def stage_graphs(model: Any, plan: ParallelPlan, **shape: Any) -> list[StageGraph]:
    """:func:`workloads.parallel.plan_graphs` of ``model`` under ``plan`` (``shape``: its keyword
    arguments), kept between calls: graphs are immutable, so a repeated question (a sweep, a tuner, a
    study) reuses them with what they keep (digest, engine walk, peak memory). A model given as a
    file is kept under its path, size and modification time; one that cannot be a key is not kept."""
    ident: Any = model
    if isinstance(model, (str, os.PathLike)) and Path(model).is_file():
        st = Path(model).stat()
        ident = (str(Path(model).resolve()), st.st_size, st.st_mtime_ns)
    try:
        key = (ident, plan, tuple(sorted(shape.items())))
        hit = _STAGE_GRAPHS.pop(key, None)
    except TypeError:  # an unhashable model config
        return plan_graphs(model, plan, **shape)
    if hit is None:
        hit = plan_graphs(model, plan, **shape)
    _STAGE_GRAPHS[key] = hit  # most recently used last
    while len(_STAGE_GRAPHS) > STAGE_GRAPH_ENTRIES:
        del _STAGE_GRAPHS[next(iter(_STAGE_GRAPHS))]
    return hit


def clear_stage_graph_cache() -> None:
    """Forget the stage graphs kept between calls (:func:`stage_graphs`); predictions never depend on them."""
    _STAGE_GRAPHS.clear()


def evaluate_plan(model: Any, system: DeviceSpec | SystemSpec, plan: ParallelPlan, options: Any = None, *,
                  phase: str | None = None, train: bool = False, seq: int | None = None,
                  context: int | None = None, dtype: str | None = None, batch: int | None = None,
                  optimizer: str = "adamw", recompute: str = "none", engine: str = "analytical",
                  fp8_linears: str | None = None, framework: str = "", weight_dtype: str | None = None,
                  kv_dtype: str | None = None, gemm_tactic_tokens: int | None = None, split_gate_up: bool = False) -> ParallelResult:
    """Predict one training iteration (``train``) or one inference step of ``model`` under ``plan``.

    Parameters
    ----------
    model
        Zoo transformer name, Hugging Face ``config.json`` path, or ``TransformerConfig``.
    system
        A system (the plan must fit in its devices) or one device (plans of one device only).
    plan
        The parallel plan; ``plan.microbatch``/``plan.global_batch`` set a training step's batch.
    options
        :class:`~simulator.engines.analytical.EvalOptions` for every stage.
    phase, seq, context, dtype, batch, weight_dtype, kv_dtype, gemm_tactic_tokens, split_gate_up
        Inference phase (``prefill``, ``decode``, ``forward``), sequence, KV context, dtype, and
        sequences per step on each data-parallel replica (inference; a training step's is the plan's);
        serving precision (:func:`workloads.precision.apply_precision`; None: 16-bit); a TensorRT
        engine's GEMM tactic token count and unfused gate/up GEMMs (:func:`_with_engine_build`).
    optimizer, recompute, fp8_linears
        Training: the optimizer, recomputation policy (:data:`workloads.recompute.POLICIES`) and fp8
        linears' scaling recipe (:data:`workloads.precision.FP8_RECIPES`; None: 16-bit).
    framework
        A :mod:`workloads.frameworks` profile: every stage's graph is built with it (costing: ``options``),
        and a training stack's sharding and overlap apply to the step
        (:func:`simulator.parallel.stacks.apply_stack`).
    engine
        ``analytical``: the pipeline schedule in closed form (:func:`~simulator.parallel.schedule.pipeline_time`);
        ``des``: the step simulated (:func:`~simulator.parallel.pipeline_des.simulate_step`): devices
        and links as resources, the pipeline's sends on the links, the data-parallel gradient buckets
        on their own stream, the update after the last bucket; ``extra['closed_form_latency_s']``
        keeps the closed form's answer. Stage times come from the analytical engine in both.
    """
    from simulator.engines.analytical import EvalOptions, evaluate, spec_of

    _check_engine(engine, plan)
    _check_fits_system(plan, system)
    _check_step_inputs(fp8_linears, system, train, batch, plan, phase)
    opts = options or EvalOptions()
    opts = replace(opts, plan=None) if getattr(opts, "plan", None) is not None else opts
    recipe = {k: v for k, v in dict(fp8_linears=fp8_linears, framework=framework, weight_dtype=weight_dtype,
                                    kv_dtype=kv_dtype).items() if v}
    graphs = stage_graphs(model, plan, phase=phase or "prefill", seq=seq, context=context, dtype=dtype,
                          train=train, optimizer=optimizer, recompute=recompute, batch=batch, **recipe)
    graphs = _with_engine_build(graphs, gemm_tactic_tokens, split_gate_up, train)
    dev = spec_of(system)[0]
    unique, costs, per_stage = _cost_graphs(graphs, system, opts, evaluate, plan.pp, plan.p2p_host_sync)
    reports = [c.report for c in costs]
    m = plan.microbatches if train else 1
    fwd, bwd, opt, comm = _stage_sums(per_stage)
    warnings = _step_warnings(reports, plan, train)
    phase_name = "train" if train else (phase or str(graphs[0].graph.meta.get("phase", "prefill")))
    pipe: PipelineTime | None = None
    if train:
        latency, pipe, breakdown, extra, tokens, opt = _train_step_time(per_stage, unique, plan, system, engine, m,
                                                                        plan.interleave, fwd, bwd, opt, comm, graphs,
                                                                        seq, framework)
        latency, breakdown, opt, pipe = _stack_step(framework, engine, plan, system, pipe, per_stage, latency,
                                                    breakdown, opt)
    else:
        latency, breakdown, extra, tokens = _inference_step_time(per_stage, plan, engine, fwd, comm, graphs)
    kind = getattr(dev, "kind", "")
    stages = _stage_results(per_stage, plan, train, pipe, fwd, bwd, opt, comm, gpu=kind == "gpu",
                            xla_reserved=float(getattr(dev.memory[0], "reserved_bytes", 0.0)) if kind == "tpu" else None,
                            nccl=_nccl_bytes(plan, system) if kind == "gpu" else None)
    if train and (plan.offload or _policy_offloads(graphs)):  # the host-link time compute does not hide
        latency, breakdown = _with_offload(latency, breakdown, stages, plan, dev, m)
    peak = _peak_flops(dev, graphs[0].graph, bool(getattr(opts, "allow_tf32", False)))
    res = ParallelResult(  # capacity: the runtime's total, not the marketed figure
        model=graphs[0].graph.name, hardware=getattr(system, "name", dev.name), plan=plan, phase=phase_name, latency_s=latency,
        breakdown=breakdown, stages=tuple(stages), memory_capacity_bytes=float(dev.memory[0].usable),
        model_flops=_model_flops(costs, plan, train, m), peak_flops_per_s=peak, tokens=tokens, pipeline=pipe, extra=extra, warnings=tuple(warnings), engine=engine,
        report_layers=tuple((sg.stage, sg.layers, sg.built_layers) for sg in graphs), reports=tuple(reports))
    if not res.fits_in_memory:
        res = replace(res, warnings=(*res.warnings, res.memory_message()))
    return res


def _step_warnings(reports: list[Any], plan: ParallelPlan, train: bool) -> list[str]:
    """The stage reports' warnings but their memory verdicts (the step's own comes later), with what an
    offloaded optimizer's step leaves unpriced (:data:`_HOST_OPTIMIZER_NOTE`)."""
    out = _merged_counts({w for rep in reports for w in rep.warnings if "does not fit" not in w})
    return sorted(out | ({_HOST_OPTIMIZER_NOTE} if train and {"optimizer", "params"} & set(plan.offload) else set()))


_COUNTED = re.compile(r"^(\d+) (op\(s\) .*)$")


def _merged_counts(warnings: set[str]) -> set[str]:
    """``warnings`` with the stage graphs' counted warnings of one kind ("17 op(s) power-capped at TDP 700 W: ...",
    "28 op(s) power-capped ...") given once, with the range of their counts per stage graph ("17-28 op(s) per stage
    power-capped ..."); one count stays as it was."""
    counts: dict[str, list[int]] = {}
    out: set[str] = set()
    for w in warnings:
        m = _COUNTED.match(w)
        if m:
            counts.setdefault(m.group(2), []).append(int(m.group(1)))
        else:
            out.add(w)
    for rest, ns in counts.items():
        lo, hi = min(ns), max(ns)
        out.add(f"{lo} {rest}" if lo == hi else f"{lo}-{hi} {rest.replace('op(s) ', 'op(s) per stage ', 1)}")
    return out


def _with_engine_build(graphs: list[StageGraph], tokens: int | None, split_gate_up: bool, train: bool
                       ) -> list[StageGraph]:
    """``graphs`` (inference) as a TensorRT-LLM v0.5 engine builds them: with ``split_gate_up`` every fused gate/up
    projection run as two GEMMs (no ``--use_fused_mlp``: :func:`workloads.frameworks.split_gated_mlp`, each rank's
    shard halves), then with ``tokens`` every linear-layer GEMM of more than one row run at the kernel picked for
    ``tokens`` rows, the tactics TensorRT timed at the context profile's opt shape
    (:func:`workloads.frameworks.gemm_tactics_at`; each rank's own shard shapes, the same token count). Stages that
    shared one graph object still share one; neither switch: ``graphs`` unchanged."""
    from workloads.frameworks import gemm_tactics_at, split_gated_mlp

    if not tokens and not split_gate_up:
        return graphs
    if train:
        raise PlanError("gemm_tactic_tokens, split_gate_up: a TensorRT engine's build applies to inference; "
                        "got train=True")
    done: dict[int, OpGraph] = {}
    try:
        for sg in graphs:
            if id(sg.graph) not in done:
                g = split_gated_mlp(sg.graph) if split_gate_up else sg.graph
                done[id(sg.graph)] = gemm_tactics_at(g, tokens) if tokens else g
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    return [replace(sg, graph=done[id(sg.graph)], forward_ops=sg.forward_ops + len(done[id(sg.graph)].ops)
                    - len(sg.graph.ops)) for sg in graphs]


def _cost_graphs(graphs: list[StageGraph], system: Any, opts: Any, evaluate: Any, p: int, p2p_sync: bool = False
                 ) -> tuple[dict[int, _GraphCost], list[_GraphCost], list[list[tuple[StageGraph, _GraphCost]]]]:
    """(costs by graph object, cost of each stage graph, each pipeline stage's graphs and costs); ``p2p_sync``:
    every pipeline send ends a host-sync interval (``ParallelPlan.p2p_host_sync``).

    Stages of one shape share one graph object (plan_graphs builds each shape once): everything that
    depends only on the graph is computed once per object and reused by every stage."""
    unique: dict[int, _GraphCost] = {}
    for sg in graphs:
        if id(sg.graph) not in unique:
            with _no_graph_memory_verdicts():
                rep = evaluate(sg.graph, system, opts)
            unique[id(sg.graph)] = _GraphCost(sg, rep, _with_host_syncs(sg, rep.records, _split(sg, rep.records),
                                                                        system, opts, p2p_sync))
    costs = [unique[id(sg.graph)] for sg in graphs]
    per_stage: list[list[tuple[StageGraph, _GraphCost]]] = [[] for _ in range(p)]
    for sg, gc in zip(graphs, costs, strict=True):
        per_stage[sg.stage].append((sg, gc))
    return unique, costs, per_stage


class _DropGraphMemoryVerdicts(logging.Filter):
    """Drops the engine's memory verdict of one stage graph ("does not fit on ...: needs ... optimizer state ..."):
    the graph holds unsharded state; the plan's own verdict (:meth:`ParallelResult.memory_message`) is the one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "does not fit" not in record.getMessage()


@contextmanager
def _no_graph_memory_verdicts() -> Iterator[None]:
    """While a stage graph is evaluated, the analytical engine logs no memory verdict of its own (the stage
    reports keep it; :func:`_step_warnings` leaves it out of the step's)."""
    engine_log = logging.getLogger("simulator.engines.analytical")
    drop = _DropGraphMemoryVerdicts()
    engine_log.addFilter(drop)
    try:
        yield
    finally:
        engine_log.removeFilter(drop)


def _with_host_syncs(sg: StageGraph, records: tuple[Any, ...], split: tuple[float, float, float, float],
                     system: Any, opts: Any, p2p_sync: bool = False) -> tuple[float, float, float, float]:
    """``split`` with what the graph's host synchronisation points add to its forward and backward passes
    (:mod:`simulator.parallel.host_sync`): the ops' own (``host_sync``) and, with ``p2p_sync``, its pipeline
    sends (:func:`~simulator.parallel.host_sync.pipeline_send_ops`); unchanged without one."""
    from simulator.parallel.host_sync import (
        gemm_call_s,
        host_per_kernel_s,
        host_sync_ops,
        launch_floor_s,
        per_expert_gemm_calls,
        pipeline_send_ops,
        sync_interval_excess,
    )

    syncs = sg.graph.memo("host_sync_ops", lambda: host_sync_ops(sg.graph.ops))  # the graph is immutable
    if p2p_sync:
        syncs = sorted({*syncs, *sg.graph.memo("pipeline_send_ops", lambda: pipeline_send_ops(sg.graph.ops))})
    if not syncs:
        return split
    from simulator.engines.analytical import spec_of

    eff = spec_of(system)[0].efficiency
    extra = sg.graph.memo("host_only_ops", lambda: tuple((_host_op_count(op, "host_ops"),
                                                           _host_op_count(op, "host_ops_after"))
                                                          for op in sg.graph.ops))
    calls = sg.graph.memo("per_expert_gemm_calls", lambda: tuple(per_expert_gemm_calls(op) for op in sg.graph.ops))
    f, b = sync_interval_excess(records, syncs, sg.forward_ops, host_per_kernel_s(eff, opts),
                                float(eff.host_sync_s), skip=_is_optimizer, launch_s=launch_floor_s(eff, opts),
                                host_ops=extra, gemm_calls=calls, gemm_call_s=gemm_call_s(eff, opts))
    return split[0] + f, split[1] + b, split[2], split[3]


def _host_op_count(op: Any, key: str) -> int:
    """The op's ``host_ops`` or ``host_ops_after`` attribute (framework ops it stands for beside its kernels,
    :mod:`simulator.parallel.host_sync`): a non-negative integer, 0 when absent; a located GraphError
    naming the op otherwise.

    >>> from types import SimpleNamespace as NS
    >>> _host_op_count(NS(name="moe.dispatch", kind="moe_dispatch", attrs={"host_ops": 12}), "host_ops")
    12
    >>> _host_op_count(NS(name="moe.dispatch", kind="moe_dispatch", attrs={"host_ops": -1}), "host_ops")
    Traceback (most recent call last):
    ...
    workloads.ir.GraphError: op 'moe.dispatch' (moe_dispatch): host_ops: got -1; expected a non-negative integer
    """
    v = op.attrs.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
        raise GraphError(f"op {op.name!r} ({op.kind}): {key}: got {v!r}; expected a non-negative integer")
    return int(v)


def _host_link_bandwidth(dev: DeviceSpec, plan: ParallelPlan) -> float:
    """Bytes/s of the device's host link (per direction), or a located PlanError when it has none."""
    return host_link_bandwidth(dev, "plan: offload " + (",".join(plan.offload) or POLICY_OFFLOAD))


#: what a ``*_offloaded`` or ``custom`` recomputation policy offloads, as errors name it
POLICY_OFFLOAD = "activations (the recomputation policy's)"


def host_link_bandwidth(dev: DeviceSpec, where: str) -> float:
    """Bytes/s of ``dev``'s host link (per direction); a PlanError located at ``where`` when it has none."""
    for ln in getattr(dev, "links", ()):
        if ln.name == "host" and ln.bandwidth_bytes_per_s > 0:
            return float(ln.bandwidth_bytes_per_s)
    raise PlanError(f"{where}: device {dev.name!r} has no host link; expected a "
                    "device with a [[links]] entry named 'host' (PCIe or NVLink-C2C to host memory)")


#: what an offloaded optimizer's step does not price (docs/training_memory.md, "Other recipe flags")
_HOST_OPTIMIZER_NOTE = ("offload: the optimizer step on the host is not priced: the step counts its host-link "
                        "transfers and the device's optimizer time in its place")


def _policy_offloads(graphs: list[StageGraph]) -> bool:
    """Whether a stage graph's recomputation policy keeps tensors in host memory (MaxText's
    ``*_offloaded`` and ``custom`` policies): their host-link time is priced as ``--offload``'s."""
    return any(sg.graph.meta.get("offloaded_activations") for sg in graphs)


def _with_offload(latency: float, breakdown: dict[str, float], stages: list[StageResult], plan: ParallelPlan,
                  dev: DeviceSpec, m: int) -> tuple[float, dict[str, float]]:
    exposed = _offload_seconds(stages, plan, _host_link_bandwidth(dev, plan), m)
    return latency + exposed, {**breakdown, "offload_exposed_s": exposed}


def _offload_seconds(stages: list[StageResult], plan: ParallelPlan, bw: float, m: int) -> float:
    """Host-link time a step's offloading adds where compute cannot hide it, on the worst stage.

    Offloaded activations go out during a microbatch's forward pass and come back during its
    backward pass (the two directions of the link, each overlapped with that pass, as
    ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` and XLA's host offload stream them); the
    optimizer step of offloaded state needs the gradients out and the updated parameters back
    after the backward pass, not overlapped (the host's optimizer arithmetic is not priced). Offloaded
    parameters (:func:`_host_transfers`) come in before each pass's gathers, beside the returning activations
    in the backward pass, and each microbatch's gradients go out during it, each overlapped with its pass."""
    worst = 0.0
    for st in stages:
        parts = st.memory_breakdown()
        a, p_in, g_out = (parts.get(f"host.{k}", 0.0) / bw
                          for k in ("activations_per_microbatch", "params_per_pass", "grads_per_microbatch"))
        per_mb = max(0.0, max(a, p_in) - st.forward_s) + max(0.0, max(a + p_in, g_out) - st.backward_s)
        worst = max(worst, m * per_mb + parts.get("host.step_transfer", 0.0) / bw)
    return worst


def _check_step_inputs(fp8_linears: str | None, system: Any, train: bool, batch: int | None,
                       plan: ParallelPlan, phase: str | None = None) -> None:
    """The fp8 recipe's device (:func:`_check_fp8_device`), a training step's batch, which is the plan's (a
    different ``batch`` is refused, not ignored), and an inference step's plan without the training-only fields
    (:data:`_TRAINING_ONLY_FIELDS`: one located PlanError naming those set, not a step priced with a
    training pipeline's syncs or a field silently dropped)."""
    _check_fp8_device(fp8_linears, system)
    _check_fp8_all_gather(fp8_linears, plan)
    if phase == "train" and not train:  # had been reported as a training iteration of the forward pass alone
        raise PlanError("phase: got 'train' without train=True, the forward pass of a training step; expected "
                        "train=True (--train) for the whole step, or an inference phase (prefill, decode, forward)")
    if not train:
        _check_inference_plan(plan, phase)
    else:
        _check_stored_dtypes(fp8_linears, plan, system)
    if train and batch is not None and batch != plan.microbatch:
        raise PlanError(f"batch: got {batch} for a training step; a training step's batch is the plan's (microbatch "
                        f"{plan.microbatch}, global_batch {plan.global_batch}); expected batch None, or "
                        "ParallelPlan(microbatch=..., global_batch=...)")


#: Plan fields of a training step only, each with the test that it is set: an inference step left them out
#: without a word (offload params even took the weights off the device for free; the stage exchanges' device
#: syncs are Megatron-Core's training pipeline's and priced a prefill's syncs). The schedule-recipe fields are
#: read by the training step alone too: an inference step passes one batch through the stages in turn
#: (:func:`_inference_step_time`), so no schedule runs (``pipeline_microbatches``), no deferred FSDP sync
#: (``grad_sync_per_step``) and no combined forward-backward pairs (``moe_a2a_overlap``) apply to it; nor do
#: fp8 parameters (``fp8_param``: the training step's fp8 weight cache and distributed-optimizer gather), nor the
#: training batch (``microbatch``, ``global_batch``: an inference step's is ``batch``, 1 when not given)
_TRAINING_ONLY_FIELDS: tuple[tuple[str, Any], ...] = (
    ("p2p_host_sync", lambda p: p.p2p_host_sync), ("recompute_output_copy", lambda p: p.recompute_output_copy),
    ("offload", lambda p: bool(p.offload)), ("zero_stage", lambda p: p.zero_stage > 0), ("fsdp", lambda p: p.fsdp),
    ("grad_reduce_dtype", lambda p: bool(p.grad_reduce_dtype)), ("param_dtype", lambda p: bool(p.param_dtype)),
    ("loss_chunks", lambda p: p.loss_chunks > 1), ("cuda_graph", lambda p: bool(p.cuda_graph)),
    ("moe_rank_capacity_factor", lambda p: p.moe_rank_capacity_factor is not None),
    ("pipeline_microbatches", lambda p: bool(p.pipeline_microbatches)),
    ("grad_sync_per_step", lambda p: p.grad_sync_per_step), ("moe_a2a_overlap", lambda p: p.moe_a2a_overlap),
    ("fp8_param", lambda p: p.fp8_param), ("fsdp_fp8_all_gather", lambda p: p.fsdp_fp8_all_gather),
    ("microbatch", lambda p: p.microbatch != 1),
    ("global_batch", lambda p: p.global_batch is not None))


def _check_fp8_all_gather(fp8_linears: str | None, plan: ParallelPlan) -> None:
    """A located PlanError when ``plan.fsdp_fp8_all_gather`` is set without torchao's ``tensorwise`` fp8 linears:
    torchao gathers fp8 weights for tensorwise scaling only (``Float8LinearConfig.__post_init__``: "float8
    all-gather only supports tensorwise", torchao/float8/config.py @ pytorch/ao eab345c; torchtitan @ e7c0cae
    refuses ``enable_fsdp_float8_all_gather`` with a ``recipe_name`` such as ``rowwise``,
    torchtitan/components/quantization/float8.py), and Transformer Engine's recipes gather through
    ``fp8_param`` instead."""
    if not plan.fsdp_fp8_all_gather or fp8_linears == "tensorwise":
        return
    got = f"fp8_linears {fp8_linears}" if fp8_linears and fp8_linears != "none" else "no fp8_linears"
    hint = "; for Megatron-Core's fp8 parameter gather use fp8_param" if fp8_linears in ("current", "delayed",
                                                                                         "mxfp8") else ""
    raise PlanError(f"plan: fsdp_fp8_all_gather: got it with {got}; expected fp8_linears tensorwise (torchao "
                    f"gathers fp8 weights for tensorwise scaling only){hint}")


def _check_stored_dtypes(fp8_linears: str | None, plan: ParallelPlan, system: Any) -> None:
    """A located PlanError for a stored-dtype field the step would not read (it was dropped without a word):
    ``fp8_param`` is Transformer Engine's fp8 parameters (:data:`workloads.precision.TE_QUANTIZE_RECIPES`; torchao's
    recipes gather fp8 weights through ``fsdp_fp8_all_gather``, MaxText's int8 keeps its weights), and on a GPU
    ``param_dtype`` is priced for FSDP2's sharded parameters only (:func:`_sharded_states`; on TPUs the XLA memory
    model reads it), not for the replicated or ZeRO-sharded states of the other stacks."""
    from workloads.precision import TE_QUANTIZE_RECIPES

    if plan.fp8_param and fp8_linears not in TE_QUANTIZE_RECIPES:
        got = f"fp8_linears {fp8_linears}" if fp8_linears and fp8_linears != "none" else "no fp8_linears"
        hint = "; torchao's FSDP2 fp8 gather is fsdp_fp8_all_gather" if fp8_linears == "tensorwise" else ""
        raise PlanError(f"plan: fp8_param: Transformer Engine's fp8 parameters; got it with {got}; expected "
                        f"fp8_linears {', '.join(TE_QUANTIZE_RECIPES)}{hint}")
    if plan.param_dtype and not plan.fsdp:
        from simulator.engines.analytical import spec_of

        dev = spec_of(system)[0]
        if getattr(dev, "kind", "") == "gpu":
            raise PlanError(f"plan: param_dtype {plan.param_dtype}: on a GPU the dtype of FSDP2's sharded "
                            f"parameters; got it without fsdp on {dev.name!r}; expected fsdp (--fsdp), or no "
                            "param_dtype (the stack's own rule: fp32 master weights)")


def _check_inference_plan(plan: ParallelPlan, phase: str | None = None) -> None:
    """An inference step refuses the plan fields only a training step reads (:data:`_TRAINING_ONLY_FIELDS`)."""
    given = [name for name, is_set in _TRAINING_ONLY_FIELDS if is_set(plan)]
    if given:
        shown = ", ".join(f"{n}={getattr(plan, n)!r}" for n in given)
        batch = " (an inference step's batch is batch=...)" if {"microbatch", "global_batch"} & set(given) else ""
        raise PlanError(f"plan: {', '.join(given)}: training only; got {shown} for an inference step (phase "
                        f"{phase or 'prefill'!r}); expected train=True (--train), or the plan without them{batch}")


def _stack_step(framework: str, engine: str, plan: ParallelPlan, system: Any, pipe: PipelineTime, per_stage: Any,
                latency: float, breakdown: dict[str, float], opt: list[float]
                ) -> tuple[float, dict[str, float], list[float], PipelineTime]:
    """The training step under ``framework``'s stack (:mod:`simulator.parallel.stacks`) with each stage's update
    seconds ``opt`` scaled as the stack shards the update (MaxText over FSDP groups), and the pipeline schedule
    the step ran (re-timed by a stack that overlaps communication with compute); unchanged without one."""
    if not framework or engine != "analytical":
        return latency, breakdown, opt, pipe
    update_s = breakdown["optimizer_s"]
    latency, breakdown, pipe = _stack_latency(framework, plan, system, pipe, per_stage, latency, breakdown)
    if update_s and breakdown["optimizer_s"] != update_s:  # a stack that shards the update over other ranks
        opt = [o * breakdown["optimizer_s"] / update_s for o in opt]
    return latency, breakdown, opt, pipe


def _stack_latency(framework: str, plan: ParallelPlan, system: Any, pipe: PipelineTime, per_stage: Any,
                   latency: float, breakdown: dict[str, float]) -> tuple[float, dict[str, float], PipelineTime]:
    """(latency, breakdown, pipeline) of the step under ``framework``'s stack
    (:func:`simulator.parallel.stacks.stack_step`)."""
    from simulator.parallel.stacks import stack_step

    hidden: list[float] = []
    if plan.moe_a2a_overlap:  # the combined 1F1B schedule's hidden all-to-alls, for a stack that re-times the stages
        bwd = [sum(gc.split[1] for _, gc in st) for st in per_stage]
        share = _a2a_compute_share(plan, system, framework)
        hidden = [min(h, b) for h, b in zip(_a2a_overlap_hidden(per_stage, plan, plan.microbatches, share), bwd,
                                            strict=True)]
    return stack_step(framework, plan, system, pipe, per_stage, latency, breakdown, _collective_times,
                      bwd_hidden=hidden)


def _stage_sums(per_stage: list[list[tuple[StageGraph, _GraphCost]]]) -> tuple[list[float], ...]:
    """(forward, backward, optimizer, communication) seconds of each pipeline stage, over its chunks."""
    p = len(per_stage)
    fwd, bwd, opt, comm = [0.0] * p, [0.0] * p, [0.0] * p, [0.0] * p
    for s in range(p):
        for _sg, gc in per_stage[s]:
            f, b, o, c = gc.split
            fwd[s] += f
            bwd[s] += b
            opt[s] += o
            comm[s] += c
    return fwd, bwd, opt, comm


def _train_step_time(per_stage: list[list[tuple[StageGraph, _GraphCost]]], unique: dict[int, _GraphCost],
                     plan: ParallelPlan, system: Any, engine: str, m: int, v: int, fwd: list[float],
                     bwd: list[float], opt: list[float], comm: list[float], graphs: list[StageGraph],
                     seq: int | None, framework: str = ""
                     ) -> tuple[float, PipelineTime, dict[str, float], dict[str, float], float, list[float]]:
    """(latency, pipeline, breakdown, extra, tokens, update seconds per stage) of a training step: the pipeline
    schedule, then the data-parallel synchronisation, ZeRO gathers and the optimizer step of the slowest tail
    (``framework``: the :mod:`workloads.frameworks` profile, :func:`_fsdp_gathers_once_per_step`). The update
    seconds are each stage device's own: its shard's under ZeRO and FSDP, the whole stage's ``opt`` otherwise."""
    p = plan.pp
    extra: dict[str, float] = {}
    once, reduce_scale, acc, runs = _pipelined_fsdp(per_stage, plan, system, m, framework, graphs)
    chunk_bwd = [[gc.split[1] + a for (_, gc), a in zip(st, accs, strict=True)] for st, accs in zip(per_stage, acc, strict=True)]
    if once:  # each backward adds its gradients to the run's unsharded accumulators
        bwd = [sum(bs) for bs in chunk_bwd]
    hidden = [0.0] * p  # all-to-all seconds a microbatch's stage hides (the combined 1F1B schedule)
    if plan.moe_a2a_overlap:
        bwd, chunk_bwd, hidden = _a2a_overlapped_backward(per_stage, plan, m, bwd, chunk_bwd,
                                                          _a2a_compute_share(plan, system, framework))
        extra["a2a_overlap_hidden_s"] = max(hidden) * m
    pipe = _scheduled_runs(plan, m, lambda k: pipeline_time(
        fwd, bwd, k, plan.schedule, v, chunk_fwd_s=[[gc.split[0] for _, gc in st] for st in per_stage],
        chunk_bwd_s=chunk_bwd))
    grad_bytes = [reduce_scale * sum(float(sg.graph.role_bytes(Role.GRADIENT)) for sg, _ in per_stage[s])
                  for s in range(p)]
    sync_kind = "reduce_scatter" if plan.zero >= 1 else "all_reduce"
    # gradients are reduced, and states sharded, over the data-parallel and context-parallel ranks together:
    # each context-parallel rank computes weight gradients from its own tokens (Megatron-LM's DDP over
    # ``get_data_parallel_group(with_context_parallel=True)``; torchtitan's FSDP mesh ``dp_shard_cp``). Rank
    # order tp, cp, dp, pp (innermost first): that group's ranks are ``tp`` apart.
    sync_n = plan.dp * plan.cp
    zero_gather = plan.zero >= 1 and sync_n > 1  # updated parameter shards gathered back
    # the parameters gathered, once each: the graph's weight-role bytes also count the optimizer's updated
    # copies (``<name>.updated``, produced by the update), which ``OpGraph.weight_bytes`` leaves out
    wbytes = [sum(_gathered_weight_bytes(sg.graph, plan) for sg, _ in per_stage[s]) for s in range(p)]
    # every distinct collective of the step, costed in one engine call (stages of one shape
    # synchronise the same bytes)
    wanted = [(sync_kind, gb) for gb in grad_bytes] + [("all_gather", w) for w in wbytes if zero_gather]
    if engine == "des" and sync_n > 1 and not once:  # buckets; a pipelined FSDP2 stage reduces all at once
        wanted += [(sync_kind, nb) for gc in unique.values() for _, nb in gc.bucket_offsets()]
    coll = _collective_times(wanted, sync_n, system, plan.tp, pad_to=_grad_buffer_divisor(plan))
    dp_sync = [coll[(sync_kind, gb)] for gb in grad_bytes]
    shares = [_expert_share(per_stage[s]) if plan.ep > 1 else 0.0 for s in range(p)]
    edp = expert_dp_size(plan, sync_n)
    if any(shares) and edp != sync_n:  # experts' gradients reduce over the expert-data-parallel group
        dp_sync, ex_gather = _expert_split_sync(plan, system, sync_kind, sync_n, edp, shares, grad_bytes,
                                                wbytes if zero_gather else [0.0] * p)
    last_bucket = [t * min(1.0, DDP_BUCKET_BYTES / gb) if gb else 0.0 for t, gb in zip(dp_sync, grad_bytes, strict=True)]
    exposed = [max(lb, t - b) for t, b, lb in zip(dp_sync, bwd, last_bucket, strict=True)]
    if once:  # reduce-scattered after the stage's last backward (of each run), the compute stream waiting on it
        exposed = [runs * t for t in dp_sync]
    gather = [0.0] * p
    if zero_gather:
        gather = ex_gather if any(shares) and edp != sync_n else [coll[("all_gather", w)] for w in wbytes]
        if plan.zero == 3:  # and gathered before each forward and backward of every microbatch, but once a
            # step for FSDP under torch.distributed.pipelining (:func:`_fsdp_gathers_once_per_step`)
            gather = [g * (runs if once else 1 + 2 * m) for g in gather]
    # each rank updates its shard: the dense parameters' 1/sync_n, the experts' 1/edp (one optimizer per group)
    opt_s = [o * ((1.0 - sh) / sync_n + sh / edp) if plan.zero >= 1 else o for o, sh in zip(opt, shares, strict=True)]
    # torchao's amax precompute for FSDP2's fp8 all-gather runs after the optimizer step: the update's tail
    opt_s = [o + c for o, c in zip(opt_s, _fp8_scale_precompute_s(per_stage, plan, system, sync_n), strict=True)]
    tail = [e + g + o for e, g, o in zip(exposed, gather, opt_s, strict=True)]
    latency = pipe.step_s + max(tail)
    worst = max(range(p), key=lambda s: tail[s])
    comm_busy = m * (comm[pipe.bottleneck_stage] - hidden[pipe.bottleneck_stage])
    breakdown = {
        "compute_s": pipe.busy_s - comm_busy,
        "communication_s": comm_busy + exposed[worst] + gather[worst],
        "bubble_s": pipe.bubble_s,
        "optimizer_s": opt_s[worst],
        "dp_sync_s": dp_sync[worst],
        "dp_sync_exposed_s": exposed[worst],
    }
    if engine == "des":
        latency, pipe, breakdown = _simulate(per_stage, plan, m, coll, sync_kind, opt_s, gather, pipe, latency,
                                             acc=acc, tail_sync=exposed if once else None)
        extra["closed_form_latency_s"] = breakdown.pop("closed_form_latency_s")
    seqlen = int(graphs[0].graph.meta.get("seq", seq or 0))
    tokens = float(plan.global_batch or plan.dp * plan.microbatch) * seqlen
    return latency, pipe, breakdown, extra, tokens, opt_s


def _fp8_scale_precompute_s(per_stage: list[list[tuple[StageGraph, _GraphCost]]], plan: ParallelPlan, system: Any,
                            sync_n: int) -> list[float]:
    """Seconds per stage device of torchao's ``precompute_float8_dynamic_scale_for_fsdp`` after the optimizer step
    (``plan.fsdp_fp8_all_gather``; zeros without it): ``torch._foreach_norm(weights, ord=inf)`` reads each fp8 linear
    weight's fp32 shard once (4 bytes a parameter over the ``sync_n`` ranks that shard it, a streaming read at the
    device's achieved DRAM rate), and the stacked amaxes, one fp32 value a weight, are all-reduced once ("it will
    issue a single all-reduce", torchao/float8/fsdp_utils.py @ pytorch/ao eab345c) over the weights' mesh, the
    sharding and tensor-parallel ranks (priced over the ``sync_n`` sharding ranks, ``tp`` apart). The scales then
    serve every gather of the step: ``fsdp_pre_all_gather`` casts with the precomputed scale, no amax of its own."""
    if not plan.fsdp_fp8_all_gather:
        return [0.0] * plan.pp
    from simulator.engines.analytical import spec_of

    dev = spec_of(system)[0]
    rate = float(dev.main_memory.read_bandwidth_bytes_per_s) * float(dev.efficiency.dram_bandwidth_fraction)
    out = []
    for st in per_stage:
        numel = sum(sg.graph.memo("fp8_weight_numel", lambda g=sg.graph: _fp8_weight_numel(g)) for sg, _ in st)
        weights = sum(sg.graph.memo("fp8_weight_count", lambda g=sg.graph: float(len(_fp8_weights(g))))
                      for sg, _ in st)
        reduce_s = (_collective_times([("all_reduce", 4.0 * weights)], sync_n, system, plan.tp)[("all_reduce",
                    4.0 * weights)] if sync_n > 1 and weights else 0.0)
        out.append(4.0 * numel / max(1, sync_n) / rate + reduce_s)
    return out


def _a2a_overlapped_backward(per_stage: list[list[tuple[StageGraph, _GraphCost]]], plan: ParallelPlan, m: int,
                             bwd: list[float], chunk_bwd: list[list[float]], share: float = 1.0
                             ) -> tuple[list[float], list[list[float]], list[float]]:
    """(backward per stage, per chunk, seconds hidden per stage) of a microbatch under the combined 1F1B schedule:
    :func:`_a2a_overlap_hidden` taken off the stage's backward, at most the whole backward (a pair's hidden time is
    charged to the backward it runs beside), shared evenly by the stage's chunks (``share``:
    :func:`_a2a_compute_share`)."""
    hidden = [min(h, b) for h, b in zip(_a2a_overlap_hidden(per_stage, plan, m, share), bwd, strict=True)]
    return ([b - h for b, h in zip(bwd, hidden, strict=True)],
            [[max(0.0, b - h / len(bs)) for b in bs] for bs, h in zip(chunk_bwd, hidden, strict=True)], hidden)


def _a2a_pairs(plan: ParallelPlan, s: int, m: int | None = None) -> int:
    """Steady-phase forward-backward pairs stage ``s`` runs under the combined 1F1B schedule
    (``plan.moe_a2a_overlap``; 0 without it) of ``m`` microbatches (default the plan's): its ``m v`` chunk
    forwards less the unpaired warm-up ones (:func:`_a2a_overlap_hidden`)."""
    if not plan.moe_a2a_overlap:
        return 0
    p, m = plan.pp, plan.microbatches if m is None else m
    v = plan.interleave if plan.schedule == "interleaved" else 1
    warm = 1 if p == 1 else 2 * (p - s - 1) + (v - 1) * p + 1
    return max(0, m * v - min(warm, m * v))


def _paired_layer_bytes(sg: StageGraph) -> float:
    """Bytes one forward-backward pair of the combined 1F1B schedule holds beyond the plain schedule's peak, the
    largest over the stage graph's layers: a pair runs layer ``i``'s forward of one chunk beside layer
    ``L - 1 - i``'s backward of another (megatron/core/models/common/model_chunk_schedule_plan.py
    ``TransformerModelChunkSchedulePlan.run`` @ core_v0.15.0), and ``TransformerLayerSchedulePlan.run`` runs the
    forward's ``attn``, ``post_attn``, ``moe_dispatch``, ``mlp`` and ``moe_combine`` nodes before the backward's
    ``post_attn`` and ``attn`` nodes; each node frees its saved tensors when its backward runs
    (pipeline_parallel/utils.py ``ScheduleNode._backward``, ``keep_graph=False``, then ``_release_state``). At
    that point the forward chunk holds layers ``0..i`` whole and the backward chunk layers ``0..L - 1 - i`` but
    the last's MoE side: one chunk's layers, plus the backward layer's attention side, which this is: the
    stash a layer keeps from the ops before its token dispatch (norm, attention, residual, router; the dense
    MLP's norm for a layer without experts)."""
    kept = _stash_kept(sg)
    fwd = sg.graph.ops[: sg.forward_ops]
    side: dict[str, float] = {}
    done: set[str] = set()
    for op in fwd:
        layer = _LAYER_PREFIX.match(op.name)
        if layer is None or layer[0] in done:
            continue
        if op.kind == "moe_dispatch" or op.name.startswith(layer[0] + "mlp."):
            done.add(layer[0])
            continue
        side[layer[0]] = side.get(layer[0], 0.0) + sum(kept.get(t.name, 0.0) for t in op.outputs)
        side[layer[0]] += kept.get(f"{op.name}:dropout_mask", 0.0)
    return max(side.values(), default=0.0)


_LAYER_PREFIX = re.compile(r"layers\.\d+\.")


def _a2a_overlap_hidden(per_stage: list[list[tuple[StageGraph, _GraphCost]]], plan: ParallelPlan, m: int,
                        share: float = 1.0) -> list[float]:
    """Seconds a microbatch's time shrinks on each stage under Megatron-Core's combined 1F1B schedule
    (``plan.moe_a2a_overlap``, megatron/core/pipeline_parallel/combined_1f1b.py @ core_v0.15.0): in each
    steady-phase step one chunk's forward and another's backward run together, the all-to-alls on the
    communication stream beside the other's compute, each hiding under the compute beside it
    (:func:`_paired_layers_hidden`). Warm-up forwards and cool-down backwards are not paired: with no pipeline
    one warm-up forward (``combined_1f1b_schedule_for_no_pipelining``); interleaved, stage ``s`` of ``p``
    runs ``2 (p - s - 1) + (v - 1) p + 1`` of its ``m v`` chunk forwards first (schedules.py
    ``get_pp_rank_microbatches``, the extra one "to ensure the forward and backward computations are
    independent in all 1f1b steps"; the microbatch group per virtual stage is ``p``, its default). ``share``:
    the compute's rate beside an all-to-all (:func:`_a2a_compute_share`)."""
    hidden = []
    for s, stage in enumerate(per_stage):
        pairs = _a2a_pairs(plan, s, m)
        gain = sum(_paired_layers_hidden(gc, share) for _, gc in stage) / len(stage)
        hidden.append(gain * pairs / m)
    return hidden


#: A layer's sub-steps as :func:`_paired_layers_hidden` reads its records: the two all-to-alls, the ``mlp`` node
#: (experts, or a dense layer's MLP) and the rest (``attn`` / ``post_attn`` nodes: attention, norm, router and the
#: token permutation, ``build_layer_callables`` in megatron/core/models/gpt/fine_grained_callables.py @ core_v0.15.0).
_ROUTING_KINDS = frozenset({"moe_router", "moe_router_bwd", "moe_dispatch", "moe_dispatch_bwd"})
_STEP_KEYS = tuple(f"{d}_{p}" for d in "fb" for p in ("attn", "mlp", "dispatch", "combine"))


def _layer_steps(gc: _GraphCost) -> list[dict[str, float]]:
    """Per transformer layer of a chunk, in order, the seconds of its forward and backward sub-steps (keys
    ``(f|b)_(attn|mlp|dispatch|combine)``); ops outside ``layers.N`` (embedding, head, pipeline sends) are not
    paired (``TransformerModelChunkSchedulePlan.run`` runs them before and after the layer pairs)."""
    steps: dict[int, dict[str, float]] = {}
    for i, r in enumerate(gc.report.records):
        hit = re.match(r"layers\.(\d+)\.", r.name)
        if hit is None or _is_optimizer(r) or r.kind in COMMUNICATION_KINDS and r.kind != "all_to_all":
            continue
        if r.kind == "all_to_all":
            part = "combine" if "combine" in r.name else "dispatch"
        else:
            part = "mlp" if re.search(r"\.(moe|mlp)\.", r.name) and r.kind not in _ROUTING_KINDS else "attn"
        key = ("f_" if i < gc.sg.forward_ops else "b_") + part
        layer = steps.setdefault(int(hit.group(1)), dict.fromkeys(_STEP_KEYS, 0.0))
        layer[key] += r.time_s
    return [steps[k] for k in sorted(steps)]


def _paired_layers_hidden(gc: _GraphCost, share: float = 1.0) -> float:
    """Seconds a steady pair of this chunk hides: layer ``i``'s forward runs beside layer ``L - 1 - i``'s
    backward, and each all-to-all hides only under the compute on the other stream beside it
    (``TransformerLayerSchedulePlan.run``, megatron/core/models/common/model_chunk_schedule_plan.py @
    core_v0.15.0): combine backward beside attention forward, dispatch forward and backward beside the experts'
    backward (with its weight gradients) and forward, combine forward beside attention backward. While an
    all-to-all of ``a`` seconds runs, the compute beside it advances at ``share`` of its rate (the SMs the
    dispatcher's kernels leave it, :func:`_a2a_compute_share`), so a sub-step hides ``min(c, share a)`` of its
    ``c`` seconds of compute.

    >>> from types import SimpleNamespace as NS
    >>> rec = lambda name, t, kind="gemm": NS(name=name, time_s=t, kind=kind, group="", attrs={})
    >>> gc = NS(sg=NS(forward_ops=4), report=NS(records=[rec("layers.0.attn.qkv", 2.0),
    ...     rec("layers.0.moe.dispatch_a2a", 1.0, "all_to_all"), rec("layers.0.moe.fc1", 3.0),
    ...     rec("layers.0.moe.combine_a2a", 1.0, "all_to_all"), rec("layers.0.attn.qkv.bwd", 4.0),
    ...     rec("layers.0.moe.dispatch_a2a.bwd", 1.0, "all_to_all"), rec("layers.0.moe.fc1.bwd", 6.0),
    ...     rec("layers.0.moe.combine_a2a.bwd", 1.0, "all_to_all")]))
    >>> _paired_layers_hidden(gc), round(_paired_layers_hidden(gc, 0.75), 6)
    (4.0, 3.0)
    """
    layers = _layer_steps(gc)
    hidden = 0.0
    for f, b in zip(layers, reversed(layers), strict=True):
        hidden += (min(f["f_attn"], share * b["b_combine"])
                   + min(f["f_mlp"] + b["b_mlp"], share * (f["f_dispatch"] + b["b_dispatch"]))
                   + min(b["b_attn"], share * f["f_combine"]))
    return hidden


def _a2a_compute_share(plan: ParallelPlan, system: DeviceSpec | SystemSpec, framework: str) -> float:
    """The fraction of its rate the compute keeps beside an overlapped all-to-all: ``(units - k) / units``, with
    ``k`` the SMs the plan's ``moe_dispatch`` kernels hold under ``framework``
    (:attr:`workloads.frameworks.FrameworkProfile.moe_dispatch_sms`: DeepEP's 20 under Megatron-Core, NCCL's
    peer-to-peer channels for its all-to-all) and ``units`` the device's SMs; 1 where the profile lists none or
    the system states no channels. PlanError where the dispatcher would hold every SM (no compute could run beside
    it). NCCL's are the system's ``p2p_channels``, all of them: the messages an MoE layer's dispatch moves are
    large enough for every channel (the size ramp of ``hwmodels.collectives._p2p_channels``, which starts fewer
    channels for small sends, is not applied here)."""
    if not framework:
        return 1.0
    from workloads.frameworks import get_profile

    held = dict(get_profile(framework).moe_dispatch_sms).get(plan.moe_dispatch, 0)
    if held == "p2p_channels":
        from simulator.lowering.collectives import collective_system_for

        held = getattr(collective_system_for(system), "p2p_channels", None) or 0
    units = int((system.device if isinstance(system, SystemSpec) else system).compute.units)
    if held and units > 0 and int(held) >= units:
        raise PlanError(f"moe_a2a_overlap: got moe_dispatch {plan.moe_dispatch!r} under framework {framework!r}, "
                        f"whose kernels hold {int(held)} SMs, on a device of {units}; expected a dispatcher holding "
                        "fewer SMs than the device has (no compute would run beside the overlapped all-to-all)")
    return (units - int(held)) / units if held and units > 0 else 1.0


def _check_engine(engine: str, plan: ParallelPlan) -> None:
    """PlanError for an unknown engine, or a number of pipeline schedule runs the DES engine cannot simulate."""
    if engine not in ("analytical", "des"):
        raise PlanError(f"engine: got {engine!r}; expected 'analytical' or 'des'")
    if engine == "des" and plan.moe_a2a_overlap:
        raise PlanError("moe_a2a_overlap: got it with engine 'des'; expected engine 'analytical' (the combined "
                        "1F1B schedule is priced in the closed-form pipeline time only)")
    if engine == "des" and plan.pp > 1 and plan.pipeline_microbatches:
        raise PlanError(f"pipeline_microbatches: got {plan.pipeline_microbatches} with engine 'des'; expected 0: the "
                        "simulated step runs every microbatch in one schedule (engine 'analytical' prices one "
                        "schedule run per local batch)")


def _fsdp_gathers_once_per_step(framework: str) -> bool:
    """Whether a pipelined FSDP plan under ``framework`` gathers each stage's weights once a step rather than
    before each forward and backward of every microbatch. Only the stacks that run ``torch.distributed.pipelining``
    do: torchtitan and NeMo AutoModel (the ``fsdp2`` profiles' stack) and no profile (a plan with ``fsdp`` stands
    for PyTorch FSDP2, :func:`_activation_memory`). They shard pipelined stages with reshard_after_forward=False
    (torchtitan parallelize_llama.py apply_fsdp @ 9dec370; NeMo AutoModel parallelizer.py @ cb97654 'With PP,
    reshard_after_forward=False'), so no backward re-gathers, and torch's PipelineStage disables FSDP's reshard
    and gradient sync for every backward, running the post-backward by hand after the last
    (backward_maybe_with_nosync since pytorch/pytorch#134052, 2024-09; as described in #144535, 2025-01), so no
    forward re-gathers either (:func:`_pipelined_fsdp_buffers`: the memory). MaxText gathers FSDP weights every
    microbatch by default (``pipeline_fsdp_ag_once: False``, "Zero-3 ... gathers for each microbatch's fwd/bwd
    pass", MaxText/configs/base.yml @ 315ebb5), and Megatron's schedules do not use PipelineStage."""
    if not framework:
        return True
    from workloads.frameworks import get_profile

    return get_profile(framework).stack == "fsdp2"


def _pipelined_fsdp(per_stage: list[list[tuple[StageGraph, _GraphCost]]], plan: ParallelPlan, system: Any, m: int,
                    framework: str, graphs: list[StageGraph]) -> tuple[bool, float, list[list[float]], int]:
    """(whether, gradient reduce scale, accumulation seconds of each chunk's backward, schedule runs that each
    reduce) of a pipelined FSDP2 stage (:func:`_fsdp_gathers_once_per_step`, :func:`_pipelined_reduce_scale`,
    :func:`_accumulation_s`, :func:`_sync_runs`); (False, the stated scale (:func:`_stated_reduce_scale`), zeros, 1)
    for any other plan. Both engines take the step's costs from here: the closed form
    (:func:`_train_step_time`) and the simulated step (:func:`_simulate`)."""
    once = plan.fsdp and plan.pp > 1 and _fsdp_gathers_once_per_step(framework)
    if not once:
        return False, _stated_reduce_scale(plan, graphs), [[0.0] * len(st) for st in per_stage], 1
    scale = _pipelined_reduce_scale(framework, graphs)
    runs = _sync_runs(plan, m)  # schedule runs each reduce-scattering, resharding, gathering again
    return True, scale, _accumulation_s(per_stage, plan, system, m // runs, scale), runs


def _pipelined_reduce_scale(framework: str, graphs: list[StageGraph]) -> float:
    """Bytes of a gradient in the dtype FSDP2 reduce-scatters it over the bytes in the graph's dtype, for a
    pipelined FSDP stage (:func:`_fsdp_gathers_once_per_step`): the profile's ``grad_reduce_dtype`` (the
    ``fsdp2`` profiles: float32, torchtitan's ``mixed_precision_reduce`` and NeMo AutoModel's
    ``FSDP2Config.mp_policy`` ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``,
    components/distributed/config.py @ cb97654, which its MoE ``apply_fsdp`` passes to the blocks and the
    ``ep_shard`` experts alike); float32 without a profile, as :func:`_pipelined_fsdp_buffers` holds the
    accumulated gradients. The gradients accumulated over the step's microbatches are already in that dtype
    (``FSDPParam.to_accumulated_grad_if_needed``), so the reduce-scatter moves them as they are.

    A stage whose backwards run through ``torch.distributed.pipelining`` reduce-scatters after its last
    backward of the step, by hand: ``_PipelineStageBase._post_backward`` (torch/distributed/pipelining/
    stage.py; before it ``backward_maybe_with_nosync(last_backward=True)``; NeMo AutoModel's
    ``patched_backward_maybe_with_nosync`` per virtual stage on the optimizer step's last backward,
    components/moe/fsdp_mixin.py @ cb97654) runs every group's ``post_backward`` and then
    ``_root_post_backward_final_callback``, whose last-backward branch makes the current (compute) stream
    wait on every reduce-scatter's event (torch/distributed/fsdp/_fully_shard/_fsdp_state.py) "to ensure FSDP
    syncs its grad reduction ops back to the default stream". No backward is left to hide them behind:
    :func:`_train_step_time` charges them in full."""
    from workloads.dtypes import dtype_bytes
    from workloads.frameworks import get_profile

    dtype = (get_profile(framework).grad_reduce_dtype if framework else "fp32") or "param"
    param = dtype_bytes(str(graphs[0].graph.meta.get("dtype") or "bf16"))  # fp8_e4m3 graphs: 1 byte
    return dtype_bytes(dtype, param) / param


def _stated_reduce_scale(plan: ParallelPlan, graphs: list[StageGraph]) -> float:
    """Bytes of a gradient in the plan's stated ``grad_reduce_dtype`` over those in the graph's dtype, for a
    plan without FSDP: Megatron-Core reduces its main-gradient buffer, whose dtype is ``torch.float`` with
    ``grad_reduce_in_fp32`` and the parameter's otherwise (``grad_dtype``, megatron/core/distributed/
    distributed_data_parallel.py ``_allocate_buffers_for_parameters``); 1 where the plan states none."""
    from workloads.dtypes import dtype_bytes

    if plan.fsdp or not plan.grad_reduce_dtype:
        return 1.0
    param = dtype_bytes(str(graphs[0].graph.meta.get("dtype") or "bf16"))
    return dtype_bytes(plan.grad_reduce_dtype, param) / param


def _accumulation_s(per_stage: list[list[tuple[StageGraph, _GraphCost]]], plan: ParallelPlan, system: Any, m: int,
                    scale: float) -> list[list[float]]:
    """Seconds each chunk's backward of one microbatch spends adding its parameter gradients to the step's
    accumulators, for a pipelined FSDP2 stage whose backwards run without gradient sync until the last
    (:func:`_pipelined_reduce_scale`): a streaming kernel on the compute stream at the device's achieved DRAM
    rate, the bytes averaged over the step's ``m`` microbatches.

    FSDP2's ``FSDPParamGroup.post_backward`` with ``reduce_grads`` False runs, on the current stream,
    ``FSDPParam.accumulate_unsharded_grad_if_needed`` (``unsharded_accumulated_grad += unsharded_param.grad``) and
    ``to_accumulated_grad_if_needed`` (the first backward's gradient cast to ``reduce_dtype``)
    (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, _fsdp_param.py): with a float32 ``reduce_dtype``
    (``scale`` 2 over bf16) the first microbatch reads 2 and writes 4 bytes a parameter, every later one reads
    4 + 2 and writes 4; with the parameters' own dtype autograd's ``AccumulateGrad`` keeps the first gradient and
    adds each later one in place (read 2 + 2, write 2). Experts left out of FSDP (``ep_shard`` 1: NeMo AutoModel's
    ``ignored_params``, :func:`_expert_sharded`) accumulate through autograd in their own dtype."""
    from simulator.engines.analytical import spec_of
    from workloads.dtypes import dtype_bytes

    dev = spec_of(system)[0]
    rate = float(dev.main_memory.read_bandwidth_bytes_per_s) * float(dev.efficiency.dram_bandwidth_fraction)
    edp = expert_dp_size(plan, plan.dp * plan.cp)

    def per_param(item: float, acc: float) -> float:  # bytes a parameter, averaged over the step's microbatches
        first = item + acc if acc != item else 0.0
        return (first + (m - 1) * (2.0 * acc + item)) / m

    out = []
    for st in per_stage:
        row = []
        for sg, _ in st:
            item = dtype_bytes(str(sg.graph.meta.get("dtype") or "bf16"))  # a gradient's bytes: fp8 1, bf16 2
            n = float(sg.graph.params)
            plain = _expert_share([(sg, None)]) if plan.ep > 1 and edp == 1 else 0.0
            b = n * ((1.0 - plain) * per_param(item, item * scale) + plain * per_param(item, item))
            row.append(b / rate)
        out.append(row)
    return out


def _sync_runs(plan: ParallelPlan, m: int) -> int:
    """Times a step of ``m`` microbatches reduce-scatters, reshards and re-gathers a pipelined FSDP2 stage
    (:func:`_fsdp_gathers_once_per_step`): once per schedule run (:func:`_scheduled_runs`), or once a step
    where the stack defers the sync to the step's last run (``plan.grad_sync_per_step``)."""
    k = plan.pipeline_microbatches
    if plan.grad_sync_per_step or plan.pp == 1 or not k or k >= m or m % k:
        return 1
    return m // k


def _scheduled_runs(plan: ParallelPlan, m: int, run: Any) -> PipelineTime:
    """The pipeline part of a step of ``m`` microbatches: one schedule of all of them, or, where the stack runs
    the schedule once per local batch of ``plan.pipeline_microbatches`` (gradient accumulation over
    ``torch.distributed.pipelining`` schedule steps, each filling and draining the pipeline), that many runs of
    ``run(k)`` back to back: the bubble paid once a run."""
    k = plan.pipeline_microbatches
    if plan.pp == 1 or not k or k >= m or m % k:
        return run(m)
    one, runs = run(k), m // k
    return replace(one, step_s=one.step_s * runs, busy_s=one.busy_s * runs, bubble_s=one.bubble_s * runs)


def expert_dp_size(plan: ParallelPlan, shard: int) -> int:
    """Ranks of the expert-data-parallel group: those holding the same experts, over which the experts'
    gradients are reduced and their parameters, gradients and optimizer state sharded, when ``shard`` ranks
    (``dp x cp``, or FSDP's shard group) do so for the dense parameters. Megatron-Core builds the expert
    groups ``ETP x EP x EDP`` over the ``tp x cp x dp`` ranks, so EDP = ``tp x cp x dp / (ep x etp)``
    (megatron/core/parallel_state.py @ core_v0.15.0, ``get_expert_data_parallel_world_size``); its DDP reduces
    the expert parameters' own buffers over that group (megatron/core/distributed/distributed_data_parallel.py:
    ``expert_parallel_buffers`` over ``intra_expt_dp_group``) and its distributed optimizer builds one optimizer
    per group (megatron/core/optimizer/__init__.py ``get_megatron_optimizer``); NeMo AutoModel shards the experts by FSDP over ``ep_shard`` = the
    data-parallel (and context-parallel) ranks / ``ep`` (components/distributed/mesh_utils.py and
    components/moe/parallelizer.py @ cb97654; with ``ep_shard`` 1 the experts are left out of FSDP,
    ``ignored_params``). Without experts parallelism (``ep`` 1) the group is ``shard`` itself.

    >>> from workloads.parallel import ParallelPlan
    >>> expert_dp_size(ParallelPlan(dp=64, ep=8), 64), expert_dp_size(ParallelPlan(tp=2, dp=16, ep=32, etp=1, sequence_parallel=True), 16)
    (8, 1)
    >>> expert_dp_size(ParallelPlan(dp=256, ep=64, pp=4, fsdp=True), 256)
    4
    """
    if plan.ep <= 1:
        return shard
    return max(1, shard * plan.tp // (plan.ep * (plan.etp or plan.tp)))


def _expert_split_sync(plan: ParallelPlan, system: Any, sync_kind: str, sync_n: int, edp: int,
                       shares: Sequence[float], grad_bytes: Sequence[float], wbytes: Sequence[float]
                       ) -> tuple[list[float], list[float]]:
    """(gradient synchronisation, parameter gather) seconds of each stage when the experts' part (``shares``
    of the bytes) is reduced and gathered over the ``edp`` expert-data-parallel ranks (``etp x ep`` ranks
    apart, the order ``tp-ep-dp`` of Megatron-Core's expert groups) and the rest over the ``sync_n``
    data-parallel ranks: two collectives on the one data-parallel stream, one after the other
    (Megatron-Core's DDP keeps the expert parameters in their own buffer, reduced over the expert group)."""
    stride = (plan.etp or plan.tp) * plan.ep
    ex_pad = math.lcm(edp, 128) if plan.zero_stage in (1, 2) and not plan.fsdp and edp > 1 else 0
    dense = [(sync_kind, (1.0 - sh) * b) for sh, b in zip(shares, grad_bytes, strict=True)]
    dense += [("all_gather", (1.0 - sh) * w) for sh, w in zip(shares, wbytes, strict=True)]
    ex = [(sync_kind, sh * b) for sh, b in zip(shares, grad_bytes, strict=True)]
    ex += [("all_gather", sh * w) for sh, w in zip(shares, wbytes, strict=True)]
    dc = _collective_times(dense, sync_n, system, plan.tp, pad_to=_grad_buffer_divisor(plan))
    ec = _collective_times(ex, edp, system, stride, pad_to=ex_pad)
    p = len(grad_bytes)
    sync = [dc[dense[s]] + ec[ex[s]] for s in range(p)]
    gather = [dc[dense[p + s]] + ec[ex[p + s]] for s in range(p)]
    return sync, gather


def _grad_buffer_divisor(plan: ParallelPlan) -> int:
    """Elements a ZeRO-1/2 plan's flat gradient buffer is padded to a multiple of before its
    reduce-scatter: Megatron-Core's distributed optimizer pads each bucket's end to
    ``lcm(dp x cp, 128)`` elements, so the data-parallel ranks get equal shards whatever the stage's size
    (megatron/core/optimizer/param_layout.py ``pad_bucket_end``/``bucket_end_divisor``, NVIDIA/Megatron-LM
    @ d98e8a64ddf34856e74b24714e3bedb2f5a39553); 0 otherwise (FSDP pads to the group, :func:`_collective_times`)."""
    n = plan.dp * plan.cp  # the distributed optimizer shards over the data- and context-parallel ranks
    return math.lcm(n, 128) if plan.zero_stage in (1, 2) and not plan.fsdp and n > 1 else 0


def _inference_step_time(per_stage: list[list[tuple[StageGraph, _GraphCost]]], plan: ParallelPlan, engine: str,
                         fwd: list[float], comm: list[float], graphs: list[StageGraph]
                         ) -> tuple[float, dict[str, float], dict[str, float], float]:
    """(latency, breakdown, extra, tokens) of an inference step: one batch through every stage in turn."""
    p = plan.pp
    extra: dict[str, float] = {}
    latency = sum(fwd)  # one batch passes every stage in turn
    breakdown = {"compute_s": latency - sum(comm), "communication_s": sum(comm), "bubble_s": 0.0,
                 "optimizer_s": 0.0}
    if engine == "des" and p > 1:
        # the batch through the stages, each hand-off one transfer on the link (the closed form
        # charges it twice: the send on one stage and the receive on the next)
        from simulator.parallel.pipeline_des import StageWork, simulate_step

        work, on_stream = [], 0.0
        for s in range(p):
            row = []
            for _sg, gc in per_stage[s]:
                f, _b, _o, cm = gc.split
                fs, fr, _bs, _br = gc.links()
                row.append(StageWork(forward_s=max(0.0, f - fs - fr), backward_s=0.0, send_forward_s=fs))
                on_stream += cm - fs - fr
            work.append(row)
        trace = simulate_step(work, 1, "gpipe")
        extra["closed_form_latency_s"] = latency
        latency = trace.pipeline_s
        links = sum(e - s0 for *_, s0, e in trace.sends)
        breakdown = {"compute_s": latency - on_stream - links, "communication_s": on_stream + links,
                     "bubble_s": 0.0, "optimizer_s": 0.0}
    meta = graphs[0].graph.meta
    per_seq = 1 if meta.get("phase") == "decode" else int(meta.get("seq", 1))
    tokens = float(int(meta.get("batch", 1)) * per_seq * plan.dp)
    return latency, breakdown, extra, tokens


def _stage_results(per_stage: list[list[tuple[StageGraph, _GraphCost]]], plan: ParallelPlan, train: bool,
                   pipe: PipelineTime | None, fwd: list[float], bwd: list[float], opt: list[float],
                   comm: list[float], gpu: bool = True, xla_reserved: float | None = None,
                   nccl: dict[str, float] | None = None) -> list[StageResult]:
    """Per pipeline stage: its times and what one of its devices holds (:func:`_stage_memory`, or
    :func:`_xla_stage_memory` for a TPU's training step: ``xla_reserved`` is its runtime's HBM reserve; ``nccl``:
    the NCCL communicators' bytes of a device by group, :func:`_nccl_bytes`)."""
    stages: list[StageResult] = []
    for s in range(len(per_stage)):
        sgs = per_stage[s]
        inflight = pipe.in_flight[s] if pipe is not None else 1.0
        if train and xla_reserved is not None:
            mem = _xla_stage_memory(sgs, plan, inflight, xla_reserved)
        else:
            mem = _stage_memory(sgs, plan, train, inflight, gpu, paired=train and _a2a_pairs(plan, s) > 0, nccl=nccl)
        stages.append(StageResult(
            stage=s, layers=tuple(sg.layers for sg, _ in sgs), forward_s=fwd[s], backward_s=bwd[s],
            optimizer_s=opt[s], communication_s=comm[s], flops=sum(float(gc.flops) for _, gc in sgs),
            weights_bytes=mem["parameters"], gradients_bytes=mem["gradients"], optimizer_state_bytes=mem["optimizer"],
            activations_bytes=mem["activations"], kv_cache_bytes=mem["kv_cache"], in_flight=inflight,
            buffers_bytes=mem["buffers"], reserve_bytes=mem["reserve"], host_bytes=mem["offloaded_to_host"],
            memory_parts=tuple(sorted(mem.items()))))
    return stages


def _param_units(g: OpGraph, experts: bool = False) -> dict[str, float]:
    """Parameter bytes of ``g`` (distinct weight tensors no op produces: an in-place update's output is
    the same parameter) per wrapping unit: a layer (``layers.3``) or a top-level module (embedding, head);
    with ``experts``, of the MoE experts' weights only (the ``experts.`` modules)."""
    from workloads.recompute import layer_key

    units: dict[str, float] = {}
    seen: set[str] = set()
    for op in g.ops:
        for t in op.inputs:
            if t.role is Role.WEIGHT and t.name not in seen and g.producer(t.name) is None:
                seen.add(t.name)
                if experts and ".experts." not in f".{t.name}":
                    continue
                key = layer_key(op.group) or (op.group.split(".")[0] if op.group else op.name)
                units[key] = units.get(key, 0.0) + float(t.nbytes)
    return units


def _torch_pipeline_stage(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan, buffers: dict[str, float],
                          out: dict[str, float]) -> float:
    """A pipelined FSDP2 stage's activations at the peak of its rank's schedule (:func:`_torch_pipeline_peak`), with
    the stage's gathered parameters and accumulators (experts left out of FSDP excluded) split by each chunk's share;
    ``buffers`` gets the FSDP figures at that peak and ``out`` the retained pipeline buffers."""
    share = [sum(sg.graph.memo("parameter_units", lambda g=sg.graph: _param_units(g)).values()) for sg, _ in sgs]
    share = [q / (sum(share) or 1.0) for q in share]
    peak = _torch_pipeline_peak(sgs, plan, [buffers["fsdp_unsharded_params"] * q for q in share],
                                [buffers["fsdp_unsharded_grads"] * q for q in share])
    out["activations.pipeline_stage_buffers"] = peak["retained"]
    buffers.update(fsdp_unsharded_params=peak["fsdp_unsharded_params"],
                   fsdp_unsharded_grads=peak["fsdp_unsharded_grads"])
    return float(peak["activations"])


def _summed_units(sgs: list[tuple[StageGraph, _GraphCost]], experts: bool = False) -> dict[str, float]:
    """The stage graphs' parameter bytes by unit (:func:`_param_units`, each graph's memoised), summed over the
    graphs; ``experts``: the experts' units only."""
    units: dict[str, float] = {}
    for sg, _ in sgs:
        key = "expert_units" if experts else "parameter_units"
        for k, v in sg.graph.memo(key, lambda g=sg.graph: _param_units(g, experts=experts)).items():
            units[k] = units.get(k, 0.0) + v
    return units


def _stage_memory(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan, train: bool,
                  inflight: float, gpu: bool = True, paired: bool = False,
                  nccl: dict[str, float] | None = None) -> dict[str, float]:
    """What one device of a stage holds, by component (bytes): ``parameters``, ``gradients``,
    ``optimizer``, ``activations``, ``kv_cache``, ``buffers`` (CUDA context, cuBLAS workspace, NCCL
    buffers, FSDP's unsharded parameters and reduce-scatter buffer) and ``reserve`` (the caching
    allocator's rounding); ``offloaded_to_host`` leaves the device. The CUDA context, cuBLAS and NCCL
    buffers and the caching allocator are a GPU's (``gpu``); a TPU's training step is
    :func:`_xla_stage_memory`'s; ``paired``: the combined 1F1B schedule runs forward-backward pairs on the stage
    (:func:`_paired_layer_bytes`); ``nccl``: the device's NCCL communicators by group (:func:`_nccl_bytes`; None:
    as the plan alone states them, on a system without a fabric entry). See docs/training_memory.md."""
    from simulator.report import memory as M

    units = _summed_units(sgs)
    params = sum(units.values())
    grads = sum(float(sg.graph.role_bytes(Role.GRADIENT)) for sg, _ in sgs)
    opt = sum(float(sg.graph.role_bytes(Role.OPTIMIZER_STATE)) for sg, _ in sgs)
    kv = sum(float(sg.graph.role_bytes(Role.KV_CACHE)) for sg, _ in sgs)
    wbytes, bf16 = _weight_itemsize(sgs)
    out = {"kv_cache": kv, "offloaded_to_host": 0.0}
    buffers = {"cuda_context": float(M.CUDA_CONTEXT_BYTES) if gpu else 0.0,
               "cublas_workspace": float(M.CUBLAS_WORKSPACE_BYTES) if gpu else 0.0,
               "nccl": 0.0}
    if gpu:
        nccl = _nccl_bytes(plan, None) if nccl is None else nccl
        buffers["nccl"] = sum(nccl.values())
        out.update({f"nccl.{k}": v for k, v in nccl.items()})
    # states shard over the data-parallel and context-parallel ranks together (torchtitan's FSDP mesh
    # ``dp_shard_cp``; Megatron-LM's distributed optimizer over the data-parallel group with context parallelism)
    # fp8 parameters (``fp8_param``): TE's fp8 weights replace the 16-bit ones, no cache beside them
    buffers["fp8_weight_cache"] = sum(_fp8_weight_cache(sg.graph) for sg, _ in sgs) if train and not plan.fp8_param else 0.0
    if train and gpu and plan.cuda_graph == "transformer_engine":
        buffers.update({f"te_cuda_graph_{k}": v for k, v in _te_graph_static(sgs, plan, inflight).items()})
    shard = plan.shard_group or plan.dp * plan.cp
    if train:
        # FSDP holds a pipelined stage's gathered state through the step only under torch.distributed.pipelining
        once = _fsdp_gathers_once_per_step(str(sgs[0][0].graph.meta.get("framework") or "")) if sgs else True
        gathered = _fp8_gathered_units(sgs, plan, units)
        p, g, o, extra = _sharded_states(plan, shard, params, grads, opt, (wbytes, bf16), units, once, gathered)
        share = _expert_share(sgs) if plan.ep > 1 and plan.zero >= 1 else 0.0
        if share:  # experts' states shard over the expert-data-parallel group only
            p, g, o, ex_extra = _expert_sharded(plan, shard, (params, grads, opt), share, (wbytes, bf16), units,
                                                _summed_units(sgs, experts=True), once)
            extra = ex_extra if ex_extra is not None else extra
        buffers.update(extra)
    else:
        p, g, o = params, grads, opt
    host = 0.0
    out.update(_host_transfers(plan, p, g))
    if "optimizer" in plan.offload or "params" in plan.offload:
        host += o
        o = 0.0
    if "params" in plan.offload:
        host += p + g
        p = g = 0.0
    act, act_host, tensors = _activation_memory(sgs, plan, train, inflight)
    if paired:
        out["activations.a2a_overlap_paired_layer"] = pair = max(_paired_layer_bytes(sg) for sg, _ in sgs)
        act += pair
    elif train and gpu and "fsdp_unsharded_grads" in buffers and _walks_torch_pipeline(sgs, plan, act_host):
        act = _torch_pipeline_stage(sgs, plan, buffers, out)
    out["host.activations_per_microbatch"] = act_host / max(1.0, inflight)
    out.update(parameters=p, gradients=g, optimizer=o, activations=act, offloaded_to_host=host + act_host)
    out.update({f"buffers.{k}": v for k, v in buffers.items()})
    out["buffers"] = sum(buffers.values())
    pools = _fsdp_stream_pools(plan, shard, units, wbytes, _fp8_gathered_units(sgs, plan, units)) if train and gpu else {}
    if train and gpu and (deferred := _graph_deferred_frees(sgs, plan)):
        pools["cuda_graph_deferred_frees"] = deferred
    out.update({f"reserve.{k}": v for k, v in pools.items()})
    out["reserve"] = (M.allocator_rounding_bytes(tensors) + sum(pools.values())) if gpu else 0.0
    out["total"] = p + g + o + act + kv + out["buffers"] + out["reserve"]
    # NCCL's buffers are its own cudaMalloc / cuMem allocations, outside the caching allocator, as the CUDA context
    out["allocator_reserved"] = out["total"] - buffers["cuda_context"] - buffers["nccl"]
    return out


def _graph_deferred_frees(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan) -> float:
    """Bytes a full-iteration CUDA graph (``plan.cuda_graph``) holds of the tensors Megatron-Core's combined 1F1B
    schedule (``plan.moe_a2a_overlap``) frees across streams, every microbatch's, every MoE layer's
    (:func:`simulator.report.memory.graph_deferred_free_bytes`): (local tokens, top-k, hidden) read off each
    forward ``moe_router`` op of the stage, the inputs freed as ``should_free_input`` decides them from the
    dispatcher (``plan.moe_dispatch``), fp8 linears (the graph's ``fp8_linears`` recipe, not AQT's ``int8``) and
    the local experts (the router's experts / ``plan.ep``; :func:`simulator.report.memory.cross_stream_freed_inputs`).
    0 without both."""
    if plan.cuda_graph != "full_iteration" or not plan.moe_a2a_overlap:
        return 0.0
    from simulator.report.memory import cross_stream_freed_inputs, graph_deferred_free_bytes

    layers = []
    for sg, _ in sgs:
        recipe = sg.graph.meta.get("fp8_linears")
        fp8 = bool(recipe) and recipe != "int8"
        for op in sg.graph.ops[: sg.forward_ops]:
            if op.kind == "moe_router":
                local = max(1, int(op.inputs[1].shape[-1]) // plan.ep)
                layers.append((int(op.inputs[0].shape[0]), int(op.outputs[0].shape[-1]), int(op.inputs[0].shape[-1]),
                               cross_stream_freed_inputs(plan.moe_dispatch, fp8, local)))
    return graph_deferred_free_bytes(plan.microbatches, layers, plan.moe_rank_capacity_factor)


def _te_graph_static(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan, inflight: float) -> dict[str, float]:
    """Static buffers of Transformer Engine's per-layer CUDA graphs on one device of a stage
    (:func:`simulator.report.memory.te_graph_static_bytes`): which of the stage's layers are graphed, as
    Megatron-Core's ``_layer_is_graphable`` decides from ``plan.cuda_graph_scope`` (empty: every layer; ``attn``:
    every layer with attention; ``mlp``: the dense-MLP layers; ``moe``, ``moe_router``, ``moe_preprocess``: the MoE
    layers), and what each graph's output is (``TransformerLayer._te_cuda_graph_replay``: the layer's output with
    an empty scope, ``mlp`` on a dense layer or ``moe`` on an MoE layer; the attention's output or the router's
    outputs otherwise). ``inflight``: the stage's microbatches in flight (chunk-microbatches over chunks), so
    ``inflight`` x graphed layers (1 x graphed layers without pipeline stages: the helper captures one
    microbatch) distinct static samples; the stage's chunks but the model's last send their outputs."""
    from simulator.report.memory import te_graph_static_bytes
    from workloads.zoo.transformer import zoo_config

    meta = sgs[0][0].graph.meta
    cfg = zoo_config(str(meta["model"]))
    scope = set(plan.cuda_graph_scope)
    moe_scope = bool(scope & {"moe", "moe_router", "moe_preprocess"})
    attn_layers = sent = 0.0
    kinds: set[str] = set()
    last_stage = sgs[0][0].stage == plan.pp - 1
    for sg, _ in sgs:
        lo, hi = sg.layers
        for i in range(lo, hi):
            moe = cfg.experts > 0 and cfg.is_moe_layer(i)
            whole = not scope or (moe and "moe" in scope) or (not moe and "mlp" in scope)
            graphed = whole or "attn" in scope or (moe and moe_scope)
            if not graphed:
                continue
            attn_layers += 1.0 if (not scope or "attn" in scope) else 0.0
            kinds.add("hidden" if whole or not (moe and moe_scope) else "router")
            if i == hi - 1 and whole and not (last_stage and sg.chunk == max(s.chunk for s, _ in sgs)):
                sent += 1.0
    grads = int("hidden" in kinds) + (2 + int(cfg.shared_d_ff > 0) if "router" in kinds else 0)
    seq = int(meta["seq"])
    local = seq // plan.cp // (plan.tp if plan.sequence_parallel else 1)
    samples = attn_layers * (max(1.0, inflight) if plan.pp > 1 or plan.moe_a2a_overlap else 1.0)
    return te_graph_static_bytes(hidden=cfg.d_model, local_seq=local, microbatch=plan.microbatch,
                                 seq_per_cp=seq // plan.cp, seq=seq, attn_samples=samples,
                                 sent_outputs=sent * max(1.0, inflight), grad_outputs=grads)


def _host_transfers(plan: ParallelPlan, p: float, g: float) -> dict[str, float]:
    """Bytes a GPU stage's ``--offload`` of state moves over the host link (:func:`_offload_seconds`), from its
    sharded parameters ``p`` and gradients ``g``. ``optimizer`` alone (ZeRO-Offload): the gradients out and the
    updated parameters back once per step (``host.step_transfer``). ``params`` (FSDP2 ``CPUOffloadPolicy``,
    torch/distributed/fsdp/_fully_shard/_fsdp_param.py ``all_gather_inputs``: the host shard copied to the device
    before each all-gather; _fsdp_collectives.py ``foreach_reduce``: each reduce-scatter's shard copied to the
    host): the shard in before every forward and every backward gather (``host.params_per_pass``), each
    microbatch's reduced gradient out (``host.grads_per_microbatch``; once per step with ``grad_sync_per_step``),
    and nothing after the step: the host's optimizer updates the host copy in place."""
    if "params" in plan.offload:
        sync_once = plan.grad_sync_per_step
        return {"host.step_transfer": g if sync_once else 0.0, "host.params_per_pass": p,
                "host.grads_per_microbatch": 0.0 if sync_once else g}
    return {"host.step_transfer": g + p if "optimizer" in plan.offload else 0.0}


def _xla_stage_memory(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan, inflight: float,
                      reserved: float) -> dict[str, float]:
    """What one TPU chip of a stage holds at a training step's peak as XLA assigns it, by the
    components of :func:`_stage_memory` (simulator/report/memory_xla.py; docs/training_memory.md,
    "XLA on TPUs"): MaxText's fp32 train state sharded over the FSDP ranks (replicated without
    ``fsdp``), the scanned layer's gathered weights and unsharded gradient, the activations with
    the row-parallel stash sharded over the tensor-parallel ranks and MaxText's loss, and the
    runtime's HBM reserve; no caching allocator, so no rounding reserve."""
    from simulator.report import memory_xla as X

    params = sum(sum(sg.graph.memo("parameter_units", lambda g=sg.graph: _param_units(g)).values()) for sg, _ in sgs)
    wbytes, _ = _weight_itemsize(sgs)
    shard = (plan.shard_group or plan.dp * plan.cp) if plan.fsdp else 1
    state = X.maxtext_state_bytes(params / wbytes, shard, plan.param_dtype)
    host = 0.0  # MaxText optimizer_memory_host_offload / parameter_memory_host_offload, as _stage_memory's
    step_transfer = state["gradients"] + state["parameters"] if set(plan.offload) - {"activations"} else 0.0
    for kind, keys in (("optimizer", ("optimizer",)), ("params", ("optimizer", "parameters", "gradients"))):
        if kind in plan.offload:
            for k in keys:
                host, state[k] = host + state[k], 0.0
    buffers = X.fsdp_gather_buffers([sg.graph for sg, _ in sgs], shard)
    buffers["xla_runtime_reserved"] = reserved
    act, act_host, _ = _activation_memory(sgs, plan, True, inflight, stack="xla")
    # the row-parallel stash: out_proj sharded over `tensor`, mlpwo's output not kept (memory_xla)
    out_b = wo_b = 0.0
    for sg, _ in sgs:
        o, w = sg.graph.memo("xla_row_parallel_stash", lambda sg=sg: X.row_parallel_stash_bytes(sg.graph, _stash_kept(sg)))
        out_b, wo_b = out_b + o, wo_b + w
    act = max(0.0, act - (out_b * (1.0 - 1.0 / plan.tp) + wo_b) * max(1.0, inflight))
    act, buffers = _xla_peak_phase(sgs, plan, act, buffers)
    out = {"kv_cache": sum(float(sg.graph.role_bytes(Role.KV_CACHE)) for sg, _ in sgs),
           "host.step_transfer": step_transfer, "host.activations_per_microbatch": act_host / max(1.0, inflight),
           "activations": act, "offloaded_to_host": host + act_host, "reserve": 0.0, **state}
    out.update({f"buffers.{k}": v for k, v in buffers.items()})
    out["buffers"] = sum(buffers.values())
    out["total"] = sum(out[k] for k in ("parameters", "gradients", "optimizer", "activations", "kv_cache", "buffers"))
    out["allocator_reserved"] = out["total"] - reserved
    return out


def _xla_peak_phase(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan, act: float,
                    buffers: dict[str, float]) -> tuple[float, dict[str, float]]:
    """(activations, buffers) at the step's peak as XLA's heap holds it: ``act`` was taken at the graph's
    peak wherever it falls, with the scanned layer's FSDP buffers on top; those buffers are temporaries of
    the scan's loop body, so the peak is the larger of the layers' peak with them and the peak of the ops
    outside the layers (the loss and its backward) without them
    (:func:`simulator.report.memory_xla.xla_peak_by_phase`)."""
    from simulator.report.memory_xla import PARAM_DTYPE_BYTES, xla_peak_by_phase

    chunks, pbytes = plan.loss_chunks, PARAM_DTYPE_BYTES.get(plan.param_dtype, 4.0)
    phases = [sg.graph.memo(f"xla_peak_by_phase.{chunks}.{pbytes}",
                            lambda g=sg.graph: xla_peak_by_phase(g, chunks, pbytes)) for sg, _ in sgs]
    inside, outside = max(p[0] for p in phases), max(p[1] for p in phases)
    top = max(inside, outside)  # the peak `act` was taken at
    scan = buffers["xla_gathered_weights"] + buffers["xla_gradient_reduce_scatter"]
    act_in, act_out = max(0.0, act - (top - inside)), max(0.0, act - (top - outside))
    if act_out <= act_in + scan:
        return act_in, buffers
    return act_out, {**buffers, "xla_gathered_weights": 0.0, "xla_gradient_reduce_scatter": 0.0}


def _check_fp8_device(recipe: str | None, system: Any) -> None:
    """A located PlanError when the fp8 recipe's GEMMs need tensor rates the device lacks (fp8, or int8 for
    ``int8``) or another device architecture (:data:`workloads.precision.BLACKWELL_ONLY`: MXFP8 on Blackwell)."""
    from workloads.precision import BLACKWELL_ONLY

    if not recipe or recipe == "none":
        return
    from simulator.engines.analytical import spec_of

    dev = spec_of(system)[0]
    rate = "int8" if recipe == "int8" else "fp8"
    rates = list(dev.compute.tensor_flops_per_s)
    if not any(k.startswith(rate) for k in rates):  # the rule `tune` skips such recipes by
        raise PlanError(f"plan: fp8_linears {recipe}: {rate} GEMMs need {rate} tensor-core rates; got device "
                        f"{dev.name!r} with {', '.join(rates)}; expected a device with {rate} tensor cores")
    if recipe not in BLACKWELL_ONLY:
        return
    archs, what = BLACKWELL_ONLY[recipe]
    arch = str(getattr(dev, "arch", ""))
    if arch not in archs:
        raise PlanError(f"plan: fp8_linears {recipe}: {what}; got device {dev.name!r} (arch {arch!r}); expected a "
                        f"device of arch {' or '.join(archs)} (e.g. b200), or fp8_linears current, tensorwise, "
                        "rowwise or delayed")


def _fp8_weight_cache(g: OpGraph) -> float:
    """Transformer Engine's fp8 copies of the linear weights (delayed and current scaling, MXFP8), cached
    across a step's microbatches (``is_first_microbatch``): the weight and its transpose, 1 byte each per
    parameter (:data:`workloads.precision.TE_WEIGHT_CACHE`)."""
    from workloads.precision import TE_WEIGHT_CACHE

    if g.meta.get("fp8_linears") not in TE_WEIGHT_CACHE:
        return 0.0
    return 2.0 * _fp8_weight_numel(g)


def _fp8_gathered_units(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan,
                        units: Mapping[str, float]) -> dict[str, float] | None:
    """Bytes FSDP2 gathers of each wrapping unit with ``plan.fsdp_fp8_all_gather``: the unit's parameter bytes
    (``units``, 16-bit) with its fp8 linear weights at 1 byte each (torchao's ``fsdp_pre_all_gather`` returns the
    fp8 ``_data`` of the cast shard, ``fsdp_post_all_gather`` wraps the gathered bytes as the ``Float8Tensor``
    the GEMMs read, torchao/float8/fsdp_utils.py @ pytorch/ao eab345c; FSDP2 gathers a group of mixed dtypes as
    bytes). None without it."""
    from workloads.dtypes import dtype_bytes

    if not plan.fsdp_fp8_all_gather or not sgs:
        return None
    less = dtype_bytes(str(sgs[0][0].graph.meta.get("dtype") or "bf16")) - 1.0
    out = dict(units)
    for sg, _ in sgs:
        for k, n in sg.graph.memo("fp8_weight_units", lambda g=sg.graph: _fp8_weight_units(g)).items():
            if k in out:
                out[k] = max(0.0, out[k] - less * n)
    return out


def _gathered_weight_bytes(g: OpGraph, plan: ParallelPlan) -> float:
    """Bytes of the stage's parameters the distributed optimizer all-gathers after its update: each once
    (``OpGraph.weight_bytes``), the fp8 linear weights 1 byte each with ``plan.fp8_param``: Megatron-Core keeps
    Transformer Engine's fp8 parameters (``fp8_param_gather``) in a ``torch.uint8`` buffer ("when creating the
    param buffer for fp8 params, it is necessary to use torch.uint8, not the 'fake' dtype",
    megatron/core/distributed/distributed_data_parallel.py ``_allocate_buffers_for_parameters``; TE 2.x's
    ``QuantizedTensor`` covers current scaling and MXFP8 alike, megatron/core/fp8_utils.py ``is_float8tensor``)."""
    from workloads.dtypes import dtype_bytes

    wb = float(g.weight_bytes)
    if not plan.fp8_param and not plan.fsdp_fp8_all_gather:  # FSDP2's fp8 gather: :func:`_fp8_gathered_units`
        return wb
    return wb - (dtype_bytes(str(g.meta.get("dtype") or "bf16")) - 1.0) * _fp8_weight_numel(g)


def _weight_itemsize(sgs: list[tuple[StageGraph, _GraphCost]]) -> tuple[float, bool]:
    """(bytes per parameter, whether the weights are bf16) of the stage's floating-point weights."""
    for sg, _ in sgs:
        for t in sg.graph.tensors.values():
            if t.role is Role.WEIGHT and t.dtype.is_float:
                return float(t.nbytes) / max(1, t.numel), t.dtype.value == "bf16"
    return 2.0, True


def _communicator_groups(plan: ParallelPlan) -> list[tuple[str, int, int]]:
    """(name, ranks, stride between consecutive ranks) of the NCCL communicators one device belongs to: one per
    parallel dimension of size > 1, ranks laid out tensor-parallel first, then context-, data- (expert-) and
    pipeline-parallel (Megatron-Core's ``tp-cp-ep-dp-pp`` order; torchtitan's mesh ``pp, dp, cp, tp``, the last
    dimension fastest); pipeline sends use a two-rank communicator with each neighbouring stage (PyTorch
    ``ProcessGroupNCCL`` keys a lone ``send``/``recv`` by the pair of ranks, ``getKeySendRecv``)."""
    inner = plan.tp * plan.cp
    out = [(name, n, stride) for name, n, stride in (("tp", plan.tp, 1), ("cp", plan.cp, plan.tp),
                                                     ("dp", plan.dp, inner), ("ep", plan.ep, inner)) if n > 1]
    if plan.pp > 1:
        out += [("pp_send", 2, inner * plan.dp), ("pp_recv", 2, inner * plan.dp)]
    return out


def _nccl_bytes(plan: ParallelPlan, system: DeviceSpec | SystemSpec | None) -> dict[str, float]:
    """NCCL's device bytes on one rank of ``plan`` by communicator (:func:`_communicator_groups`), each as NCCL 2.21
    allocates it at creation (:func:`simulator.report.memory.nccl_communicator_bytes`): the ring channels the
    system's fabric entry states (``ring_channels``; :data:`~simulator.report.memory.NCCL_CHANNELS` where none),
    NVLink SHARP with its ``nvls_channels`` (``nvls_channels_one_node`` for a communicator inside one node, where
    given) unless ``plan.nccl_nvls`` is off (``NCCL_NVLS_ENABLE=0``); ranks of a group share a node as the layout
    places them (``devices_per_node``)."""
    from simulator.lowering.collectives import collective_system_for
    from simulator.report import memory as M

    csys = collective_system_for(system) if system is not None else None
    per_node = int(getattr(system, "devices_per_node", 0) or 0) if isinstance(system, SystemSpec) else 0
    channels = int(getattr(csys, "ring_channels", None) or M.NCCL_CHANNELS)
    out: dict[str, float] = {}
    for name, n, stride in _communicator_groups(plan):
        local = n if not per_node else (1 if stride >= per_node else min(n, per_node // stride))
        nvls = 0
        if plan.nccl_nvls and csys is not None:
            one = getattr(csys, "nvls_channels_one_node", None) if local >= n else None
            nvls = int(one or getattr(csys, "nvls_channels", None) or 0)
        out[name] = sum(M.nccl_communicator_bytes(n, local, channels, nvls).values())
    return out


def _expert_share(sgs: Sequence[tuple[StageGraph, Any]]) -> float:
    """Fraction of a stage's parameter bytes held by MoE experts (weights of the ``experts.`` modules)."""
    total = experts = 0.0
    for sg, _ in sgs:
        t, e = sg.graph.memo("expert_weight_bytes", lambda g=sg.graph: _expert_weight_bytes(g))
        total, experts = total + t, experts + e
    return experts / total if total else 0.0


def _expert_weight_bytes(g: OpGraph) -> tuple[float, float]:
    """(all, the experts') bytes of the parameters of ``g``: weights no op produces."""
    total = experts = 0.0
    for t in g.tensors.values():
        if t.role is Role.WEIGHT and g.producer(t.name) is None:
            total += float(t.nbytes)
            experts += float(t.nbytes) if ".experts." in f".{t.name}" else 0.0
    return total, experts


def _expert_sharded(plan: ParallelPlan, shard: int, states: tuple[float, float, float], share: float,
                    weight: tuple[float, bool], units: Mapping[str, float], ex_units: Mapping[str, float],
                    pipelined_once: bool = True) -> tuple[float, float, float, dict[str, float] | None]:
    """(parameters, gradients, optimizer state, FSDP buffers or None) with the experts' part (``share`` of the
    bytes; ``ex_units`` per wrapping unit) sharded over the expert-data-parallel group
    (:func:`expert_dp_size`: Megatron-Core's distributed optimizer shards expert parameters over
    ``expert_data_parallel_group``, the data-parallel ranks that hold the same experts,
    megatron/core/optimizer/__init__.py ``get_megatron_optimizer`` building one optimizer per group; NeMo
    AutoModel's FSDP over ``ep_shard``). Where that group is one rank under FSDP, NeMo AutoModel leaves the
    experts out of FSDP (``fully_shard(block, ignored_params=set(moe.experts.parameters()))``,
    components/moe/parallelizer.py ``apply_fsdp`` @ cb97654): the FSDP buffers (gathered parameters,
    reduce-scatter input, pipelined accumulation) are the dense parameters' only, returned in place of the
    whole stage's; else None (the experts are gathered and reduced like the rest). ``pipelined_once``: as
    :func:`_sharded_states`."""
    ex_shard = expert_dp_size(plan, shard)
    dense_units = {k: max(0.0, v - ex_units.get(k, 0.0)) for k, v in units.items()}
    ex = _sharded_states(plan, ex_shard, *(share * v for v in states), weight, ex_units, pipelined_once)
    dense = _sharded_states(plan, shard, *((1.0 - share) * v for v in states), weight, dense_units, pipelined_once)
    p, g, o = (a + b for a, b in zip(dense[:3], ex[:3], strict=True))
    return p, g, o, (dense[3] if plan.fsdp and ex_shard == 1 else None)


def _sharded_states(plan: ParallelPlan, shard: int, params: float, grads: float, opt: float,
                    weight: tuple[float, bool], units: Mapping[str, float],
                    pipelined_once: bool = True, gathered: Mapping[str, float] | None = None
                    ) -> tuple[float, float, float, dict[str, float]]:
    """(parameters, gradients, optimizer state, extra buffers) of one device after sharding.

    FSDP (PyTorch FSDP2 with ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, as
    torchtitan sets it): the sharded parameters are fp32 (they are the master weights, so no separate
    master copy), the sharded gradients fp32, the moments fp32; the unsharded 16-bit parameters of
    :data:`~simulator.report.memory.FSDP_UNSHARDED_IN_FLIGHT` units and the fp32 unsharded gradient of
    the largest unit (the reduce-scatter input) are buffers; a ``param_dtype`` ``bf16`` plan keeps the module's
    bf16 parameters (NeMo AutoModel's ``from_config``, ``torch_dtype="auto"`` -> ``torch.bfloat16``,
    nemo_automodel/_transformers/auto_model.py @ cb97654): the sharded parameters, their gradients (FSDP2
    casts the fp32-reduced shard back to the parameter's dtype) and ``torch.optim.Adam``'s moments
    (``zeros_like`` the parameter) are bf16, 8 bytes per parameter. Megatron-LM (no FSDP): 16-bit weights,
    gradients accumulated in fp32 for bf16 (``--accumulate-allreduce-grads-in-fp32``, forced on with
    ``--bf16``; Megatron-LM docs/source/api-guide/dist_optimizer.md: 18 bytes per parameter, 6 + 12/d
    with the distributed optimizer), the optimizer's master weights and moments sharded by ZeRO stage;
    ``grad_reduce_dtype`` ``bf16`` (Megatron-Core ``grad_reduce_in_fp32=False``: the main-gradient buffer in
    the parameters' dtype, megatron/core/distributed/distributed_data_parallel.py ``grad_dtype``) keeps the
    graph's 16-bit gradients.

    ``pipelined_once`` (:func:`_fsdp_gathers_once_per_step` of the graphs' stack): a pipelined FSDP stage holds its
    whole unsharded state through the step (:func:`_pipelined_fsdp_buffers`); where it is False (MaxText's default
    ``pipeline_fsdp_ag_once: False``, which gathers the weights for each microbatch's forward and backward; its docs,
    docs/explanations/sharding.md "PP + FSDP/DP", name the once-a-step gather's "huge memory cost - the weights and
    gradients are not sharded by FSDP" as what the default avoids; Megatron) the per-gather buffers of
    an unpipelined plan stand: the in-flight units and the reduce-scatter input.

    ``gathered``: the bytes FSDP2 gathers of each unit where they differ from ``units`` (:func:`_fp8_gathered_units`:
    fp8 linear weights gathered in fp8); the unsharded parameters are those, the gradients stay ``units``'.
    """
    from simulator.report import memory as M

    wbytes, bf16 = weight
    n = params / wbytes
    extra: dict[str, float] = {}
    if plan.fsdp:
        master = 4.0 * n if wbytes < 4 else 0.0  # the graph's optimizer state holds a master copy
        root, blocks = _fsdp_groups(units)
        g_root, g_blocks = _fsdp_groups(gathered) if gathered is not None else (root, blocks)
        extra["fsdp_unsharded_params"] = g_root + sum(g_blocks[:M.FSDP_UNSHARDED_IN_FLIGHT]) if shard > 1 else 0.0
        extra["fsdp_reduce_scatter"] = (blocks[0] if blocks else root) / wbytes * 4.0 if shard > 1 else 0.0
        if plan.pp > 1 and shard > 1 and pipelined_once:
            extra.update(_pipelined_fsdp_buffers(params, n, wbytes))
            if gathered is not None:  # the stage's gathered parameters, fp8 linear weights 1 byte each
                extra["fsdp_unsharded_params"] = sum(gathered.values())
        if plan.param_dtype == "bf16":  # bf16 parameters, gradients and Adam moments, no master copy
            return 2.0 * n / shard, 2.0 * n / shard, max(0.0, opt - master) / 2.0 / shard, extra
        return 4.0 * n / shard, 4.0 * n / shard, max(0.0, opt - master) / shard, extra
    zero = plan.zero if shard > 1 else 0
    g = 4.0 * n if (bf16 and zero <= 1 and plan.grad_reduce_dtype != "bf16") else grads
    if zero == 3:
        top = sorted(units.values(), reverse=True)
        extra["zero3_unsharded_params"] = sum(top[:M.FSDP_UNSHARDED_IN_FLIGHT])
    return (params / shard if zero >= 3 else params, g / shard if zero >= 2 else g,
            opt / shard if zero >= 1 else opt, extra)


def _fsdp_groups(units: Mapping[str, float]) -> tuple[float, list[float]]:
    """(16-bit bytes of the root group, of each block group, largest first) as torchtitan wraps a model in
    FSDP2: ``fully_shard`` on every transformer block, then on the whole model (``apply_fsdp``,
    torchtitan/parallelisms/parallelize_llama.py @ 9dec370), so the modules outside the blocks (embedding,
    final norm, output projection) are one root group."""
    from workloads.recompute import layer_key

    blocks = sorted((v for k, v in units.items() if layer_key(k) == k), reverse=True)
    return sum(v for k, v in units.items() if layer_key(k) != k), blocks


def _fsdp_stream_pools(plan: ParallelPlan, shard: int, units: Mapping[str, float], wbytes: float,
                       gathered: Mapping[str, float] | None = None) -> dict[str, float]:
    """Bytes the caching allocator keeps reserved in FSDP2's side streams (``reserve.*`` of the breakdown;
    :func:`~simulator.report.memory.fsdp_stream_pool_bytes`); none without FSDP sharding. ``gathered``: the bytes
    gathered of each unit (:func:`_fp8_gathered_units`), which size the all-gather stream's block."""
    from simulator.report import memory as M

    if not plan.fsdp or shard <= 1 or not units:
        return {}
    root, blocks = _fsdp_groups(units)
    pools = M.fsdp_stream_pool_bytes(max([root, *blocks]), 4.0 / wbytes, shard)
    if gathered is not None:
        g_root, g_blocks = _fsdp_groups(gathered)
        pools["fsdp_all_gather_stream"] = max([g_root, *g_blocks])
    return pools


def _pipelined_fsdp_buffers(params: float, n: float, wbytes: float) -> dict[str, float]:
    """FSDP2 under PyTorch's pipeline schedules holds a stage's whole unsharded state through the step:
    torchtitan shards pipelined stages with ``reshard_after_forward=False`` (torchtitan/parallelisms/
    parallelize_llama.py ``apply_fsdp``, ``if pp_enabled: reshard_after_forward = False``, @ 9dec370), and
    ``PipelineStage.backward_maybe_with_nosync`` (torch/distributed/pipelining/stage.py) runs every backward
    but the last with ``set_reshard_after_backward(False)`` and ``set_requires_gradient_sync(False)``, so
    the unsharded gradients accumulate, upcast to the fp32 ``reduce_dtype``
    (``FSDPParam.to_accumulated_grad_if_needed``), until the last microbatch's reduce-scatter. Replaces
    the in-flight units of :func:`_sharded_states` (bytes of one device)."""
    return {"fsdp_unsharded_params": params, "fsdp_unsharded_grads": 4.0 * n if wbytes < 4 else params}


#: Software-stack profiles whose pipelined training runs torch.distributed.pipelining as PyTorch had it in
#: December 2024 (torchtitan before 2025-04, whose benchmarks name torch 1963fc8 of 2024-12-23): each
#: ``PipelineStage`` keeps the output of every microbatch until the next step (``forward_one_chunk`` appends it to
#: ``output_chunks``, which only ``clear_runtime_states`` empties; limited to the last stage by pytorch/pytorch#153383,
#: 2025-05-12), one receive buffer per microbatch for its input and for its output's gradient (``_prepare_forward_infra``,
#: ``_prepare_backward_infra``, allocated once), and the input gradients ``torch.autograd.backward`` accumulates on
#: those (leaf) receive buffers until the next step (``clear_runtime_states`` sets ``buffer.grad = None``); read in
#: torch 2.6.0's torch/distributed/pipelining/stage.py (git 2236df1, the release cut from main in December 2024).
#: See :func:`_torch_pipeline_peak`.
PIPELINE_OUTPUTS_KEPT_PROFILES = ("fsdp2-compile-blocks", "torchtitan-eager")


def _walks_torch_pipeline(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan, act_host: float) -> bool:
    """Whether a stage's peak is :func:`_torch_pipeline_peak`'s walk: a pipelined FSDP2 plan of a stack that runs
    torch.distributed.pipelining (the caller's ``fsdp_unsharded_grads``: :func:`_fsdp_gathers_once_per_step`), 1F1B
    or interleaved with microbatches a multiple of the stages, one schedule run a step (several runs,
    :attr:`~workloads.parallel.ParallelPlan.pipeline_microbatches`, keep the accumulators between runs), nothing on
    the host."""
    if plan.schedule not in ("1f1b", "interleaved") or act_host or "activations" in plan.offload or not sgs:
        return False
    if plan.pipeline_microbatches and plan.pipeline_microbatches != plan.microbatches:
        return False
    return plan.schedule == "1f1b" or plan.microbatches % plan.pp == 0


def _chunk_work_bytes(sg: StageGraph, plan: ParallelPlan) -> float:
    """One microbatch's peak of live activations on one chunk of a PyTorch FSDP2 stage, with the loss's fp32
    working set and the head's gathered input, as :func:`_activation_memory` counts it for the chunk alone."""
    from simulator.report.memory import peak_activation_bytes

    g = sg.graph
    work = float(g.memo("peak_activation_bytes_first_use", lambda: peak_activation_bytes(g, inputs_from_first_use=True)))
    stack = "pytorch-compiled" if _loss_compiled(g) else ("pytorch-loss-parallel" if plan.tp > 1 else "pytorch")
    work += g.memo(f"fp32_loss_bytes.{stack}", lambda: _fp32_loss_bytes(g, stack))
    return work + g.memo("saved_head_gather_bytes", lambda: _saved_head_gather_bytes(g))


def _pipeline_tensor_bytes(sg: StageGraph) -> tuple[float, float, float]:
    """(bytes of the stage's output sent to the next stage, of its input received from the previous one, of the
    16-bit logits of the last stage) for one microbatch; 0 where the chunk has none."""
    out = inp = logits = 0.0
    for op in sg.graph.ops[: sg.forward_ops]:
        if op.kind == "send" and op.inputs:
            out = float(op.inputs[0].nbytes)
        elif op.kind == "recv" and op.outputs:
            inp = float(op.outputs[0].nbytes)
        elif op.kind == "cross_entropy":
            logits = float(op.inputs[0].nbytes)
    return out, inp, logits


def _torch_pipeline_peak(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan, params: list[float],
                         grads: list[float]) -> dict[str, float]:
    """The peak of one pipeline rank under torch.distributed.pipelining with FSDP2 as torchtitan runs it, walked op
    by op over the rank's schedule (:func:`~simulator.parallel.schedule.device_order`: torch's ``Schedule1F1B`` and
    ``ScheduleInterleaved1F1B`` run the same order for microbatches a multiple of the stages). Per chunk (a
    ``PipelineStage``) ``c``:

    * its unsharded 16-bit parameters ``params[c]`` from its first forward to its last backward: torchtitan shards
      pipelined stages with ``reshard_after_forward=False`` and ``backward_maybe_with_nosync`` reshards only after
      the last backward (``set_reshard_after_backward(True)`` then ``post_backward``, stage.py);
    * its fp32 unsharded gradient accumulators ``grads[c]`` from its first backward (FSDP2's
      ``to_accumulated_grad_if_needed`` upcasts the first microbatch's gradient) to its last, whose
      ``post_backward`` reduce-scatters and frees them: so an interleaved rank that finishes one chunk's backwards
      before the next chunk's holds one chunk's accumulators, where 1F1B holds its stage's from the first
      backward through every later forward;
    * the stash of each microbatch from its forward to its backward, and the working set of the op running;
    * with :data:`PIPELINE_OUTPUTS_KEPT_PROFILES`, the stage's per-microbatch tensors: every forward's output
      (the last stage's 16-bit logits), a receive buffer for the output's gradient per microbatch (but one,
      which the working set counts), the input receive buffers of microbatches not in flight and the input
      gradients of the microbatches already back-propagated.

    Returns the bytes at the peak: ``activations`` (stash, working set and ``retained``, the last of them),
    ``fsdp_unsharded_params``, ``fsdp_unsharded_grads``."""
    from simulator.parallel.schedule import device_order

    m = plan.microbatches
    v = len(sgs)
    keep = str(sgs[0][0].graph.meta.get("framework") or "") in PIPELINE_OUTPUTS_KEPT_PROFILES
    work = [_chunk_work_bytes(sg, plan) for sg, _ in sgs]
    stash = [gc.stash_bytes for _, gc in sgs]
    sizes = [_pipeline_tensor_bytes(sg) for sg, _ in sgs]
    n_f, n_b = [0] * v, [0] * v
    best = {"total": -1.0}
    for kind, _, c in device_order(plan.schedule, plan.pp, m, sgs[0][0].stage, v):
        if kind == "F":
            n_f[c] += 1
        else:
            n_b[c] += 1
        live = [n_f[i] - n_b[i] - (1 if (i == c and kind == "F") else 0) for i in range(v)]
        p = sum(params[i] for i in range(v) if n_f[i] and (n_b[i] < m or (i == c and kind == "B")))
        g = sum(grads[i] for i in range(v) if n_b[i] and (n_b[i] < m or (i == c and kind == "B")))
        act = work[c] + sum(stash[i] * live[i] for i in range(v))
        kept = 0.0
        if keep:
            for i, (out, inp, logits) in enumerate(sizes):
                done_f = n_f[i] - (1 if (i == c and kind == "F") else 0)
                done_b = n_b[i] - (1 if (i == c and kind == "B") else 0)
                in_flight = n_f[i] - done_b  # this op's microbatch included
                kept += (logits if logits else out) * (n_f[i] if kind == "B" or i != c else done_f)
                kept += out * (m - 1)
                kept += inp * (max(0, m - in_flight) + done_b)
        total = p + g + act + kept
        if total > best["total"]:
            best = {"total": total, "activations": act + kept, "retained": kept, "fsdp_unsharded_params": p,
                    "fsdp_unsharded_grads": g}
    return best


#: Bytes per logit live at once when a 16-bit model's cross entropy runs in fp32, by stack:
#: PyTorch's ``F.cross_entropy(pred.float(), ...)`` (torchtitan) is ``nll_loss(log_softmax(x))``
#: (aten/src/ATen/native/LossNLL.cpp ``cross_entropy_loss``): its backward holds the saved fp32
#: log-softmax, nll_loss's dense fp32 gradient and log_softmax_backward's fp32 result, 12 bytes;
#: Megatron-LM's ``vocab_parallel_cross_entropy(output.float(), labels)`` (tensor_parallel/cross_entropy.py)
#: keeps the fp32 softmax and turns it into the gradient in place, then casts it to 16 bits: 4 + 2 bytes.
#: Under torch.compile (a profile's ``compiled_loss``: torchtitan compiles ``cross_entropy_loss`` with ``--compile``
#: since 2025-04-02) Inductor fuses the upcast, log-softmax and NLL and their backward: the 16-bit logits and their
#: 16-bit gradient only, 4 bytes.
#: With tensor parallelism torchtitan runs the eager loss under ``loss_parallel()`` (``ParallelDims.loss_parallel_enabled``:
#: ``tp > 1`` unless ``--training.disable_loss_parallel``; ``get_train_context``, torchtitan/utils.py @ 9dec370) on the
#: vocabulary-sharded logits; DTensor's handlers (torch/distributed/tensor/parallel/loss.py) replace the aten kernels:
#: the forward keeps the fp32 log-softmax ``result``; the backward ``_nll_loss_and_log_softmax_backward`` computes
#: ``(grad_input + torch.exp(x)) * grad_output`` with ``grad_input = torch.zeros_like(x)``: the saved result, the zeros,
#: the sum and the product (or ``exp(x)`` before it) are four fp32 tensors at once, 16 bytes, where the bf16 logits are
#: already freed (``del pred`` before ``loss.backward()``, train.py @ 9dec370).
LOSS_PEAK_BYTES_PER_LOGIT = {"pytorch": 12.0, "megatron": 6.0, "pytorch-compiled": 4.0, "pytorch-loss-parallel": 16.0}


def _fp32_loss_bytes(g: OpGraph, stack: str) -> float:
    """Extra bytes at the loss over what the graph holds there (its 16-bit logits and their 16-bit
    gradient) when the training stack computes the cross entropy of 16-bit logits in fp32
    (:data:`LOSS_PEAK_BYTES_PER_LOGIT`)."""
    for op in g.ops:
        if op.kind == "cross_entropy":
            x = op.inputs[0]
            size = x.nbytes / max(1, x.numel)
            if size >= 4:
                return 0.0
            return max(0.0, float(x.numel) * (LOSS_PEAK_BYTES_PER_LOGIT[stack] - 2.0 * size))
    return 0.0


def _saved_head_gather_bytes(g: OpGraph) -> float:
    """Bytes PyTorch's tensor parallelism keeps of the output projection's all-gathered input beyond the
    local shard the graph keeps. torchtitan parallelises the head with ``ColwiseParallel(input_layouts=Shard(1))``
    (``apply_tp``, torchtitan/parallelisms/parallelize_llama.py @ 9dec370), whose input hook redistributes the
    sequence-sharded norm output to ``Replicate()`` (torch/distributed/tensor/parallel/style.py
    ``ColwiseParallel._prepare_input_fn``); ``F.linear`` then saves that gathered input for its weight
    gradient, from the head's forward through the loss to its backward (outside any checkpointed block).
    Megatron-LM gathers it again in the backward instead (the graph's ``recompute_in_backward``)."""
    for op in g.ops:
        if (op.kind == "all_gather" and op.attrs.get("recompute_in_backward") and op.group.startswith("lm_head")
                and "@recompute" not in op.name and ".bwd" not in op.name):
            return max(0.0, float(op.outputs[0].nbytes - op.inputs[0].nbytes))
    return 0.0


def _loss_compiled(g: OpGraph) -> bool:
    """Whether the graph's software stack runs its loss under torch.compile (``compiled_loss``)."""
    name = g.meta.get("framework")
    if not name:
        return False
    from workloads.frameworks import get_profile

    return bool(get_profile(str(name)).compiled_loss)


#: training stacks whose fused kernels keep fewer tensors for the backward than the graph's unfused ops
#: (:func:`_fused_unsaved`)
FUSED_SAVE_STACKS = ("megatron-core",)


def _fused_unsaved(sg: StageGraph) -> tuple[float, float]:
    """(bytes, bytes of the pipeline stash) of forward tensors the graph's backward reads but Megatron-Core's
    fused kernels do not keep (0 for another stack, :data:`FUSED_SAVE_STACKS`):

    * the SiLU output of a gated MLP: ``bias_swiglu_impl``/``weighted_bias_swiglu_impl``
      (megatron/core/fusions/fused_bias_swiglu.py, ``SwiGLUFunction``/``WeightedSwiGLUFunction``) save their
      input only and recompute the SiLU in their backward (``bias_activation_fusion``: True in Megatron-Bridge's
      src/megatron/bridge/models/llama/llama_provider.py and gpt_provider.py @ 6ef21f8, set again by the Qwen3
      performance configs; Megatron-LM's ``--bias-swiglu-fusion`` default);
    * the experts' outputs entering the MoE combine: ``TEGroupedMLP`` multiplies the router probabilities in
      the experts' activation (megatron/core/transformer/moe/experts.py ``bias_act_func`` with
      ``permuted_probs``), so the unpermute carries no probabilities and keeps no expert outputs; the
      probabilities' gradient comes from the saved activation input.

    The bytes are taken off the step's peak whole (the peak is the start of the backward, where every
    layer's stash is live)."""
    g = sg.graph
    if g.meta.get("framework") not in FUSED_SAVE_STACKS:
        return 0.0, 0.0
    return g.memo(f"fused_unsaved.{sg.forward_ops}", lambda: _fused_unsaved_bytes(sg))


def _fused_unsaved_bytes(sg: StageGraph) -> tuple[float, float]:
    from workloads.recompute import layer_key

    g = sg.graph
    names: dict[str, float] = {}
    for op in g.ops:
        if "@recompute" in op.name or ".bwd" in op.name or layer_key(op.group) is None:
            continue
        if op.kind == "elementwise" and op.attrs.get("op") == "silu" and any(
                c.kind == "elementwise" and c.attrs.get("op") == "mul" for c in g.consumers(op.outputs[0].name)):
            names[op.outputs[0].name] = float(op.outputs[0].nbytes)
        elif op.kind == "moe_combine":
            names[op.inputs[0].name] = float(op.inputs[0].nbytes)
    read = {t.name for op in g.ops if ".bwd" in op.name for t in op.inputs}
    total = sum(b for n, b in names.items() if n in read)
    kept = _stash_kept(sg)
    return total, sum(kept.get(n, 0.0) for n in names)


def _activation_memory(sgs: list[tuple[StageGraph, _GraphCost]], plan: ParallelPlan, train: bool,
                       inflight: float, stack: str | None = None) -> tuple[float, float, float]:
    """(activation bytes on the device, bytes kept on the host, large tensors live at the peak).

    One microbatch's peak of live activations (its stash included) plus the stash of the other
    microbatches the schedule keeps in flight (1F1B: ``p - s`` on stage ``s``; Narayanan et al. 2021).
    Tensors a recomputation policy offloads, and with ``offload=activations`` the whole stash but
    the layer being worked on, stay on the host."""
    work = max(float(gc.report.memory.activations_bytes) for _, gc in sgs)
    if not train:
        return work, 0.0, 0.0
    from simulator.report.memory import peak_activation_bytes

    if stack == "xla":  # XLA's buffers and MaxText's loss (simulator/report/memory_xla.py)
        from simulator.report.memory_xla import PARAM_DTYPE_BYTES, xla_peak_activation_bytes

        chunks, pbytes = plan.loss_chunks, PARAM_DTYPE_BYTES.get(plan.param_dtype, 4.0)
        work = max(sg.graph.memo(f"xla_peak_activation_bytes.{chunks}.{pbytes}",
                                 lambda g=sg.graph: xla_peak_activation_bytes(g, chunks, pbytes)) for sg, _ in sgs)
    else:
        work = max(float(sg.graph.memo("peak_activation_bytes_first_use", lambda g=sg.graph: peak_activation_bytes(
            g, inputs_from_first_use=True))) for sg, _ in sgs)
        stack = "pytorch" if plan.fsdp else "megatron"  # FSDP plans stand for PyTorch (torchtitan); others Megatron-LM
        if stack == "pytorch" and _loss_compiled(sgs[0][0].graph):
            stack = "pytorch-compiled"
        elif stack == "pytorch" and plan.tp > 1:
            stack = "pytorch-loss-parallel"  # torchtitan's eager loss under loss_parallel()
        work += max(sg.graph.memo(f"fp32_loss_bytes.{stack}", lambda g=sg.graph: _fp32_loss_bytes(g, stack))
                    for sg, _ in sgs)
        if stack != "megatron":  # PyTorch's DTensor head keeps its gathered input
            work += max(sg.graph.memo("saved_head_gather_bytes", lambda g=sg.graph: _saved_head_gather_bytes(g))
                        for sg, _ in sgs)
    fused = [_fused_unsaved(sg) for sg, _ in sgs]
    work -= max((f[0] for f in fused), default=0.0)
    stash = sum(gc.stash_bytes for _, gc in sgs) - sum(f[1] for f in fused)
    count = sum(gc.stash_tensors for _, gc in sgs)
    off = sum(gc.offloaded_bytes for _, gc in sgs)
    host = off * inflight
    act = work + stash * max(0.0, inflight - 1.0) - host
    if "activations" in plan.offload:
        layers = max(1, sum(sg.layers[1] - sg.layers[0] for sg, _ in sgs))
        moved = (stash - off) * inflight * (1.0 - 1.0 / layers)
        act -= moved
        host += moved
    return max(0.0, act), host, count * max(1.0, inflight)


def _simulate(per_stage: list[list[tuple[StageGraph, _GraphCost]]], plan: ParallelPlan, m: int,
              coll: Mapping[tuple[str, float], float], sync_kind: str, opt_s: list[float], gather: list[float],
              closed: PipelineTime, closed_latency: float, *, acc: list[list[float]] | None = None,
              tail_sync: list[float] | None = None) -> tuple[float, PipelineTime, dict[str, float]]:
    """The step by the discrete-event engine: (latency, pipeline, breakdown).

    Each chunk's passes run its compute on the device (the pipeline's sends and receives taken out
    of the stage times), its sends occupy the link to the next device; the last backward pass of
    each chunk releases its gradient buckets (:meth:`_GraphCost.bucket_offsets`) onto the
    data-parallel stream; the update and the ZeRO parameter gather follow the device's last bucket.

    A pipelined FSDP2 stage (:func:`_pipelined_fsdp`, the closed form's costs): ``acc[s][c]``, the seconds each
    backward of chunk ``c`` adds its gradients to the step's accumulators, runs in that backward pass on the
    compute stream; ``tail_sync[s]``, the stage's whole reduce-scatter (of every schedule run) in FSDP2's ``reduce_dtype``, runs after
    the device's last pass with the compute stream waiting on it (:func:`_pipelined_reduce_scale`), in place of
    buckets that overlap the last backward.
    """
    from simulator.parallel.pipeline_des import Bucket, StageWork, simulate_step

    p = len(per_stage)
    work: list[list[StageWork]] = []
    buckets: list[list[Bucket]] = []
    on_stream = [0.0] * p  # communication that stays on the compute stream (tensor-parallel collectives)
    for s in range(p):
        row, brow = [], []
        for c, (_sg, gc) in enumerate(per_stage[s]):
            f, b, _o, cm = gc.split
            fs, fr, bs, br = gc.links()
            row.append(StageWork(forward_s=max(0.0, f - fs - fr), backward_s=max(0.0, b - bs - br) + (acc[s][c] if acc else 0.0),
                                 send_forward_s=fs, send_backward_s=bs))
            on_stream[s] += cm - fs - fr - bs - br
            if plan.dp * plan.cp > 1 and tail_sync is None:
                brow += [Bucket(chunk=c, ready_s=ready, sync_s=coll[(sync_kind, nb)], nbytes=nb)
                         for ready, nb in gc.bucket_offsets()]
        work.append(row)
        buckets.append(brow)
    after = [o + g + (tail_sync[d] if tail_sync else 0.0) for d, (o, g) in enumerate(zip(opt_s, gather, strict=True))]
    trace = simulate_step(work, m, plan.schedule, buckets=buckets, after_s=after)
    busy = [trace.busy_s(d) for d in range(p)]
    bottleneck = max(range(p), key=lambda d: busy[d])
    pipe = PipelineTime(step_s=trace.pipeline_s, busy_s=busy[bottleneck], bubble_s=trace.bubble_s,
                        bottleneck_stage=bottleneck, in_flight=closed.in_flight)
    worst = max(range(p), key=lambda d: trace.finish_s[d])
    exposed = max(0.0, trace.finish_s[worst] - trace.last_pass_end_s(worst) - after[worst])
    synced = sum(e - s0 for s0, e in trace.syncs[worst])
    if tail_sync:  # the reduce-scatter the compute stream waited on after the last pass
        exposed = synced = tail_sync[worst]
    comm_busy = m * max(0.0, on_stream[bottleneck])
    breakdown = {
        "compute_s": pipe.busy_s - comm_busy,
        "communication_s": comm_busy + exposed + gather[worst],
        "bubble_s": pipe.bubble_s,
        "optimizer_s": opt_s[worst],
        "dp_sync_s": synced,
        "dp_sync_exposed_s": exposed,
        "closed_form_latency_s": closed_latency,
    }
    return trace.step_s, pipe, breakdown


def _shift_layers(name: str, shift: int) -> str:
    """``layers.<i>`` in an op name or group renumbered by ``shift`` (a stage sharing another's graph)."""
    return _LAYER.sub(lambda m: f"layers.{int(m.group(1)) + shift}", name)


_LAYER = re.compile(r"layers\.(\d+)")


def _model_flops(costs: list[_GraphCost], plan: ParallelPlan, train: bool, m: int) -> float:
    """Model FLOPs of one step over all devices: the unsharded work, without recomputation or
    collectives' reductions (the numerator of MFU, as in Korthikanti et al. 2022)."""
    total = float(sum(c.model_flops for c in costs))  # integer counts: exact in any order
    per_replica = total * plan.tp * plan.cp * (m if train else 1)
    return per_replica * plan.dp


#: a 16-bit or fp8 precision a device lists no rate of -> its same-width twin's rate (TPUs list bf16, not fp16)
_PEAK_TWIN = {"fp16": "bf16", "bf16": "fp16", "fp8_e5m2": "fp8_e4m3", "fp8_e4m3": "fp8_e5m2"}


def _peak_flops(dev: DeviceSpec, g: OpGraph, allow_tf32: bool = False) -> float:
    """MFU's denominator: the dense peak of the precision the step's GEMMs run in, the path
    :func:`hwmodels.gpu.gpu_params` prices them on: fp32 on the TF32 tensor rate with ``allow_tf32``,
    else on a native fp32 matrix rate (CDNA's MFMA F32, a TPU's MXU) or the SIMT/vector fp32 rate; any
    other dtype at its tensor rate. fp8 linears of a bf16 step (``fp8_linears``) leave the graph's dtype
    bf16, so their MFU is over the bf16 peak, as torchtitan and Megatron-Bridge quote fp8 recipes'.
    0 where the device lists no rate of the dtype (never another precision's peak)."""
    dt = str(g.meta.get("dtype", "bf16"))
    tensor: Mapping[str, float] = dev.compute.tensor_flops_per_s or {}
    vector: Mapping[str, float] = dev.compute.vector_flops_per_s or {}
    if dt == "fp32":
        key = "tf32" if allow_tf32 and "tf32" in tensor else "fp32"
        return float(tensor.get(key) or vector.get("fp32", 0.0))
    return float(tensor.get(dt) or tensor.get(_PEAK_TWIN.get(dt, dt)) or vector.get(dt, 0.0))


def generate_request(model: Any, system: DeviceSpec | SystemSpec, plan: ParallelPlan, options: Any = None, *,
                     input_len: int, output_len: int, batch: int = 1, dtype: str | None = None,
                     samples: int = 5, weight_dtype: str | None = None, kv_dtype: str | None = None) -> ParallelResult:
    """A whole generation request as serving engines run it: one prefill of ``input_len`` tokens
    (which yields the first output token), then ``output_len - 1`` decode steps over a KV cache of
    ``input_len`` to ``input_len + output_len - 2`` tokens.

    TTFT is the prefill; TPOT the mean decode step, ``(e2e - ttft) / (output_len - 1)`` as vLLM's
    benchmark defines it. Decode-step time is predicted at ``samples`` evenly spaced context lengths
    and summed exactly for the piecewise-linear interpolant in between (a step's time is affine in
    its context except where a kernel's tiling changes); ``extra['tpot_interpolation_spread']`` is
    the largest relative deviation of an interior sample from the line through the end points.
    ``weight_dtype``, ``kv_dtype``: serving precision of every step (as :func:`evaluate_plan`).
    """
    for k, val in (("input_len", input_len), ("output_len", output_len), ("batch", batch)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 1:
            raise PlanError(f"generate: {k}: got {val!r}; expected a positive integer")
    from workloads.parallel import request_context_problem

    problem = request_context_problem(model, input_len, output_len)
    if problem:  # the rule serve's requests are held to (simulator.serving.setup)
        raise PlanError(f"generate: {problem}")
    quant = {k: v for k, v in (("weight_dtype", weight_dtype), ("kv_dtype", kv_dtype)) if v}
    pre = evaluate_plan(model, system, plan, options, phase="prefill", seq=input_len, dtype=dtype, batch=batch,
                        **quant)
    n_steps = output_len - 1
    decode_total, spread, comm_decode = 0.0, 0.0, 0.0
    steps: list[ParallelResult] = []
    if n_steps:
        first, last = input_len, input_len + n_steps - 1
        n = max(1, min(samples, n_steps))
        ctxs = sorted({round(first + (last - first) * i / max(1, n - 1)) for i in range(n)})
        steps = [evaluate_plan(model, system, plan, options, phase="decode", context=c, dtype=dtype, batch=batch,
                               **quant) for c in ctxs]
        times = [r.latency_s for r in steps]
        comms = [r.breakdown["communication_s"] for r in steps]
        for i in range(len(ctxs) - 1):
            c0, c1, t0, t1, q0, q1 = ctxs[i], ctxs[i + 1], times[i], times[i + 1], comms[i], comms[i + 1]
            k = c1 - c0  # steps at contexts c0 .. c1 - 1 on the line from (c0, t0) to (c1, t1)
            decode_total += k * t0 + (t1 - t0) * (k - 1) / 2.0
            comm_decode += k * q0 + (q1 - q0) * (k - 1) / 2.0
        decode_total += times[-1]  # the step at context `last`
        comm_decode += comms[-1]
        if len(ctxs) > 2:
            for c, t in zip(ctxs, times, strict=True):
                line = times[0] + (times[-1] - times[0]) * (c - first) / (last - first)
                spread = max(spread, abs(t - line) / line)
    ttft = pre.latency_s
    e2e = ttft + decode_total
    tpot = decode_total / n_steps if n_steps else 0.0
    tokens = float(batch * plan.dp * (input_len + output_len))
    extra = {"ttft_s": ttft, "tpot_s": tpot, "e2e_latency_s": e2e,
             "output_tokens_per_s": batch * plan.dp * output_len / e2e,
             "input_len": float(input_len), "output_len": float(output_len),
             "tpot_interpolation_spread": spread}
    comm = pre.breakdown["communication_s"] + comm_decode
    breakdown = {"compute_s": e2e - comm, "communication_s": comm, "bubble_s": 0.0, "optimizer_s": 0.0,
                 "prefill_s": ttft, "decode_s": decode_total}
    worst = max([pre, *steps], key=lambda r: r.memory_per_device_bytes)
    flops = pre.model_flops + (sum(r.model_flops for r in steps) / len(steps) * n_steps if steps else 0.0)
    mid = steps[len(steps) // 2] if steps else None  # the step at the middle context stands for the mean step
    reports = pre.reports + (mid.reports if mid else ())
    layers = pre.report_layers + (mid.report_layers if mid else ())
    repeats = (1.0,) * len(pre.reports) + ((float(n_steps),) * len(mid.reports) if mid else ())
    return replace(worst, phase="generate", latency_s=e2e, breakdown=breakdown, tokens=tokens, extra=extra,
                   model_flops=flops, warnings=tuple(sorted({*pre.warnings, *worst.warnings})),
                   reports=reports, report_layers=layers, report_repeats=repeats, pipeline=None)
