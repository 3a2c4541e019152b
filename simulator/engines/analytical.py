"""The analytical engine: ``evaluate(graph, system, options)`` costs every op and composes a CostReport.

Ops run in the graph's topological order on one stream of one device (the order PyTorch eager
issues kernels). For each op the lowering rule gives the kernel's device time; the engine then
applies, in order: L2 residency of inputs produced by the previous kernel, optional fusion of
elementwise ops into their producer, the per-kernel launch floor (host launch rate, or CUDA-graph
replay rate), energy, and the TDP power cap. Identical ops (same kind, shapes, dtypes, attributes
and residency) are costed once per call, so a 80-layer model costs about as much as one layer.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hwmodels.energy import dvfs_kernel, dynamic_energy, kernel_energy
from hwmodels.spec import DeviceSpec, SpecError, SystemSpec
from simulator.lowering import (
    COLLECTIVE_KINDS,
    VIEW_KINDS,
    KernelCost,
    LoweringContext,
    lower,
    sfu_ops,
)
from simulator.lowering.common import check_dtype_rates, kernel_device_s, rule_set_state
from simulator.lowering.cpu import CONTRACTION_KINDS
from simulator.lowering.gpu import library_launches
from simulator.report import CostReport, OpCost, Totals
from simulator.report.memory import check_memory
from workloads.ir import Op, OpGraph

__all__ = ["EvalOptions", "CONV_LAYOUTS", "evaluate", "launch_floor_s", "host_floor_s", "CUDNN_CONV_RULES", "module_call_counts",
           "LIBRARY_KERNEL_KINDS", "GROUP_KINDS", "FusionGroup", "is_gemv",
           "module_host_s", "MODULE_OP_KINDS", "ENGINE_NAME", "FUSIBLE_KINDS", "spec_of", "graph_digest", "spec_digest", "spec_tree",
           "clear_kernel_cost_cache"]

logger = logging.getLogger(__name__)

ENGINE_NAME = "analytical"
#: Op kinds that may be fused into the kernel producing their input (epilogue / chain fusion).
FUSIBLE_KINDS = frozenset({"elementwise", "elementwise_bwd"})
# Producers that cannot take an epilogue (communication, no kernel).
_NO_EPILOGUE = COLLECTIVE_KINDS | VIEW_KINDS
#: Op kinds a compiler that generates only pointwise and reduction kernels calls as library kernels
#: (cuBLAS / cuDNN / FlashAttention): with ``EvalOptions.epilogue_fusion`` off, nothing fuses into them.
#: The contractions (the CPU rules' list), less the MoE router, whose gate and top-k the graph keeps as one op.
LIBRARY_KERNEL_KINDS = CONTRACTION_KINDS - {"moe_router", "moe_router_bwd"}


#: Op kinds that join a generated (pointwise / reduction) kernel but never a library kernel's epilogue:
#: a reduction over the kernel's values (an RMSNorm's mean) and a concatenation of them (RoPE's
#: rotate_half), which fusing compilers emit inside the same loop (Inductor's pointwise and reduction
#: kernels, XLA loop and input fusions).
GROUP_KINDS = frozenset({"reduction", "concat"})


def is_gemv(op: Op) -> bool:
    """A matmul whose activation operand has one row (``m == 1`` after flattening the leading dims)."""
    if op.kind != "matmul" or not op.inputs:
        return False
    shape = op.inputs[0].shape
    return len(shape) >= 2 and int(np.prod(shape[:-1])) == 1


class FusionGroup:
    """The kernel being built while the engine walks the graph in order, for fusion decisions.

    ``head_kind`` is the kind of the op that launched it, ``library`` whether that op is a library
    kernel (:data:`LIBRARY_KERNEL_KINDS`; not a matrix-vector product with
    ``EvalOptions.gemv_generated``), ``made`` and ``read`` the (base) tensors it has produced and read
    so far. :meth:`join` says whether the next op joins it.
    """

    __slots__ = ("head_kind", "library", "made", "read")

    def __init__(self) -> None:
        self.head_kind: str | None = None
        self.library = False
        self.made: set[str] = set()
        self.read: set[str] = set()

    def start(self, op: Op, base: Any, opts: EvalOptions) -> None:
        """``op`` launches a new kernel."""
        self.head_kind = op.kind
        self.library = op.kind in LIBRARY_KERNEL_KINDS and not (opts.gemv_generated and is_gemv(op))
        self.made = {base(t.name) for t in op.outputs}
        self.read = {base(t.name) for t in op.inputs}

    def join(self, op: Op, graph: OpGraph, base: Any, opts: EvalOptions) -> tuple[frozenset[int], float] | None:
        """``(inputs held, bytes reused)`` when ``op`` fuses into this kernel, else None.

        An elementwise op (or inference batch norm) joins when it reads a tensor the kernel made
        (vertical fusion: into a library contraction's epilogue only with ``opts.epilogue_fusion``).
        Into a generated kernel -- whose head is not a library contraction -- a reduction or a
        concatenation may join too, and so may an op that only reads a tensor the kernel already
        reads (horizontal fusion over a shared input, as Inductor's scheduler scores shared reads).
        *Inputs held* are the positions of the op's inputs the kernel already holds (no traffic);
        *bytes reused*: an input made in the kernel that only this op reads is never stored, the op's
        output takes its store.
        """
        head = self.head_kind
        library = self.library
        if head is None or head in _NO_EPILOGUE or (library and not opts.epilogue_fusion):
            return None
        elementwise = _fusible(op)
        if not elementwise and (library or op.kind not in GROUP_KINDS):
            return None
        names = [base(t.name) for t in op.inputs]
        made = [i for i, b in enumerate(names) if b in self.made]
        if not made and (library or not any(b in self.read for b in names)):
            return None
        pool = self.made if library else (self.made | self.read)
        held = frozenset(i for i, b in enumerate(names) if b in pool)
        reuse = 0.0
        for i in made:
            t = op.inputs[i]
            if names[i] == t.name and len(graph.consumers(t.name)) == 1:
                reuse = max(reuse, float(t.nbytes))
        return held, reuse

    def add(self, op: Op, base: Any) -> None:
        """``op`` joined the kernel."""
        self.made.update(base(t.name) for t in op.outputs)
        self.read.update(base(t.name) for t in op.inputs)


@dataclass(frozen=True)
class EvalOptions:
    """Options of an evaluation (they are recorded in the report's provenance).

    Attributes
    ----------
    fusion
        None (default): fuse on TPUs, whose XLA compiler always fuses, and not on GPUs/CPUs (eager
        frameworks launch one kernel per op). True/False force it. Ops join the kernel being built
        as compilers such as torch.compile or XLA build them (:class:`FusionGroup`): an elementwise
        op that reads a tensor the kernel made, and in generated kernels also reductions,
        concatenations and ops sharing a read with it; fused ops cost the traffic of what the kernel
        does not hold yet and their vector work, and no launch.
    epilogue_fusion
        With fusion: elementwise ops may also fuse into a contraction's epilogue (GEMM, convolution,
        attention: TensorRT, XLA, Inductor's Triton GEMM templates under ``max-autotune``). False:
        they fuse only into generated pointwise / reduction kernels, and a contraction's output is
        read back by a separate kernel, as torch.compile's default and ``reduce-overhead`` modes run
        (cuBLAS / cuDNN / SDPA called as extern kernels, :data:`LIBRARY_KERNEL_KINDS`).
    gemv_generated
        With fusion: a matrix-vector product (a matmul with one row, :func:`is_gemv`) is a generated
        reduction kernel, not a library call, so it takes fused epilogues whatever
        ``epilogue_fusion`` says: Inductor decomposes ``mm`` with one row into a product and a sum
        when ``coordinate_descent_tuning`` is on (``torch/_inductor/decomposition.py`` ``mm``), as
        gpt-fast's and torchao's ``generate.py`` set it for batch-1 decoding.
    cuda_graphs
        Kernels are replayed from a captured CUDA graph: the per-kernel floor is
        ``efficiency.graph_launch_overhead_s`` instead of ``efficiency.launch_overhead_s``.
    power_cap
        Stretch ops whose average power would exceed the TDP (and say so in the report).
    allow_tf32
        fp32 contractions use the TF32 tensor path (PyTorch ``allow_tf32``); otherwise SIMT FP32.
    l2_residency
        Inputs just written by the previous kernel and no larger than L2 are read from L2.
    attention_kernel
        Fused-attention kernel design: ``"auto"`` (the best the architecture supports),
        ``"flash2"`` (FlashAttention-2 style: warp-level ``mma.sync``, softmax serialised with the
        matmuls) or ``"flash3"`` (warp-specialised, softmax overlapped with asynchronous matmuls:
        FlashAttention-3/4, cuDNN). See :func:`hwmodels.gpu.attention`.
    eager_framework
        Ops are issued one by one by an eager framework (PyTorch eager): every op, fused or not,
        takes at least ``efficiency.framework_op_overhead_s`` of host time, so small ops are
        bound by the host rather than the GPU.
    eager_modules
        With ``eager_framework``: the ops are issued from ``nn.Module`` objects (eager PyTorch /
        Hugging Face, not a compiled program), so an op issued by a module holding parameters adds
        ``efficiency.framework_module_call_s`` to its host time and the first op of every container
        module (read from the graph's dotted op names, :func:`module_call_counts`) adds
        ``efficiency.framework_container_call_s`` per container entered.
    conv_layout
        Memory format of a convolution's activations: ``"nhwc"`` (default: channels last, what
        TensorRT, XLA/TensorFlow, DeepLearningExamples' AMP configurations and Inductor's layout
        optimisation give cuDNN) or ``"nchw"`` (PyTorch's default contiguous format). cuDNN's
        tensor-core convolutions are NHWC kernels: on an NCHW tensor they run between layout
        transforms of their operands and result (:data:`CONV_LAYOUTS`, ``simulator.lowering.gpu``).
    calibration_id
        Identifier of the calibration overlay applied to the spec, if any (recorded only).
    plan
        A :class:`workloads.parallel.ParallelPlan`: the graph's model (a zoo transformer or a
        Hugging Face config, named in its ``meta``) is split over the system's devices and the
        report is the whole step (see :func:`simulator.parallel.evaluate_graph_with_plan`).
    """

    fusion: bool | None = None
    epilogue_fusion: bool = True
    gemv_generated: bool = False
    cuda_graphs: bool = False
    power_cap: bool = True
    allow_tf32: bool = False
    l2_residency: bool = True
    attention_kernel: str = "auto"
    eager_framework: bool = False
    eager_modules: bool = False
    conv_layout: str = "nhwc"
    calibration_id: str = ""
    plan: Any = None

    def __post_init__(self) -> None:
        if self.conv_layout not in CONV_LAYOUTS:
            from nodeperf.suggest import did_you_mean

            raise ValueError(f"options.conv_layout: unknown memory format; got {self.conv_layout!r}; expected one of "
                             f"{', '.join(CONV_LAYOUTS)}" + did_you_mean(str(self.conv_layout).lower(), CONV_LAYOUTS))


#: Memory formats of convolution activations (``EvalOptions.conv_layout``, ``--conv-layout``).
CONV_LAYOUTS = ("nhwc", "nchw")


def _collectives_of(system: DeviceSpec | SystemSpec) -> Any:
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
    provenance and file names left out, and an absent ``dvfs`` table too (so the digests of specs
    without DVFS data did not change when the table was added)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: spec_tree(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if f.name not in ("provenance", "source_file")
                and not (f.name == "dvfs" and getattr(obj, f.name) is None)}
    if isinstance(obj, dict):
        return {str(k): spec_tree(v) for k, v in sorted(obj.items())}
    if isinstance(obj, (list, tuple)):
        return [spec_tree(x) for x in obj]
    return obj


def _spec_digest(spec: DeviceSpec | SystemSpec) -> tuple[str, bool]:
    """(:func:`spec_digest`, plain): plain when every field value is a number, string, bool or None
    (JSON writes it exactly), so that the digest identifies the values; a spec holding numpy arrays
    (a sweep's hardware variants, whose ``repr`` may elide elements) is not plain."""
    odd: list[type] = []

    def text_of(obj: Any) -> str:  # what JSON cannot write (a numpy array of hardware variants...)
        odd.append(type(obj))
        return repr(obj)

    text = json.dumps(spec_tree(spec), sort_keys=True, separators=(",", ":"), default=text_of)
    return hashlib.sha256(text.encode()).hexdigest(), not odd


@functools.lru_cache(maxsize=1)
def _version() -> str:
    """The installed package's version (looked up once per process)."""
    from simulator.version import package_version  # without importing importlib.metadata

    return package_version() or "unknown"


class _Energy:
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


def _fusible(op: Op) -> bool:
    """Elementwise ops, and inference batch norm (a per-channel scale and shift), fuse into producers."""
    return op.kind in FUSIBLE_KINDS or (op.kind == "batchnorm" and not op.attrs.get("training"))


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
    same library call: a kernel launch each, not a framework op. Zero without kernels."""
    lib = library_launches(rule)
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


#: Op kinds an eager model issues from a module holding parameters, when the op has a weight operand
#: (``nn.Linear``, ``nn.Embedding``, ``nn.LayerNorm``, ``nn.BatchNorm2d``; a convolution's call time,
#: ``framework_conv_op_overhead_s``, was measured through ``nn.Conv2d`` and includes its module).
MODULE_OP_KINDS = frozenset({"matmul", "embedding", "layernorm", "rmsnorm", "batchnorm"})


def module_call_counts(graph: OpGraph) -> dict[str, tuple[int, int]]:
    """``{op name: (containers entered, parameter-holding module calls)}`` of an eager model's forward.

    Op names are the module paths of the zoo and Hugging Face builders (``layers.3.attn.q``): every
    dotted prefix that is not itself an op names a container module, called once, whose Python runs
    before the first op it issues; an op of :data:`MODULE_OP_KINDS` with a weight operand is its own
    module's call. Containers first seen at an op that launches no kernel (a view) are carried to the
    next op that does. Ops with neither are left out, and so is everything from a training graph's loss
    on (the backward pass runs in autograd's engine and the optimizer step calls no module).
    """
    from workloads.frameworks import AUTOCAST_CAST_SUFFIX
    from workloads.training import LOSS_KINDS

    names = {op.name for op in graph}
    seen: set[str] = set()
    out: dict[str, tuple[int, int]] = {}
    pending = 0
    for op in graph:
        if op.kind in LOSS_KINDS:  # what follows the loss is autograd's backward and the optimizer: no module calls
            break
        parts = op.name.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix not in seen and prefix not in names:
                seen.add(prefix)
                pending += 1
        if op.kind in VIEW_KINDS:
            continue
        # a weight torch.autocast cast first (workloads.frameworks.autocast_weight_casts) still belongs to
        # the op's module
        cast = op.name + AUTOCAST_CAST_SUFFIX
        leaf = int(op.kind in MODULE_OP_KINDS and any(t.role == "weight" or t.name.startswith(cast)
                                                      for t in op.inputs))
        if pending or leaf:
            out[op.name] = (pending, leaf)
        pending = 0
    return out


def module_host_s(counts: tuple[int, int], eff: Any) -> Any:
    """Host seconds of an op's module calls: containers x ``framework_container_call_s`` + module
    calls x ``framework_module_call_s``."""
    return counts[0] * eff.framework_container_call_s + counts[1] * eff.framework_module_call_s


def _signature(op: Op, resident: float) -> tuple[Any, ...]:
    """What a lowering rule's cost of ``op`` depends on (besides the device and the options): its
    kind, tensor shapes, dtypes and input roles, attributes (compared by value) and the bytes of its
    inputs resident in L2. Ops with equal signatures cost the same."""
    return (op.kind, tuple([(t.shape, t.dtype, t.role) for t in op.inputs]),
            tuple([(t.shape, t.dtype) for t in op.outputs]), tuple(op.attrs.items()), resident)


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
        :class:`EvalOptions` (default: no fusion, eager launches, power cap on).

    Returns
    -------
    CostReport
        One record per op in execution order, totals, memory check, warnings and provenance.
        Deterministic: the same inputs give byte-identical ``to_json()``.
    """
    opts = options or EvalOptions()
    if opts.plan is not None:
        from simulator.parallel import evaluate_graph_with_plan

        return evaluate_graph_with_plan(graph, system, opts)
    dev, hw_name, count, fabric = spec_of(system)
    check_dtype_rates(graph, dev)  # a contraction dtype without a rate is refused before any op is costed
    floor = launch_floor_s(dev, opts)
    fuse = opts.fusion if opts.fusion is not None else dev.kind == "tpu"
    ctx = LoweringContext(dev, opts, fabric=fabric, group_size=count, collectives=_collectives_of(system),
                          nodes=int(getattr(system, "nodes", 1)))
    energy = _Energy(dev)
    l2 = next((lv for lv in dev.memory if lv.name.lower() in ("l2", "llc")), None)
    l2cap = l2.capacity_bytes if l2 is not None else 0.0
    spec_sha, plain = _spec_digest(system)
    costs = _costs_of(spec_sha, plain, dev, opts, ctx)
    # the first record made of each op signature (and of each fused cost): later ops of the same
    # cost copy it (:func:`_same_cost`), which is what _make_record would give them
    protos: dict[tuple[Any, ...], tuple[KernelCost, OpCost]] = {}
    fused_protos: dict[KernelCost, OpCost] = {}
    view: OpCost | None = None
    alias: dict[str, str] = {}  # view output -> base tensor
    resident: set[str] = set()  # base tensors written by the previous kernel (and fitting in L2)
    prev_kernel: str | None = None
    group = FusionGroup()  # the kernel being built (fusion)
    records: list[OpCost] = []
    warnings: set[str] = set()
    fallbacks: Counter[str] = Counter()
    capped = 0

    def base(name: str) -> str:
        return alias.get(name, name)

    # the nn.Module calls of an eager model's ops (module_call_counts): part of the op's host time
    calls = module_call_counts(graph) if (opts.eager_framework and opts.eager_modules) else {}

    def first_record(op: Op, kc: KernelCost, fused_into: str, mods: tuple[int, int] = (0, 0)) -> OpCost:
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
        return _make_record(op, kc, got[0], fused_into)

    for op in graph:
        if op.kind in VIEW_KINDS:
            for t in op.outputs:
                alias[t.name] = base(op.inputs[0].name)
            if view is None:
                view = _view_record(op)
                records.append(view)
            else:
                records.append(_same_cost(view, op, ""))
            continue
        in_l2 = 0.0
        if opts.l2_residency and resident:
            in_l2 = float(sum(t.nbytes for t in op.inputs if alias.get(t.name, t.name) in resident))
        fused_into = ""
        joined = group.join(op, graph, base, opts) if fuse else None
        if joined is not None:
            fused_into = prev_kernel
            group.add(op, base)
        elif fuse:
            group.start(op, base, opts)
        if fused_into:
            fkey = ("fused", _signature(op, 0.0), *joined)
            kc = costs.kernels.get(fkey)
            if kc is None:
                kc = costs.kernels[fkey] = _fused_cost(op, *joined, ctx)
            rec = fused_protos.get(kc)
            if rec is None:
                rec = fused_protos[kc] = first_record(op, kc, fused_into)
            else:
                rec = _same_cost(rec, op, fused_into)
        else:
            key = _signature(op, in_l2)
            mods = calls.get(op.name) if calls else None
            pkey = key if mods is None else (key, mods)
            hit = protos.get(pkey)
            if hit is None:
                kc = costs.kernels.get(key)
                if kc is None:
                    ctx.resident_bytes = in_l2
                    kc = costs.kernels[key] = lower(op, ctx)
                rec = first_record(op, kc, "", mods or (0, 0))
                protos[pkey] = (kc, rec)
            else:
                kc, rec = hit
                rec = _same_cost(rec, op, "")
        if kc.fallback:
            fallbacks[op.kind] += 1
        capped += rec.power_capped
        records.append(rec)
        # what the next kernel finds in L2 (a fused op extends its producer's kernel)
        out_bytes = sum(t.nbytes for t in op.outputs)
        written = {t.name for t in op.outputs} if out_bytes <= l2cap else set()
        resident = (resident | written) if fused_into else written
        prev_kernel = op.name  # a fused op extends the chain: the next op may fuse into it too

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
    totals = _totals(records, dev)
    prov = {
        "engine": ENGINE_NAME,
        "options": dataclasses.asdict(opts),
        "graph_sha256": graph_digest(graph),
        "spec_sha256": spec_sha,
        "spec_file": _display_path(getattr(system, "source_file", "")),
        "calibration_id": opts.calibration_id,
        "version": _version(),
        "workload": {k: graph.meta[k] for k in sorted(graph.meta)},
        "devices": count,
    }
    return CostReport(model=graph.name, hardware=hw_name, records=tuple(records), totals=totals, memory=mem,
                      warnings=tuple(sorted(warnings)), provenance=prov)


def _view_record(op: Op) -> OpCost:
    return OpCost(
        name=op.name, kind=op.kind, group=op.group, category=op.category, dtype=op.dtype.value, time_s=0.0,
        energy_j=0.0, dynamic_energy_j=0.0, static_energy_j=0.0, flops=float(op.flops), dram_bytes=0.0,
        l2_bytes=0.0, smem_bytes=0.0, compute_s=0.0, memory_s=0.0, overhead_s=0.0, bound="latency",
        rule="view", kernels=0,
    )


#: The fields of a record that come from its op (and the kernel it is fused into); every other
#: field comes from the op's kernel cost (keep in step with _make_record and _view_record).
_OP_FIELDS = ("name", "kind", "group", "category", "dtype", "flops", "fused_into")
_new_record = object.__new__
_set_fields = object.__setattr__


def _same_cost(rec: OpCost, op: Op, fused_into: str) -> OpCost:
    """The record of ``op``, whose kernel cost is that of the record ``rec``: ``rec``'s fields with
    those of :data:`_OP_FIELDS` taken from ``op``. (The fields are copied as one dict, not passed
    through the frozen dataclass's ``__init__``: a step costs thousands of records.)"""
    fields = rec.__dict__.copy()
    fields["name"], fields["kind"], fields["group"] = op.name, op.kind, op.group
    fields["category"], fields["dtype"], fields["flops"] = op.category, op.dtype.value, float(op.flops)
    fields["fused_into"] = fused_into
    out = _new_record(OpCost)
    _set_fields(out, "__dict__", fields)
    return out


def _num(x: Any) -> Any:
    """``float(x)``; a float array for an array of hardware variants (sweeps)."""
    return float(x) if np.ndim(x) == 0 else np.asarray(x, dtype=float)


def _fused_cost(op: Op, held: frozenset[int], reuse: float, ctx: LoweringContext) -> KernelCost:
    """An op folded into the kernel being built (:class:`FusionGroup`): the traffic of the inputs the
    kernel does not hold yet (``held``: positions it holds) and of the output beyond the ``reuse`` bytes
    of a store it replaces, and its vector work."""
    extra_in = float(sum(t.nbytes for i, t in enumerate(op.inputs) if i not in held))
    extra_out = float(max(0.0, sum(t.nbytes for t in op.outputs) - reuse))
    sfu = 0.0
    if ctx.device.kind == "gpu":
        p = ctx.params("fp32")  # (fields may be arrays of hardware variants: simulator.sweep.vectorized)
        rate = _num(p.vector_flops_per_s) * _num(p.vector_fraction)
        bw = _num(p.dram_bytes_per_s) * _num(p.dram_fraction)
        sfu = sfu_ops(op) / _num(p.sfu_ops_per_s)  # the same special functions as unfused
    else:  # TPU vector unit / CPU SIMD: the spec's vector rate and main-memory bandwidth
        dev = ctx.device
        vec = dev.compute.vector_flops_per_s
        rate = float(vec.get(op.dtype.value) or vec.get("fp32") or max(vec.values())) * dev.efficiency.vector_peak_fraction
        bw = dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction
    return KernelCost(
        compute_s=float(op.flops) / rate + sfu, memory_s=(extra_in + extra_out) / bw, latency_s=0.0,
        dram_bytes=extra_in + extra_out, l2_bytes=extra_in + extra_out, smem_bytes=0.0, matrix_flops=0.0,
        vector_flops=float(op.flops), rule="fused-epilogue", kernels=0,
    )


def _record_values(kc: KernelCost, dev: DeviceSpec, energy: _Energy, floor: float,
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
    j_vector = energy.per_flop(dev.energy.vector_j_per_flop, "fp32", "vector_j_per_flop")
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


def _totals(records: list[OpCost], dev: DeviceSpec) -> Totals:
    lat = sum(r.time_s for r in records)
    e_dyn = sum(r.dynamic_energy_j for r in records)
    e_st = sum(r.static_energy_j for r in records)
    energy = sum(r.energy_j for r in records)
    flops = sum(r.flops for r in records)
    by_dtype: Counter[str] = Counter()
    for r in records:
        dt = r.matrix_dtype or r.dtype  # the rate the rule actually used (e.g. fp32 on a TPU runs at bf16)
        if r.category in ("contraction", "attention", "recurrent") and dt in dev.compute.tensor_flops_per_s:
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
        dram_bytes=sum(r.dram_bytes for r in records), l2_bytes=sum(r.l2_bytes for r in records),
        smem_bytes=sum(r.smem_bytes for r in records), kernels=sum(r.kernels for r in records),
        ops=len(records),
    )
