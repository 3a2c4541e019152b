"""GPU lowering rules: GEMM, convolution, attention, streaming, router, RNN and collective ops on SMs.

Each rule maps one op onto the numeric models of :mod:`hwmodels.gpu` (tile choice, waves, split-K,
pipeline edges, DRAM traffic) and returns a :class:`~simulator.lowering.common.KernelCost`; kinds
without a rule fall back to :func:`_gpu_roofline`, marked in the report.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from hwmodels import gpu
from hwmodels.spec import DeviceSpec, SpecError
from simulator.lowering.collectives import collective_cost
from simulator.lowering.common import (
    COLLECTIVE_KINDS,
    VIEW_KINDS,
    KernelCost,
    LoweringContext,
    element_bytes,
    gpu_vector_flops,
    is_narrow_grouped_conv,
    register_rule,
    rnn_dims,
    set_fallback,
    sfu_ops,
    zero_cost,
)
from workloads.dtypes import dtype_bytes
from workloads.frameworks import MAIN_GRAD_ADD_ATTR, MAIN_GRAD_DTYPE_ATTR, MAIN_GRAD_READ_ATTR
from workloads.ir import Op, UnsupportedOpError
from workloads.precision import (
    QUANT_GROUPED_MATMUL,
    QUANT_MATMUL,
    QUANTIZE_OUTPUT_ATTR,
    SCALE_SWIZZLE_ATTR,
    TE_QUANTIZE_ATTR,
    fp8_gemm_reads_both_layouts,
    packed_weight_bytes,
    quant_operands,
    weight_only,
)
from workloads.semantics import attention_window, conv_dims, conv_params, gemm_dims

__all__ = ["attention_kernel_for"]

def _f(x: Any) -> Any:
    """``float(x)``; a float array when ``x`` is one (a device spec holding hardware variants: sweeps)."""
    return float(x) if np.ndim(x) == 0 else np.asarray(x, dtype=float)


def _i(x: Any) -> Any:
    """``int(x)``; an int array when ``x`` is one (hardware variants)."""
    return int(x) if np.ndim(x) == 0 else np.asarray(x).astype(int)


def _matrix_key(ctx: LoweringContext, dtype: str, p: gpu.GpuParams) -> str:
    """The tensor-core path a contraction in ``dtype`` ran on ("" when it ran on the SIMT units): fp32
    contractions allowed onto the tensor cores run as TF32 where the device has that rate (so they are
    charged TF32's energy per FLOP, not fp32's or a fallback's)."""
    if not p.uses_matrix_unit:
        return ""
    if dtype == "fp32" and "tf32" in ctx.device.compute.tensor_flops_per_s:
        return "tf32"
    return dtype


def _from_estimate(e: gpu.KernelEstimate, rule: str, matrix_flops: float, vector_flops: float,
                   matrix_dtype: str = "", **kw: Any) -> KernelCost:
    return KernelCost(
        compute_s=_f(e.compute_s), memory_s=_f(e.memory_s), latency_s=_f(e.latency_s),
        dram_bytes=_f(e.dram_bytes), l2_bytes=_f(e.l2_bytes), smem_bytes=_f(e.smem_bytes),
        matrix_flops=float(matrix_flops), vector_flops=float(vector_flops), rule=rule,
        matrix_dtype=matrix_dtype, **kw,
    )


def _gemm_cost(ctx: LoweringContext, m: int, n: int, k: int, *, batch: int, dtype: str, in_bytes: float,
               out_bytes: float, b_shared: bool, rule: str, vector_flops: float = 0.0,
               a_operand: gpu.ImplicitOperand | None = None, tile_bytes: float | None = None,
               tile_shape: tuple[int, int] | None = None, tactic_m: int | None = None,
               resident: float = 0.0, kernel: gpu.TileCandidate | None = None, library: bool = True,
               conv: bool = False) -> KernelCost:
    p = ctx.params(dtype)
    if library and _library_gemv(ctx, m, n, batch, a_operand, kernel):
        p = gpu.gemv_params(p, min(m, n))
    if conv and p.uses_matrix_unit and _cudnn(ctx.device):
        # cuDNN's implicit-GEMM convolutions below the GEMM figure (efficiency.conv_rate_fraction: measured
        # convolution times against the model's time for the same implicit GEMM)
        p = dataclasses.replace(p, matrix_fraction=p.matrix_fraction * ctx.device.efficiency.conv_rate_fraction)
    cands = gpu.tile_candidates(ctx.device.arch, matrix_unit=p.uses_matrix_unit,
                                in_bytes=in_bytes if tile_bytes is None else tile_bytes)
    if tile_shape is not None:  # the caller searches tile shapes itself (weight-only GEMMs)
        cands = tuple(c for c in cands if (c.tile_m, c.tile_n) == tile_shape)
    split_k = gpu.SPLIT_K_FACTORS
    if kernel is not None:  # one kernel the stack launches whatever the shape (no search, no split-K)
        cands, split_k = (kernel,), (1,)
    # the power limit the kernel is chosen under (TensorRT and autotuners time their candidates on the running
    # board; cuBLAS's heuristic is assumed tuned on the board at its own limit: docs/accuracy.md)
    power = None if a_operand is not None else _gemm_power(ctx, dtype, p)
    tactic = bool(tactic_m) and tactic_m != m and a_operand is None
    if tactic:
        cands, split_k = _tactic_at(p, cands, tactic_m, n, k, batch=batch, in_bytes=in_bytes, out_bytes=out_bytes,
                                    b_shared=b_shared, power=power)
    # an implicit GEMM's A operand (a conv's im2col matrix) is priced inside the model: the tile choice,
    # the DRAM term, the memory time and the bound term all see the source tensor's real traffic
    e = gpu.gemm(m, n, k, p, cands, batch=batch, in_bytes=in_bytes, out_bytes=out_bytes, b_shared=b_shared,
                 a_operand=a_operand, split_k=split_k, power=power, l2_resident_bytes=resident)
    dram = _f(e.dram_bytes)
    flops = 2.0 * batch * m * n * k
    return KernelCost(
        compute_s=_f(e.compute_s), memory_s=_f(e.memory_s), latency_s=_f(e.latency_s), dram_bytes=dram,
        l2_bytes=_f(e.l2_bytes), smem_bytes=_f(e.smem_bytes),
        matrix_flops=flops if p.uses_matrix_unit else 0.0,
        vector_flops=vector_flops + (0.0 if p.uses_matrix_unit else flops),
        rule=rule if p.uses_matrix_unit else f"{rule}-simt", matrix_dtype=_matrix_key(ctx, dtype, p),
        tile=str(e.tile) if np.ndim(e.tile) == 0 else e.tile, split_k=_i(e.split_k), ctas=_i(e.ctas),
        waves=_f(e.waves), ctas_per_sm=_i(e.ctas_per_sm),
        notes="; ".join(x for x in (_gemm_notes(e), f"kernel picked at M = {tactic_m}" if tactic and np.ndim(e.compute_s) == 0 else "") if x),
        memory_level=str(e.bound_level) if np.ndim(e.bound_level) == 0 else "",
    )


def _library_gemv(ctx: LoweringContext, m: int, n: int, batch: int, a_operand: Any, kernel: Any) -> bool:
    """Whether a GEMM may be a skinny product run by the library (one batch entry, no implicit operand, no fixed
    kernel): it then streams its matrix at ``efficiency.gemv_bandwidth_fraction`` if it has at most
    ``efficiency.gemv_max_rows`` rows or columns (:func:`hwmodels.gpu.gemv_params`), the rate measured for the
    library's GEMV and its skinny GEMMs. A one-row product is not the library's under ``EvalOptions.gemv_generated``,
    where Inductor decomposes it into a generated product-and-sum."""
    if batch != 1 or a_operand is not None or kernel is not None:
        return False
    return 1 not in (m, n) or not getattr(ctx.options, "gemv_generated", False)


def _tactic_at(p: gpu.GpuParams, cands: tuple[gpu.TileCandidate, ...], tactic_m: int, n: int, k: int,
               **kw: Any) -> tuple[tuple[gpu.TileCandidate, ...], tuple[int, ...]]:
    """(candidates, split-K factors) reduced to the kernel the model picks for ``[tactic_m, k] @ [k, n]``: a
    kernel chosen once at another M (``attrs['tactic_m']``: a TensorRT engine's tactic, timed at its optimisation
    profile's opt shape, :func:`workloads.frameworks.gemm_tactics_at`) and run at every M of the profile. With
    hardware variants (sweeps) whose picks differ, every picked tile and split stays a candidate."""
    e = gpu.gemm(tactic_m, n, k, p, cands, **kw)
    names = {str(x) for x in np.ravel(e.tile)}
    splits = tuple(sorted({int(x) for x in np.ravel(e.split_k)}))
    return tuple(c for c in cands if c.name in names), splits

#: The dtype whose energy per FLOP stands in for a missing one (as the engine's ``EnergyCoefficients.per_flop``).
_ENERGY_ALT = {"fp8_e5m2": "fp8_e4m3", "fp16": "bf16", "bf16": "fp16", "tf32": "fp32", "int8": "fp8_e4m3",
               "int4": "int8", "fp8_e4m3": "int8"}


def _per_flop(table: dict[str, Any], dtype: str) -> Any:
    if dtype in table or not table:
        return table.get(dtype, 0.0)
    alt = _ENERGY_ALT.get(dtype)
    return table[alt if alt in table else max(table, key=lambda k: table[k])]


def _gemm_power(ctx: LoweringContext, dtype: str, p: gpu.GpuParams) -> gpu.GemmPower | None:
    """The power limit and energy model the GEMM's kernel is chosen under (:class:`hwmodels.gpu.GemmPower`):
    the coefficients the engine charges (``simulator.engines.analytical.EnergyCoefficients``: DRAM devices plus
    the on-die path, the L2 level, the shared-memory level, the path's energy per FLOP) and the device's
    ``power`` and ``[dvfs]`` fields; None where the engine applies no power cap (``EvalOptions.power_cap``
    off) or the device has no dynamic budget (``power.tdp_w <= power.idle_w``)."""
    dev = ctx.device
    if not getattr(ctx.options, "power_cap", True) or not np.any(np.asarray(dev.power.tdp_w) > np.asarray(dev.power.idle_w)):
        return None
    levels = {lv.name.lower(): lv for lv in dev.memory}
    l2 = next((lv for n, lv in levels.items() if n in ("l2", "llc")), None)
    sm = next((lv for n, lv in levels.items() if n in ("smem", "shared", "l1", "lds", "rf", "vmem", "sram", "scratchpad")), None)
    key = _matrix_key(ctx, dtype, p)
    per_flop = _per_flop(dev.energy.tensor_j_per_flop, key) if key else _per_flop(dev.energy.vector_j_per_flop, "fp32")
    kw: dict[str, Any] = {}
    if dev.dvfs is not None:
        kw = dict(dvfs=True, ref_hz=dev.clock.sustained_hz, base_hz=dev.dvfs.base_hz, boost_hz=dev.clock.boost_hz,
                  base_voltage_fraction=dev.dvfs.base_voltage_fraction)
    return gpu.GemmPower(
        j_per_flop=per_flop, j_per_dram_byte=dev.main_memory.energy_j_per_byte + dev.energy.dram_path_j_per_byte,
        j_per_l2_byte=l2.energy_j_per_byte if l2 is not None and l2 is not dev.main_memory else 0.0,
        j_per_smem_byte=sm.energy_j_per_byte if sm is not None else 0.0, idle_w=dev.power.idle_w,
        tdp_w=dev.power.tdp_w, device_s=dev.efficiency.kernel_device_time_s, **kw)


def _gemm_notes(e: Any) -> str:
    if np.ndim(e.compute_s) or np.ndim(e.memory_s) or np.ndim(e.split_k):
        return ""  # hardware variants (sweeps) carry no per-kernel notes
    parts = [f"bound by {e.bound_level}"] if _f(e.memory_s) > _f(e.compute_s) else []
    if int(e.split_k) > 1:
        parts.append(f"split-K fixup {_f(e.fixup_s) * 1e6:.2f} us")
    parts.append(_bound_term_note(e))
    return "; ".join(parts)


def _bound_term_note(e: gpu.KernelEstimate) -> str:
    """``bound term <name>``: the largest model term, that bounds the kernel (:data:`hwmodels.gpu.GEMM_TERMS`,
    :data:`hwmodels.gpu.ATTENTION_TERMS`)."""
    return f"bound term {e.bound_term}"


#: FLOPs that ``compute.vector_flops_per_s`` counts for one FP32 lane operation: the vector rate counts an FMA as two
#: FLOPs (H100 SXM: 66.9 TFLOP/s = 132 SMs x 128 FP32 lanes x 2 x 1.98 GHz), while an FADD takes the same issue slot
#: and does one (CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table: 32-bit floating-point add,
#: multiply and multiply-add all at 128 results per clock per SM on compute capability 9.0, 64 on 8.0).
FP32_FLOPS_PER_LANE_OP = 2.0


def fp8_promotion(ctx: LoweringContext, batch: int, m: int, n: int, k: int) -> tuple[Any, Any]:
    """(seconds, FP32 additions) of the promotions of ``batch`` fp8 GEMMs ``[m, k] @ [k, n]`` run without fast
    accumulation (cuBLASLt ``CUBLASLT_MATMUL_DESC_FAST_ACCUM`` = 0, ``torch._scaled_mm``'s default
    ``use_fast_accum=False``): one FP32 add per output element every ``efficiency.fp8_promotion_interval`` K
    elements (:class:`hwmodels.spec.EfficiencySpec`), each an FADD issue slot of the SMs' FP32 lanes
    (:data:`FP32_FLOPS_PER_LANE_OP`), and not hidden behind the MMAs: CUTLASS's split-accumulation mainloop
    promotes with ``warpgroup_wait<0>()`` first (``GmmaFP8Accumulation::promote_core``,
    include/cutlass/gemm/collective/fp8_accumulation.hpp), so the warpgroup's tensor-core pipe is drained while
    its FADDs run (DeepSeek-V3 overlaps them across warpgroups in its own kernel; cuBLASLt states nothing)."""
    interval = ctx.device.efficiency.fp8_promotion_interval  # an array in hardware variants (sweeps)
    p = ctx.params("fp32")
    adds = float(batch) * m * n * np.ceil(k / np.asarray(interval, dtype=float))
    secs = adds / np.multiply(p.vector_flops_per_s / FP32_FLOPS_PER_LANE_OP, p.vector_fraction)
    return (float(secs), float(adds)) if np.ndim(secs) == 0 else (secs, adds)


def _split_accumulation(op: Op, ctx: LoweringContext) -> str:
    """Why ``op`` runs without fast accumulation (``"marked"``: its recipe marks it, ``attrs['fp8_accumulation'] ==
    'split'``, :func:`workloads.precision._accumulation`; ``"option"``: an unmarked fp8 GEMM under
    ``EvalOptions.fp8_accumulation = "split"`` on an architecture of :data:`FP8_PROMOTION_ARCHS`; ``"ignored"``: the
    same elsewhere, priced fast) or ``""`` (fast accumulation)."""
    if op.attrs.get("fp8_accumulation") == "split":
        return "marked"
    if getattr(ctx.options, "fp8_accumulation", "fast") != "split" or not op.dtype.value.startswith("fp8"):
        return ""
    from simulator.engines.options import FP8_PROMOTION_ARCHS

    return "option" if ctx.device.arch in FP8_PROMOTION_ARCHS else "ignored"


def _promotion_s(op: Op, ctx: LoweringContext, bt: int, m: int, n: int, k: int) -> tuple[Any, Any]:
    """(seconds, FP32 additions) of an fp8 GEMM's promotions to FP32 (:func:`fp8_promotion`) when it runs without
    fast accumulation (:func:`_split_accumulation`: torchao's backward GEMMs, Transformer Engine's per-tensor
    recipes' input- and weight-gradient GEMMs, any fp8 GEMM under ``EvalOptions.fp8_accumulation = "split"`` on
    Hopper); else none."""
    if _split_accumulation(op, ctx) not in ("marked", "option"):
        return 0.0, 0.0
    return fp8_promotion(ctx, bt, m, n, k)


def _warm_operands(ctx: LoweringContext) -> float:
    """A GEMM's operand bytes found in L2 at its start: those of a benchmark loop over tensors that fit in L2
    (``EvalOptions.warm_repeats``, the walk's ``in_l2``); else 0 (a GEMM's inputs just written by the previous
    kernel are not priced as resident)."""
    return float(ctx.resident_bytes) if getattr(ctx.options, "warm_repeats", False) else 0.0


@register_rule("gpu", "matmul")
def _gemm(op: Op, ctx: LoweringContext) -> KernelCost:
    bt, m, n, k = gemm_dims(op)
    a, b = op.inputs[0], op.inputs[1]
    bias = op.outputs[0].numel if len(op.inputs) == 3 else 0
    cost = _gemm_cost(ctx, m, n, k, batch=bt, dtype=op.dtype.value,
                      in_bytes=max(element_bytes(a.dtype), element_bytes(b.dtype)), out_bytes=_c_bytes(op),
                      b_shared=len(b.shape) == 2, rule="gemm", vector_flops=float(bias),
                      tactic_m=op.attrs.get("tactic_m"), resident=_warm_operands(ctx))
    cost = _with_main_grad_add(op, ctx, _with_main_grad_note(op, _with_promotion(op, ctx, cost, bt, m, n, k)))
    if not op.attrs.get(SCALE_SWIZZLE_ATTR):
        return cost
    cost = _with_scale_swizzle(ctx, cost, float(bt * m * k), float((1 if len(b.shape) == 2 else bt) * k * n), 1)
    return dataclasses.replace(cost, rule=cost.rule + SCALE_SWIZZLE_SUFFIX)


def _c_bytes(op: Op) -> float:
    """Bytes per output element a GEMM moves through its C/D matrix: its output's width, or, for a weight-gradient
    GEMM accumulating into the main-gradient buffer (:func:`workloads.frameworks.main_grad_accumulation`), D written
    in the buffer's dtype plus C read in it on the share of calls that accumulate (beta = 1; cuBLAS reads no C at
    beta = 0). The epilogue's C load is priced like the D store: the GEMM model's C-tile bytes (DRAM, L2, the last
    tile's store) scale with this width."""
    main = op.attrs.get(MAIN_GRAD_DTYPE_ATTR)
    if not main:
        return element_bytes(op.outputs[0].dtype)
    return dtype_bytes(str(main)) * (1.0 + float(op.attrs.get(MAIN_GRAD_READ_ATTR, 1.0)))


def _with_main_grad_note(op: Op, cost: KernelCost) -> KernelCost:
    """``cost`` with a note naming the main-gradient accumulation its C bytes carry (:func:`_c_bytes`)."""
    main = op.attrs.get(MAIN_GRAD_DTYPE_ATTR)
    if not main or np.ndim(cost.compute_s) != 0:
        return cost
    note = f"wgrad accumulates into the {main} main gradient (C read on {float(op.attrs.get(MAIN_GRAD_READ_ATTR, 1.0)):.0%} of calls)"
    return dataclasses.replace(cost, notes="; ".join(x for x in (cost.notes, note) if x))

#: Rule suffix of a weight-gradient GEMM priced with the add of its gradient into the main-gradient buffer
#: (:func:`_with_main_grad_add`; :func:`library_launches` counts its kernel).
MAIN_GRAD_ADD_SUFFIX = "+main-grad-add"


def _with_main_grad_add(op: Op, ctx: LoweringContext, gemm: KernelCost) -> KernelCost:
    """``gemm`` plus, for a weight-gradient GEMM marked :data:`workloads.frameworks.MAIN_GRAD_ADD_ATTR`, the kernel
    that then adds its gradient into the main-gradient buffer (``main_grad.add_(grad)``): it reads the gradient in
    its dtype and the buffer in the attribute's, writes the buffer, one add per element, serial after the GEMM; the
    rule gains :data:`MAIN_GRAD_ADD_SUFFIX`."""
    main = op.attrs.get(MAIN_GRAD_ADD_ATTR)
    if not main:
        return gemm
    n = float(op.outputs[0].numel)
    mb = dtype_bytes(str(main))
    st = gpu.streaming(n * (element_bytes(op.outputs[0].dtype) + mb), n * mb, n, ctx.params(str(main)))
    x = _serial_s(st)
    return dataclasses.replace(
        gemm, compute_s=gemm.compute_s + x, memory_s=gemm.memory_s + x, latency_s=gemm.latency_s + _f(st.latency_s),
        dram_bytes=gemm.dram_bytes + _f(st.dram_bytes), l2_bytes=gemm.l2_bytes + _f(st.l2_bytes),
        vector_flops=gemm.vector_flops + n, kernels=gemm.kernels + 1, rule=gemm.rule + MAIN_GRAD_ADD_SUFFIX,
        notes="; ".join(t for t in (gemm.notes, f"gradient added to the {main} main gradient (one kernel)") if t)
        if np.ndim(gemm.compute_s) == 0 else "")


#: Rule suffix of a dense GEMM priced with its scale swizzles (:func:`library_launches` counts them).
SCALE_SWIZZLE_SUFFIX = "+mx-swizzle"
#: Tensors one ``multi_tensor_swizzle_scaling_factors`` launch takes (``kMaxTensorsPerKernel``,
#: transformer_engine/common/swizzle/swizzle.cu @ v2.9).
SWIZZLE_TENSORS_PER_KERNEL = 64
#: Elements per MXFP8 block scale (one E8M0 byte each): the OCP Microscaling Formats (MX) Specification v1.0's
#: block size k = 32, which Transformer Engine's ``MXFP8BlockScaling`` recipe uses (a scale per 32 consecutive values).
MXFP8_BLOCK_ELEMENTS = 32


def _with_scale_swizzle(ctx: LoweringContext, gemm: KernelCost, a_elems: float, b_elems: float,
                        tensors: int) -> KernelCost:
    """``gemm`` plus the swizzle of its two MXFP8 operands' E8M0 block scales (one byte per 32 elements) into
    cuBLASLt's tiled layout, which Transformer Engine 2.9 runs inside every GEMM call before cuBLAS:
    ``gemm()`` calls ``swizzle_scaling_factors`` on A and on B, one ``nvte_swizzle_scaling_factors`` kernel
    each into a freshly allocated buffer, and ``te_general_grouped_gemm`` calls
    ``multi_tensor_swizzle_scaling_factors`` on the A list and on the B list, one kernel per 64 tensors
    (transformer_engine/pytorch/csrc/extensions/gemm.cpp, csrc/util.cpp, common/swizzle/swizzle.cu @ v2.9; the
    scales are quantised in row order and swizzled at every call, the cached weight's included). Each kernel
    reads and writes its operand's scales; ``tensors`` the GEMMs of the call (the experts of a grouped call)."""
    launches = 2 * max(1, math.ceil(tensors / SWIZZLE_TENSORS_PER_KERNEL))
    p32 = ctx.params("fp32")
    parts = [gpu.streaming(x / MXFP8_BLOCK_ELEMENTS, x / MXFP8_BLOCK_ELEMENTS, 0.0, p32) for x in (a_elems, b_elems)]
    x = sum(_serial_s(st) for st in parts)
    return dataclasses.replace(
        gemm, compute_s=gemm.compute_s + x, memory_s=gemm.memory_s + x,
        latency_s=gemm.latency_s + sum(_f(st.latency_s) for st in parts),
        dram_bytes=gemm.dram_bytes + sum(_f(st.dram_bytes) for st in parts),
        l2_bytes=gemm.l2_bytes + sum(_f(st.l2_bytes) for st in parts), kernels=gemm.kernels + launches,
        notes="; ".join(t for t in (gemm.notes, f"MXFP8 scale swizzles ({launches} kernels)") if t)
        if np.ndim(gemm.compute_s) == 0 else "")


def _with_promotion(op: Op, ctx: LoweringContext, cost: KernelCost, bt: int, m: int, n: int, k: int) -> KernelCost:
    """``cost`` plus the FP32 promotions of ``bt`` fp8 GEMMs run without fast accumulation (:func:`_promotion_s`),
    serial with their MMAs (in the compute term); a ``"split"`` option off Hopper is noted, not priced."""
    why = _split_accumulation(op, ctx)
    if not why:
        return cost
    scalar = np.ndim(cost.compute_s) == 0
    if why == "ignored":
        note = f"fp8 split accumulation not priced: no promotion interval stated for {ctx.device.arch}"
        return dataclasses.replace(cost, notes="; ".join(x for x in (cost.notes, note) if x) if scalar else "")
    promo_s, adds = _promotion_s(op, ctx, bt, m, n, k)
    return dataclasses.replace(cost, compute_s=cost.compute_s + promo_s, vector_flops=cost.vector_flops + adds,
                   notes="; ".join(x for x in (cost.notes, "fp8 split accumulation: partial sums promoted to FP32")
                                   if x) if scalar else "")


@register_rule("gpu", "grouped_matmul")
def _grouped_gemm(op: Op, ctx: LoweringContext) -> KernelCost:
    x, w = op.inputs
    e, c, k = x.shape
    n = w.shape[2]
    tokens = int(op.attrs.get("tokens", e * c))
    active = int(op.attrs.get("experts_active", e))
    m = max(1, math.ceil(tokens / active))
    return _experts_gemm(op, ctx, m, n, k, active, in_bytes=_expert_operand_bytes(op, x),
                         out_bytes=element_bytes(op.outputs[0].dtype), kernel=fused_moe_kernel(op, ctx))


def fused_moe_kernel(op: Op, ctx: LoweringContext) -> gpu.TileCandidate | None:
    """The kernel of a 16-bit expert GEMM that vLLM's Triton ``fused_moe_kernel`` runs without a tuned config.
    Under ``EvalOptions.fused_moe_configs`` (the stack's tuned configs, ``(local experts, N, device)``:
    :attr:`workloads.frameworks.FrameworkProfile.fused_moe_configs`), an expert GEMM of ``E`` local experts
    (its weight's first dimension) and width ``N`` (``moe_width``, set by
    :func:`workloads.frameworks.fused_moe_steps` under these configs) on a device with no such config runs
    ``get_default_config``'s tile for the step's ``moe_tokens`` (:func:`workloads.frameworks.fused_moe_default_tile`)
    with Triton's default warps and stages (:data:`workloads.frameworks.FUSED_MOE_TRITON_WARPS`,
    ``FUSED_MOE_TRITON_STAGES``), as 2 x 2 warps, no producer warps and no split-K. None: the tile search (a tuned
    config, another stack, or not a 16-bit GEMM)."""
    configs = getattr(ctx.options, "fused_moe_configs", ())
    if not configs or "moe_width" not in op.attrs or op.dtype.value not in ("bf16", "fp16"):
        return None
    experts, width = int(op.inputs[1].shape[0]), int(op.attrs["moe_width"])
    if (experts, width, ctx.device.name) in configs:
        return None
    from workloads.frameworks import (
        FUSED_MOE_TRITON_STAGES,
        FUSED_MOE_TRITON_WARPS,
        fused_moe_default_tile,
    )

    tm, tn, tk = fused_moe_default_tile(int(op.attrs.get("moe_tokens", 0)), experts)
    return gpu.TileCandidate(tm, tn, tk, FUSED_MOE_TRITON_STAGES, 2, FUSED_MOE_TRITON_WARPS // 2,
                             32 * FUSED_MOE_TRITON_WARPS)


@register_rule("gpu", "grouped_matmul_bwd_data", "grouped_matmul_bwd_weight")
def _grouped_gemm_bwd(op: Op, ctx: LoweringContext) -> KernelCost:
    a, b = op.inputs
    e, c = a.shape[0], a.shape[1]
    tokens = int(op.attrs.get("tokens", e * c))
    active = int(op.attrs.get("experts_active", e))
    rows = max(1, math.ceil(tokens / active))
    if op.kind == "grouped_matmul_bwd_data":  # dx[rows, K] = dy[rows, N] @ w^T[N, K] per expert
        m, n, k = rows, b.shape[1], b.shape[2]
    else:  # dw[K, N] = x^T[K, rows] @ dy[rows, N] per expert
        m, n, k = a.shape[2], b.shape[2], rows
    return _with_main_grad_add(op, ctx, _with_main_grad_note(
        op, _experts_gemm(op, ctx, m, n, k, active, in_bytes=_expert_operand_bytes(op, a), out_bytes=_c_bytes(op))))


def _expert_operand_bytes(op: Op, a: Any) -> float:
    """Bytes per operand element an expert GEMM reads: 1 for an fp8 GEMM (its operands are the quantised
    copies, :func:`workloads.precision.fp8_linears`), else the activation's width."""
    return 1.0 if op.dtype.value.startswith("fp8") else element_bytes(a.dtype)


#: The rule of a grouped GEMM run as one GEMM kernel per expert (library_launches counts its launches).
PER_EXPERT_RULE = "grouped-gemm-per-expert"


def _experts_gemm(op: Op, ctx: LoweringContext, m: int, n: int, k: int, active: int, *, in_bytes: float,
                  out_bytes: float, kernel: gpu.TileCandidate | None = None) -> KernelCost:
    """``active`` expert GEMMs ``[m, k] @ [k, n]``: one batched kernel (``"grouped-gemm"``), or with the
    ``per_expert_streams`` attribute (a stack whose grouped GEMM launches one GEMM per expert,
    :attr:`workloads.frameworks.FrameworkProfile.grouped_gemm`) ``active`` kernels issued round-robin on that
    many streams: each round of ``streams`` concurrent GEMMs shares the SMs as one batch of that many (its
    waves quantised on its own), the rounds run one after another, and the host launches every kernel. Expert
    GEMMs run without fast accumulation (``fp8_accumulation``) carry their FP32 promotions (:func:`fp8_promotion`)."""
    kw: dict[str, Any] = dict(dtype=op.dtype.value, in_bytes=in_bytes, out_bytes=out_bytes, b_shared=False)
    streams = int(op.attrs.get("per_expert_streams", 0))
    if streams <= 0:
        fused = _with_promotion(op, ctx, _gemm_cost(ctx, m, n, k, batch=active, rule="grouped-gemm", kernel=kernel,
                                                    **kw), active, m, n, k)
        return _with_expert_quantisation(op, ctx, fused, active) if op.attrs.get("fp8_quantize") else fused
    width = min(streams, active)
    full, rest = divmod(active, width)
    one = _gemm_cost(ctx, m, n, k, batch=width, rule=PER_EXPERT_RULE, **kw)
    parts = [(one, full)] + ([(_gemm_cost(ctx, m, n, k, batch=rest, rule=PER_EXPERT_RULE, **kw), 1)] if rest else [])
    total = {f: sum(getattr(c, f) * r for c, r in parts) for f in (
        "compute_s", "memory_s", "latency_s", "dram_bytes", "l2_bytes", "smem_bytes", "matrix_flops", "vector_flops")}
    note = f"{active} GEMM kernels (one per expert) on {width} streams, {full + (1 if rest else 0)} rounds"
    cost = dataclasses.replace(one, **total, kernels=active,
                               notes="; ".join(x for x in (one.notes, note) if x) if np.ndim(one.compute_s) == 0
                               else "")
    cost = _with_promotion(op, ctx, cost, active, m, n, k)
    if op.attrs.get(SCALE_SWIZZLE_ATTR):
        cost = _with_scale_swizzle(ctx, cost, float(active * m * k), float(active * k * n), active)
    if op.dtype.value.startswith("fp8"):
        cost = _with_row_padding(op, ctx, cost)
    return _with_expert_quantisation(op, ctx, cost, active) if op.attrs.get("fp8_quantize") else cost


def _serial_s(st: gpu.KernelEstimate) -> Any:
    """The bound time of a streaming kernel that runs before or after a GEMM (not overlapped with it): added
    to both the GEMM's compute and memory times, so the op's time grows by it whichever bounds the GEMM."""
    return _f(np.maximum(st.compute_s, st.memory_s))


def _with_row_padding(op: Op, ctx: LoweringContext, gemm: KernelCost) -> KernelCost:
    """``gemm`` plus Megatron-Core's fp8 row padding around Transformer Engine's grouped GEMMs: under fp8,
    ``TEGroupedMLP.forward`` pads every expert's rows to the fp8 alignment (``Fp8Padding``: 16 rows, 32 under
    MXFP8) before ``linear_fc1`` and unpads ``linear_fc2``'s output (``Fp8Unpadding``), unless
    ``moe_router_padding_for_fp8`` pads the routing map (False in the Megatron-Bridge Qwen3 and DeepSeek
    recipes); with dropless routing the counts are not aligned, so each is one ``fused_multi_row_padding``
    copy of the rows at the model width, and their backward the inverse copy (NVIDIA/Megatron-LM core_v0.15.0
    megatron/core/transformer/moe/experts.py; NVIDIA/TransformerEngine release_v2.9
    transformer_engine/pytorch/module/fp8_padding.py, fp8_unpadding.py). Priced with the GEMM that reads or
    writes the rows: the forward and input-gradient GEMMs of fc1 (input side) and fc2 (output side)."""
    if op.kind == "grouped_matmul_bwd_weight":
        return gemm
    fc1 = op.name.split("@recompute")[0].split(".bwd_")[0].endswith("experts_in")
    bwd = op.kind == "grouped_matmul_bwd_data"
    t = op.outputs[0] if fc1 == bwd else op.inputs[0]  # the tensor at the model width
    rows = float(int(op.attrs.get("tokens", t.shape[0] * t.shape[1])))
    nbytes = rows * t.shape[-1] * element_bytes(t.dtype)
    st = gpu.streaming(nbytes, nbytes, 0.0, ctx.params("fp32"), l2_resident_bytes=ctx.resident_bytes)
    x = _serial_s(st)
    return dataclasses.replace(
        gemm, compute_s=gemm.compute_s + x, memory_s=gemm.memory_s + x, latency_s=gemm.latency_s + _f(st.latency_s),
        dram_bytes=gemm.dram_bytes + _f(st.dram_bytes), l2_bytes=gemm.l2_bytes + _f(st.l2_bytes),
        kernels=gemm.kernels + 1, notes="; ".join(x for x in (gemm.notes, "fp8 row padding copy") if x)
        if np.ndim(gemm.compute_s) == 0 else "")


#: Kernels Transformer Engine's split_quantize runs per expert split (transformer_engine/pytorch/csrc/quantizer.cpp
#: @ release_v2.9): current scaling nvte_compute_amax_with_config, nvte_compute_scale_from_amax and
#: nvte_quantize_v2; MXFP8 nvte_quantize_v2 (the 32-element block scales from the same read); delayed scaling
#: one fused nvte_multi_cast_transpose over every split (multi_tensor_quantize_impl), counted per call.
SPLIT_QUANTIZE_KERNELS = {"current": 3, "mxfp8": 1, "delayed": 1}
#: Recipes whose split_quantize is one kernel over every expert split (the rest run per split).
FUSED_SPLIT_QUANTIZE = ("delayed",)
#: The rule suffix of an expert GEMM priced with its operand's quantisation (library_launches reads it).
EXPERT_QUANT_SUFFIX = "+fp8-quant"


def _with_expert_quantisation(op: Op, ctx: LoweringContext, gemm: KernelCost, active: int) -> KernelCost:
    """``gemm`` plus the quantisation of its 16-bit operand (operand 0: the forward's input, the input-gradient
    GEMM's output gradient) one expert split at a time (``fp8_quantize``: the recipe): a read of the 16-bit
    split (twice under current scaling: its amax first), a rowwise and a columnwise fp8 copy written (the
    weight-gradient GEMM reads the columnwise one) with a 1-byte E8M0 scale per 32 elements (MXFP8:
    ``DType::kFloat8E8M0``, transformer_engine/pytorch/csrc/util.cpp @ v2.9) or a 4-byte one per split;
    ``SPLIT_QUANTIZE_KERNELS`` kernels a split, launched by the one split_quantize call. A recipe whose splits
    are quantised one kernel (chain) each (not :data:`FUSED_SPLIT_QUANTIZE`: ``multi_tensor_quantize_impl`` calls
    ``quantizer->quantize`` once per split, transformer_engine/pytorch/csrc/extensions/cast.cpp @ v2.9) pays each
    split's fixed costs (DRAM latency, ``bandwidth_half_size_bytes``) once per split; MXFP8's kernel runs at the
    device's ``efficiency.mxfp8_quantize_stream_fraction`` of the streaming rate (:data:`workloads.precision.TE_QUANTIZE_ATTR`)."""
    recipe = str(op.attrs["fp8_quantize"])
    t = op.inputs[0]
    elems = float(int(op.attrs.get("tokens", t.shape[0] * t.shape[1])) * t.shape[-1])
    reads = 2.0 if recipe == "current" else 1.0
    scales = elems / MXFP8_BLOCK_ELEMENTS * 2.0 if recipe == "mxfp8" else 8.0 * active
    p32 = ctx.params("fp32")
    per = SPLIT_QUANTIZE_KERNELS.get(recipe, 1)
    splits = 1 if recipe in FUSED_SPLIT_QUANTIZE else max(1, active)
    kernels = per if recipe in FUSED_SPLIT_QUANTIZE else per * active
    st = gpu.streaming(reads * elems * element_bytes(t.dtype) / splits, (2.0 * elems + scales) / splits,
                       2.0 * elems / splits, p32, l2_resident_bytes=_f(ctx.resident_bytes) / splits)
    if recipe == "mxfp8":
        st = _at_stream_fraction(st, ctx.device.efficiency.mxfp8_quantize_stream_fraction)
    x = _f(splits * _serial_s(st))
    return dataclasses.replace(
        gemm, compute_s=gemm.compute_s + x, memory_s=gemm.memory_s + x,
        latency_s=gemm.latency_s + splits * _f(st.latency_s), dram_bytes=gemm.dram_bytes + splits * _f(st.dram_bytes),
        l2_bytes=gemm.l2_bytes + splits * _f(st.l2_bytes), vector_flops=gemm.vector_flops + 2.0 * elems,
        kernels=gemm.kernels + kernels, rule=gemm.rule + EXPERT_QUANT_SUFFIX,
        notes="; ".join(x for x in (gemm.notes, f"operand quantised per expert split ({recipe}, {kernels} kernels)")
                        if x) if np.ndim(gemm.compute_s) == 0 else "")


@register_rule("gpu", QUANT_MATMUL)
def _quant_gemm(op: Op, ctx: LoweringContext) -> KernelCost:
    """A linear layer with quantised weights (:mod:`workloads.precision`), priced per operand
    (:func:`_quant_cost`)."""
    bt, m, n, k = gemm_dims(op)
    bias = float(op.outputs[0].numel) if quant_operands(op)["bias"] is not None else 0.0
    return _quant_cost(op, ctx, batch=bt, m=m, n=n, k=k, b_shared=True, bias=bias)


@register_rule("gpu", QUANT_GROUPED_MATMUL)
def _quant_grouped_gemm(op: Op, ctx: LoweringContext) -> KernelCost:
    """MoE experts with quantised weights: one GEMM per active expert (as :func:`_grouped_gemm`),
    priced per operand (:func:`_quant_cost`)."""
    x, w = op.inputs[0], op.inputs[1]
    e, c, k = x.shape
    n = w.shape[2]
    tokens = int(op.attrs.get("tokens", e * c))
    active = int(op.attrs.get("experts_active", e))
    return _quant_cost(op, ctx, batch=active, m=max(1, math.ceil(tokens / active)), n=n, k=k, b_shared=False,
                       bias=0.0)


def _quant_cost(op: Op, ctx: LoweringContext, *, batch: int, m: int, n: int, k: int, b_shared: bool,
                bias: float) -> KernelCost:
    """``batch`` GEMMs ``[m, k] @ [k, n]`` whose B operand is a quantised weight (one shared B, or one per
    batch entry), priced per operand.

    Weight-only int4/int8 (W4A16/W8A16, the Marlin/AWQ/GPTQ kernels): the activations move at their
    own width, the weights packed (int4: 0.5 B) with their group scales and zero points; the math
    runs on the tensor units at the activation dtype's rate, after each CTA converts its weight
    panel in registers: ``efficiency.weight_dequant_ops_per_element`` lane instructions per weight
    per CTA row tile, issued by the warps that issue the matrix instructions (added to the main
    loop, at the FP32 issue rate of the SMs that hold CTAs). fp8 weights (W8A8): fp8 math on both
    operands, 16-bit output, plus the per-token quantisation of the activations (a streaming
    kernel). The GEMM model takes one operand width, so the two operands' bytes are folded into
    mean widths (see below).
    """
    w = op.inputs[1]
    a = op.inputs[0]
    act_bytes = element_bytes(a.dtype)
    w_elem = float(packed_weight_bytes(op)) / float(w.numel)  # bytes per weight, scales and zeros included
    out_bytes = element_bytes(op.outputs[0].dtype)
    w_only = weight_only(op)
    dt = a.dtype.value if w_only else op.dtype.value
    mk = float(batch * m * k)
    wk = float((1 if b_shared else batch) * k * n)  # weight elements the launch reads
    op_bytes = act_bytes if w_only else 1.0  # W8A8: activations quantised to fp8 before the GEMM
    mean_bytes = (mk * op_bytes + wk * w_elem) / (mk + wk)
    rule = "quant-gemm" if b_shared else "quant-grouped-gemm"
    if w_only:
        # The conversion is paid once per weight per CTA row tile, so the tile is chosen with it. The
        # GEMM model takes one operand width: per tile shape it is priced twice, at the width the
        # tile's panels mix (tile_m activation rows, tile_n weight columns: shared-memory feed, L2
        # panels, pipeline capacity) and at the problem's compulsory mean (DRAM traffic).
        p = ctx.params(dt)
        per_weight = _f(ctx.device.efficiency.weight_dequant_ops_per_element)
        rows = batch * m if b_shared else m  # activation rows each weight meets
        cands = gpu.tile_candidates(ctx.device.arch, matrix_unit=p.uses_matrix_unit, in_bytes=act_bytes)
        options = []
        unfit: SpecError | None = None
        for tm, tn in sorted({(c.tile_m, c.tile_n) for c in cands}):
            # (a weight-only kernel is Marlin/AWQ/GPTQ's own, not the library's GEMV: library=False)
            kw: dict[str, Any] = dict(batch=batch, dtype=dt, out_bytes=out_bytes, b_shared=b_shared, rule=rule,
                                      vector_flops=bias, tile_bytes=act_bytes, tile_shape=(tm, tn), library=False)
            try:
                g = _gemm_cost(ctx, m, n, k, in_bytes=(tm * act_bytes + tn * w_elem) / (tm + tn), **kw)
                g = _compulsory_dram(g, _gemm_cost(ctx, m, n, k, in_bytes=mean_bytes, **kw), p)
            except SpecError as exc:  # this tile shape does not fit the SM at the mixed width (Blackwell's): the next
                unfit = exc
                continue
            instr = per_weight * wk * math.ceil(rows / tm)
            busy = np.minimum(1.0, np.maximum(1.0, _f(g.ctas)) / _f(p.sms))  # SMs holding a CTA convert the weights
            dq_s = instr / (_f(p.vector_flops_per_s) * _f(p.vector_fraction) * busy / 2.0)  # FMA = 2 FLOPs per lane instr.
            notes = "; ".join(x for x in (g.notes, f"{w.dtype.value} weights dequantised in registers") if x)
            options.append(dataclasses.replace(g, compute_s=_f(g.compute_s + dq_s),
                                               vector_flops=_f(g.vector_flops + 2.0 * instr),
                                               notes=notes if np.ndim(dq_s) == 0 else ""))
        if not options and unfit is not None:
            raise unfit
        return _fastest(options)
    g = _gemm_cost(ctx, m, n, k, batch=batch, dtype=dt, in_bytes=mean_bytes, out_bytes=out_bytes, b_shared=b_shared,
                   rule="fp8-gemm", vector_flops=bias, tile_bytes=op_bytes, tactic_m=op.attrs.get("tactic_m"))
    g = _with_promotion(op, ctx, g, batch, m, n, k)  # (EvalOptions.fp8_accumulation "split" on Hopper)
    # fp8 W8A8: the activations are quantised first. Dynamic scaling (the default): per token, an absmax pass,
    # the scale (4 B a row) and the cast, 2 FLOPs an element; a static scale (EvalOptions.fp8_activation_scale,
    # TensorRT-LLM's FP8Linear and its calibrated activation_scaling_factor): the cast only, 1 FLOP an element
    static = getattr(ctx.options, "fp8_activation_scale", "dynamic") == "static"
    per_elem = 1.0 if static else 2.0
    p32 = ctx.params("fp32")
    s = gpu.streaming(mk * act_bytes, mk * 1.0 + (0.0 if static else batch * m * 4.0), per_elem * mk, p32,
                      l2_resident_bytes=ctx.resident_bytes)
    what = "activations cast to fp8 with a static scale" if static else "activations quantised to fp8 per token"
    return dataclasses.replace(
        g, compute_s=g.compute_s + _f(s.compute_s), memory_s=g.memory_s + _f(s.memory_s),
        latency_s=g.latency_s + _f(s.latency_s), dram_bytes=g.dram_bytes + _f(s.dram_bytes),
        l2_bytes=g.l2_bytes + _f(s.l2_bytes), vector_flops=g.vector_flops + per_elem * mk, kernels=2,
        rule="fp8-cast+gemm" if static else "fp8-quant+gemm",
        notes="; ".join(x for x in (g.notes, what) if x) if np.ndim(g.compute_s) == 0 else "")


def _compulsory_dram(tile: KernelCost, comp: KernelCost, p: gpu.GpuParams) -> KernelCost:
    """``tile`` (priced at its panels' mixed width) with the DRAM traffic of ``comp`` (priced at the
    problem's compulsory mean width): the memory time is the larger of ``tile``'s on-chip terms and
    ``comp``'s DRAM time. Where ``tile`` was DRAM-bound its on-chip terms are not known separately,
    and ``comp``'s memory time stands (DRAM time as :func:`hwmodels.gpu.gemm` takes it)."""
    rate = _f(p.dram_bytes_per_s) * _f(p.dram_fraction)
    t_dram_tile, t_dram = _f(tile.dram_bytes) / rate, _f(comp.dram_bytes) / rate
    on_chip_bound = _f(tile.memory_s) > t_dram_tile * (1.0 + 1e-9)
    memory = np.where(on_chip_bound, np.maximum(_f(tile.memory_s), t_dram), _f(comp.memory_s))
    return dataclasses.replace(tile, memory_s=_f(memory), dram_bytes=comp.dram_bytes)


def _fastest(options: list[KernelCost]) -> KernelCost:
    """The option with the shortest device time; per hardware variant when the costs are arrays (sweeps)."""
    times = [o.device_time_s for o in options]
    if all(np.ndim(t) == 0 for t in times):
        return options[int(np.argmin(times))]
    shape = np.broadcast_shapes(*(np.shape(t) for t in times))
    idx = np.argmin(np.stack([np.broadcast_to(t, shape) for t in times]), axis=0)
    picked: dict[str, Any] = {}
    for f in dataclasses.fields(KernelCost):
        vals = [getattr(o, f.name) for o in options]
        if all(np.ndim(v) == 0 for v in vals) and all(v == vals[0] for v in vals):
            continue
        if f.name == "notes":
            picked[f.name] = ""
            continue
        picked[f.name] = np.choose(idx, [np.broadcast_to(np.asarray(v), shape) for v in vals])
    return dataclasses.replace(options[0], **picked)


@register_rule("gpu", "conv2d", "conv1d", "conv2d_bwd_data", "conv1d_bwd_data", "conv2d_bwd_weight",
               "conv1d_bwd_weight")
def _conv(op: Op, ctx: LoweringContext) -> KernelCost:
    d = conv_dims(op)
    g = d["groups"]
    dt = op.dtype.value
    if is_narrow_grouped_conv(d):
        # depthwise / narrow grouped conv: a direct kernel on the vector units, bandwidth-bound
        p = ctx.params("fp32")
        macs = g * d["gemm_m"] * d["gemm_n"] * d["gemm_k"]
        e = gpu.streaming(op.bytes_read, op.bytes_written, 2.0 * macs, p, l2_resident_bytes=ctx.resident_bytes)
        return _from_estimate(e, "conv-direct", 0.0, 2.0 * macs)
    cost = _implicit_gemm_conv(op, ctx, d)
    if getattr(ctx.options, "conv_layout", "nhwc") != "nchw" or not _cudnn(ctx.device) \
            or not ctx.params(dt).uses_matrix_unit \
            or (element_bytes(op.inputs[0].dtype) > 2 and not _tf32_path(dt, ctx)):
        return cost
    # PyTorch's default NCHW tensors reach cuDNN, whose tensor-core convolutions (16-bit, 8-bit and TF32)
    # are NHWC kernels: the library transforms the operands into NHWC and the result back, one kernel per
    # tensor, on every call (CONV_LAYOUT_SOURCES; for TF32: TF32_LAYOUT_SOURCES). fp32 convolutions on the
    # SIMT path (no TF32) keep cuDNN's NCHW kernels.
    nchw = _with_layout_transforms(cost, op, ctx)
    if element_bytes(op.inputs[0].dtype) <= 2:
        return nchw
    # with TF32 allowed cuDNN also holds FFMA kernels that read NCHW as it is, and takes them where they are
    # faster than the TF32 kernel between its transforms (TF32_LAYOUT_SOURCES: "in some cases the NCHW
    # kernels are faster on Ampere"); cudnn.benchmark times both, the heuristic predicts both
    simt = dataclasses.replace(ctx, options=dataclasses.replace(ctx.options, allow_tf32=False), _params={})
    return _fastest([nchw, _implicit_gemm_conv(op, simt, d, dtype="fp32")])


def _tf32_path(dt: str, ctx: LoweringContext) -> bool:
    """Whether a 4-byte convolution runs on TF32 tensor cores: a ``tf32`` op, or ``fp32`` with TF32 allowed
    on a device whose tensor units list a TF32 rate (the contraction path :func:`hwmodels.gpu.gpu_params` takes)."""
    if dt == "tf32":
        return True
    return dt == "fp32" and bool(getattr(ctx.options, "allow_tf32", False)) \
        and "tf32" in ctx.device.compute.tensor_flops_per_s


#: Kernels cuDNN adds to a convolution call on NCHW tensors: the transforms of its two operands and of its
#: result (``_with_layout_transforms``).
LAYOUT_TRANSFORM_KERNELS = 3
#: The suffix of the rule of a convolution run between those transforms (``implicit-gemm+nchw``).
NCHW_RULE_SUFFIX = "+nchw"


def library_launches(rule: str, kernels: Any = 1) -> Any:
    """Kernels an op's one library call launches beside its own (a launch each on the host, not a framework
    op): cuDNN's layout transforms around a convolution on NCHW tensors; every expert GEMM after the first of
    a grouped GEMM run per expert (one Transformer Engine call launches them from C++,
    :func:`_experts_gemm`); the two MXFP8 scale swizzles of a dense TE GEMM (:func:`_with_scale_swizzle`); the add
    into the main gradient after a weight-gradient GEMM (:func:`_with_main_grad_add`); none otherwise."""
    if rule.endswith(MAIN_GRAD_ADD_SUFFIX):  # the hook's add into the main gradient, after the GEMM
        return library_launches(rule[:-len(MAIN_GRAD_ADD_SUFFIX)], kernels - 1) + 1
    if rule.startswith(PER_EXPERT_RULE):  # one framework op for the GEMMs, one for split_quantize
        calls = 2 if rule.endswith(EXPERT_QUANT_SUFFIX) else 1
        return np.maximum(np.asarray(kernels) - calls, 0) if np.ndim(kernels) else max(int(kernels) - calls, 0)
    if rule.endswith(SCALE_SWIZZLE_SUFFIX):  # the two scale swizzles beside the GEMM of one TE call
        return 2
    return LAYOUT_TRANSFORM_KERNELS if rule.endswith(NCHW_RULE_SUFFIX) else 0


#: Where the NCHW layout transforms of cuDNN's tensor-core convolutions are documented.
CONV_LAYOUT_SOURCES = (
    "NVIDIA cuDNN documentation, Legacy API, 'Tensor Core operations / Data and Filter Formats': 'The cuDNN "
    "library may use padding, folding, and NCHW-to-NHWC transformations to call the Tensor Core operations'",
    "NVIDIA Deep Learning Performance Guide, 'Convolutional Layers User's Guide', QuickStart Checklist: "
    "'Choose tensor layouts in memory to avoid transposing input and output data ... We recommend using the "
    "NHWC format where possible'",
    "microsoft/onnxruntime pull request #17200 ('Make CUDA a NHWC EP', 2023): an Nsight Systems profile of "
    "fp16 convolutions through cuDNN shows NCHW<>NHWC conversion kernels around every convolution in NCHW, "
    "none in NHWC",
    "MosaicML Composer method card 'Channels Last' (after NVIDIA's diagram): 'Every time a convolution "
    "operation is called by a layer like torch.nn.Conv2D, the cuDNN library performs a transpose to convert "
    "the tensor into NHWC format'; channels last 'accelerates ResNet-50 on ImageNet by about 30% on NVIDIA "
    "V100 and A100 accelerators'",
)


#: Where cuDNN's transforms around TF32 convolutions on NCHW tensors are shown (Ampere and later).
TF32_LAYOUT_SOURCES = (
    "pytorch/pytorch issue #81940 (2022-07-22, timm_regnet inference on an A100, cuDNN 8.3.2, PyTorch's default "
    "NCHW fp32 tensors with TF32 allowed, Nsight Systems at batch 32 and 64): "
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc (58.8% of GPU time) beside "
    "cudnn::ops::nchwToNhwcKernel<float, ...> (16.6%) and nhwcToNchwKernel<float, ...> (15.7%), 1011 "
    "instances of each; cuDNN 'could add transpose kernels if the end2end performance would still be better'",
    "pytorch/pytorch issue #119458 (2024, sm86, CUDA 12.1 wheels, profiler table of Conv2d + BatchNorm2d in "
    "fp32): cudnn::ops::nchwToNhwcKernel<float, ...> beside sm86_xmma_fprop_implicit_gemm_indexed_tf32f32_...",
    "tensorflow/tensorflow pull request #58054 (NVIDIA, 2022-10-11, 'Use NHWC for TF32'): NHWC 'is recommended "
    "[on Ampere with TF32] to better utilize the 3rd generation Tensor Core'; about 20% faster convnet "
    "inference than NCHW",
    "tensorflow/tensorflow pull request #56744 (NVIDIA, 2022-07-12, 'Revert TF32+NHWC changes'): 'in some cases "
    "the NCHW kernels are faster on Ampere'; cuDNN's and TensorRT's Ampere tactic lists hold FFMA kernels on "
    "NCHW operands (sm80_xmma_fprop_implicit_gemm_indexed_f32f32_f32f32_f32_nchwkcrs_nchw_..._ffma)",
)


def _cudnn(dev: DeviceSpec) -> bool:
    """True for the devices whose convolutions the model prices as cuDNN's (NVIDIA GPUs)."""
    return str(getattr(dev, "vendor", "")).strip().upper() == "NVIDIA"


def _implicit_gemm_conv(op: Op, ctx: LoweringContext, d: dict[str, int], dtype: str | None = None) -> KernelCost:
    """A dense (or wide-group) convolution as one implicit-GEMM kernel on NHWC operands (``dtype``: the
    contraction dtype, the op's unless given)."""
    dt = dtype or op.dtype.value
    ib = element_bytes(op.inputs[0].dtype)
    ob = element_bytes(op.outputs[0].dtype)
    g = d["groups"]
    bias = op.outputs[0].numel if (len(op.inputs) == 3 and not op.kind.endswith(("bwd_data", "bwd_weight"))) else 0
    a_operand = _implicit_operand(op, d)
    if op.kind.endswith("bwd_weight"):
        # dW^T[C*R*S, K] = im2col(X)^T[C*R*S, N*P*Q] @ dY[N*P*Q, K]: the implicit operand is A, as in
        # fprop, so DRAM reads X itself (never the im2col matrix) and dY as the B operand
        m, n, k = d["gemm_k"], d["gemm_n"], d["gemm_m"]
        return _gemm_cost(ctx, m, n, k, batch=g, dtype=dt, in_bytes=ib, out_bytes=ob, b_shared=False,
                          rule="implicit-gemm-wgrad", a_operand=a_operand, vector_flops=0.0, conv=True)
    m, n, k = d["gemm_m"], d["gemm_n"], d["gemm_k"]
    rule = "implicit-gemm-dgrad" if op.kind.endswith("bwd_data") else "implicit-gemm"
    return _gemm_cost(ctx, m, n, k, batch=g, dtype=dt, in_bytes=ib, out_bytes=ob, b_shared=False, rule=rule,
                      vector_flops=float(bias), a_operand=a_operand, conv=True)


def _with_layout_transforms(cost: KernelCost, op: Op, ctx: LoweringContext) -> KernelCost:
    """``cost`` (the NHWC tensor-core kernel) run between cuDNN's layout transforms: each tensor operand
    (x and w for fprop, dy and w for dgrad, x and dy for wgrad) read in NCHW and written in NHWC, and the
    result read in NHWC and written in NCHW, one memory-bound kernel each, run one after another with the
    convolution (their time adds to both its compute and memory terms)."""
    p32 = ctx.params("fp32")
    tensors = [*op.inputs[:2], op.outputs[0]]
    assert len(tensors) == LAYOUT_TRANSFORM_KERNELS
    # what each transform finds in L2, by the engine's rule (EvalOptions.l2_residency: a tensor the previous
    # kernel wrote and no larger than L2): the inputs the engine found resident (ctx.resident_bytes, given to
    # the operands in order), and the result, which the convolution kernel has just written
    left = float(ctx.resident_bytes) if getattr(ctx.options, "l2_residency", True) else 0.0
    resident = []
    for t in tensors[:2]:
        took = min(left, float(t.nbytes))
        resident.append(took)
        left -= took
    fits = _f(p32.l2_capacity_bytes) >= float(tensors[2].nbytes)
    resident.append(np.where(fits, float(tensors[2].nbytes), 0.0) if getattr(ctx.options, "l2_residency", True)
                    else 0.0)
    ests = [gpu.streaming(float(t.nbytes), float(t.nbytes), 0.0, p32, l2_resident_bytes=r)
            for t, r in zip(tensors, resident, strict=True)]
    extra = sum(_f(np.maximum(_f(e.compute_s), _f(e.memory_s))) for e in ests)
    lat = sum(_f(e.latency_s) for e in ests)
    moved = sum(2.0 * float(t.nbytes) for t in tensors)
    note = f"NCHW operands: {len(tensors)} layout transforms ({moved / 1e6:.3g} MB moved) around the NHWC kernel"
    return dataclasses.replace(
        cost, compute_s=_f(cost.compute_s + extra), memory_s=_f(cost.memory_s + extra),
        latency_s=_f(cost.latency_s + lat), dram_bytes=_f(cost.dram_bytes + sum(_f(e.dram_bytes) for e in ests)),
        l2_bytes=_f(cost.l2_bytes + sum(_f(e.l2_bytes) for e in ests)), kernels=cost.kernels + len(tensors),
        rule=f"{cost.rule}{NCHW_RULE_SUFFIX}", notes="; ".join(x for x in (cost.notes, note) if x)
        if np.ndim(cost.compute_s) == 0 else "")


def _implicit_operand(op: Op, d: dict[str, int]) -> gpu.ImplicitOperand:
    """The implicit-GEMM A operand of a conv (one group): x for fprop and wgrad, dY for dgrad, with the
    geometry that decides how much of it a CTA's panel touches (:class:`hwmodels.gpu.ImplicitOperand`)."""
    if op.kind.endswith("bwd_data"):  # dy, w -> dx
        x_shape, w_shape, y_shape = op.outputs[0].shape, op.inputs[1].shape, op.inputs[0].shape
    elif op.kind.endswith("bwd_weight"):  # x, dy -> dw
        x_shape, w_shape, y_shape = op.inputs[0].shape, op.outputs[0].shape, op.inputs[1].shape
    else:
        x_shape, w_shape, y_shape = op.inputs[0].shape, op.inputs[1].shape, op.outputs[0].shape
    nd = len(x_shape) - 2
    stride, dil, pad, groups = conv_params(op.attrs, nd)
    x_sp, y_sp, filt = tuple(x_shape[2:]), tuple(y_shape[2:]), tuple(w_shape[2:])
    if op.kind.endswith("bwd_data"):
        return gpu.ImplicitOperand.dgrad(d["n"], d["k"] // groups, y_sp, x_sp, filt, stride, dil)
    make = gpu.ImplicitOperand.wgrad if op.kind.endswith("bwd_weight") else gpu.ImplicitOperand.fprop
    return make(d["n"], d["c"] // groups, x_sp, y_sp, filt, stride, dil, pad[:nd])


@register_rule("gpu", "attention", "attention_bwd")
def _attention(op: Op, ctx: LoweringContext) -> KernelCost:
    q, k, v = op.inputs[:3]
    b, hq, sq, d = q.shape
    hk, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    dt = op.dtype.value
    p = ctx.params(dt)
    backward = op.kind == "attention_bwd"
    # a generation step: one new query over a cache (a one-token prompt, skv == 1, is a context step)
    if not backward and sq == 1 < skv and getattr(ctx.options, "decode_attention", "grouped") == "per-query-head":
        return _masked_mha(op, ctx)
    requested = getattr(ctx.options, "attention_kernel", "auto")
    kernel = attention_kernel_for(ctx.device, requested)
    mem_eff = _runs_mem_efficient(ctx.device, q.dtype)  # fp32: PyTorch's memory-efficient kernel, not FlashAttention
    if mem_eff:
        kernel, p = "flash2", _mem_efficient_params(ctx)  # warp-synchronous MMAs, softmax between them
    sharing = 1
    blackwell = kernel == "flash3" and _family(ctx.device) == "sm100"
    if blackwell:
        sharing = gpu.BLACKWELL_CTA_PAIR  # FlashAttention-4's 2-CTA MMA mode shares K/V panels
    # FlashAttention-3 (Hopper) serialises the backward's softmax with its matmuls (gpu.FLASH3_SOFTMAX_OVERLAP);
    # no source gives FlashAttention-4's backward schedule, so Blackwell keeps the overlap
    causal, window = bool(op.attrs.get("causal", False)), attention_window(op)  # window: visited key blocks only
    # FlashAttention-2's causal forward as measured against its non-causal one (a device with a measured table:
    # efficiency.flash2_causal_fwd_ratio, the Hopper defaults)
    eff = ctx.device.efficiency
    ratio = gpu.flash2_causal_forward_ratio(skv, eff.flash2_causal_fwd_ratio, eff.flash2_causal_fwd_ratio_scale) if (
        kernel == "flash2" and causal and not window and not backward and sq == skv
        and eff.flash2_causal_fwd_ratio and not mem_eff) else None
    exposed = kernel == "flash3" and _family(ctx.device) in gpu.FLASH3_EXP_EXPOSED_FAMILIES  # Hopper: exp2 not hidden
    edges = _family(ctx.device) in gpu.FLASH2_EDGE_FAMILIES and not mem_eff  # FlashAttention-2's CTAs' edges
    block_q = gpu.mem_efficient_f32_block(max(d, dv), backward=backward, batch_heads=b * hq, seq_kv=skv) \
        if mem_eff else 128
    tiles, pick = _flash2_tiles(op, ctx.device, d, backward, causal) if edges and kernel == "flash2" else ((None,), None)
    longest = int(op.attrs.get("kv_tokens_max", 0) or 0)  # a decode batch of mixed contexts: its longest
    e = _per_tile(lambda tile: gpu.attention(
        b, hq, hk, sq, skv, d, dv, p, causal=causal, window=window, in_bytes=element_bytes(q.dtype), backward=backward,
        kernel=kernel, kv_sharing=sharing, bwd_softmax_overlap=blackwell, causal_rate_ratio=ratio, exp_exposed=exposed,
        cta_edges=edges, tile=tile, seq_kv_max=longest, block_q=block_q, fp32_mem_efficient=mem_eff), tiles, pick)
    if element_bytes(k.dtype) != element_bytes(q.dtype) and not backward:  # a narrower (fp8) KV cache
        e = _narrow_kv(e, _per_tile(lambda tile: gpu.attention(
            b, hq, hk, sq, skv, d, dv, p, causal=causal, window=window, in_bytes=element_bytes(k.dtype), kernel=kernel,
            kv_sharing=sharing, cta_edges=edges, tile=tile, seq_kv_max=longest), tiles, pick),
                       float(b * hq * sq * (d + dv)), element_bytes(q.dtype) - element_bytes(k.dtype), p,
                       kv_bytes=element_bytes(k.dtype))
    if requested == TRTLLM_CONTEXT_FMHA and not backward and sq > 1 and element_bytes(q.dtype) == 2:
        e = _context_fmha_floor(e, float(op.flops), ctx.device, dt)  # TensorRT-LLM's fmha_v2 at its measured rate
    if op.attrs.get("stored_score_passes"):  # PaddlePaddle's cuDNN fused attention keeps S (and dS) in memory
        e = _stored_scores(e, float(b * hq * sq * skv) * element_bytes(q.dtype) * int(op.attrs["stored_score_passes"]),
                           p)
    det = dict(e.details)
    pairs = op.macs / (d + dv) if not backward else op.macs / (3 * d + 2 * dv)
    if window:  # the softmax runs over every visited pair, the band's edge blocks included
        pairs = float(b * hq * dict(e.details).get("head_pairs", pairs / (b * hq)))
    # FlashAttention-2's forward also rescales its output accumulators (gpu.flash2_rescale_ops_per_score): the
    # multiplies its time holds are counted in the vector work its energy is priced from
    vec = pairs * (gpu.SOFTMAX_ALU_OPS_PER_SCORE["bwd" if backward else "fwd"] + float(det.get("rescale_ops_per_score", 0.0))) \
        + float(det.get("pass_vector_flops", 0.0))
    rule = "flash-attention-bwd" if backward else "flash-attention"
    # 3xTF32 runs three TF32 MMAs a product: their energy (gpu.FAST_F32_MMAS)
    mflops = float(op.flops) * (gpu.FAST_F32_MMAS if mem_eff and p.uses_matrix_unit else 1)
    kernels = int(det.get("kernels", 1))  # backward: preprocess, main and postprocess kernels
    if np.ndim(det.get("kv_splits", 1)) or np.ndim(e.compute_s):  # hardware variants (sweeps): no notes
        return _from_estimate(e, rule, mflops, vec, matrix_dtype=_matrix_key(ctx, dt, p),
                              ctas=_i(det.get("ctas", 0)), kernels=kernels,
                              tile="q" + "/".join(str(int(r)) for r in np.unique(det.get("block_q", 0))))
    return _from_estimate(e, rule, mflops, vec, kernels=kernels,
                          matrix_dtype=_matrix_key(ctx, dt, p), ctas=int(det.get("ctas", 0)),
                          notes=f"{_MEM_EFF_NOTE if mem_eff else kernel} kernel; {_bound_term_note(e)}",
                          tile=f"q{det.get('block_q', 0)}" + (f" kv-split {int(det['kv_splits'])}" if det.get("kv_splits", 1) > 1 else ""))


#: How a record names PyTorch's memory-efficient fp32 attention (:data:`hwmodels.gpu.MEM_EFFICIENT_SOURCE`).
_MEM_EFF_NOTE = "memory-efficient (CUTLASS, fp32)"


def _runs_mem_efficient(device: DeviceSpec, dtype: Any) -> bool:
    """Whether a fused attention over ``dtype`` operands runs PyTorch's memory-efficient kernel on ``device``: 4-byte
    (fp32) operands on an NVIDIA GPU, where FlashAttention and cuDNN accept only 16-bit ones
    (:data:`hwmodels.gpu.MEM_EFFICIENT_SOURCE`)."""
    return element_bytes(dtype) == 4 and device.vendor.lower() == "nvidia"


def _mem_efficient_params(ctx: LoweringContext) -> gpu.GpuParams:
    """The contraction rate of the memory-efficient fp32 kernel on ``ctx.device`` (:func:`hwmodels.gpu.
    mem_efficient_f32_params`): 3xTF32 ``mma.sync`` from compute capability 8.0 (the TF32 rate whatever the
    run's ``allow_tf32``), SIMT FFMA below (the lowest capability of a sweep's variants decides)."""
    cc = int(np.min(np.asarray(ctx.device.sm.compute_capability)))
    tf32 = "tf32" in ctx.device.compute.tensor_flops_per_s
    p_tf32 = gpu.gpu_params(ctx.device, "fp32", allow_tf32=True) if tf32 else None
    p_simt = gpu.gpu_params(ctx.device, "fp32", allow_tf32=False)
    return gpu.mem_efficient_f32_params(p_tf32 or p_simt, p_simt, cc if tf32 else 0)


def _flash2_tiles(op: Op, device: DeviceSpec, head_dim: int, backward: bool, causal: bool
                  ) -> tuple[tuple[gpu.Flash2Tile, ...], Any]:
    """The tiles FlashAttention-2's launch template picks for this op on ``device`` (:func:`hwmodels.gpu.flash2_tile`):
    by head dim, direction, compute capability, the device's shared memory per SM and per block, causal, and
    dropout (an op's ``dropout_p`` attribute, 0 when absent). For hardware variants (a sweep's arrays) each
    variant's tile: (the distinct tiles, the index of each variant's among them), the index None where one
    tile serves every variant."""
    sm = device.sm
    figures = np.broadcast_arrays(np.asarray(sm.compute_capability), np.asarray(sm.shared_mem_per_sm_bytes),
                                  np.asarray(sm.max_shared_mem_per_cta_bytes))
    dropout = float(op.attrs.get("dropout_p", 0.0) or 0.0) > 0.0
    chosen = [gpu.flash2_tile(head_dim, backward=backward, compute_capability=int(cc), smem_per_sm=float(per_sm),
                              smem_per_block=float(per_block), dropout=dropout, causal=causal)
              for cc, per_sm, per_block in zip(*(f.ravel() for f in figures), strict=True)]
    tiles = tuple(dict.fromkeys(chosen))
    if len(tiles) == 1:
        return tiles, None
    return tiles, np.array([tiles.index(t) for t in chosen]).reshape(figures[0].shape)


def _per_tile(estimate: Any, tiles: tuple[Any, ...], pick: Any) -> gpu.KernelEstimate:
    """``estimate(tile)`` for the one tile, or, with hardware variants that pick different tiles (``pick``, the
    index of each variant's tile), each variant's fields from its own tile's estimate."""
    ests = [estimate(t) for t in tiles]
    if pick is None:
        return ests[0]
    fields = ("time_s", "compute_s", "memory_s", "latency_s", "dram_bytes", "l2_bytes", "smem_bytes", "bound_term")
    chosen = {f: np.choose(pick, [np.asarray(getattr(e, f)) for e in ests]) for f in fields}
    details = tuple((k, v if all(dict(e.details)[k] is v or np.array_equal(dict(e.details)[k], v) for e in ests)
                     else np.choose(pick, [np.asarray(dict(e.details)[k]) for e in ests]))
                    for k, v in ests[0].details)
    return dataclasses.replace(ests[0], details=details, **chosen)


def _masked_mha(op: Op, ctx: LoweringContext) -> KernelCost:
    """A one-token decode attention as a masked multi-head attention kernel (``EvalOptions.decode_attention =
    "per-query-head"``): one CTA per sequence and query head, each reading its KV head's cache
    (:func:`hwmodels.gpu.masked_mha_decode`); the K/V cache at its own width (an fp8 cache converted in registers)."""
    q, k, v = op.inputs[:3]
    b, hq, _, d = q.shape
    hk, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    p = ctx.params(op.dtype.value)
    e = gpu.masked_mha_decode(b, hq, hk, skv, d, dv, p, q_bytes=element_bytes(q.dtype), kv_bytes=element_bytes(k.dtype))
    det = dict(e.details)
    reads = int(det["kv_reads"])
    return _from_estimate(e, "masked-mha", 0.0, float(op.flops), ctas=int(det["ctas"]),
                          notes=(f"masked multi-head attention: one CTA per sequence and query head, each K/V head read "
                                 f"by {reads} CTAs (L2 serves the repeats); {_bound_term_note(e)}")
                          if np.ndim(e.compute_s) == 0 else "")


#: ``EvalOptions.attention_kernel`` of TensorRT-LLM's own context-phase attention (its fmha_v2 kernels, NVIDIA/TensorRT-LLM
#: cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention): the ``"auto"`` design's estimate under the measured floor
#: of :func:`_context_fmha_floor`.
TRTLLM_CONTEXT_FMHA = "trtllm-fmha"


def _context_fmha_floor(e: gpu.KernelEstimate, flops: float, device: DeviceSpec, dtype: str) -> gpu.KernelEstimate:
    """A prompt's 16-bit self-attention as TensorRT-LLM's context kernels run it: the compute time held at least at
    ``flops`` (the op's, causal pairs only) over ``efficiency.context_fmha_tensor_fraction`` of the ``dtype`` tensor
    peak, the rate those kernels were measured at on long prompts (aiconfigurator's context-attention tables); a
    fraction of 0 (no measurement) or a dtype without a tensor rate keeps ``e``. Traffic and latency are kept."""
    frac = np.asarray(device.efficiency.context_fmha_tensor_fraction, dtype=float)
    peak = device.compute.tensor_flops_per_s.get(dtype)
    if peak is None or not np.any(frac > 0):
        return e
    floor = np.where(frac > 0, flops / (np.where(frac > 0, frac, 1.0) * np.asarray(peak, dtype=float)), 0.0)
    compute = np.maximum(np.asarray(e.compute_s, dtype=float), floor)
    if not np.any(compute > np.asarray(e.compute_s, dtype=float)):
        return e
    term = np.where(compute > np.asarray(e.compute_s, dtype=float), "trtllm-fmha-rate", e.bound_term)
    return dataclasses.replace(e, compute_s=_f(compute), bound_term=term.item() if term.ndim == 0 else term,
                               time_s=_f(np.maximum(compute, np.asarray(e.memory_s, dtype=float))
                                         + np.asarray(e.latency_s, dtype=float)))


def _stored_scores(e: gpu.KernelEstimate, extra_bytes: float, p: gpu.GpuParams) -> gpu.KernelEstimate:
    """A fused-attention kernel that also moves its score matrix through DRAM (``extra_bytes``: the passes an op's
    ``stored_score_passes`` attribute counts, :data:`workloads.paddle_fmha.STORED_SCORE_PASSES`): the bytes are added
    to the kernel's DRAM and L2 traffic and their DRAM time, at the rate :func:`hwmodels.gpu.attention` streams at
    (``dram_fraction`` of the peak), to its memory term; the compute term is kept."""
    extra_s = extra_bytes / (_f(p.dram_bytes_per_s) * _f(p.dram_fraction))
    t_mem = _f(_f(e.memory_s) + extra_s)
    return dataclasses.replace(e, memory_s=t_mem, dram_bytes=_f(_f(e.dram_bytes) + extra_bytes),
                               l2_bytes=_f(_f(e.l2_bytes) + extra_bytes),
                               time_s=_f(np.maximum(_f(e.compute_s), t_mem) + _f(e.latency_s)))


def _narrow_kv(e_q: gpu.KernelEstimate, e_kv: gpu.KernelEstimate, qo_elements: float, extra_bytes: float,
               p: gpu.GpuParams, *, kv_bytes: float) -> gpu.KernelEstimate:
    """Forward attention whose K/V are stored narrower than Q and O (an fp8 KV cache).

    ``e_q`` prices every operand at the query width, ``e_kv`` at the K/V width; the model's traffic
    is linear in the operand width, so the mixed traffic is ``e_kv``'s plus the Q and O elements
    (``qo_elements``) at the ``extra_bytes`` they are wider. Memory time is that traffic at the
    DRAM and L2 rates as :func:`hwmodels.gpu.attention` takes them (a decode kernel at the DRAM
    fraction measured for its K/V width, ``kv_bytes``: :func:`hwmodels.gpu.attention_dram_fraction`);
    the math runs at the query dtype's rate (K/V converted in registers), so the compute time is ``e_q``'s.
    """
    dram = _f(e_kv.dram_bytes) + qo_elements * extra_bytes
    l2 = _f(e_kv.l2_bytes) + qo_elements * extra_bytes
    frac = gpu.attention_dram_fraction(p, kv_bytes, bool(dict(e_kv.details).get("decode", False)))
    t_mem = np.maximum(dram / (_f(p.dram_bytes_per_s) * _f(frac)),
                       l2 / (_f(p.l2_bytes_per_s) * _f(p.l2_tile_fraction)))
    t_mem = _f(t_mem)
    return dataclasses.replace(e_kv, compute_s=e_q.compute_s, memory_s=t_mem, dram_bytes=dram, l2_bytes=l2,
                               time_s=_f(np.maximum(_f(e_q.compute_s), t_mem) + _f(e_kv.latency_s)))


#: Tile families whose native tensor instructions are asynchronous (Hopper wgmma, Blackwell UMMA):
#: the best available attention kernels there are warp-specialised (FlashAttention-3/4, cuDNN).
_ASYNC_MMA_FAMILIES = frozenset({"sm90", "sm100"})


def _family(device: DeviceSpec) -> str:
    try:
        return gpu.tile_family(device.arch)
    except SpecError:
        return ""


def attention_kernel_for(device: DeviceSpec, requested: str) -> str:
    """The fused-attention kernel design used on ``device`` for the option value ``requested``.

    ``"auto"`` picks the best design the architecture supports: ``"flash3"`` (warp-specialised,
    softmax overlapped with asynchronous matmuls) on Hopper and Blackwell, ``"flash2"`` elsewhere.
    ``"trtllm-fmha"`` (TensorRT-LLM's context kernels) takes the ``"auto"`` design, whose estimate the attention
    rule then holds to the measured floor (:func:`_context_fmha_floor`).
    An explicit ``"flash2"``/``"flash3"`` is returned as is; anything else raises ValueError.
    """
    if requested in ("auto", TRTLLM_CONTEXT_FMHA):  # TensorRT-LLM's kernels: the auto design, floored in _attention
        return "flash3" if _family(device) in _ASYNC_MMA_FAMILIES else "flash2"
    if requested not in gpu.ATTENTION_KERNELS:
        raise ValueError(f"options.attention_kernel: unknown kernel design; got {requested!r}; expected "
                         f"'auto', '{TRTLLM_CONTEXT_FMHA}' or one of {', '.join(gpu.ATTENTION_KERNELS)}")
    return requested


@register_rule("gpu", "elementwise", "elementwise_bwd", "softmax", "softmax_bwd", "layernorm", "rmsnorm",
               "layernorm_bwd", "rmsnorm_bwd", "reduction", "pool2d",
               "pool2d_bwd", "resize", "concat", "transpose", "cross_entropy", "cross_entropy_bwd",
               "optimizer_update", "embedding", "embedding_bwd", "kv_append", "moe_dispatch", "moe_combine",
               "expand", "groupnorm", "groupnorm_bwd", "mse_loss", "mse_loss_bwd", "moe_dispatch_bwd",
               "moe_combine_bwd")
def _streaming(op: Op, ctx: LoweringContext) -> KernelCost:
    if op.attrs.get(QUANTIZE_OUTPUT_ATTR) == "transpose" and fp8_gemm_reads_both_layouts(
            int(np.min(np.asarray(ctx.device.sm.compute_capability)))):
        return zero_cost("fp8-transpose-not-written")  # TE writes no transposed copy here
    p = ctx.params("fp32")
    vec = gpu_vector_flops(op)  # compiled instruction count of special functions, else semantic FLOPs
    e = gpu.streaming(op.bytes_read, op.bytes_written, vec, p,
                      l2_resident_bytes=ctx.resident_bytes, sfu_ops=sfu_ops(op))
    if "access" in op.attrs:
        e = _at_access(e, op, ctx)
    if _eager_dropout(op, ctx):
        e = _at_stream_fraction(e, ctx.device.efficiency.dropout_stream_fraction)
    if op.attrs.get(TE_QUANTIZE_ATTR) == "mxfp8":  # TE's MXFP8 quantize kernel (and the columnwise copy it writes)
        e = _at_stream_fraction(e, ctx.device.efficiency.mxfp8_quantize_stream_fraction)
    rule = "gather" if op.kind in ("embedding", "moe_dispatch") else "bandwidth"
    if op.kind == "elementwise" and getattr(ctx.options, "streaming_kernel", ""):
        e, rule = _in_tile_loop(e, rule, op, ctx)
    cost = _from_estimate(e, rule, 0.0, vec)
    if op.attrs.get("operands") == "register-chain":  # a dependent FMA chain on register operands
        cost = dataclasses.replace(cost, chain_flops=cost.vector_flops)
    return cost


def _in_tile_loop(e: gpu.KernelEstimate, rule: str, op: Op, ctx: LoweringContext) -> tuple[gpu.KernelEstimate, str]:
    """``e`` no faster than the tile-loop kernel ``options.streaming_kernel`` runs ``op``
    (:func:`hwmodels.tile_loop.tile_loop_time`: its tiles in flight per SM and its instruction issue); the rule
    becomes ``"tile-loop"`` where that bound sets the time. The busiest SM's issue time
    (:func:`hwmodels.tile_loop.tile_loop_issue_time`) is the compute term, which a clock lowered under a power limit
    stretches; the loop's time is the memory term (its DRAM latency and DRAM queueing do not follow the SM clock),
    so at the reference clock the time is the loop's. A kernel compiled for another compute capability, for another
    dtype or functor than ``op``'s, or of which an SM holds no block, is a located error."""
    from hwmodels.tile_loop import TILE_LOOP_KERNELS, tile_loop_issue_time, tile_loop_time

    k = TILE_LOOP_KERNELS[ctx.options.streaming_kernel]
    sm, p = ctx.device.sm, ctx.params("fp32")
    _check_tile_loop_kernel(op, ctx, k)
    numel = max(1, op.outputs[0].numel)
    try:
        t = tile_loop_time(numel, op.bytes_read / numel, op.bytes_written / numel, k, p,
                           warp_schedulers=sm.warp_schedulers, warp_size=sm.warp_size,
                           smem_latency_s=ctx.device.level("smem").latency_s)
        issue = tile_loop_issue_time(numel, op.bytes_read / numel, k, p, warp_schedulers=sm.warp_schedulers,
                                     warp_size=sm.warp_size)
    except ValueError as exc:
        raise UnsupportedOpError(f"op {op.name!r} ({op.kind}): options.streaming_kernel "
                                 f"{ctx.options.streaming_kernel!r} on device {ctx.device.name!r}: {exc}") from None
    loop = _f(_f(t) - _f(e.latency_s))
    bound = np.any(loop > np.maximum(_f(e.compute_s), _f(e.memory_s)))
    compute, memory = _f(np.maximum(_f(e.compute_s), issue)), _f(np.maximum(_f(e.memory_s), loop))
    e = dataclasses.replace(e, compute_s=compute, memory_s=memory,
                            time_s=_f(np.maximum(compute, memory) + _f(e.latency_s)))
    return e, ("tile-loop" if bound else rule)


def _check_tile_loop_kernel(op: Op, ctx: LoweringContext, k: Any) -> None:
    """A located UnsupportedOpError unless the tile-loop kernel ``k`` (``options.streaming_kernel``) can run ``op``:
    compiled for the device's compute capability, on ``op``'s output dtype, computing ``op``'s functor where its
    ``attrs["op"]`` names one."""
    name, sm = ctx.options.streaming_kernel, ctx.device.sm
    where = f"op {op.name!r} ({op.kind}): options.streaming_kernel {name!r}"
    if int(sm.compute_capability) != k.compute_capability:
        raise UnsupportedOpError(f"{where} is compiled for compute capability {k.compute_capability / 10:.1f}; got "
                                 f"device {ctx.device.name!r} of {int(sm.compute_capability) / 10:.1f}; expected a "
                                 f"{k.compute_capability / 10:.1f} device or no streaming_kernel")
    dtype = str(getattr(op.outputs[0].dtype, "value", op.outputs[0].dtype))
    if dtype != k.dtype:
        raise UnsupportedOpError(f"{where}: dtype; got {dtype!r}; expected {k.dtype!r} (the kernel's element type)")
    functor = op.attrs.get("op")
    if functor is not None and functor not in k.ir_ops:
        raise UnsupportedOpError(f"{where}: functor; got op={functor!r}; expected "
                                 f"{' or '.join(repr(f) for f in k.ir_ops)} (the kernel's functor)")


def _eager_dropout(op: Op, ctx: LoweringContext) -> bool:
    """Whether ``op`` is a training dropout's forward run as its own library kernel (ATen's
    ``native_dropout``): an ``elementwise`` dropout with ``attrs training`` in an evaluation without
    fusion (a compiler's generated dropout is another kernel)."""
    return (op.kind == "elementwise" and op.attrs.get("op") == "dropout" and bool(op.attrs.get("training"))
            and not getattr(ctx.options, "fusion", None))


def _at_stream_fraction(e: gpu.KernelEstimate, frac: Any) -> gpu.KernelEstimate:
    """``e`` with its memory time at ``frac`` of the streaming rate (0: unchanged); ``frac`` may be an array
    (hardware variants of a sweep)."""
    return _at_fraction(e, frac) if np.any(_f(frac) > 0.0) else e


def _at_fraction(e: gpu.KernelEstimate, frac: Any) -> gpu.KernelEstimate:
    """``e`` with its memory time divided by ``frac`` where it is positive (the streaming rate where it is 0) and
    its time recomputed as the larger of compute and memory plus latency; ``frac`` may be an array."""
    mem = _f(_f(e.memory_s) / np.where(_f(frac) > 0.0, frac, 1.0))
    return dataclasses.replace(e, memory_s=mem, time_s=_f(np.maximum(_f(e.compute_s), mem) + _f(e.latency_s)))


def _at_access(e: gpu.KernelEstimate, op: Op, ctx: LoweringContext) -> gpu.KernelEstimate:
    """``e`` with its memory time at the device's fraction of the streaming rate for the op's ``access``
    pattern: ``"outer_axis"`` (:data:`workloads.precision.OUTER_AXIS_ACCESS`, uncoalesced loads) at
    ``efficiency.outer_axis_stream_fraction`` (0: the streaming rate)."""
    from workloads.precision import OUTER_AXIS_ACCESS

    access = op.attrs["access"]
    if access != OUTER_AXIS_ACCESS:
        raise UnsupportedOpError(f"op {op.name!r} ({op.kind}): access; got {access!r}; expected "
                                 f"{OUTER_AXIS_ACCESS!r}")
    return _at_fraction(e, ctx.device.efficiency.outer_axis_stream_fraction)  # an array in hardware variants


@register_rule("gpu", "batchnorm", "batchnorm_bwd")
def _batchnorm(op: Op, ctx: LoweringContext) -> KernelCost:
    """Batch normalisation. At inference (running statistics) and for a tensor small enough to stay on
    chip it streams its operands once, like any bandwidth-bound op. In training it cannot: the forward
    normalises with statistics over the whole batch and the backward's ``dx`` needs the batch sums of
    ``dy`` and ``dy * x_hat`` (Ioffe & Szegedy 2015, the backward equations of section 3), so a reduction
    pass over ``x`` (forward) or ``dy`` and ``x`` (backward) precedes the elementwise pass that reads them
    again, as PyTorch's CUDA kernels run it (``aten/src/ATen/native/cuda/Normalization.cuh``:
    ``batch_norm_collect_statistics_kernel`` then ``batch_norm_transform_input_kernel``;
    ``batch_norm_backward_reduce_kernel`` then ``batch_norm_backward_elemt_kernel``). The second read comes
    from L2 where the tensors fit in it, else from DRAM (:func:`batchnorm_second_read_bytes`)."""
    p = ctx.params("fp32")
    vec = gpu_vector_flops(op)
    again = batchnorm_second_read_bytes(op, p)
    if not np.any(again > 0):
        e = gpu.streaming(op.bytes_read, op.bytes_written, vec, p, l2_resident_bytes=ctx.resident_bytes,
                          sfu_ops=sfu_ops(op))
        return _from_estimate(e, "bandwidth", 0.0, vec)
    # the second read finds the operands in L2 where they fit, by the engine's residency rule (off: DRAM)
    in_l2 = np.where(again <= _f(p.l2_capacity_bytes), again, 0.0) if getattr(ctx.options, "l2_residency", True) \
        else 0.0
    e = gpu.streaming(op.bytes_read + again, op.bytes_written, vec, p,
                      l2_resident_bytes=_f(ctx.resident_bytes) + in_l2, sfu_ops=sfu_ops(op))
    return _from_estimate(e, "bandwidth-two-pass", 0.0, vec)


def batchnorm_second_read_bytes(op: Op, p: gpu.GpuParams) -> Any:
    """Bytes a training batch norm reads a second time after its reduction pass: ``x`` (forward) or ``dy``
    and ``x`` (backward); 0 at inference and when they fit in the chip's registers and shared memory
    together (``sms x (registers_per_sm x 4 B + smem_per_sm_bytes)``), where one persistent kernel could
    hold them across the reduction."""
    if op.kind == "batchnorm" and not op.attrs.get("training"):
        return 0.0
    tensors = op.inputs[:1] if op.kind == "batchnorm" else op.inputs[:2]
    nbytes = float(sum(t.nbytes for t in tensors))
    on_chip = _f(p.sms) * (_f(p.registers_per_sm) * 4.0 + _f(p.smem_per_sm_bytes))
    return np.where(nbytes > on_chip, nbytes, 0.0) if np.ndim(on_chip) else (nbytes if nbytes > on_chip else 0.0)


@register_rule("gpu", "moe_router")
def _router(op: Op, ctx: LoweringContext) -> KernelCost:
    x, w = op.inputs
    t, d = x.shape
    e_ = w.shape[1]
    g = _gemm_cost(ctx, t, e_, d, batch=1, dtype=op.dtype.value, in_bytes=element_bytes(x.dtype), out_bytes=4.0,
                   b_shared=True, rule="router")
    p = ctx.params("fp32")
    s = gpu.streaming(t * e_ * 4.0, sum(o.nbytes for o in op.outputs), float(op.flops) - 2.0 * t * d * e_, p,
                      sfu_ops=float(t * e_))
    return KernelCost(
        compute_s=g.compute_s + _f(s.compute_s), memory_s=g.memory_s + _f(s.memory_s),
        latency_s=g.latency_s + _f(s.latency_s), dram_bytes=g.dram_bytes + _f(s.dram_bytes),
        l2_bytes=g.l2_bytes + _f(s.l2_bytes), smem_bytes=g.smem_bytes, matrix_flops=g.matrix_flops,
        vector_flops=g.vector_flops + float(op.flops) - 2.0 * t * d * e_, rule="gemm+softmax-topk",
        matrix_dtype=g.matrix_dtype, tile=g.tile, split_k=g.split_k, ctas=g.ctas, waves=g.waves,
        ctas_per_sm=g.ctas_per_sm, kernels=2,
    )


@register_rule("gpu", "moe_router_bwd")
def _router_bwd(op: Op, ctx: LoweringContext) -> KernelCost:
    """The router's backward as the stacks run it: the gate is a linear layer (Megatron-Core ``TopKRouter``
    ``gating``: ``torch.nn.functional.linear``; NeMo AutoModel ``Gate``: ``F.linear``), so autograd runs its
    two GEMMs, ``dx = dlogits W^T`` (T x D x E) and ``dW = x^T dlogits`` (D x E x T), on the tensor cores; the
    softmax and top-k backward streams the (T, E) fp32 scores."""
    x, w = op.inputs[0], op.inputs[1]
    t, d = x.shape
    e_ = w.shape[1]
    ib = element_bytes(x.dtype)
    gx = _gemm_cost(ctx, t, d, e_, batch=1, dtype=op.dtype.value, in_bytes=ib, out_bytes=ib, b_shared=True,
                    rule="router-bwd")
    gw = _gemm_cost(ctx, d, e_, t, batch=1, dtype=op.dtype.value, in_bytes=ib, out_bytes=4.0, b_shared=False,
                    rule="router-bwd")
    rest = max(0.0, float(op.flops) - 4.0 * t * d * e_)
    s = gpu.streaming(2.0 * t * e_ * 4.0, t * e_ * 4.0, rest, ctx.params("fp32"))
    return KernelCost(
        compute_s=gx.compute_s + gw.compute_s + _f(s.compute_s), memory_s=gx.memory_s + gw.memory_s + _f(s.memory_s),
        latency_s=gx.latency_s + gw.latency_s + _f(s.latency_s),
        dram_bytes=gx.dram_bytes + gw.dram_bytes + _f(s.dram_bytes), l2_bytes=gx.l2_bytes + gw.l2_bytes + _f(s.l2_bytes),
        smem_bytes=gx.smem_bytes + gw.smem_bytes, matrix_flops=gx.matrix_flops + gw.matrix_flops,
        vector_flops=gx.vector_flops + gw.vector_flops + rest, rule="gemm+gemm+softmax-topk-bwd",
        matrix_dtype=gx.matrix_dtype, tile=gx.tile, ctas=gx.ctas + gw.ctas, waves=gx.waves + gw.waves, kernels=3,
    )


@register_rule("gpu", "lstm", "gru", "lstm_cell", "gru_cell")
def _rnn(op: Op, ctx: LoweringContext) -> KernelCost:
    d = rnn_dims(op)
    gates, steps, b, i, hid, dirs, ib = d.gates, d.steps, d.batch, d.inputs, d.hidden, d.directions, d.in_bytes
    dt = op.dtype.value
    # input projection for all steps at once, then one recurrent GEMM per step (sequential)
    inp = _gemm_cost(ctx, steps * b, gates * hid, i, batch=dirs, dtype=dt, in_bytes=ib, out_bytes=ib,
                     b_shared=False, rule="rnn")
    rec = _gemm_cost(ctx, b, gates * hid, hid, batch=dirs, dtype=dt, in_bytes=ib, out_bytes=ib,
                     b_shared=False, rule="rnn")
    pw = float(op.flops) - 2.0 * steps * dirs * b * gates * hid * (i + hid)
    p = ctx.params("fp32")
    point = gpu.streaming(steps * dirs * b * gates * hid * ib * 2, steps * dirs * b * hid * ib * 2, pw, p)
    step_t = rec.device_time_s + _f(point.time_s) / steps
    return KernelCost(
        compute_s=inp.compute_s + steps * max(rec.compute_s, _f(point.compute_s) / steps),
        memory_s=inp.memory_s + steps * max(rec.memory_s, _f(point.memory_s) / steps),
        latency_s=inp.latency_s + steps * (step_t - max(rec.compute_s, rec.memory_s)),
        dram_bytes=inp.dram_bytes + steps * rec.dram_bytes, l2_bytes=inp.l2_bytes + steps * rec.l2_bytes,
        smem_bytes=inp.smem_bytes + steps * rec.smem_bytes, matrix_flops=inp.matrix_flops + steps * rec.matrix_flops,
        vector_flops=pw + inp.vector_flops + steps * rec.vector_flops, rule="rnn-steps", matrix_dtype=inp.matrix_dtype,
        tile=rec.tile, kernels=1 + steps, notes=f"{steps} sequential steps",
    )


@register_rule("gpu", *sorted(VIEW_KINDS))
def _view(op: Op, ctx: LoweringContext) -> KernelCost:
    return zero_cost("view")


@register_rule("gpu", *sorted(COLLECTIVE_KINDS))
def _collective(op: Op, ctx: LoweringContext) -> KernelCost:
    return collective_cost(op, ctx, ("peer", "nvlink", "fabric"), _gpu_roofline,
                           lambda n, link: f"{n} devices over {link.kind}; raw link bandwidth")


def _gpu_roofline(op: Op, ctx: LoweringContext) -> KernelCost:
    """Fallback: roofline of the op's FLOPs (vector units, or tensor units for contractions) and bytes."""
    matrix = op.macs > 0
    try:
        p = ctx.params(op.dtype.value if matrix else "fp32")
    except SpecError:
        p = ctx.params("fp32")
        matrix = False
    by = float(op.bytes_read + op.bytes_written)
    e = gpu.roofline(float(op.flops), by, p, matrix=matrix and p.uses_matrix_unit)
    mf = float(op.flops) if matrix and p.uses_matrix_unit else 0.0
    return _from_estimate(e, "roofline-fallback", mf, float(op.flops) - mf,
                          matrix_dtype=op.dtype.value if mf else "", fallback=True,
                          notes=f"no rule for kind {op.kind!r}")


set_fallback("gpu", _gpu_roofline)

