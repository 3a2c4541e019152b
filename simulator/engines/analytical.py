"""The analytical engine: ``evaluate(graph, system, options)`` costs every op and composes a CostReport.

Ops run in the graph's topological order on one stream of one device (the order PyTorch eager
issues kernels). For each op the lowering rule gives the kernel's device time; the engine then
applies, in order: L2 residency of inputs produced by the previous kernel, optional fusion of
elementwise ops into their producer, the per-kernel launch floor (host launch rate, or CUDA-graph
replay rate), energy, and the TDP power cap. Identical ops (same kind, shapes, dtypes, attributes
and residency) are costed once per call, so a 80-layer model costs about as much as one layer.

The walk itself (view aliases, L2 residency, fusion, one slot per op signature) is
:func:`simulator.engines.walk.walk_graph`, shared with the vectorised evaluator over hardware
variants (:mod:`simulator.engines.vectorized`); this module turns each slot into a record.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from hwmodels.energy import dvfs_kernel, dynamic_energy, kernel_energy
from hwmodels.spec import DeviceSpec, SpecError, SystemSpec
from simulator.engines.options import CONV_LAYOUTS, EvalOptions
from simulator.engines.walk import (
    FUSED,
    FUSIBLE_KINDS,
    GROUP_KINDS,
    LIBRARY_KERNEL_KINDS,
    MODULE_OP_KINDS,
    QUANTIZE_OUTPUT,
    TE_QUANTIZE,
    VIEW,
    FusionGroup,
    Walk,
    is_gemv,
    module_call_counts,
    settle_warm,
    walk_graph,
)
from simulator.lowering import KernelCost, LoweringContext, gpu_vector_flops, lower, sfu_ops
from simulator.lowering.common import check_dtype_rates, kernel_device_s, rule_set_state, zero_cost
from simulator.lowering.gpu import library_launches
from simulator.report import CostReport, OpCost, Totals
from simulator.report.memory import check_memory
from workloads.ir import Op, OpGraph

__all__ = ["EvalOptions", "CONV_LAYOUTS", "evaluate", "launch_floor_s", "host_floor_s", "CUDNN_CONV_RULES", "module_call_counts",
           "LIBRARY_KERNEL_KINDS", "GROUP_KINDS", "FusionGroup", "is_gemv",
           "module_host_s", "MODULE_OP_KINDS", "ENGINE_NAME", "FUSIBLE_KINDS", "spec_of", "graph_digest", "spec_digest", "spec_tree",
           "digest_tree", "absent_in_digest",
           "clear_kernel_cost_cache", "provenance", "collectives_of", "EnergyCoefficients", "fused_cost",
           "l2_capacity"]

logger = logging.getLogger(__name__)

ENGINE_NAME = "analytical"
def collectives_of(system: DeviceSpec | SystemSpec) -> Any:
    """The fabric-catalog node configuration costing a system's collectives (None for a device)."""
    if not isinstance(system, SystemSpec):
        return None
    from simulator.lowering.collectives import collective_system_for

    return collective_system_for(system)


def spec_of(system: DeviceSpec | SystemSpec) -> tuple[DeviceSpec, str, int, Any]:
    """(device, hardware name, device count, fabric link) of a device or system spec."""
    if isinstance(system, SystemSpec):
        return system.device, system.name, system.count, system.fabric
    if isinstance(system, DeviceSpec):
        return system, system.name, 1, None
    raise SpecError(f"evaluate: system: not a spec; got a {type(system).__name__}; expected a DeviceSpec or SystemSpec")


def graph_digest(graph: OpGraph) -> str:
    """SHA-256 over the graph's ops (name, kind, group, tensors with shapes/dtypes/roles, attributes).

    Computed once per graph object (graphs are immutable) and kept with it.
    """
    return graph.memo("sha256", lambda: _graph_digest(graph))


def _graph_digest(graph: OpGraph) -> str:
    # one line per op, hashed as one text (the same bytes as hashing the lines one by one); a
    # tensor appears as one op's output and other ops' inputs: its text is formatted once, and
    # the shape, dtype and role part once per distinct (shape, dtype, role)
    text: dict[int, str] = {}  # by id: every tensor object lives as long as the graph
    tails: dict[tuple[Any, ...], str] = {}
    attr_text: dict[int, str] = {}  # by id, as the tensors
    lines = [graph.name]
    for op in graph:
        parts = []
        for t in (*op.inputs, *op.outputs):
            s = text.get(id(t))
            if s is None:
                key = (t.shape, t.dtype, t.role)
                tail = tails.get(key)
                if tail is None:
                    tail = tails[key] = f":{t.shape}:{t.dtype.value}:{t.role.value}"
                s = text[id(t)] = t.name + tail
            parts.append(s)
        attrs = attr_text.get(id(op.attrs))  # a recomputed op shares its forward op's attributes
        if attrs is None:
            attrs = attr_text[id(op.attrs)] = ",".join(f"{k}={op.attrs[k]!r}" for k in sorted(op.attrs))
        lines.append(f"{op.name}|{op.kind}|{op.group}|{';'.join(parts)}|{attrs}\n")
    lines.append(json.dumps({k: graph.meta[k] for k in sorted(graph.meta)}, default=str))
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def spec_digest(spec: DeviceSpec | SystemSpec) -> str:
    """SHA-256 of a spec's field values (provenance excluded)."""
    return _spec_digest(spec)[0]


def spec_tree(obj: Any) -> Any:
    """The field values of a spec as nested dicts and lists, the text :func:`spec_digest` hashes:
    provenance and file names left out, and fields at their "absent" value too (:func:`absent_in_digest`:
    a ``dvfs`` table of None, an empty ``flash2_causal_fwd_ratio`` table, a ``flash2_causal_fwd_ratio_scale``
    of exactly 1, a ``library_gemm_call_s`` or ``gemv_bandwidth_fraction`` of 0, a ``gemv_max_rows`` of 64, a ``conv_rate_fraction`` of 1, a ``dropout_stream_fraction`` or ``mxfp8_quantize_stream_fraction`` of 0, an ``l2_tile_sm_port_ratio`` of 1, a ``context_fmha_tensor_fraction`` of 0, a ``compute_capability`` of 0, ``warp_schedulers`` at its
    default of 4), so the digests of specs without those data did not
    change when the fields were added, and sweep stores keyed on them keep their points."""
    if dataclasses.is_dataclass(obj):
        return {f.name: spec_tree(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if f.name not in ("provenance", "source_file") and not absent_in_digest(f.name, getattr(obj, f.name))}
    if isinstance(obj, dict):
        return {str(k): spec_tree(v) for k, v in sorted(obj.items())}
    if isinstance(obj, (list, tuple)):
        return [spec_tree(x) for x in obj]
    return obj


# fields added after sweep stores were keyed on spec digests, by the value meaning "no data": a spec
# holding that value is hashed as it was before the field existed
_ABSENT_FIELDS: dict[str, Any] = {"dvfs": None, "flash2_causal_fwd_ratio": (), "flash2_causal_fwd_ratio_scale": 1.0,
                                   "library_gemm_call_s": 0.0, "compute_capability": 0,
                                   # (sm.warp_schedulers at its declared default: every catalog GPU has 4)
                                   "warp_schedulers": 4,
                                   # (energy.chain_j_per_flop empty: every vector FLOP at vector_j_per_flop)
                                   "chain_j_per_flop": (),
                                   # (efficiency.gemv_bandwidth_fraction 0: GEMVs at dram_bandwidth_fraction)
                                   "gemv_bandwidth_fraction": 0.0,
                                   # (efficiency.gemv_max_rows at its declared default: the scope before it was a field)
                                   "gemv_max_rows": 64,
                                   # (efficiency.conv_rate_fraction 1: convolutions at the GEMM figure)
                                   "conv_rate_fraction": 1.0,
                                   # (efficiency.dropout_stream_fraction 0: a training dropout at the streaming rate)
                                   "dropout_stream_fraction": 0.0,
                                   # (efficiency.mxfp8_quantize_stream_fraction 0: TE's MXFP8 quantize at the
                                   # streaming rate)
                                   "mxfp8_quantize_stream_fraction": 0.0,
                                   # (efficiency.l2_tile_sm_port_ratio 1: a CTA at its share of the L2 tile rate)
                                   "l2_tile_sm_port_ratio": 1.0,
                                   # (efficiency.context_fmha_tensor_fraction 0: a prompt's attention at the flash
                                   # kernel's estimate alone)
                                   "context_fmha_tensor_fraction": 0.0}


def absent_in_digest(name: str, value: Any) -> bool:
    """Whether a spec field ``name`` holding ``value`` is left out of :func:`spec_tree` (its "no data" value
    of ``_ABSENT_FIELDS``)."""
    if name not in _ABSENT_FIELDS:
        return False
    absent = _ABSENT_FIELDS[name]
    if absent is None or absent == ():
        return value is None or (isinstance(value, (tuple, list, dict)) and len(value) == 0)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == absent


def _spec_digest(spec: DeviceSpec | SystemSpec) -> tuple[str, bool]:
    """(:func:`spec_digest`, plain): plain when every field value is a number, string, bool or None
    (JSON writes it exactly), so that the digest identifies the values; a spec holding numpy arrays
    (a sweep's hardware variants, whose ``repr`` may elide elements) is not plain."""
    odd: list[type] = []

    def text_of(obj: Any) -> str:  # what JSON cannot write (a numpy array of hardware variants...)
        odd.append(type(obj))
        return repr(obj)

    text = json.dumps(digest_tree(spec), sort_keys=True, separators=(",", ":"), default=text_of)
    return hashlib.sha256(text.encode()).hexdigest(), not odd


def digest_tree(spec: DeviceSpec | SystemSpec) -> Any:
    """The tree :func:`spec_digest` hashes: :func:`spec_tree`, and for a system the fabric-catalog entries
    that cost its collectives (its node configuration with its fabrics and library, key ``fabric_catalog``;
    :func:`collectives_of`), since a system spec names them only: a changed ``fabrics.toml`` entry is a new
    digest. A device spec's tree is :func:`spec_tree`'s (its digest, and the sweep points keyed on it, did
    not change when the catalog entries were added)."""
    tree = spec_tree(spec)
    csys = collectives_of(spec) if isinstance(spec, SystemSpec) else None
    if csys is not None and isinstance(tree, dict):
        tree["fabric_catalog"] = _catalog_tree(csys)
    return tree


_CATALOG_TREES: dict[int, tuple[Any, Any]] = {}


def identity_cached(cache: dict[int, tuple[Any, Any]], obj: Any, compute: Any, limit: int) -> Any:
    """``compute(obj)``, kept in ``cache`` per object identity (the object is held too, so a reused id of a
    collected object never hits); the cache is emptied when it holds more than ``limit`` entries."""
    hit = cache.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    value = compute(obj)
    if len(cache) > limit:
        cache.clear()
    cache[id(obj)] = (obj, value)
    return value


def _catalog_tree(obj: Any) -> Any:
    """The field values of a fabric-catalog entry (provenance left out), computed once per entry object."""
    return identity_cached(_CATALOG_TREES, obj, _plain_tree, 64)


# the fields of each fabric-catalog class that system digests held when sweep stores were first keyed on
# them, hashed whatever their value; any other field (one added since) is left out at its declared default,
# so adding an optional field moves no digest
_CATALOG_KEYED_FIELDS: dict[str, frozenset[str]] = {
    "CollectiveSystem": frozenset((
        "name", "description", "library", "intra", "devices_per_node", "inter", "nics_per_node", "p2p_channels",
        "p2p_channels_per_peer", "cpu_vendor", "ring_channels", "nvls_channels", "gpu_nic_path", "nvls_tuner_algbw",
        "nvls_tuner_latency_s")),
    "CollectiveLibrary": frozenset((
        "name", "description", "algorithms", "base_latency_s", "step_latency_s", "protocol_bandwidth_fraction",
        "nvls_latency_s", "p2p_chunk_bytes", "launch_per_device_s", "max_threads", "thread_threshold_bytes",
        "nvls_chunk_bytes", "ll_max_bandwidth_multi_node", "allpairs", "tree_tuner", "ll128_max_gpu_nic_path")),
    "Fabric": frozenset((
        "name", "description", "latency_class", "topology", "link_bandwidth_bytes_per_s", "links_per_device",
        "bandwidth_fraction", "links_per_peer", "torus_dims", "hop_latency_s", "extra_step_latency_s",
        "tuner_extra_step_latency_s", "nvls_bandwidth_fraction", "ll_max_bandwidth_bytes_per_s",
        "channel_bandwidth_bytes_per_s", "tree_channel_bandwidth_bytes_per_s",
        "tree_ll128_channel_bandwidth_bytes_per_s", "ll128")),
}


def _at_declared_default(field: dataclasses.Field, value: Any) -> bool:
    """Whether ``value`` equals the ``default`` (or ``default_factory()``) a dataclass field declares
    (False for a field without one, or for a value whose comparison is not one bool: a numpy array)."""
    if field.default is not dataclasses.MISSING:
        default = field.default
    elif field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        return False
    try:
        return isinstance(value, bool) == isinstance(default, bool) and bool(value == default)
    except (TypeError, ValueError):
        return False


def _plain_tree(obj: Any) -> Any:
    """The field values of a fabric-catalog entry as nested dicts and lists: provenance left out, and a field
    outside ``_CATALOG_KEYED_FIELDS`` when it holds its declared default."""
    if dataclasses.is_dataclass(obj):
        keyed = _CATALOG_KEYED_FIELDS.get(type(obj).__name__, frozenset())
        return {f.name: _plain_tree(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name != "provenance"
                and (f.name in keyed or not _at_declared_default(f, getattr(obj, f.name)))}
    if isinstance(obj, Mapping):
        return {str(k): _plain_tree(v) for k, v in sorted(obj.items())}
    if isinstance(obj, (list, tuple)):
        return [_plain_tree(x) for x in obj]
    return obj


@functools.lru_cache(maxsize=1)
def _version() -> str:
    """The installed package's version (looked up once per process)."""
    from simulator.version import package_version  # without importing importlib.metadata

    return package_version() or "unknown"


class EnergyCoefficients:
    """Energy coefficients of a device, with located fallbacks recorded as warnings."""

    def __init__(self, dev: DeviceSpec) -> None:
        self.dev = dev
        self.warnings: set[str] = set()
        levels = {lv.name.lower(): lv for lv in dev.memory}
        main = dev.main_memory
        l2 = next((lv for n, lv in levels.items() if n in ("l2", "llc")), None)
        # the operand-staging on-chip level: GPU shared memory / LDS, TPU VMEM, an accelerator's scratchpad
        sm = next((lv for n, lv in levels.items()
                   if n in ("smem", "shared", "l1", "lds", "rf", "vmem", "sram", "scratchpad")), None)
        # the main memory's energy covers the DRAM devices; energy.dram_path_j_per_byte adds the on-die wires
        self.per_byte = {"dram": main.energy_j_per_byte + dev.energy.dram_path_j_per_byte}
        if l2 is not None and l2 is not main:
            self.per_byte["l2"] = l2.energy_j_per_byte
        if sm is not None:
            self.per_byte["smem"] = sm.energy_j_per_byte
        else:
            self.warnings.add(f"{dev.name}: memory: no shared-memory level with an energy per byte; "
                              "shared-memory traffic costs no energy in this report")

    def vector_per_flop(self, kc: KernelCost) -> Any:
        """J per vector FLOP of ``kc``: ``energy.vector_j_per_flop.fp32``, its ``chain_flops`` (a dependent FMA
        chain on register operands) at ``energy.chain_j_per_flop.fp32`` where the device gives that figure."""
        j = self.per_flop(self.dev.energy.vector_j_per_flop, "fp32", "vector_j_per_flop")
        chain = self.dev.energy.chain_j_per_flop.get("fp32")
        cf = np.asarray(kc.chain_flops, float)
        if chain is None or not np.any(cf > 0):
            return j
        vf = np.asarray(kc.vector_flops, float)
        mixed = np.where(vf > 0, (j * (vf - cf) + chain * cf) / np.where(vf > 0, vf, 1.0), j)
        return float(mixed) if np.ndim(mixed) == 0 else mixed

    def per_flop(self, table: dict[str, float], dtype: str, what: str) -> float:
        if not dtype:
            return 0.0
        if dtype in table:
            return table[dtype]
        if not table:
            self.warnings.add(f"{self.dev.name}: energy.{what}: empty; arithmetic costs no energy")
            return 0.0
        alt = {"fp8_e5m2": "fp8_e4m3", "fp16": "bf16", "bf16": "fp16", "tf32": "fp32", "int8": "fp8_e4m3",
               "int4": "int8", "fp8_e4m3": "int8"}.get(dtype)
        use = alt if alt in table else max(table, key=lambda k: table[k])
        self.warnings.add(f"{self.dev.name}: energy.{what}.{dtype}: missing; used energy.{what}.{use}")
        return table[use]


def _display_path(path: str) -> str:
    """A spec file path that does not depend on where the package is installed (catalog-relative)."""
    if not path:
        return ""
    if Path(path).is_absolute():  # (a relative one resolves against the working directory of the moment)
        return _display_absolute(path)
    return _display_absolute.__wrapped__(path)


@functools.lru_cache(maxsize=64)
def _display_absolute(path: str) -> str:
    from hwmodels.catalog import CATALOG_DIR

    p = Path(path).resolve()
    try:
        return "catalog/" + p.relative_to(Path(CATALOG_DIR).resolve()).as_posix()
    except ValueError:
        return p.name


def launch_floor_s(dev: DeviceSpec, opts: EvalOptions) -> float:
    """Host time per kernel (s), the floor of every kernel's time.

    ``efficiency.graph_launch_overhead_s`` with CUDA graphs, else ``efficiency.launch_overhead_s``;
    with an eager framework at least ``efficiency.framework_op_overhead_s``.
    """
    eff = dev.efficiency
    floor = eff.graph_launch_overhead_s if opts.cuda_graphs else eff.launch_overhead_s
    if opts.eager_framework:
        floor = max(floor, eff.framework_op_overhead_s)
    return float(floor)


#: Lowering rules whose kernel an eager framework issues through cuDNN's convolution API (forward
#: convolutions, on NHWC or NCHW tensors): their host time per call is ``efficiency.framework_conv_op_overhead_s``.
CUDNN_CONV_RULES = frozenset({"implicit-gemm", "implicit-gemm-simt", "conv-direct", "implicit-gemm+nchw"})


def host_floor_s(rule: str, kernels: Any, floor: Any, eff: Any, opts: EvalOptions, modules: Any = 0.0) -> Any:
    """Host time of one op (s): ``kernels`` launches at ``floor`` each (:func:`launch_floor_s`), or
    with an eager framework a forward convolution's cuDNN call time when that is longer (the call
    issues one kernel; its host work is the descriptor and plan lookup around it), plus ``modules``,
    the op's ``nn.Module`` call time (:func:`module_host_s`). The layout transforms cuDNN runs around a
    convolution on NCHW tensors (:func:`simulator.lowering.gpu.library_launches`) are launched inside the
    same library call: a kernel launch each, not a framework op. Zero without kernels, and zero when the timed
    quantity is the kernels' own device time (``opts.kernel_time_only``: a profiler's kernel records)."""
    if opts.kernel_time_only:
        return np.zeros(np.shape(kernels)) if np.ndim(kernels) else 0.0
    lib = library_launches(rule, kernels)
    launched = np.asarray(kernels) > 0
    own = np.maximum(np.asarray(kernels) - lib, 0)
    lib_s = lib * (eff.graph_launch_overhead_s if opts.cuda_graphs else eff.launch_overhead_s)
    host = np.multiply(own, floor)
    if opts.eager_framework and rule in CUDNN_CONV_RULES:
        host = np.maximum(host, eff.framework_conv_op_overhead_s)
    host = np.where(launched, host + lib_s, 0.0)
    if opts.eager_framework and np.any(np.asarray(modules) > 0):
        host = np.where(launched, host + modules, 0.0)
    return host if np.ndim(host) else float(host)


def module_host_s(counts: tuple[int, int], eff: Any) -> Any:
    """Host seconds of an op's module calls: containers x ``framework_container_call_s`` + module
    calls x ``framework_module_call_s``."""
    return counts[0] * eff.framework_container_call_s + counts[1] * eff.framework_module_call_s


#: Costs kept across calls: at most this many costing contexts (spec values, options, rules in
#: force), least recently used dropped first ...
KERNEL_COST_CONTEXTS = 8
#: ... each of at most this many op signatures (a full context starts again empty at the next call).
KERNEL_COST_ENTRIES = 4096


class _Costs:
    """What one costing context keeps across calls: the kernel cost of each op signature, and the
    record values (:func:`_record_values`) of each kernel cost with the energy warnings computing
    them gave."""

    __slots__ = ("collectives", "kernels", "values")

    def __init__(self, collectives: Any) -> None:
        self.collectives = collectives  # kept alive: its id is part of the context's key
        self.kernels: dict[tuple[Any, ...], KernelCost] = {}
        self.values: dict[KernelCost, tuple[tuple[Any, ...], frozenset[str]]] = {}


_COSTS: dict[tuple[Any, ...], _Costs] = {}


def clear_kernel_cost_cache() -> None:
    """Forget the costs kept across calls. Predictions never depend on them: a cost is kept under
    everything that decides it (the spec's field values, the options, the lowering rules registered,
    the op's signature), so a cleared cache gives the same reports, only slower."""
    _COSTS.clear()


def _costs_of(spec_sha: str, plain: bool, dev: DeviceSpec, opts: EvalOptions, ctx: LoweringContext) -> _Costs:
    """The costs kept across calls in this costing context.

    The context is the spec's digest (its field values: a calibration overlay or any replaced field
    is another context), the options (but the calibration id, which is only recorded), the device
    kind's rules and fallback, and the fabric-catalog entry costing collectives. A spec holding
    arrays (sweep variants), or options that cannot be a key, get a fresh, unkept context.
    """
    if not plain:
        return _Costs(ctx.collectives)
    try:
        key = (spec_sha, dataclasses.replace(opts, calibration_id=""), rule_set_state(dev.kind),
               id(ctx.collectives))
        hit = _COSTS.pop(key, None)
    except TypeError:  # an option value that cannot be hashed
        return _Costs(ctx.collectives)
    if hit is None or len(hit.kernels) >= KERNEL_COST_ENTRIES:
        hit = _Costs(ctx.collectives)
    _COSTS[key] = hit  # most recently used last
    while len(_COSTS) > KERNEL_COST_CONTEXTS:
        del _COSTS[next(iter(_COSTS))]
    return hit


def evaluate(graph: OpGraph, system: DeviceSpec | SystemSpec, options: EvalOptions | None = None) -> CostReport:
    """Predict latency, energy and memory of ``graph`` on ``system``, op by op.

    Parameters
    ----------
    graph
        The workload (any :class:`~workloads.ir.OpGraph`).
    system
        A device, or a system whose device runs the graph (the graph is one device's work;
        collectives use the system's fabric).
    options
        :class:`EvalOptions` (default: no fusion, eager launches, power cap on). A parallel plan
        (``options.plan``) is refused here: :func:`simulator.evaluate` routes it to
        :mod:`simulator.parallel`.

    Returns
    -------
    CostReport
        One record per op in execution order, totals, memory check, warnings and provenance.
        Deterministic: the same inputs give byte-identical ``to_json()``.
    """
    opts = options or EvalOptions()
    if opts.plan is not None:
        raise ValueError(f"evaluate: options.plan: the analytical engine costs one device's graph; got a parallel plan "
                         f"{opts.plan!r}; expected no plan here: simulator.evaluate (nodeperf.evaluate) splits a "
                         "model over a plan")
    if opts.fused_moe_configs:  # the M and N of vLLM's fused-MoE config lookup, read from the graph's ops
        from workloads.frameworks import fused_moe_steps

        graph = graph.memo("fused_moe_steps", lambda: fused_moe_steps(graph))
    dev, hw_name, count, fabric = spec_of(system)
    fuse = opts.fusion if opts.fusion is not None else dev.kind == "tpu"
    opts = settle_warm(graph, opts, l2_capacity(dev))  # a warm loop only where the whole graph fits in L2
    walk = walk_graph(graph, opts, fuse, l2_capacity(dev))
    check_dtype_rates(walk.rate_ops, dev)  # a contraction dtype without a rate is refused before any op is costed
    ctx = LoweringContext(dev, opts, fabric=fabric, group_size=count, collectives=collectives_of(system),
                          nodes=int(getattr(system, "nodes", 1)))
    energy = EnergyCoefficients(dev)
    spec_sha, plain = _spec_digest(system)
    costs = _costs_of(spec_sha, plain, dev, opts, ctx)
    protos, fallbacks, capped = _slot_records(walk, dev, opts, ctx, costs, energy)
    records = _op_records(walk, protos)
    warnings: set[str] = set()
    for kind, n in sorted(fallbacks.items()):
        warnings.add(f"{n} op(s) of kind {kind!r} have no lowering rule on {dev.kind} devices; "
                     "costed by the roofline fallback (rule 'roofline-fallback')")
    if capped:
        warnings.add(f"{capped} op(s) power-capped at TDP {dev.power.tdp_w:.0f} W: clocks and throughput "
                     "scaled down so average power stays within the limit")
    mem = check_memory(graph, dev)
    if not mem.fits:
        warnings.add(mem.message())
    warnings |= energy.warnings
    for w in sorted(warnings):
        logger.warning("%s", w) if ("fallback" in w or "does not fit" in w) else logger.info("%s", w)
    return CostReport(model=graph.name, hardware=hw_name, records=records, totals=_totals(records, dev), memory=mem,
                      warnings=tuple(sorted(warnings)), provenance=provenance(graph, system, opts, spec_sha))


def l2_capacity(dev: DeviceSpec) -> Any:
    """Capacity of the device's L2 (the memory level named ``l2`` or ``llc``; 0 without one): outputs
    larger than it do not stay resident for the next kernel."""
    l2 = next((lv for lv in dev.memory if lv.name.lower() in ("l2", "llc")), None)
    return l2.capacity_bytes if l2 is not None else 0.0


def provenance(graph: OpGraph, system: DeviceSpec | SystemSpec, options: EvalOptions,
               spec_sha256: str | None = None) -> dict[str, Any]:
    """The provenance :func:`evaluate` records for ``graph`` on ``system`` under ``options``: engine,
    options, graph and spec digests, the spec file (catalog-relative), calibration id, package
    version, the workload's meta and the device count. ``spec_sha256`` is :func:`spec_digest` of
    ``system`` when not given (a sweep that writes each variant's own digest passes it)."""
    _, _, count, _ = spec_of(system)
    return {
        "engine": ENGINE_NAME,
        "options": dataclasses.asdict(options),
        "graph_sha256": graph_digest(graph),
        "spec_sha256": spec_digest(system) if spec_sha256 is None else spec_sha256,
        "spec_file": _display_path(getattr(system, "source_file", "")),
        "calibration_id": options.calibration_id,
        "version": _version(),
        "workload": {k: graph.meta[k] for k in sorted(graph.meta)},
        "devices": count,
    }


def _slot_records(walk: Walk, dev: DeviceSpec, opts: EvalOptions, ctx: LoweringContext, costs: _Costs,
                  energy: EnergyCoefficients) -> tuple[list[OpCost], Counter[str], int]:
    """(the record of each slot of the walk, made from its first op; op kinds costed by the roofline
    fallback with their op counts; ops power-capped)."""
    floor = launch_floor_s(dev, opts)
    protos: list[OpCost] = []
    fallbacks: Counter[str] = Counter()
    capped = 0
    for slot in walk.slots:
        op = slot.op
        if slot.kind == VIEW:
            protos.append(_view_record(op))
            continue
        kc = costs.kernels.get(slot.key)
        if kc is None:
            if slot.kind == FUSED:
                kc = fused_cost(op, *slot.joined, ctx)
            else:
                ctx.resident_bytes = slot.in_l2
                kc = lower(op, ctx)
            costs.kernels[slot.key] = kc
        mods = slot.modules
        ckey = (kc, mods) if mods != (0, 0) else kc
        got = costs.values.get(ckey)
        if got is None:  # the energy warnings computing these values gives are kept with them
            outer, energy.warnings = energy.warnings, set()
            try:
                vals = _record_values(kc, dev, energy, floor, opts, module_host_s(mods, dev.efficiency))
            finally:
                new, energy.warnings = energy.warnings, outer
            got = costs.values[ckey] = (vals, frozenset(new))
        energy.warnings |= got[1]
        rec = _make_record(op, kc, got[0], "")
        if kc.fallback:
            fallbacks[op.kind] += slot.count
        capped += slot.count * rec.power_capped
        protos.append(rec)
    return protos, fallbacks, capped


def _op_records(walk: Walk, protos: list[OpCost]) -> tuple[OpCost, ...]:
    """One record per op: its slot's record with the op's own fields (:attr:`Walk.op_fields`). (The
    fields are merged as dicts, not passed through the frozen dataclass's ``__init__``: a step costs
    thousands of records.)"""
    new, set_fields = _new_record, _set_fields
    kernel = [p.__dict__ for p in protos]
    out = []
    for ix, own in zip(walk.op_slots, walk.op_fields, strict=True):
        rec = new(OpCost)
        fields = kernel[ix].copy()
        fields.update(own)
        set_fields(rec, "__dict__", fields)
        out.append(rec)
    return tuple(out)


def _view_record(op: Op) -> OpCost:
    return OpCost(
        name=op.name, kind=op.kind, group=op.group, category=op.category, dtype=op.dtype.value, time_s=0.0,
        energy_j=0.0, dynamic_energy_j=0.0, static_energy_j=0.0, flops=float(op.flops), dram_bytes=0.0,
        l2_bytes=0.0, smem_bytes=0.0, compute_s=0.0, memory_s=0.0, overhead_s=0.0, bound="latency",
        rule="view", kernels=0,
    )


_new_record = object.__new__
_set_fields = object.__setattr__


def _num(x: Any) -> Any:
    """``float(x)``; a float array for an array of hardware variants (sweeps)."""
    return float(x) if np.ndim(x) == 0 else np.asarray(x, dtype=float)


def _no_transpose(op: Op, ctx: LoweringContext) -> bool:
    """Whether ``op`` is the transposed fp8 copy of a Transformer Engine per-tensor quantize (:data:`QUANTIZE_OUTPUT`
    ``transpose``) on a GPU whose fp8 GEMMs read the rowwise data in both layouts, where TE writes none
    (:func:`workloads.precision.fp8_gemm_reads_both_layouts`)."""
    from workloads.precision import fp8_gemm_reads_both_layouts

    return (op.attrs.get(QUANTIZE_OUTPUT) == "transpose" and ctx.device.kind == "gpu"
            and fp8_gemm_reads_both_layouts(int(np.min(np.asarray(ctx.device.sm.compute_capability)))))


def fused_cost(op: Op, held: frozenset[int], reuse: float, ctx: LoweringContext) -> KernelCost:
    """An op folded into the kernel being built (:class:`FusionGroup`): the traffic of the inputs the
    kernel does not hold yet (``held``: positions it holds) and of the output beyond the ``reuse`` bytes
    of a store it replaces, and its vector work."""
    if _no_transpose(op, ctx):
        return zero_cost("fp8-transpose-not-written")
    extra_in = float(sum(t.nbytes for i, t in enumerate(op.inputs) if i not in held))
    extra_out = float(max(0.0, sum(t.nbytes for t in op.outputs) - reuse))
    sfu = 0.0
    work = float(op.flops)
    if ctx.device.kind == "gpu":
        work = gpu_vector_flops(op)  # as unfused: the compiled special function's instructions
        p = ctx.params("fp32")  # (fields may be arrays of hardware variants: simulator.engines.vectorized)
        rate = _num(p.vector_flops_per_s) * _num(p.vector_fraction)
        bw = _num(p.dram_bytes_per_s) * _num(p.dram_fraction)
        sfu = sfu_ops(op) / _num(p.sfu_ops_per_s)  # the same special functions as unfused (separate pipe)
        if op.attrs.get(TE_QUANTIZE) == "mxfp8":  # a second copy written by TE's MXFP8 quantize kernel
            frac = _num(ctx.device.efficiency.mxfp8_quantize_stream_fraction)
            bw = _num(bw * np.where(np.asarray(frac) > 0.0, frac, 1.0))
    else:  # TPU vector unit / CPU SIMD: the spec's vector rate and main-memory bandwidth
        dev = ctx.device
        vec = dev.compute.vector_flops_per_s
        rate = float(vec.get(op.dtype.value) or vec.get("fp32") or max(vec.values())) * dev.efficiency.vector_peak_fraction
        bw = dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction
    return KernelCost(
        compute_s=_num(np.maximum(work / rate, sfu)), memory_s=(extra_in + extra_out) / bw, latency_s=0.0,
        dram_bytes=extra_in + extra_out, l2_bytes=extra_in + extra_out, smem_bytes=0.0, matrix_flops=0.0,
        vector_flops=work, rule="fused-epilogue", kernels=0,
    )


def _record_values(kc: KernelCost, dev: DeviceSpec, energy: EnergyCoefficients, floor: float,
                   opts: EvalOptions, modules: float = 0.0
                   ) -> tuple[float, float, float, float, float, float, str, bool, str]:
    """(time, dynamic J, static J, compute, memory, overhead, bound, capped, clock note) of one kernel cost.

    Over the TDP, a device with DVFS data (``dev.dvfs``) runs the kernel at the clock that fits
    the limit (:func:`hwmodels.energy.dvfs_kernel`: arithmetic time and energy per FLOP scale with
    the clock, memory time and traffic energy do not); a device without it is stretched at constant
    energy (:func:`hwmodels.energy.kernel_energy`).
    """
    gap = kernel_device_s(kc, dev.efficiency)
    device_t = kc.device_time_s + gap
    host = host_floor_s(kc.rule, kc.kernels, floor, dev.efficiency, opts, modules)
    t = max(device_t, host)
    compute, memory = kc.compute_s, kc.memory_s
    j_matrix = energy.per_flop(dev.energy.tensor_j_per_flop, kc.matrix_dtype, "tensor_j_per_flop")
    j_vector = energy.vector_per_flop(kc)
    traffic = {"dram": kc.dram_bytes, "l2": kc.l2_bytes, "smem": kc.smem_bytes}
    e_dyn = float(dynamic_energy(kc.matrix_flops, j_matrix, kc.vector_flops, j_vector, traffic, energy.per_byte))
    capped = False
    e_static = 0.0
    note = ""
    if t > 0 and dev.dvfs is not None and opts.power_cap:
        # arithmetic energy scales with V(f)^2; data movement does not
        e_core = float(dynamic_energy(kc.matrix_flops, j_matrix, kc.vector_flops, j_vector, {}, {}))
        e_move = float(dynamic_energy(0.0, 0.0, 0.0, 0.0, traffic, energy.per_byte))
        k = dvfs_kernel(
            compute_s=compute, memory_s=memory,
            fixed_s=device_t - max(compute, memory), floor_s=host,
            core_j=e_core, other_j=e_move, ref_hz=dev.clock.sustained_hz, base_hz=dev.dvfs.base_hz,
            boost_hz=dev.clock.boost_hz, base_voltage_fraction=dev.dvfs.base_voltage_fraction,
            idle_w=dev.power.idle_w, tdp_w=dev.power.tdp_w)
        if k.power_capped:
            capped = True
            compute, t, e_dyn = float(k.compute_s), float(k.time_s), float(k.dynamic_j)
            note = (f"sustained {k.clock_hz / 1e9:.3g} GHz under {dev.power.tdp_w:.0f} W" if k.clock_hz < dev.clock.sustained_hz
                    else f"data movement alone exceeds {dev.power.tdp_w:.0f} W: stretched at constant energy")
        e_static = float(k.static_j)
    elif t > 0:
        est = kernel_energy(t, e_dyn, dev.power.idle_w, dev.power.tdp_w, cap=opts.power_cap)
        if est.power_capped:
            capped = True
            compute *= est.time_s / t  # the clock drops: arithmetic stretches
            t = float(est.time_s)
        e_static = float(est.static_j)
    overhead = max(0.0, t - max(compute, memory))
    comps = {"compute": compute, "memory": memory, "latency": overhead}
    bound = max(("compute", "memory", "latency"), key=lambda b: comps[b])
    if gap > 0 and t > host:  # the device, not the host's launch floor, sets the time: say what the kernels add
        k = int(kc.kernels)
        per = f"{gap / k * 1e6:.3g} us" + (f" x {k} kernels" if k > 1 else "")
        note = "; ".join(x for x in (note, f"device time per kernel {per}") if x)
    return t, e_dyn, e_static, compute, memory, overhead, bound, capped, note


def _make_record(op: Op, kc: KernelCost, vals: tuple[Any, ...], fused_into: str) -> OpCost:
    t, e_dyn, e_static, compute, memory, overhead, bound, capped, clock_note = vals
    notes = "; ".join(x for x in (kc.notes, clock_note) if x)
    return OpCost(
        name=op.name, kind=op.kind, group=op.group, category=op.category, dtype=op.dtype.value, time_s=t,
        energy_j=e_dyn + e_static, dynamic_energy_j=e_dyn, static_energy_j=e_static, flops=float(op.flops),
        dram_bytes=kc.dram_bytes, l2_bytes=kc.l2_bytes, smem_bytes=kc.smem_bytes, compute_s=compute,
        memory_s=memory, overhead_s=overhead, bound=bound, rule=kc.rule, tile=kc.tile, split_k=kc.split_k,
        ctas=kc.ctas, waves=kc.waves, ctas_per_sm=kc.ctas_per_sm, kernels=kc.kernels, fallback=kc.fallback,
        power_capped=capped, fused_into=fused_into, notes=notes, matrix_dtype=kc.matrix_dtype,
        memory_level=kc.memory_level if bound == "memory" else "",
    )


def _totals(records: Sequence[OpCost], dev: DeviceSpec) -> Totals:
    def total(field: str) -> Any:  # summed in execution order (a C-level loop over the records)
        return sum(map(attrgetter(field), records))

    lat, e_dyn, e_st, energy, flops = (total(f) for f in ("time_s", "dynamic_energy_j", "static_energy_j",
                                                          "energy_j", "flops"))
    by_dtype: Counter[str] = Counter()
    rates = dev.compute.tensor_flops_per_s
    for r in records:
        if r.category in ("contraction", "attention", "recurrent"):
            dt = r.matrix_dtype or r.dtype  # the rate the rule actually used (e.g. fp32 on a TPU runs at bf16)
            if dt in rates:
                by_dtype[dt] += r.flops
    if by_dtype:
        dt = max(sorted(by_dtype), key=lambda d: by_dtype[d])
        peak = dev.compute.tensor_flops_per_s[dt]
    else:
        peak = dev.compute.vector_flops_per_s.get("fp32", max(dev.compute.vector_flops_per_s.values(), default=0.0))
    achieved = flops / lat if lat > 0 else 0.0
    return Totals(
        latency_s=lat, energy_j=energy, dynamic_energy_j=e_dyn, static_energy_j=e_st,
        avg_power_w=energy / lat if lat > 0 else 0.0, flops=flops, achieved_flops_per_s=achieved,
        peak_flops_per_s=float(peak), mfu=achieved / peak if peak else 0.0,
        dram_bytes=total("dram_bytes"), l2_bytes=total("l2_bytes"), smem_bytes=total("smem_bytes"),
        kernels=total("kernels"),
        ops=len(records),
    )
