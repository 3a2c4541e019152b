"""The one walk of the analytical engine over a graph: which kernel each op is, and what it costs by.

Ops run in the graph's topological order on one stream of one device. :func:`walk_graph` decides, op
by op, what both analytical evaluators need before any hardware number is read: view ops alias their
input (no kernel); the bytes of an op's inputs that the previous kernel wrote and that fit in L2
(residency); with fusion, whether the op joins the kernel being built (:class:`FusionGroup`); the
``nn.Module`` calls an eager model's op issues (:func:`module_call_counts`); and the key its cost
depends on (:func:`op_signature`). Ops of equal key share one *slot*: one costing per walk.

The decisions depend on the graph, a few options and the L2 capacity only, so a walk is computed
once per graph object and those (:meth:`workloads.ir.OpGraph.memo`). Its two consumers differ only in
what they make of a slot: :func:`simulator.engines.analytical.evaluate` one record per op for one
system, :func:`simulator.engines.vectorized.evaluate_variants` arrays over hardware variants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.engines.options import EvalOptions
from simulator.lowering import COLLECTIVE_KINDS, VIEW_KINDS
from simulator.lowering.common import is_contraction
from simulator.lowering.cpu import CONTRACTION_KINDS
from workloads.ir import Op, OpGraph

__all__ = ["ATEN_FALLBACK", "OUTSIDE_EPILOGUE", "QUANTIZE_OUTPUT", "TE_NORM_FUSED", "TE_QUANTIZE", "FUSIBLE_KINDS", "GROUP_KINDS", "NORM_KINDS", "LIBRARY_KERNEL_KINDS", "QUANT_LINEAR_KINDS", "MODULE_OP_KINDS", "FusionGroup", "Slot", "Walk",
           "VIEW", "KERNEL", "FUSED", "is_gemv", "is_fusible", "is_library_kernel", "module_call_counts", "op_signature", "walk_graph"]

#: Op attribute: the op runs as an eager ATen kernel even under a compiler (Inductor's fallback for complex
#: tensors: ``unsupported_input_tensor`` in torch/_inductor/lowering.py warns "Torchinductor does not support code
#: generation for complex operators" and the node becomes a ``FallbackKernel``): it fuses into no kernel and no op
#: fuses into it.
ATEN_FALLBACK = "aten_fallback"
#: Op attributes of a Transformer Engine quantize kernel and of the second copy it writes
#: (:data:`workloads.precision.TE_QUANTIZE_ATTR`, :data:`workloads.precision.QUANTIZE_OUTPUT_ATTR`)
TE_QUANTIZE = "te_quantize"
QUANTIZE_OUTPUT = "quantize_output"
#: Op attribute of the part of a TE quantisation a norm kernel computes (:data:`workloads.precision.TE_NORM_FUSED_ATTR`)
TE_NORM_FUSED = "te_norm_fused"
#: Op attribute of an elementwise op the stack runs as a kernel of its own after a library GEMM, never in its
#: epilogue (``workloads.zoo.transformer.OUTSIDE_EPILOGUE``; ``FrameworkProfile.epilogue_bias_only``: Megatron-Core's
#: activation and bias-dropout-add kernels); it may still head or join a generated kernel.
OUTSIDE_EPILOGUE = "outside_epilogue"
#: Op kinds that may be fused into the kernel producing their input (epilogue / chain fusion).
FUSIBLE_KINDS = frozenset({"elementwise", "elementwise_bwd"})
# Producers that cannot take an epilogue (communication, no kernel).
_NO_EPILOGUE = COLLECTIVE_KINDS | VIEW_KINDS
#: Op kinds a compiler that generates only pointwise and reduction kernels calls as library kernels
#: (cuBLAS / cuDNN / FlashAttention): with ``EvalOptions.epilogue_fusion`` off, nothing fuses into them.
#: The contractions (the CPU rules' list), less the MoE router, whose gate and top-k the graph keeps as one op.
LIBRARY_KERNEL_KINDS = CONTRACTION_KINDS - {"moe_router", "moe_router_bwd"}
#: Quantised linear layers (``workloads.precision``) and MoE experts that may run as library kernels
#: (:func:`is_library_kernel`). fp8 weights and activations (W8A8): vLLM's ``apply_fp8_linear`` calls
#: ``torch._scaled_mm`` (cuBLASLt / hipBLASLt) or CUTLASS ``cutlass_scaled_mm`` (vllm-project/vllm
#: vllm/model_executor/layers/quantization/utils/w8a8_utils.py, 2024), whose epilogue is the library's. fp8 experts:
#: ``Fp8MoEMethod.apply`` (vllm/model_executor/layers/quantization/fp8.py) calls ``fused_experts(...,
#: use_fp8_w8a8=True)``, which runs the hand-written Triton ``fused_moe_kernel`` twice with ``ops.silu_and_mul`` (a
#: CUDA kernel of its own) between them and ``moe_sum`` after (vllm/model_executor/layers/fused_moe/fused_moe.py;
#: the structure as later copies of that file show it, not read at a pinned 2024 commit): no activation or residual enters the grouped GEMM. Weight-only int4 / int8 (W4A16 / W8A16):
#: vLLM runs hand-written CUDA kernels -- GPTQ-Marlin / AWQ-Marlin ``ops.gptq_marlin_gemm``
#: (csrc/quantization/gptq_marlin/gptq_marlin.cu, called by ``apply_gptq_marlin_linear`` in
#: vllm/model_executor/layers/quantization/utils/marlin_utils.py), AWQ ``ops.awq_gemm``
#: (csrc/quantization/awq/gemm_kernels.cu, ``AWQLinearMethod.apply``), GPTQ ``ops.gptq_gemm`` (the ExLlama(v2)
#: kernels, csrc/quantization/gptq/q_gemm.cu, ``GPTQLinearMethod.apply``), the MoE experts ``fused_marlin_moe``
#: (vllm/model_executor/layers/fused_moe/fused_marlin_moe.py) -- and adds the bias after (``output.add_(bias)``);
#: SGLang takes these quantisation methods from vLLM (python/sglang/srt/layers/quantization, 2024). A stack that
#: compiles (``EvalOptions.epilogue_fusion`` on) may generate the weight-only kernels itself, so there only the fp8
#: kinds are library kernels.
QUANT_LINEAR_KINDS = frozenset({"quant_matmul", "quant_grouped_matmul"})


def is_library_kernel(op: Op, compiled: bool = True) -> bool:
    """Whether ``op`` runs as a library kernel: a contraction of :data:`LIBRARY_KERNEL_KINDS`, or a quantised
    linear or grouped layer (:data:`QUANT_LINEAR_KINDS`) -- every one where the stack does not compile
    (``compiled`` False: ``EvalOptions.epilogue_fusion`` off, vLLM's and SGLang's hand-written Marlin / AWQ / GPTQ /
    fused-MoE kernels), only fp8 (W8A8) ones where it does."""
    if op.kind in LIBRARY_KERNEL_KINDS:
        return True
    if op.kind not in QUANT_LINEAR_KINDS:
        return False
    return not compiled or (len(op.inputs) > 1 and op.inputs[1].dtype.value.startswith("fp8"))


#: Op kinds that join a generated (pointwise / reduction) kernel but never a library kernel's epilogue:
#: a reduction over the kernel's values (an RMSNorm's mean) and a concatenation of them (RoPE's
#: rotate_half), which fusing compilers emit inside the same loop (Inductor's pointwise and reduction
#: kernels, XLA loop and input fusions).
GROUP_KINDS = frozenset({"reduction", "concat"})

#: Normalisations a compiler lowers to reductions of its own and fuses with the pointwise op before them
#: (``EvalOptions.norm_fusion``): with it they join a generated kernel as :data:`GROUP_KINDS` do.
NORM_KINDS = frozenset({"layernorm", "rmsnorm", "softmax"})


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

    __slots__ = ("head_kind", "library", "made", "read", "read_exact", "settled", "te_quantize")

    def __init__(self) -> None:
        self.head_kind: str | None = None
        self.library = False
        self.made: set[str] = set()
        self.read: set[str] = set()
        self.read_exact: set[str] = set()  # the tensors read as named (a view, not its base)
        self.settled: set[str] = set()  # results of grid-wide reductions: ready only when the kernel ends
        self.te_quantize = False  # the kernel is a Transformer Engine quantize (TE_QUANTIZE)

    def start(self, op: Op, base: Any, opts: EvalOptions) -> None:
        """``op`` launches a new kernel."""
        self.head_kind = op.kind
        self.library = is_library_kernel(op, opts.epilogue_fusion) and not (opts.gemv_generated and is_gemv(op))
        if op.attrs.get(ATEN_FALLBACK):  # an eager ATen kernel inside a compiled graph: nothing joins it
            self.head_kind = None
        self.made = {base(t.name) for t in op.outputs}
        self.read = {base(t.name) for t in op.inputs}
        self.read_exact = {t.name for t in op.inputs}
        self.settled = {base(t.name) for t in op.outputs} if _grid_reduction(op) else set()
        self.te_quantize = bool(op.attrs.get(TE_QUANTIZE))

    def join(self, op: Op, graph: OpGraph, base: Any, opts: EvalOptions) -> tuple[frozenset[int], float] | None:
        """``(inputs held, bytes reused)`` when ``op`` fuses into this kernel, else None.

        An elementwise op (or inference batch norm) joins when it reads a tensor the kernel made
        (vertical fusion: into a library contraction's epilogue only with ``opts.epilogue_fusion``).
        Into a generated kernel -- whose head is not a library contraction -- a reduction or a
        concatenation may join too (with ``opts.norm_fusion`` also a norm or softmax, :data:`NORM_KINDS`), and so may an op that only reads a tensor the kernel already
        reads (horizontal fusion over a shared input, as Inductor's scheduler scores shared reads).
        *Inputs held* are the positions of the op's inputs the kernel already holds (no traffic);
        *bytes reused*: an input made in the kernel that only this op reads is never stored, the op's
        output takes its store.
        """
        if self.te_quantize or op.attrs.get(TE_QUANTIZE):
            if op.attrs.get(TE_NORM_FUSED) and not self.te_quantize:
                return self._in_norm(op, graph, base)
            return self._quantize_output(op, base)
        head = self.head_kind
        library = self.library
        if head is None or head in _NO_EPILOGUE or (library and not opts.epilogue_fusion):
            return None
        if library and op.attrs.get(OUTSIDE_EPILOGUE):
            return None
        elementwise = is_fusible(op)
        if not elementwise and (library or not (op.kind in GROUP_KINDS
                                                or (opts.norm_fusion and op.kind in NORM_KINDS))):
            return None
        names = [base(t.name) for t in op.inputs]
        if self.settled and any(b in self.settled for b in names):
            return None  # a grid-wide reduction's result: only its kernel's end makes it whole
        made = [i for i, b in enumerate(names) if b in self.made]
        if not made and (library or not any(b in self.read for b in names)):
            return None
        pool = self.made if library else (self.made | self.read)
        # a marked op (OUTSIDE_EPILOGUE) holds a tensor read before only if that very tensor was: the other half
        # of a split the kernel read one half of is read too (Megatron's SwiGLU kernel reads both halves)
        exact = bool(op.attrs.get(OUTSIDE_EPILOGUE))
        held = frozenset(i for i, b in enumerate(names) if b in pool and not (
            exact and b not in self.made and op.inputs[i].name not in self.read_exact))
        reuse = 0.0
        for i in made:
            t = op.inputs[i]
            if names[i] == t.name and len(graph.consumers(t.name)) == 1:
                reuse = max(reuse, float(t.nbytes))
        return held, reuse

    def _in_norm(self, op: Op, graph: OpGraph, base: Any) -> tuple[frozenset[int], float] | None:
        """A TE quantisation's part that the norm kernel making its operand computes (:data:`TE_NORM_FUSED`:
        delayed scaling's cast, current scaling's amax): it joins when its input is a norm's output made in this
        kernel, holding it; a cast that is the norm output's only reader takes its store (the norm writes fp8)."""
        t = op.inputs[0]
        name = base(t.name)
        prod = graph.producer(name)
        if name not in self.made or prod is None or prod.kind not in NORM_KINDS:
            return None
        only = op.kind == "elementwise" and name == t.name and len(graph.consumers(t.name)) == 1
        return frozenset({0}), float(t.nbytes) if only else 0.0

    def _quantize_output(self, op: Op, base: Any) -> tuple[frozenset[int], float] | None:
        """A Transformer Engine quantize kernel (:data:`TE_QUANTIZE`) is a library kernel of its own: it fuses into
        no producer and nothing joins it but the second copy it writes from the same read (:data:`QUANTIZE_OUTPUT`,
        e.g. MXFP8's columnwise copy), which holds its input (no read) and stores its own output."""
        if not (self.te_quantize and op.attrs.get(TE_QUANTIZE) and op.attrs.get(QUANTIZE_OUTPUT)):
            return None
        held = frozenset(i for i, t in enumerate(op.inputs) if base(t.name) in self.made)
        return (held, 0.0) if held else None

    def add(self, op: Op, base: Any) -> None:
        """``op`` joined the kernel."""
        self.made.update(base(t.name) for t in op.outputs)
        self.read.update(base(t.name) for t in op.inputs)
        self.read_exact.update(t.name for t in op.inputs)
        if _grid_reduction(op):
            self.settled.update(base(t.name) for t in op.outputs)


def _grid_reduction(op: Op) -> bool:
    """A reduction marked ``grid_reduction`` (over a whole tensor or an outer axis, e.g. a tensorwise fp8
    scale's amax): split across the kernel's blocks, its result is complete only when the kernel ends,
    so an op reading it starts a kernel of its own (Inductor emits the consumer as a later kernel)."""
    return op.kind == "reduction" and bool(op.attrs.get("grid_reduction", False))


def is_fusible(op: Op) -> bool:
    """Elementwise ops, and inference batch norm (a per-channel scale and shift), fuse into producers; not an
    op marked :data:`ATEN_FALLBACK`."""
    if op.attrs.get(ATEN_FALLBACK):
        return False
    return op.kind in FUSIBLE_KINDS or (op.kind == "batchnorm" and not op.attrs.get("training"))


#: Op kinds an eager model issues from a module holding parameters, when the op has a weight operand
#: (``nn.Linear``, ``nn.Embedding``, ``nn.LayerNorm``, ``nn.BatchNorm2d``; a convolution's call time,
#: ``framework_conv_op_overhead_s``, was measured through ``nn.Conv2d`` and includes its module).
MODULE_OP_KINDS = frozenset({"matmul", "embedding", "layernorm", "rmsnorm", "batchnorm"})


def module_call_counts(graph: OpGraph) -> dict[str, tuple[int, int]]:
    """``{op name: (containers entered, parameter-holding module calls)}`` of an eager model's forward.

    Op names are the module paths of the zoo and Hugging Face builders (``layers.3.attn.q``): every
    dotted prefix that is not itself an op names a container module, called once, whose Python runs
    before the first op it issues; an op of :data:`MODULE_OP_KINDS` with a weight operand is its own
    module's call. ``meta[EXTRA_MODULE_CALLS_META]`` adds, per op, the module calls of the model's code that the
    names do not show (parameter-free modules, unnamed containers: :func:`workloads.frameworks.with_module_tree`),
    counted as containers. Containers first seen at an op that launches no kernel (a view) are carried to the
    next op that does. Ops with neither are left out, and so is everything from a training graph's loss
    on (the backward pass runs in autograd's engine and the optimizer step calls no module); a graph whose
    loss is no loss kind names its loss op in ``meta["loss_op"]``.
    """
    from workloads.frameworks import AUTOCAST_CAST_SUFFIX, EXTRA_MODULE_CALLS_META, LOSS_OP_META
    from workloads.training import LOSS_KINDS

    names = {op.name for op in graph}
    seen: set[str] = set()
    out: dict[str, tuple[int, int]] = {}
    pending = 0
    stop = graph.meta.get(LOSS_OP_META)  # a loss that is not a loss kind (logits.sum(): workloads.frameworks.sum_loss)
    extra = graph.meta.get(EXTRA_MODULE_CALLS_META) or {}  # calls the names do not show (workloads.frameworks.MODULE_TREES)
    for op in graph:
        if op.kind in LOSS_KINDS or op.name == stop:  # what follows the loss is autograd's backward and the optimizer
            break
        pending += int(extra.get(op.name, 0))
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


def op_signature(op: Op, resident: float) -> tuple[Any, ...]:
    """What a lowering rule's cost of ``op`` depends on (besides the device and the options): its
    kind, tensor shapes, dtypes and input roles, attributes (compared by value) and the bytes of its
    inputs resident in L2. Ops with equal signatures cost the same."""
    return (op.kind, tuple([(t.shape, t.dtype, t.role) for t in op.inputs]),
            tuple([(t.shape, t.dtype) for t in op.outputs]), tuple(op.attrs.items()), resident)


#: What a slot costs: a view (no kernel), an op's own kernel, or an op fused into the kernel before it.
VIEW, KERNEL, FUSED = 0, 1, 2


@dataclass(frozen=True)
class Slot:
    """One costing of a walk, shared by every op of equal key.

    ``op`` is the first op of the slot (the one its rule is called on), ``key`` what the cost
    depends on besides the device and options (:func:`op_signature` with the resident bytes, or for a
    fused op ``("fused", signature, inputs held, bytes reused)``; None for a view), ``in_l2`` the
    bytes of its inputs resident in L2, ``joined`` the ``(inputs held, bytes reused)`` of a fused op
    (:meth:`FusionGroup.join`), ``modules`` the op's ``nn.Module`` calls (containers, leaf modules)
    and ``count`` the ops that share it.
    """

    kind: int
    op: Op
    key: Any
    in_l2: float
    joined: tuple[frozenset[int], float] | None
    modules: tuple[int, int]
    count: int


@dataclass(frozen=True)
class Walk:
    """A graph walked under some options: its slots in order of first use, and per op (execution
    order) the slot index, the name of the kernel it is fused into (``""``: its own) and the op's own
    record fields (name, kind, group, category, dtype, FLOPs, fused_into), ready to be merged into its
    slot's record. ``rate_ops`` is the first contraction of each dtype (the ops whose dtype needs a
    matrix rate, :func:`simulator.lowering.common.check_dtype_rates`)."""

    slots: tuple[Slot, ...]
    op_slots: tuple[int, ...]
    op_fields: tuple[dict[str, Any], ...]
    rate_ops: tuple[Op, ...]


def working_set_bytes(graph: OpGraph) -> float:
    """Bytes of all the distinct tensors ``graph``'s ops read and write (views count their base once): what
    L2 must hold for a run of the graph to find every input there when the run is repeated on the same
    tensors (:attr:`simulator.engines.options.EvalOptions.warm_repeats`); computed once per graph."""
    return graph.memo("working_set_bytes", lambda: _working_set_bytes(graph))


def _working_set_bytes(graph: OpGraph) -> float:
    alias: dict[str, str] = {}
    sizes: dict[str, float] = {}
    for op in graph:
        if op.kind in VIEW_KINDS:
            src = op.inputs[0]
            if src.name not in alias:  # the base itself, at its own size (not the size of a view of it)
                sizes.setdefault(src.name, float(src.nbytes))
            for t in op.outputs:
                alias[t.name] = alias.get(src.name, src.name)
            continue
        for t in (*op.inputs, *op.outputs):
            sizes.setdefault(alias.get(t.name, t.name), float(t.nbytes))
    return float(sum(sizes.values()))


def settle_warm(graph: OpGraph, opts: EvalOptions, l2_capacity_bytes: float) -> EvalOptions:
    """``opts`` as the engines price ``graph``: ``warm_repeats`` holds only where L2 residency is on and every
    distinct tensor of the graph fits in L2 together (:func:`working_set_bytes`); otherwise the loop runs as
    cold as one run, and no rule (a GEMM's operands included) may take residency from the request."""
    if not getattr(opts, "warm_repeats", False):
        return opts
    if opts.l2_residency and working_set_bytes(graph) <= l2_capacity_bytes:
        return opts
    import dataclasses

    return dataclasses.replace(opts, warm_repeats=False)


def walk_graph(graph: OpGraph, opts: EvalOptions, fuse: bool, l2_capacity_bytes: float) -> Walk:
    """The walk of ``graph`` (:class:`Walk`), computed once per graph object, fusion setting, the
    options the walk reads (L2 residency, epilogue fusion, generated GEMVs, eager module calls) and
    L2 capacity (outputs larger than it do not stay resident for the next kernel)."""
    modules = bool(opts.eager_framework and opts.eager_modules)
    key = ("walk", bool(fuse), bool(opts.l2_residency), bool(opts.epilogue_fusion), bool(opts.gemv_generated),
           modules, float(l2_capacity_bytes), bool(opts.norm_fusion), bool(getattr(opts, "warm_repeats", False)))
    return graph.memo(key, lambda: _walk(graph, opts, bool(fuse), float(l2_capacity_bytes), modules))


def _walk(graph: OpGraph, opts: EvalOptions, fuse: bool, l2cap: float, modules: bool) -> Walk:
    alias: dict[str, str] = {}  # view output -> base tensor
    resident: set[str] = set()  # base tensors written by the previous kernel (and fitting in L2)
    prev_kernel = ""
    group = FusionGroup()  # the kernel being built (fusion)
    calls = module_call_counts(graph) if modules else {}
    index: dict[Any, int] = {}
    slots: list[list[Any]] = []  # [kind, op, key, in_l2, joined, modules, count]
    op_slots: list[int] = []
    op_fields: list[dict[str, Any]] = []
    rate_ops: dict[str, Op] = {}
    # a benchmark loop over the same tensors (EvalOptions.warm_repeats): all of them stay in L2 if they fit
    # (an ablation with L2 residency off turns this off too: no input is read from L2 then; settle_warm)
    warm = bool(settle_warm(graph, opts, l2cap).warm_repeats)

    def base(name: str) -> str:
        return alias.get(name, name)

    def use(key: Any, make: Any) -> None:
        ix = index.get(key)
        if ix is None:
            ix = index[key] = len(slots)
            slots.append(make())
        slots[ix][-1] += 1
        op_slots.append(ix)

    for op in graph:
        dt = op.dtype.value
        if dt not in rate_ops and is_contraction(op):
            rate_ops[dt] = op
        if op.kind in VIEW_KINDS:
            for t in op.outputs:
                alias[t.name] = base(op.inputs[0].name)
            use(("view",), lambda op=op: [VIEW, op, None, 0.0, None, (0, 0), 0])
            op_fields.append(_fields(op, ""))
            continue
        in_l2 = 0.0
        if warm:
            in_l2 = float(sum(t.nbytes for t in op.inputs))
        elif opts.l2_residency and resident:
            in_l2 = float(sum(t.nbytes for t in op.inputs if alias.get(t.name, t.name) in resident))
        fused_into = ""
        joined = group.join(op, graph, base, opts) if fuse else None
        if joined is not None:
            fused_into = prev_kernel
            group.add(op, base)
        elif fuse:
            group.start(op, base, opts)
        if fused_into:
            fkey = ("fused", op_signature(op, 0.0), *joined)
            use(fkey, lambda op=op, k=fkey, j=joined: [FUSED, op, k, 0.0, j, (0, 0), 0])
        else:
            mods = calls.get(op.name) if calls else None
            key = op_signature(op, in_l2)
            use(key if mods is None else (key, mods),
                lambda op=op, k=key, r=in_l2, m=mods: [KERNEL, op, k, r, None, m or (0, 0), 0])
        op_fields.append(_fields(op, fused_into))
        # what the next kernel finds in L2 (a fused op extends its producer's kernel)
        out_bytes = sum(t.nbytes for t in op.outputs)
        written = {t.name for t in op.outputs} if out_bytes <= l2cap else set()
        resident = (resident | written) if fused_into else written
        prev_kernel = op.name  # a fused op extends the chain: the next op may fuse into it too
    return Walk(slots=tuple(Slot(*s) for s in slots), op_slots=tuple(op_slots), op_fields=tuple(op_fields),
                rate_ops=tuple(rate_ops.values()))


def _fields(op: Op, fused_into: str) -> dict[str, Any]:
    """The fields of an op's record that come from the op (and the kernel it is fused into)."""
    return {"name": op.name, "kind": op.kind, "group": op.group, "category": op.category,
            "dtype": op.dtype.value, "flops": float(op.flops), "fused_into": fused_into}
