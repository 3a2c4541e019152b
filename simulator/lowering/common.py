"""Lowering machinery shared by every device kind: kernel costs, the rule registry, common helpers.

A *rule* maps one op to a :class:`KernelCost` (device-side time components, traffic per level,
matrix/vector work, the chosen kernel) using the numeric models of :mod:`hwmodels`. Rules are kept
in one :class:`RuleSet` per device kind (``"gpu"``, ``"tpu"``, ``"cpu"``); the engines look rules
up by ``(device.kind, op.kind)`` and fall back to the rule set's roofline — marked as a fallback in
the report and warned about — when a kind has no rule.

Extending to another device kind (e.g. a TPU rule set)
------------------------------------------------------
Create a module (``simulator/lowering/tpu.py``) that registers its rules against the kind::

    from simulator.lowering import KernelCost, LoweringContext, register_rule, set_fallback

    @register_rule("tpu", "matmul", "conv2d")
    def _tpu_contraction(op, ctx: LoweringContext) -> KernelCost:
        ...  # call hwmodels.systolic functions with ctx.device.systolic and the op's dims

    set_fallback("tpu", my_tpu_roofline)

and import it from :data:`RULE_MODULES` (or import it before evaluating). A rule receives the op and
a :class:`LoweringContext` (device, options, L2-resident input bytes, per-call caches) and must not
mutate either. Nothing else in the engines depends on the device kind.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwmodels import gpu
from hwmodels.loader import KNOWN_DTYPES
from hwmodels.spec import DeviceSpec, LinkSpec, SpecError
from nodeperf.suggest import did_you_mean
from workloads.ir import Op, UnsupportedOpError

__all__ = [
    "KernelCost",
    "RnnDims",
    "rnn_dims",
    "LoweringContext",
    "Rule",
    "RuleSet",
    "ruleset",
    "register_rule",
    "set_fallback",
    "lower",
    "rule_name_for",
    "rule_set_state",
    "VIEW_KINDS",
    "COLLECTIVE_KINDS",
    "NARROW_GROUP_CHANNELS",
    "RULE_MODULES",
    "element_bytes",
    "is_contraction",
    "require_rate",
    "check_dtype_rates",
    "zero_cost",
    "is_narrow_grouped_conv",
    "ring_collective",
    "sfu_ops",
    "gpu_vector_flops",
]

logger = logging.getLogger(__name__)

#: Kinds that only relabel memory: no kernel, no cost.
VIEW_KINDS = frozenset({"reshape", "split", "slice"})
#: Communication kinds: rings over the system fabric or a device link; no producer fuses into them.
COLLECTIVE_KINDS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send",
                              "recv"})
#: Grouped convolutions with fewer output channels per group than this (depthwise and similar) run
#: as direct kernels on the vector units: one group cannot fill the N = 8 side of the smallest
#: tensor-core MMA shape (``mma.sync`` m16n8k16, PTX ISA "Matrix shape"), nor a systolic array.
NARROW_GROUP_CHANNELS = 8
#: Optional modules registering rule sets for further device kinds (imported on first lookup).
RULE_MODULES: tuple[str, ...] = ("simulator.lowering.gpu", "simulator.lowering.tpu", "simulator.lowering.cpu",
                                 "simulator.lowering.linalg")


@dataclass(frozen=True)
class KernelCost:
    """Device-side cost of one op as its rule estimates it (before launch floor and power cap).

    ``compute_s`` and ``memory_s`` overlap; ``latency_s`` is added (pipeline prologue, DRAM
    latency, serial steps). ``matrix_flops``/``vector_flops`` split the arithmetic by unit for
    energy; ``sfu_ops`` are special-function evaluations.
    """

    compute_s: float
    memory_s: float
    latency_s: float
    dram_bytes: float
    l2_bytes: float
    smem_bytes: float
    matrix_flops: float
    vector_flops: float
    rule: str
    matrix_dtype: str = ""
    tile: str = ""
    split_k: int = 1
    ctas: int = 0
    waves: float = 0.0
    ctas_per_sm: int = 0
    kernels: int = 1
    fallback: bool = False
    notes: str = ""
    memory_level: str = ""  # the memory level whose traffic sets memory_s ("dram", "l2", "smem"; "" = dram)
    # the cost already holds the device-side time of its kernels (a measured end-to-end collective time;
    # linear-algebra pieces priced one by one): the engine adds no efficiency.kernel_device_time_s to it
    kernel_time_included: bool = False
    # the part of vector_flops that is a dependent FMA chain on register operands (the op declares it:
    # attrs operands = "register-chain"); the engine prices it at energy.chain_j_per_flop where the device gives one
    chain_flops: float = 0.0

    @property
    def device_time_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.latency_s


def kernel_device_s(kc: KernelCost, eff: Any) -> Any:
    """Device-side time the engine adds to ``kc`` beyond its modelled work: ``efficiency.kernel_device_time_s``
    per kernel, none where the cost already holds it (``KernelCost.kernel_time_included``)."""
    return 0.0 if kc.kernel_time_included else kc.kernels * eff.kernel_device_time_s


@dataclass
class LoweringContext:
    """What a rule may consult: the device, evaluation options and per-op facts the engine knows.

    Attributes
    ----------
    device
        The device the op runs on.
    options
        The engine's options object (``allow_tf32`` etc.).
    resident_bytes
        Bytes of this op's inputs resident in L2 (produced by the previous kernel and small enough).
    fabric
        The system's device-to-device link (collectives), if any.
    group_size
        Devices in the system.
    collectives
        The system's node configuration in the fabric catalog
        (:class:`hwmodels.collectives.CollectiveSystem`), which costs its collectives; None: a ring
        over ``fabric`` at its raw bandwidth.
    nodes
        Nodes in the system.
    """

    device: DeviceSpec
    options: Any
    resident_bytes: float = 0.0
    fabric: LinkSpec | None = None
    group_size: int = 1
    collectives: Any = None
    nodes: int = 1
    _params: dict[tuple[str, bool], gpu.GpuParams] = field(default_factory=dict)

    def params(self, dtype: str) -> gpu.GpuParams:
        """GPU model parameters of the device for contractions in ``dtype`` (cached)."""
        tf32 = bool(getattr(self.options, "allow_tf32", False))
        key = (dtype, tf32)
        if key not in self._params:
            self._params[key] = gpu.gpu_params(self.device, dtype, allow_tf32=tf32)
        return self._params[key]


Rule = Callable[[Op, LoweringContext], KernelCost]


class RuleSet:
    """Rules for one device kind, plus the fallback used for kinds without a rule."""

    def __init__(self, device_kind: str) -> None:
        self.device_kind = device_kind
        self.rules: dict[str, Rule] = {}
        self.fallback: Rule | None = None

    def register(self, *op_kinds: str) -> Callable[[Rule], Rule]:
        def deco(fn: Rule) -> Rule:
            for k in op_kinds:
                self.rules[k] = fn
            return fn

        return deco

    def lookup(self, op_kind: str) -> Rule | None:
        return self.rules.get(op_kind)


_RULESETS: dict[str, RuleSet] = {}
_loaded_modules = False


def ruleset(device_kind: str) -> RuleSet:
    """The rule set of ``device_kind`` (created empty on first use)."""
    if device_kind not in _RULESETS:
        _RULESETS[device_kind] = RuleSet(device_kind)
    return _RULESETS[device_kind]


def register_rule(device_kind: str, *op_kinds: str) -> Callable[[Rule], Rule]:
    """Decorator registering a rule for ``op_kinds`` on ``device_kind`` devices."""
    return ruleset(device_kind).register(*op_kinds)


def set_fallback(device_kind: str, fn: Rule) -> None:
    """Set the fallback rule of ``device_kind`` (used, with a warning, for kinds without a rule)."""
    ruleset(device_kind).fallback = fn


def _load_rule_modules() -> None:
    global _loaded_modules
    if _loaded_modules:
        return
    _loaded_modules = True
    for mod in RULE_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise


def rule_name_for(device_kind: str, op_kind: str) -> str | None:
    """Name of the rule function that would cost ``op_kind`` (None: the fallback)."""
    _load_rule_modules()
    fn = ruleset(device_kind).lookup(op_kind)
    return None if fn is None else fn.__name__.lstrip("_")


def rule_set_state(device_kind: str) -> tuple[frozenset[tuple[str, Rule]], Rule | None]:
    """The rules that cost ops on ``device_kind`` devices now, and the fallback: what a kernel cost
    kept across calls depends on besides the op, the device and the options (a cache key; registering
    or replacing a rule changes it)."""
    _load_rule_modules()
    rs = ruleset(device_kind)
    return frozenset(rs.rules.items()), rs.fallback


def lower(op: Op, ctx: LoweringContext) -> KernelCost:
    """Cost ``op`` on ``ctx.device`` with its rule, or with the fallback (marked, logged).

    Raises
    ------
    UnsupportedOpError
        The device kind has neither a rule for the op nor a fallback.
    """
    _load_rule_modules()
    rs = ruleset(ctx.device.kind)
    fn = rs.lookup(op.kind)
    if fn is not None:
        return fn(op, ctx)
    if rs.fallback is None:
        raise UnsupportedOpError(
            f"op {op.name!r}: no lowering rule for kind {op.kind!r} on {ctx.device.kind} device "
            f"{ctx.device.name!r} and no fallback; expected a rule registered with register_rule"
        )
    logger.debug("op %r (%s): no rule on %s devices; costed by the roofline fallback", op.name, op.kind, ctx.device.kind)
    return rs.fallback(op, ctx)


# ================================================================================================
# helpers shared by the rule sets of every device kind


def is_contraction(op: Op) -> bool:
    """Whether ``op`` is a contraction: a kernel with multiply-accumulates (matmul, conv, attention, RNN...)."""
    return op.kind not in VIEW_KINDS and op.kind not in COLLECTIVE_KINDS and op.macs > 0


def require_rate(device: DeviceSpec, dtype: str, op: Op | None = None) -> None:
    """Refuse a contraction in ``dtype`` on a device with no rate for it; the same rule on every device kind.

    A contraction runs at ``compute.tensor_flops_per_s[dtype]`` or, where the matrix unit has no rate
    for the dtype, at ``compute.vector_flops_per_s[dtype]`` (a GPU's SIMT fp32, a TPU's vector unit);
    a dtype in neither table has no rate, and costing it at another dtype's rate would be a silent guess.

    Raises
    ------
    SpecError
        ``<device>: compute.tensor_flops_per_s: no rate for dtype 'int4' ...; expected one of ...``.
    """
    rates = {*device.compute.tensor_flops_per_s, *device.compute.vector_flops_per_s}
    have = [d for d in KNOWN_DTYPES if d in rates] + sorted(rates - set(KNOWN_DTYPES))
    if dtype in have:
        return
    what = f" (op {op.name!r}, {op.kind})" if op is not None else ""
    flag = "--weight-dtype" if op is not None and op.kind == "quant_matmul" else "--dtype"  # a quantised weight's dtype
    raise SpecError(f"{device.name}: compute.tensor_flops_per_s: no rate for dtype {dtype!r}{what}; got {dtype!r}; "
                    f"expected one of {', '.join(have) or 'none'} (choose one with {flag}){did_you_mean(dtype, have)}")


def check_dtype_rates(ops: Any, device: DeviceSpec) -> None:
    """:func:`require_rate` for every contraction of ``ops`` (an iterable of ops; each dtype checked once)."""
    seen: set[str] = set()
    for op in ops:
        dt = op.dtype.value
        if dt not in seen and is_contraction(op):
            require_rate(device, dt, op)
            seen.add(dt)


def element_bytes(dtype: Any) -> float:
    """Bytes per element of a workload dtype (``DType.bits / 8``)."""
    return dtype.bits / 8.0



@dataclass(frozen=True)
class RnnDims:
    """An LSTM/GRU op's dimensions as every device's rule reads them: gates per step (4 LSTM, 3 GRU), steps,
    batch, input and hidden width, directions, and the element bytes of its input."""

    gates: int
    steps: int
    batch: int
    inputs: int
    hidden: int
    directions: int
    in_bytes: float


def rnn_dims(op: Op) -> RnnDims:
    """The :class:`RnnDims` of an ``lstm``/``gru`` layer (input ``(steps, batch, inputs)``, ``hidden`` and
    ``bidirectional`` attributes) or an ``lstm_cell``/``gru_cell`` (inputs ``x (batch, inputs)``, ``h``)."""
    gates = 4 if op.kind.startswith("lstm") else 3
    x = op.inputs[0]
    if op.kind.endswith("_cell"):
        return RnnDims(gates, 1, x.shape[0], x.shape[1], op.inputs[1].shape[1], 1, element_bytes(x.dtype))
    steps, b, i = x.shape
    dirs = 2 if op.attrs.get("bidirectional") else 1
    return RnnDims(gates, steps, b, i, int(op.attrs["hidden"]), dirs, element_bytes(x.dtype))


def zero_cost(rule: str) -> KernelCost:
    """The cost of an op that launches no kernel (views, collectives over one device)."""
    return KernelCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, rule=rule, kernels=0)


def is_narrow_grouped_conv(dims: dict[str, int]) -> bool:
    """Whether a convolution (its :func:`~workloads.semantics.conv_dims`) has groups too narrow for the
    matrix units (fewer than :data:`NARROW_GROUP_CHANNELS` output channels per group, one input
    channel group per output group)."""
    g = dims["groups"]
    return g > 1 and dims["gemm_n"] * g == dims["c"] and dims["gemm_n"] < NARROW_GROUP_CHANNELS


#: Ring steps of each collective over ``n`` devices (a ring all-reduce is a reduce-scatter then an
#: all-gather: ``2 (n - 1)`` steps).
_RING_STEPS: dict[str, Callable[[int], int]] = {
    "all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1, "reduce_scatter": lambda n: n - 1,
    "all_to_all": lambda n: n - 1, "broadcast": lambda n: n - 1, "send": lambda n: 1, "recv": lambda n: 1,
}


def ring_collective(op: Op, link: LinkSpec, n: int, notes: str) -> KernelCost:
    """A collective of ``n`` devices as a ring over ``link``: each step sends one ``1/n`` chunk
    (the whole message for send/recv) at the link's raw bandwidth and pays its latency."""
    size = float(op.attrs.get("size_bytes") or (op.outputs[0].nbytes if op.kind == "all_gather"
                 else (op.inputs[0].nbytes if op.inputs else op.outputs[0].nbytes)))
    steps = _RING_STEPS[op.kind](n)
    per_step = size if op.kind in ("send", "recv") else size / n
    wire = steps * per_step / link.bandwidth_bytes_per_s
    return KernelCost(0.0, wire, steps * link.latency_s, 2.0 * steps * per_step, 0.0, 0.0, 0.0, float(op.flops),
                      rule=f"ring-{op.kind}", notes=notes)


# kinds whose work per element includes a special-function evaluation (exp, tanh, erf, rsqrt, ...)
_SFU_ELEMENTWISE = frozenset({"exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "silu", "swish",
                              "gelu", "erf", "softplus", "quick_gelu", "div", "pow"})


def _special_work(op: Op) -> tuple[float, float] | None:
    """``(FP32 FLOP-equivalents, MUFU ops)`` of a forward elementwise op, or of the gradient of a unary
    one (an ``elementwise_bwd`` reading ``dy`` and the op's input), from the compiled instruction
    counts of :func:`hwmodels.gpu.elementwise_work`; None for other ops."""
    if op.kind == "elementwise":
        fn = str(op.attrs.get("op"))
        if fn == "dropout" and not op.attrs.get("training"):
            return None  # an inference dropout draws no random numbers
        return gpu.elementwise_work(fn, float(op.outputs[0].numel))
    if op.kind == "elementwise_bwd" and len(op.inputs) == 2:
        return gpu.elementwise_work(str(op.attrs.get("op")), float(op.outputs[0].numel), backward=True)
    return None


def sfu_ops(op: Op) -> float:
    """Special-function evaluations (exp, tanh, rsqrt, ...) of an op on a GPU's SFUs."""
    if op.kind in ("softmax", "softmax_bwd", "cross_entropy"):
        return float(op.inputs[0].numel)
    work = _special_work(op)
    if work is not None:
        return work[1]
    if op.kind in ("elementwise", "elementwise_bwd") and op.attrs.get("op") in _SFU_ELEMENTWISE:
        return float(op.outputs[0].numel)
    return 0.0


def gpu_vector_flops(op: Op) -> float:
    """FP32 work of an op on a GPU's FMA pipe, in FLOP (FMA = 2): the instruction count of the
    compiled special function for the elementwise ops of :data:`hwmodels.gpu.ELEMENTWISE_INSTRUCTIONS`
    and the gradients of :data:`hwmodels.gpu.ELEMENTWISE_BWD_INSTRUCTIONS`, else the op's semantic FLOPs."""
    work = _special_work(op)
    if work is not None:
        return work[0]
    return float(op.flops)
