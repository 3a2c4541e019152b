"""Lowering rules for TPU-style devices (kind ``"tpu"``): contractions on the systolic arrays, the rest on the vector unit.

Registered with :mod:`simulator.lowering` on import (it is listed in ``RULE_MODULES``). The model,
per op kind:

Contractions (matmul, grouped matmul, convolutions and their gradients, the attention GEMMs)
    The GEMM ``batch x (M, N, K)`` is split over the chip's ``A = compute.units x
    systolic.arrays_per_core`` arrays (MXUs). Every split ``A = pb x pm x pn`` of the arrays over
    batch, M and N is tried; each array then runs ``ceil(batch/pb)`` GEMMs of
    ``(ceil(M/pm), ceil(N/pn), K)`` and the split with the fewest cycles wins (XLA's choice is not
    public; the best split is an optimistic stand-in). Cycles of one array come from
    :func:`hwmodels.systolic.gemm_cycles` (SCALE-Sim-parity closed form, ideal memory), whose folds
    pad every dimension to the array size, as XLA pads operands to MXU multiples; successive folds
    overlap as on an MXU, so only the first pays the preload and fill/drain bubble
    (:func:`pipelined_cycles`). Then::

        compute_s = cycles / (clock.sustained_hz x rate_factor x efficiency.tensor_peak_fraction)

    where ``rate_factor = compute.tensor_flops_per_s[dtype] / (2 x rows x cols x A x clock)`` is 1
    for the dtype the geometry peak is quoted in (bf16) and 2 for int8 on chips that pack two int8
    MACs per PE. A dtype missing from the matrix table but with a vector rate (fp32 on a chip whose
    MXUs list only bf16/int8) runs at the slowest listed matrix rate (noted); a dtype with no rate at
    all is refused (:func:`simulator.lowering.common.require_rate`), as on every device kind.

    HBM traffic assumes blocked tiling through each TensorCore's VMEM (output blocks with an fp32
    accumulator, double-buffered operand blocks; the fewest bytes among the blocks that fit, see
    :func:`_core_dram_bytes`); ``memory_s = dram_bytes / (hbm bandwidth x
    efficiency.dram_bandwidth_fraction)``.
    Compute and memory overlap (``time = max``, XLA double-buffers HBM->VMEM copies). On-chip
    (VMEM <-> array) traffic, for energy, is the closed form's SRAM access counts (partial sums in
    fp32). The record carries the array shape, dataflow, split, folds, utilisation and bound.

Attention
    ``QK^T`` and ``PV`` (and the seven GEMMs of the backward's dkv and dq kernels,
    :data:`BACKWARD_KERNEL_GEMMS`) as batched GEMMs over
    ``batch x heads`` on the arrays, plus the softmax on the vector unit (scores never leave
    VMEM: HBM traffic is Q, K, V and the output once, flash-style). The forward's softmax runs between its
    two GEMMs, the backward's beside its GEMMs (:func:`splash_compute_s`). A causal
    mask is priced as the Pallas splash kernel runs it: whole ``SPLASH_BLOCK`` x ``SPLASH_BLOCK`` tiles,
    the empty ones skipped and the partly masked ones computed in full (:func:`splash_block_pairs`).
    With grouped KV heads the query heads of a KV head are the rows of one GEMM against its K/V
    (``batch x kv_heads`` GEMMs of ``group x queries`` rows), as JAX's Pallas ragged paged attention
    kernel computes ``einsum("nd,md->nm", q, k)`` with ``q`` of
    ``[num_q_per_blk * num_q_heads_per_kv_head, head_dim]``: decode streams each KV head once.

LSTM / GRU
    The input projection of every step as one GEMM on the arrays, then per step the recurrent GEMM
    (weights read from HBM each step) and the gates on the vector unit, sequentially.

Vector unit (elementwise, softmax, norms, reductions, pooling, ...)
    ``compute_s = flops / (compute.vector_flops_per_s.fp32 x efficiency.vector_peak_fraction)``
    (the VPU computes in fp32), ``memory_s`` = compulsory bytes over HBM bandwidth. Depthwise
    convolutions (fewer than ``NARROW_GROUP_CHANNELS`` output channels per group) run here too, as on GPUs.

Embeddings and MoE dispatch are gathers (bytes only); views are free; collectives are rings over
the system fabric or the chip's ``ici`` link; anything else is a roofline marked as a fallback.

Fixed-function engines (a DLA, an Edge TPU)
    A device with an ``[op_support]`` table (:class:`hwmodels.spec.OpSupportSpec`) runs only the op
    kinds it lists: every rule here (and the fallback) first calls :func:`check_op_support`, which
    raises :class:`~workloads.ir.UnsupportedOpError` (a ``NotImplementedError``) naming the op, its
    kind and the device for anything else, so a partitioner can place the op on another engine.
    Integer dtypes run at their own matrix rate (``compute.tensor_flops_per_s.int8``; the geometry
    peak is the bf16/fp16 one, so int8 gets ``rate_factor`` 2 on engines with two int8 MACs per PE)
    with one byte per operand word; a dtype the device has no rate for is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hwmodels.spec import DeviceSpec, MemoryLevel, SpecError

if TYPE_CHECKING:  # the systolic model is imported when a TPU op is costed: a GPU run never loads it
    from hwmodels.systolic import SystolicResult
from simulator.lowering.collectives import collective_cost
from simulator.lowering.common import (
    COLLECTIVE_KINDS,
    VIEW_KINDS,
    KernelCost,
    LoweringContext,
    Rule,
    RuleSet,
    element_bytes,
    is_narrow_grouped_conv,
    register_rule,
    require_rate,
    rnn_dims,
    ruleset,
    set_fallback,
    zero_cost,
)
from workloads.ir import Op, Role, UnsupportedOpError
from workloads.semantics import (
    ELEMENTWISE_FLOPS,
    attention_window,
    band_block_start,
    conv_dims,
    gemm_dims,
)
from workloads.semantics import kinds as known_op_kinds

__all__ = ["GemmMapping", "map_gemm", "pipelined_cycles", "array_splits", "tpu_rate", "VECTOR_KINDS", "ONCHIP_LEVELS",
           "SOFTMAX_VECTOR_OPS_PER_SCORE", "check_op_support", "splash_compute_s", "unsupported_reason", "splash_block_pairs", "splash_blocks",
           "BACKWARD_KERNEL_GEMMS", "fused_dq_partial_bytes",
           "flash_row_stats_bytes", "FLASH_2023_LANES", "residual_stats_slice_bytes", "RESIDUAL_STAT_LANES",
           "MASK_VECTOR_OPS_PER_SCORE", "mask_vector_ops"]

#: Op kinds costed on the vector unit, bounded by HBM bandwidth.
VECTOR_KINDS = frozenset({
    "elementwise", "elementwise_bwd", "softmax", "softmax_bwd", "layernorm", "rmsnorm", "batchnorm",
    "layernorm_bwd", "rmsnorm_bwd", "batchnorm_bwd", "groupnorm", "groupnorm_bwd", "reduction", "pool2d",
    "pool2d_bwd", "resize", "concat", "transpose", "expand", "cross_entropy", "cross_entropy_bwd",
    "optimizer_update", "kv_append", "moe_combine", "moe_combine_bwd", "mse_loss", "mse_loss_bwd",
})
#: Gathers and scatters: bytes only, no arithmetic worth counting.
GATHER_KINDS = frozenset({"embedding", "embedding_bwd", "moe_dispatch", "moe_dispatch_bwd"})
#: Names a TPU device file may give its on-chip scratchpad level (first match wins).
ONCHIP_LEVELS: tuple[str, ...] = ("vmem", "sram", "smem")
_ACC_BYTES = 4.0  # partial sums are accumulated in fp32 on every MXU
#: Vector-unit operations per attention score: the forward softmax's max, subtract, exp, sum and
#: scale (5); the backward recomputes P and forms dS = P * (dP - D), counted as twice the forward.
SOFTMAX_VECTOR_OPS_PER_SCORE = {"fwd": 5.0, "bwd": 10.0}
#: Query and key block of the Pallas splash-attention kernel, which skips the (query block, key block)
#: tiles its mask leaves empty: MaxText's default ``sa_block_q`` / ``sa_block_kv`` of 512
#: (AI-Hypercomputer/maxtext src/MaxText/configs/base.yml; the ``SplashAttention`` block-size fields of
#: configs/types.py), and the same 512 for the backward's ``sa_block_*_dkv`` / ``sa_block_*_dq``, where
#: ``EvalOptions.splash_blocks`` states none (a workload's own sizes: :func:`splash_blocks`). A causal
#: mask (with or without a sliding window) is priced over the whole blocks the kernel runs
#: (:func:`splash_block_pairs`).
SPLASH_BLOCK = 512
#: GEMMs of a training step's attention backward on a TPU: two Pallas kernels, each recomputing the scores.
#: The dkv kernel computes S = Q K^T, dV = P^T dO, dP = dO V^T and dK = dS^T Q, the dq kernel S, dP and
#: dQ = dS K: ``_flash_attention_bwd_dkv`` / ``_flash_attention_bwd_dq`` of
#: jax/experimental/pallas/ops/tpu/flash_attention.py (the kernel MaxText's ``attention: flash`` ran in 2023,
#: MaxText/layers/attentions.py @ 76bd53b0f) and ``_flash_attention_dkv_kernel`` / ``_flash_attention_dq_kernel``
#: of the splash kernel, which MaxText runs split by default (``sa_use_fused_bwd_kernel: False`` in
#: configs/base.yml at tpu-recipes-v0.1.2 to v0.1.5 and main); with ``sa_use_fused_bwd_kernel: True`` the dkv
#: kernel computes dQ too (5 GEMMs): ``EvalOptions.splash_fused_bwd`` (:func:`splash_blocks`).
BACKWARD_KERNEL_GEMMS = 7


def _onchip(dev: DeviceSpec) -> MemoryLevel | None:
    for name in ONCHIP_LEVELS:
        for lv in dev.memory:
            if lv.name == name:
                return lv
    return dev.memory[1] if len(dev.memory) > 1 else None


def _require_systolic(dev: DeviceSpec) -> None:
    if dev.systolic is None:
        raise SpecError(f"{dev.source_file or dev.name}: systolic: missing for a tpu device; got nothing; "
                        "expected a [systolic] table with rows, cols, arrays_per_core, dataflow")


def tpu_rate(dev: DeviceSpec, dtype: str, op: Op | None = None) -> tuple[float, str, str]:
    """(matrix rate in FLOP/s, dtype whose rate is used, note) for contractions in ``dtype`` (``op`` names
    the op in the error for a dtype the device has no rate for)."""
    table = dev.compute.tensor_flops_per_s
    if dtype in table:
        return table[dtype], dtype, ""
    require_rate(dev, dtype, op)  # a dtype without any rate is refused, as on every device kind
    if not table:
        raise SpecError(f"{dev.name}: compute.tensor_flops_per_s: empty; got no rates; expected at least bf16")
    slow = min(table, key=lambda k: table[k])
    return table[slow], slow, f"{dtype} not in compute.tensor_flops_per_s; costed at the {slow} rate"


def array_splits(arrays: int) -> np.ndarray:
    """Every ``(pb, pm, pn)`` with ``pb * pm * pn == arrays`` (rows of an int64 array)."""
    out = [(pb, pm, arrays // (pb * pm)) for pb in range(1, arrays + 1) if arrays % pb == 0
           for pm in range(1, arrays // pb + 1) if (arrays // pb) % pm == 0]
    return np.asarray(out, dtype=np.int64)


def pipelined_cycles(r: SystolicResult) -> np.ndarray:
    """Cycles of a GEMM when successive folds overlap, as on a TPU MXU.

    The closed form runs every fold in full (stationary-tile preload, stream, fill/drain skew). An MXU
    loads the next weight tile while the current one streams, so only the first fold pays the
    bubble ("There is an initial pipeline bubble as the weights (RHS) and activations (LHS) are
    loaded. After that initial bubble, new inputs and weights can be loaded in without an
    additional bubble", How to Scale Your Model, TPU chapter, Appendix B). Each later fold lasts
    ``max(t, preload)`` (the stream, or the weight load when the stream is shorter)::

        cycles = compute_cycles - (folds - 1) * (fold_cycles - max(t, preload per fold))

    which equals the closed form's ``compute_cycles`` for one fold.
    """
    per_fold_preload = r.preload_cycles // r.folds
    steady = np.maximum(r.t, per_fold_preload)
    return r.compute_cycles - (r.folds - 1) * (r.fold_cycles - steady)


@dataclass(frozen=True)
class GemmMapping:
    """How one batched GEMM maps onto a chip's arrays, and what it costs.

    Attributes
    ----------
    cycles
        Array cycles of the busiest array (all arrays run in parallel), ideal memory, folds
        overlapped (:func:`pipelined_cycles`).
    split
        ``(pb, pm, pn)``: arrays over batch, M and N.
    folds
        Folds one array runs per GEMM of its share; ``per_array_batch`` GEMMs run one after another.
    util_pct
        ``100 x MACs / (cycles x rows x cols x arrays)``.
    dram_bytes, sram_bytes
        HBM traffic of the whole chip (bytes) and VMEM <-> array traffic (bytes).
    """

    cycles: int
    split: tuple[int, int, int]
    per_array_batch: int
    sub_mnk: tuple[int, int, int]
    folds: int
    util_pct: float
    dram_bytes: float
    sram_bytes: float


def map_gemm(dev: DeviceSpec, batch: int, m: int, n: int, k: int, *, in_bytes: float, out_bytes: float,
             ifmap_words: int | None = None) -> GemmMapping:
    """Map ``batch x (M, N, K)`` onto the arrays of ``dev`` (see the module docstring).

    Parameters
    ----------
    batch, m, n, k
        Independent GEMMs and their dimensions (counts).
    in_bytes, out_bytes
        Bytes per operand and per output element.
    ifmap_words
        Distinct elements of the streamed operand per GEMM (a convolution's input tensor rather than
        its ``M x K`` im2col view); default ``M x K``.
    """
    _require_systolic(dev)
    s = dev.systolic
    arrays = dev.compute.units * s.arrays_per_core
    splits = array_splits(arrays)
    pb, pm, pn = splits[:, 0], splits[:, 1], splits[:, 2]
    bsub = -(-batch // pb)
    msub = -(-m // pm)
    nsub = -(-n // pn)
    from hwmodels.systolic import gemm_cycles

    r = gemm_cycles(s.rows, s.cols, s.dataflow, msub, nsub, k)
    total = bsub * pipelined_cycles(r)
    best = int(np.lexsort((pm, pb, total))[0])  # fewest cycles; ties: fewest batch, then M splits
    cycles = int(total[best])
    macs = batch * m * n * k
    util = 100.0 * macs / (cycles * s.rows * s.cols * arrays) if cycles > 0 else 0.0
    sram_words_in = float(r.sram_ifmap_reads[best] + r.sram_filter_reads[best])
    sram_words_acc = float(r.sram_ofmap_writes[best] + r.sram_ofmap_reads[best])
    sram_bytes = float(arrays * int(bsub[best])) * (sram_words_in * in_bytes + sram_words_acc * _ACC_BYTES)
    dram = _core_dram_bytes(dev, batch, m, n, k, in_bytes, out_bytes, ifmap_words)
    return GemmMapping(cycles=cycles, split=(int(pb[best]), int(pm[best]), int(pn[best])),
                       per_array_batch=int(bsub[best]), sub_mnk=(int(msub[best]), int(nsub[best]), k),
                       folds=int(r.folds[best]), util_pct=util, dram_bytes=dram, sram_bytes=sram_bytes)


def _core_dram_bytes(dev: DeviceSpec, batch: int, m: int, n: int, k: int, in_bytes: float, out_bytes: float,
                     ifmap_words: int | None) -> float:
    """HBM bytes of the whole GEMM under blocked tiling through each TensorCore's VMEM.

    TensorCores take whole GEMMs of the batch, or share one along M (each then reads the whole
    filter into its own VMEM). A core computes output blocks ``bm x bn`` with an fp32 accumulator,
    streaming double-buffered ``bm x bk`` and ``bk x bn`` operand blocks (``bk`` = the array's row
    count, the K extent of one fold), so the streamed operand is read ``ceil(N / bn)`` times, the
    filter ``ceil(M / bm)`` times and the output written once. ``bm`` and ``bn`` run over the array
    size times powers of two (capped at M and N); the feasible pair moving the fewest bytes wins
    (the smallest tile if none fits).
    """
    s = dev.systolic
    cores = dev.compute.units
    share = 1 if batch >= cores else max(1, cores // batch)  # cores per GEMM
    cm = -(-m // share)
    lv = _onchip(dev)
    budget = lv.capacity_bytes / cores if lv is not None else float("inf")
    bk = min(k, s.rows)
    sizes_m = np.unique(np.minimum(cm, s.rows * 2 ** np.arange(0, 20)))
    sizes_n = np.unique(np.minimum(n, s.cols * 2 ** np.arange(0, 20)))
    bm, bn = np.meshgrid(sizes_m, sizes_n, indexing="ij")
    foot = 2.0 * (bm * bk + bk * bn) * in_bytes + bm * bn * _ACC_BYTES
    a_bytes = (cm * k if ifmap_words is None else -(-ifmap_words // share)) * in_bytes
    traffic = (a_bytes * -(-n // bn) + k * n * in_bytes * -(-cm // bm) + cm * n * out_bytes).astype(float)
    fits = foot <= budget
    per_share = float(traffic[fits].min()) if fits.any() else float(traffic[0, 0])
    return float(batch * share) * per_share


def _hbm(dev: DeviceSpec) -> float:
    return dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction


def _vector_rate(dev: DeviceSpec) -> float:
    table = dev.compute.vector_flops_per_s
    rate = table.get("fp32", max(table.values(), default=0.0))
    if rate <= 0:
        raise SpecError(f"{dev.name}: compute.vector_flops_per_s: no fp32 rate; got {table}; expected fp32 = ...")
    return rate * dev.efficiency.vector_peak_fraction


def _contraction(ctx: LoweringContext, batch: int, m: int, n: int, k: int, *, dtype: str, in_bytes: float,
                 out_bytes: float, rule: str, ifmap_words: int | None = None, vector_flops: float = 0.0,
                 extra_vector_s: float = 0.0, dram_bytes: float | None = None, notes: str = "",
                 op: Op | None = None) -> KernelCost:
    dev = ctx.device
    s = dev.systolic
    rate, used, rnote = tpu_rate(dev, dtype, op)
    mp = map_gemm(dev, batch, m, n, k, in_bytes=in_bytes, out_bytes=out_bytes, ifmap_words=ifmap_words)
    geometry_peak = 2.0 * s.rows * s.cols * s.arrays_per_core * dev.compute.units * dev.clock.sustained_hz
    factor = rate / geometry_peak
    mxu_s = mp.cycles / (dev.clock.sustained_hz * factor * dev.efficiency.tensor_peak_fraction)
    vec_s = vector_flops / _vector_rate(dev) if vector_flops else 0.0
    compute_s = max(mxu_s, vec_s + extra_vector_s)
    dram = mp.dram_bytes if dram_bytes is None else dram_bytes
    memory_s = dram / _hbm(dev)
    bound = "memory" if memory_s > compute_s else ("vector" if vec_s + extra_vector_s > mxu_s else "mxu")
    pb, pm, pn = mp.split
    tile = f"{s.rows}x{s.cols} {s.dataflow} x{s.arrays_per_core * dev.compute.units}"
    detail = (f"array {s.rows}x{s.cols} {s.dataflow}; split batch/M/N {pb}/{pm}/{pn} over "
              f"{dev.compute.units} core(s) x {s.arrays_per_core} MXU; per array {mp.per_array_batch} x "
              f"(M,N,K)={mp.sub_mnk} in {mp.folds} folds, {mp.cycles} cycles; util {mp.util_pct:.1f}%; "
              f"bound {bound}")
    extra = "; ".join(x for x in (rnote, notes) if x)
    return KernelCost(
        compute_s=compute_s, memory_s=memory_s, latency_s=0.0, dram_bytes=dram, l2_bytes=0.0,
        smem_bytes=mp.sram_bytes, matrix_flops=2.0 * batch * m * n * k, vector_flops=vector_flops, rule=rule,
        matrix_dtype=used, tile=tile, ctas=pb * pm * pn, waves=float(mp.per_array_batch * mp.folds),
        notes=detail + (f"; {extra}" if extra else ""),
    )


@register_rule("tpu", "matmul")
def _tpu_gemm(op: Op, ctx: LoweringContext) -> KernelCost:
    bt, m, n, k = gemm_dims(op)
    a, b = op.inputs[0], op.inputs[1]
    bias = float(op.outputs[0].numel) if len(op.inputs) == 3 else 0.0
    return _contraction(ctx, bt, m, n, k, dtype=op.dtype.value, in_bytes=max(element_bytes(a.dtype), element_bytes(b.dtype)),
                        out_bytes=element_bytes(op.outputs[0].dtype), rule="mxu-gemm", vector_flops=bias, op=op)


def _grouped_rows(op: Op) -> tuple[int, int]:
    """(rows per group, groups) of a grouped matmul: its routed rows shared by the active experts; with a
    ``tile_rows`` m tile (MaxText's Megablox ``gmm``, :attr:`workloads.frameworks.FrameworkProfile.grouped_gemm_tile_rows`)
    the rows the kernel computes: ``ceil(rows / tm)`` tiles plus one more visit for every group that starts
    inside a tile (``make_group_metadata``), ``(groups - 1) (tm - 1) / tm`` expected when the group sizes
    fall as routing spreads them (a start on a tile edge 1 time in ``tm``), each visit a full tile."""
    a = op.inputs[0]
    e, c = a.shape[0], a.shape[1]
    tokens = int(op.attrs.get("tokens", e * c))
    active = int(op.attrs.get("experts_active", e))
    tm = int(op.attrs.get("tile_rows", 0))
    if tm > 1 and active > 1:
        tokens = round(tm * (math.ceil(tokens / tm) + (active - 1) * (tm - 1) / tm))
    return max(1, math.ceil(tokens / active)), active


@register_rule("tpu", "grouped_matmul", "grouped_matmul_bwd_data", "grouped_matmul_bwd_weight")
def _tpu_grouped(op: Op, ctx: LoweringContext) -> KernelCost:
    a, b = op.inputs[0], op.inputs[1]
    rows, active = _grouped_rows(op)
    if op.kind == "grouped_matmul":
        m, n, k = rows, b.shape[2], a.shape[2]
    elif op.kind == "grouped_matmul_bwd_data":
        m, n, k = rows, b.shape[1], b.shape[2]
    else:
        m, n, k = a.shape[2], b.shape[2], rows
    cost = _contraction(ctx, active, m, n, k, dtype=op.dtype.value, in_bytes=element_bytes(a.dtype),
                        out_bytes=element_bytes(op.outputs[0].dtype), rule="mxu-grouped-gemm", op=op)
    # a gated up-projection's w0 and w1 are two gmm calls of half the columns (their dlhs keep the full width)
    calls = 1 if op.kind == "grouped_matmul_bwd_data" else max(1, int(op.attrs.get("column_calls", 1)))
    split = megacore_tile_split(n // calls, int(op.attrs.get("tile_cols", 0)), ctx.device.compute.units)
    # A Megablox weight gradient reads its activations in their own (m, k) layout: ``_gmm_bwd`` passes
    # ``lhs.swapaxes(0, 1)`` to ``tgmm``, which swaps it back before the Pallas call (``lhs = lhs.swapaxes(0, 1)``,
    # src/MaxText/kernels/megablox/backend.py @ 3eb77db3c; MaxText/kernels/megablox/gmm.py @ f4db8e4cc), so the
    # two transposes cancel and no transposed copy of the rows is written. The kernel transposes each (tm, tk)
    # tile in VMEM instead (``loaded_lhs.swapaxes(0, 1)``), beside its masks of both tiles; no source sizes that
    # in-kernel work or says whether it overlaps the MXU, so it is not priced (docs/tpu.md).
    cost = cost if split == 1.0 else dataclasses.replace(cost, compute_s=cost.compute_s * split)
    return _with_split_input_gradient(op, ctx, cost) if op.kind == "grouped_matmul_bwd_data" else cost


def _with_split_input_gradient(op: Op, ctx: LoweringContext, cost: KernelCost) -> KernelCost:
    """A Megablox input gradient of an up-projection run as ``column_calls`` separate ``gmm`` calls, with the HBM
    passes their separate outputs add: MaxText calls ``gmm`` once for ``w0`` and once for ``w1``
    (src/MaxText/layers/moe.py @ 3eb77db3c, lines 1039 and 1046), each a ``custom_vjp`` whose backward writes its own
    ``dlhs`` of the routed rows' shape in their dtype (``_gmm_bwd``, megablox/ops.py), and the two cotangents of the
    shared rows are then summed. Priced at the least that costs: each further call writes one more ``[rows, d_model]``
    array (inside its kernel, so only in its memory time) and the sum, wherever XLA fuses it, reads it once more,
    serial with the kernels; an unfused add would also write the sum and have its consumer read it, two passes more
    (not priced: no source says whether XLA fuses it).

    >>> round(393_216 * 7168 * 2 / 1e9, 2)   # DeepSeek-V3 on one chip: GB of the second call's dlhs, a layer
    5.64
    """
    calls = int(op.attrs.get("column_calls", 1))
    if calls < 2 or not int(op.attrs.get("tile_rows", 0)):
        return cost
    a, out = op.inputs[0], op.outputs[0]
    one = float(int(op.attrs.get("tokens", a.shape[0] * a.shape[1])) * out.shape[2] * element_bytes(out.dtype))
    extra = (calls - 1) * one
    t = extra / _hbm(ctx.device)
    return dataclasses.replace(cost, compute_s=cost.compute_s + t, memory_s=cost.memory_s + 2.0 * t,
                               dram_bytes=cost.dram_bytes + 2.0 * extra,
                               notes=f"{cost.notes}; {calls} gmm calls' input gradients summed: {t * 1e6:.1f} us read")


def megacore_tile_split(n: int, tile_n: int, cores: int) -> float:
    """Factor on a Megablox grouped matmul's array time when its ``ceil(n / tile_n)`` output-column tiles are
    the only grid axis split over the chip's ``cores`` TensorCores: the busiest core takes
    ``ceil(tiles / cores)`` of them where an even share is ``tiles / cores``.

    The kernel's grid is ``(tiles_n, num_active_tiles, tiles_k)`` with ``dimension_semantics=("parallel",
    "arbitrary", "arbitrary")`` (``gmm``), and ``tgmm``'s ``(tiles_n, tiles_k, num_active_tiles)`` the same
    (src/MaxText/kernels/megablox/backend.py @ 3eb77db3c); a ``"parallel"`` grid axis is what Pallas splits
    over a megacore's two TensorCores ("TPUs in Megacore configuration", JAX docs/pallas/tpu/pipelining.md).
    The backward ``gmm`` (``dlhs``) and ``tgmm`` take the forward call's tiling (megablox/ops.py ``_gmm_bwd``),
    so their n tile is the forward's ``tn`` over their own output width.

    >>> megacore_tile_split(7168, 1024, 2)   # 7 tiles: 4 on one core where 3.5 is the even share
    1.1428571428571428
    >>> megacore_tile_split(2048, 1024, 2), megacore_tile_split(5120, 1024, 1)
    (1.0, 1.0)
    """
    if tile_n <= 0 or cores <= 1:
        return 1.0
    tiles = -(-n // tile_n)
    return (-(-tiles // cores)) * cores / tiles if tiles > 1 else float(cores)


@register_rule("tpu", "conv1d", "conv2d", "conv1d_bwd_data", "conv2d_bwd_data", "conv1d_bwd_weight",
               "conv2d_bwd_weight")
def _tpu_conv(op: Op, ctx: LoweringContext) -> KernelCost:
    d = conv_dims(op)
    g = d["groups"]
    ib, ob = element_bytes(op.inputs[0].dtype), element_bytes(op.outputs[0].dtype)
    if is_narrow_grouped_conv(d):
        # depthwise / narrow grouped: too little reuse for the arrays; the vector unit does it
        macs = g * d["gemm_m"] * d["gemm_n"] * d["gemm_k"]
        return _vector_cost(op, ctx, flops=2.0 * macs, rule="vpu-depthwise-conv",
                            notes="depthwise convolution on the vector unit")
    bias = float(op.outputs[0].numel) if (len(op.inputs) == 3 and op.kind in ("conv1d", "conv2d")) else 0.0
    if op.kind.endswith("bwd_weight"):
        m, n, k = d["gemm_n"], d["gemm_k"], d["gemm_m"]
        rule = "mxu-conv-wgrad"
        ifw = None
    else:
        m, n, k = d["gemm_m"], d["gemm_n"], d["gemm_k"]
        rule = "mxu-conv-dgrad" if op.kind.endswith("bwd_data") else "mxu-conv"
        ifw = max(1, op.inputs[0].numel // g)  # the input tensor, not its im2col copies
    return _contraction(ctx, g, m, n, k, dtype=op.dtype.value, in_bytes=ib, out_bytes=ob, rule=rule,
                        ifmap_words=ifw, vector_flops=bias, op=op)


@functools.lru_cache(maxsize=1024)
def splash_block_pairs(sq: int, skv: int, window: int, block_q: int, block_kv: int) -> int:
    """Query-key pairs the Pallas splash-attention kernel computes per (batch, head) under a causal mask
    (``window`` > 0: a causal sliding window of that many keys).

    The kernel's grid runs (query block, key block) tiles of ``block_q`` x ``block_kv``; a tile its mask
    leaves empty is skipped (``should_run`` from the block mask), and a tile it runs is computed whole:
    every ``block_kv_compute`` slice takes ``qk = lax.dot_general(q, k, ...)`` of the full block and only
    then applies the mask with ``jnp.where`` (``flash_attention_kernel`` and ``_apply_mask_and_soft_cap``
    in jax/experimental/pallas/ops/tpu/splash_attention/splash_attention_kernel.py). So a query block
    computes every key from the start of the first key block its band meets to the end of the key block
    holding its last row's position; queries sit at the last ``sq`` of ``skv`` positions.

    >>> splash_block_pairs(8192, 8192, 0, 512, 512) / 8192 ** 2   # 136 of 256 tiles, not 8192 x 8193 / 2
    0.53125
    >>> splash_block_pairs(4096, 4096, 1024, 512, 512)   # 512 x (512 + 1024 + 6 x 1536) keys
    5505024
    """
    bq, bkv = max(1, block_q), max(1, block_kv)
    total = 0
    for m in range(0, sq, bq):
        rows = min(m + bq, sq) - m
        p0 = m + skv - sq  # position of the block's first row
        p1 = p0 + rows - 1
        lo = band_block_start(p0, window, bkv)  # the band's first key block, as the GPU block-sparse rule
        hi = min(skv, (max(0, p1) // bkv + 1) * bkv)
        total += rows * max(0, hi - lo)
    return total


def splash_blocks(options: Any) -> tuple[tuple[int, int, int, int, int, int], bool]:
    """(block sizes, fused backward) of the Pallas splash kernel under ``options``: its
    ``splash_blocks`` (``sa_block_q``, ``sa_block_kv``, ``sa_block_q_dkv``, ``sa_block_kv_dkv``,
    ``sa_block_q_dq``, ``sa_block_kv_dq`` as a MaxText workload sets them) and ``splash_fused_bwd``
    (``sa_use_fused_bwd_kernel``); :data:`SPLASH_BLOCK` for each and the split backward when not stated.

    >>> splash_blocks(None)
    ((512, 512, 512, 512, 512, 512), False)
    """
    given = tuple(int(x) for x in (getattr(options, "splash_blocks", ()) or ()))
    blocks = given if len(given) == 6 else (SPLASH_BLOCK,) * 6
    return blocks, bool(getattr(options, "splash_fused_bwd", False))  # type: ignore[return-value]


def _splash_backward_gemms(rows: int, d: int, dv: int, kv_dkv: int, kv_dq: int, fused: bool,
                           heads: int) -> tuple[list[tuple[int, int, int]], float]:
    """(GEMMs (M, N, K) per (batch, head) group, scores formed) of the splash backward, ``kv_dkv`` / ``kv_dq``
    keys per query row under each kernel's blocks. Split (MaxText's default): the dkv kernel computes
    S = Q K^T, dV = P^T dO, dP = dO V^T and dK = dS^T Q, the dq kernel S, dP and dQ = dS K
    (:data:`BACKWARD_KERNEL_GEMMS`); fused (``sa_use_fused_bwd_kernel: True``): one kernel over the dkv blocks
    computes S, dV, dP, dK and dQ (``_flash_attention_dkv_kernel`` with ``dq`` accumulated,
    jax/experimental/pallas/ops/tpu/splash_attention/splash_attention_kernel.py). Each kernel recomputes P and
    forms dS, twice the forward's softmax work per score it runs."""
    dkv = [(rows, kv_dkv, d), (kv_dkv, dv, rows), (rows, kv_dkv, dv), (kv_dkv, d, rows)]
    if fused:
        return dkv + [(rows, d, kv_dkv)], 2.0 * heads * rows * kv_dkv
    dq = [(rows, kv_dq, d), (rows, kv_dq, dv), (rows, d, kv_dq)]
    return dkv + dq, float(heads * rows * (kv_dkv + kv_dq))


def fused_dq_partial_bytes(q_bytes: float, skv: int, block_kv_dkv: int) -> tuple[float, float]:
    """(bytes the fused splash backward writes as partial dQ, bytes the sum of those partials moves) for a query
    tensor of ``q_bytes`` against ``skv`` keys in key blocks of ``block_kv_dkv``.

    With ``sa_use_fused_bwd_kernel: True`` the dkv kernel computes dQ of each (key block, query block) step but
    cannot accumulate it across key blocks (the grid's outer axis): its output ``dq_unreduced`` has shape
    ``(kv_seq_len // bkv, *q.shape)`` in ``q.dtype``, every grid step writes its block (``dq_ref[...] =
    jnp.zeros_like(dq_ref)`` before ``should_run``, so key blocks the mask skips write zeros), and
    ``_splash_attention_bwd_dkv`` returns ``dq_unreduced.sum(axis=0)``: an XLA reduction after the kernel that
    reads every partial and writes dQ (jax/experimental/pallas/ops/tpu/splash_attention/splash_attention_kernel.py,
    the same at jax-v0.4.35, jax-v0.6.1 and HEAD cec06d116). The split backward's dq kernel accumulates dQ in a
    float32 VMEM scratch instead and writes it once.

    >>> fused_dq_partial_bytes(1.0, 8192, 2048)   # 4 partials written; the sum reads 4 and writes 1
    (4.0, 5.0)
    """
    blocks = max(1, -(-skv // max(1, block_kv_dkv)))
    return blocks * q_bytes, (blocks + 1) * q_bytes


PRE_FLASH = " and m, l, di broadcast over lanes (2023 flash kernel)"
#: Lanes of the 2023 flash kernel's broadcast row statistics (``MIN_BLOCK_SIZE`` of jax's ``flash_attention.py``)
FLASH_2023_LANES = 128


def flash_row_stats_bytes(rows: int, block_k_major_dq: int) -> float:
    """HBM bytes the 2023 Pallas flash backward writes, before its kernels, to broadcast its row statistics over
    ``rows`` (batch x heads x query) rows. ``_flash_attention_bwd_dkv`` passes ``m``, ``l`` and ``di`` as
    ``jnp.broadcast_to(x[..., None], (*x.shape, MIN_BLOCK_SIZE))`` (float32, 128 lanes); ``_flash_attention_bwd_dq``
    passes ``m`` and ``l`` so and ``di`` broadcast to ``block_k_major`` lanes (jax/experimental/pallas/ops/tpu/
    flash_attention.py @ 9d0a9918b, 2023-12-11): a kernel operand is materialised, so each is an XLA broadcast
    written to HBM (the three float32 sources read once each for both).

    >>> flash_row_stats_bytes(1, 512)   # (3 x 128 + 2 x 128 + 512) x 4 written + 3 x 4 read
    4620.0
    """
    lanes = 5 * FLASH_2023_LANES + max(1, int(block_k_major_dq))
    return float(rows) * 4.0 * (lanes + 3)


#: Lanes over which a TPU Pallas attention forward writes each row statistic it saves for the backward: the splash
#: kernel's ``logsumexp`` output is ``jax.ShapeDtypeStruct((num_q_heads, q_seq_len, NUM_LANES), jnp.float32)`` with
#: ``NUM_LANES = 128`` (``_splash_attention_forward``, jax/experimental/pallas/ops/tpu/splash_attention/
#: splash_attention_kernel.py), the 2023 ``flash_attention.py`` kernel's ``l`` and ``m`` alike (``MIN_BLOCK_SIZE``
#: lanes); a compiled MaxText step shows it: ``splash_mha_fwd_segmented_residuals.6`` returns ``f32[32,1024,128]``
#: beside its ``bf16[32,1024,64]`` output (patrick-toulme/justabyte @ 4b28527db0763f02af56ee3b47a16a163ebe0ffd,
#: maxtext_pretraining/ir_dumps/module_0142.jit_train_step.cl_873080440.after_optimizations.txt).
RESIDUAL_STAT_LANES = 128
#: Row statistics each forward saves: the splash kernel's logsumexp; the 2023 flash kernel's l and m.
RESIDUAL_STATS = {"splash": 1, "flash-2023": 2}


def residual_stats_slice_bytes(rows: int, stats: int) -> float:
    """HBM bytes of the XLA slice that narrows the lane-wide row statistics a TPU attention forward saved to one
    float32 per row, before the backward's kernels read them: ``logsumexp = logsumexp[..., 0]`` after the splash
    forward's ``pallas_call`` (``l, m = (v[..., 0] for v in aux[-2:])`` in the 2023 flash kernel), a separate XLA
    fusion (a custom call's output fuses into nothing). The source is ``f32[..., 128]`` in (8, 128) tiles (the
    layout the compiled step prints, ``{2,1,0:T(8,128)}``), so the slice reads every tile of it: ``stats`` x
    ``RESIDUAL_STAT_LANES`` float32 read and ``stats`` float32 written a head and query row (``rows``).

    >>> residual_stats_slice_bytes(1, 1), residual_stats_slice_bytes(1, 2)   # (128 + 1) x 4, twice that
    (516.0, 1032.0)
    """
    return float(rows) * float(stats) * 4.0 * (RESIDUAL_STAT_LANES + 1)


def _splash_bwd_passes(op: Op, skv: int, block_kv_dkv: int, fused: bool) -> tuple[float, float, float]:
    """(partial dQ bytes the fused kernel writes, bytes of their sum, bytes of the ``di`` pass) of a TPU attention
    backward ``op`` (inputs q, k, v, o, do). Before its kernels the splash backward computes ``di =
    jnp.einsum("hsd,hsd->hs", o.astype(float32), do.astype(float32))`` in XLA (``_splash_attention_bwd`` in
    jax/experimental/pallas/ops/tpu/splash_attention/splash_attention_kernel.py; the 2023 ``flash_attention.py``
    ``_flash_attention_bwd`` alike): o and do read, one float32 per query row and head written. The fused
    kernel's partial dQ: :func:`fused_dq_partial_bytes`."""
    q, o, do = op.inputs[0], op.inputs[3], op.inputs[4]
    b, hq, sq, _ = q.shape
    di_b = float(o.numel) * element_bytes(o.dtype) + float(do.numel) * element_bytes(do.dtype) + 4.0 * b * hq * sq
    if not fused:
        return 0.0, 0.0, di_b
    part_b, sum_b = fused_dq_partial_bytes(float(q.numel) * element_bytes(q.dtype), skv, block_kv_dkv)
    return part_b, sum_b, di_b


#: Vector-unit operations per score of a causal splash kernel's mask: ``k_offset + broadcasted_iota`` (the key
#: positions), ``mask_function(q_sequence, k_sequence)`` (the causal compare) and ``jnp.where(mask, qk,
#: mask_value)``; and with segment ids, ``q_ids == kv_ids`` and the ``logical_and`` of the two masks
#: (``_apply_mask_and_soft_cap`` in jax/experimental/pallas/ops/tpu/splash_attention/splash_attention_kernel.py,
#: run on every block a kernel computes: ``should_not_mask`` only ORs into the mask). The 2023 ``flash_attention.py``
#: kernel builds the same masks from two iotas (``_flash_attention_kernel_single_batch``).
#: A causal sliding window (MaxText's ``mask &= LocalMask(...)``: a ``LogicalAnd`` of two masks, which is no single
#: computable mask, so ``_process_mask`` gives the kernel partial mask blocks to load) costs the loaded block's
#: ``bitwise_or`` with ``should_not_mask`` and the where instead.
MASK_VECTOR_OPS_PER_SCORE = {"causal": 3.0, "window": 2.0, "segment_ids": 2.0}


def mask_vector_ops(causal: bool, options: Any, *, windowed: bool = False) -> float:
    """Vector operations a splash kernel spends per score on its mask: the causal mask's (when ``causal``; a loaded
    block mask when ``windowed``) and the segment ids' (``options.tpu_segment_ids``: MaxText passes
    ``decoder_segment_ids``, all ones on synthetic data, to every attention call); 0 without either
    (:data:`MASK_VECTOR_OPS_PER_SCORE`).

    >>> mask_vector_ops(True, None), mask_vector_ops(True, None, windowed=True), mask_vector_ops(False, None)
    (3.0, 2.0, 0.0)
    """
    seg = bool(getattr(options, "tpu_segment_ids", False))
    own = MASK_VECTOR_OPS_PER_SCORE["window" if windowed else "causal"] if causal else 0.0
    # the segment mask alone: its compare and the where (no logical_and of one mask)
    return own + (MASK_VECTOR_OPS_PER_SCORE["segment_ids"] if seg else 0.0)


def splash_compute_s(mxu_s: float, vec_s: float, backward: bool) -> float:
    """Seconds of one splash-attention kernel whose GEMMs take ``mxu_s`` on the arrays and softmax ``vec_s`` on the
    vector unit: the sum in the forward, the larger in the backward.

    The forward (``flash_attention_kernel`` of jax/experimental/pallas/ops/tpu/splash_attention/splash_attention_kernel.py,
    as the 2023 ``flash_attention.py`` kernel) runs, for each ``bkv_compute`` chunk of a grid step, ``qk =
    dot_general(q, k)``, ``qk.max(axis=-1)``, ``exp(qk - m_next)`` and its row sum, then ``dot_general(s_curr, v)``:
    a chain with no array work independent of the softmax at the kernel's code granularity (a row's max needs every
    score of that row, ``P V`` needs ``P``; whether Mosaic pipelines row blocks inside a step is not known, so the
    serial sum is an upper bound, docs/tpu.md). The chunks of one step are an unrolled ``fori_loop``, but every MaxText workload of the training
    dataset sets ``sa_block_kv_compute`` equal to ``sa_block_kv`` (512 both in ``configs/base.yml``, 2,048 in the
    Llama 3.1 workloads, 1,024 in Gemma 3's), one chunk a step, and the grid's steps run one after another ("the
    grid is generally not processed in parallel, but sequentially", JAX ``docs/pallas/tpu/details.rst``; only the
    HBM copies of the next step overlap the current one's compute). MaxText's Megablox kernel states the rule:
    vector work on a matmul's result pipelines with MXU work only across pieces the kernel's loops expose ("result of
    [tile_m, mxu_size] becomes available at the end of every k inner loop which can be used to pipeline subsequent
    VPU or VST ops with MXU ops for the next [tile_m, mxu_size]", src/maxtext/kernels/megablox/
    pallas_mosaic_tpu_v2_gmm_kernel.py @ e591f30cb). In the backward kernels ``dP = dO V^T`` needs no vector result
    and ``dV = P^T dO`` none of ``dS``, so array work runs beside each vector stage: overlapped.

    >>> splash_compute_s(1.4, 0.8, backward=False), splash_compute_s(4.9, 1.6, backward=True)
    (2.2, 4.9)
    """
    return max(mxu_s, vec_s) if backward else mxu_s + vec_s


@register_rule("tpu", "attention", "attention_bwd")
def _tpu_attention(op: Op, ctx: LoweringContext) -> KernelCost:
    q, k, v = op.inputs[:3]
    b, hq, sq, d = q.shape
    skv, dv = k.shape[2], v.shape[3]
    backward = op.kind == "attention_bwd"
    causal = bool(op.attrs.get("causal", False))
    dt = op.dtype.value
    ib = element_bytes(q.dtype)
    hkv = k.shape[1]
    # grouped KV heads: the query heads sharing a KV head are one GEMM of group x query rows against
    # that head's K/V, streamed once (as the Pallas ragged paged attention kernel computes
    # einsum("nd,md->nm", q, k) with q of [num_q_per_blk * num_q_heads_per_kv_head, head_dim])
    group = hq // hkv if 0 < hkv < hq and hq % hkv == 0 else 1
    heads = b * hq // group
    rows = sq * group
    # causal: the splash kernel skips the blocks above the diagonal (and before a window's band) and runs
    # the partly masked ones whole; the keys each query row computes, per kernel (its own block sizes)
    blocks, fused = splash_blocks(ctx.options)
    window = attention_window(op) if causal and sq > 1 else None

    def keep(bq: int, bkv: int) -> float:  # the kept fraction of scores
        return 1.0 if window is None else splash_block_pairs(sq, skv, window, bq, bkv) / float(sq * skv)

    def kv_eff(bq: int, bkv: int) -> int:
        return max(1, round(skv * keep(bq, bkv)))

    if not backward:
        kv_f = kv_eff(blocks[0], blocks[1])
        gemms = [(rows, kv_f, d), (rows, dv, kv_f)]  # S = Q K^T, O = P V
        scores = float(heads * rows * kv_f)
    else:
        gemms, scores = _splash_backward_gemms(rows, d, dv, kv_eff(blocks[2], blocks[3]), kv_eff(blocks[4], blocks[5]),
                                               fused, heads)
    dram = float(op.bytes_read + op.bytes_written)
    part_b, sum_b, di_b = _splash_bwd_passes(op, skv, blocks[3], fused) if backward else (0.0, 0.0, 0.0)
    pre = PRE_FLASH if backward and getattr(ctx.options, "tpu_flash_2023", False) else ""
    if pre:  # the 2023 kernel's broadcast row statistics
        di_b += flash_row_stats_bytes(b * hq * sq, blocks[5])
    # the forward's lane-wide saved row statistics, narrowed to a float32 a row before the kernels read them
    res_b = residual_stats_slice_bytes(b * hq * sq, RESIDUAL_STATS["flash-2023" if pre else "splash"]) if backward \
        else 0.0
    # the mask each kernel applies to every score it computes (one pass over the fused backward's scores, which
    # `scores` counts twice)
    vec_flops = scores * (SOFTMAX_VECTOR_OPS_PER_SCORE["fwd"]
                          + mask_vector_ops(window is not None, ctx.options, windowed=bool(window))
                          / (2.0 if backward and fused else 1.0))
    parts = [_contraction(ctx, heads, m_, n_, k_, dtype=dt, in_bytes=ib, out_bytes=ib, rule="mxu-attention",
                          dram_bytes=0.0, op=op) for (m_, n_, k_) in gemms]
    mxu_s = sum(p.compute_s for p in parts)
    vec_s = vec_flops / _vector_rate(ctx.device)
    memory_s = (dram + part_b) / _hbm(ctx.device)
    compute_s = splash_compute_s(mxu_s, vec_s, backward)
    bound = "memory" if memory_s > compute_s else ("vector" if vec_s > mxu_s else "mxu")
    dq_sum_s, di_s, res_s = sum_b / _hbm(ctx.device), di_b / _hbm(ctx.device), res_b / _hbm(ctx.device)
    if backward:  # XLA passes before (di, the statistics' slice) and after (the partial dQ's sum) the kernels, at HBM rate
        compute_s = max(compute_s, memory_s) + dq_sum_s + di_s + res_s
        memory_s = memory_s + dq_sum_s + di_s + res_s
    first = parts[0]
    return KernelCost(
        compute_s=compute_s, memory_s=memory_s, latency_s=0.0, dram_bytes=dram + part_b + sum_b + di_b + res_b,
        l2_bytes=0.0,
        smem_bytes=sum(p.smem_bytes for p in parts), matrix_flops=sum(p.matrix_flops for p in parts),
        vector_flops=vec_flops, rule="mxu-attention-bwd" if backward else "mxu-attention",
        matrix_dtype=first.matrix_dtype, tile=first.tile, ctas=first.ctas, waves=sum(p.waves for p in parts),
        notes=(f"{len(gemms)} GEMMs over {heads} batch x {'KV ' if group > 1 else ''}heads on the arrays"
               f"{f' ({group} query heads per KV head in one GEMM)' if group > 1 else ''} (QK^T: {first.notes}); "
               f"softmax on the vector unit {vec_s * 1e6:.2f} us vs arrays {mxu_s * 1e6:.2f} us, "
               f"{'overlapped' if backward else 'between the GEMMs (serial)'}; "
               f"causal kept fraction {keep(*blocks[2 if backward else 0:4 if backward else 2]):.3f}"
               f"{f' (window {window})' if window else ''}; splash blocks {'x'.join(map(str, blocks))}"
               f"{' (fused backward)' if fused and backward else ''}; bound {bound}"
               f"{f'; di = sum(o * do){pre} before the kernels {di_s * 1e6:.2f} us' if di_s else ''}"
               f"{f'; saved row statistics sliced from {RESIDUAL_STAT_LANES} lanes {res_s * 1e6:.2f} us' if res_s else ''}"
               f"{f'; partial dQ summed after the kernel {dq_sum_s * 1e6:.2f} us' if dq_sum_s else ''}"),
        kernels=1 + (di_s > 0) + (dq_sum_s > 0) + (res_s > 0),
    )


@register_rule("tpu", "lstm", "gru", "lstm_cell", "gru_cell")
def _tpu_rnn(op: Op, ctx: LoweringContext) -> KernelCost:
    """An LSTM/GRU layer as XLA runs it on a TPU: the input projection of every step in one GEMM on the
    arrays, then per step (a sequential loop) the recurrent GEMM on the arrays followed by the gates'
    pointwise work on the vector unit (fp32). Each step reads its recurrent weights from HBM (no
    residency across loop iterations is modelled)."""
    d = rnn_dims(op)
    gates, steps, b, i, hid, dirs, ib = d.gates, d.steps, d.batch, d.inputs, d.hidden, d.directions, d.in_bytes
    dt = op.dtype.value
    inp = _contraction(ctx, dirs, steps * b, gates * hid, i, dtype=dt, in_bytes=ib, out_bytes=ib,
                       rule="mxu-rnn-input", op=op)
    rec = _contraction(ctx, dirs, b, gates * hid, hid, dtype=dt, in_bytes=ib, out_bytes=ib,
                       rule="mxu-rnn-recurrent", op=op)
    pw = max(0.0, float(op.flops) - 2.0 * steps * dirs * b * gates * hid * (i + hid))
    # per step: read the gate pre-activations and the cell state, write h and c
    pw_bytes = float(dirs * b * (gates * hid + 2 * hid) * ib + dirs * b * 2 * hid * ib)
    vec_s = pw / steps / _vector_rate(ctx.device)
    pw_mem_s = pw_bytes / _hbm(ctx.device)
    step_compute = rec.compute_s + vec_s
    step_memory = rec.memory_s + pw_mem_s
    compute_s = max(inp.compute_s, inp.memory_s) + steps * max(step_compute, step_memory)
    return KernelCost(
        compute_s=compute_s, memory_s=inp.memory_s + steps * step_memory, latency_s=0.0,
        dram_bytes=inp.dram_bytes + steps * (rec.dram_bytes + pw_bytes), l2_bytes=0.0,
        smem_bytes=inp.smem_bytes + steps * rec.smem_bytes, matrix_flops=inp.matrix_flops + steps * rec.matrix_flops,
        vector_flops=pw, rule="mxu-rnn-steps", matrix_dtype=inp.matrix_dtype, tile=rec.tile,
        ctas=rec.ctas, waves=inp.waves + steps * rec.waves,
        notes=(f"input projection {inp.compute_s * 1e6:.2f} us on the arrays, then {steps} sequential steps of "
               f"recurrent GEMM {rec.compute_s * 1e6:.3f} us (HBM {rec.memory_s * 1e6:.3f} us) + gates on the "
               f"vector unit {vec_s * 1e6:.3f} us (HBM {pw_mem_s * 1e6:.3f} us); recurrent GEMM: {rec.notes}"),
    )


def _vector_cost(op: Op, ctx: LoweringContext, *, flops: float | None = None, rule: str = "vpu",
                 notes: str = "") -> KernelCost:
    dev = ctx.device
    f = float(op.flops) if flops is None else flops
    moved = float(op.bytes_read + op.bytes_written)
    compute_s = f / _vector_rate(dev) if f else 0.0
    memory_s = moved / _hbm(dev) if moved else 0.0
    bound = "memory" if memory_s >= compute_s else "vector"
    text = f"vector unit {compute_s * 1e6:.3f} us vs HBM {memory_s * 1e6:.3f} us; bound {bound}"
    return KernelCost(compute_s=compute_s, memory_s=memory_s, latency_s=0.0, dram_bytes=moved, l2_bytes=0.0,
                      smem_bytes=moved, matrix_flops=0.0, vector_flops=f, rule=rule,
                      notes=f"{notes}; {text}" if notes else text)


@register_rule("tpu", *sorted(VECTOR_KINDS))
def _tpu_vector(op: Op, ctx: LoweringContext) -> KernelCost:
    return _vector_cost(op, ctx)


@register_rule("tpu", *sorted(GATHER_KINDS))
def _tpu_gather(op: Op, ctx: LoweringContext) -> KernelCost:
    if op.kind in ("embedding", "embedding_bwd") and getattr(ctx.options, "embedding_onehot", False):
        return _onehot_embedding(op, ctx)
    return _vector_cost(op, ctx, rule="gather", notes="row gather/scatter through HBM (SparseCores not modelled)")


def _onehot_embedding(op: Op, ctx: LoweringContext) -> KernelCost:
    """A token embedding as MaxText runs it with ``use_iota_embed: True`` (``EvalOptions.embedding_onehot``):
    ``one_hot = inputs[..., None] == lax.iota(vocab)`` cast to the compute dtype, then ``jnp.dot(one_hot,
    embedding)`` (MaxText ``layers/embeddings.py``, ``Embed.__call__``): a (tokens, d_model, vocab) GEMM on the
    MXUs. Its backward is the table's gradient ``one_hot^T @ grad``, a (vocab, d_model, tokens) GEMM; the
    one-hot operand has no gradient (it comes from integer ids). The comparison producing the one-hot operand
    is priced as that operand's HBM traffic in the GEMM, not as a separate pass."""
    if op.kind == "embedding":
        ids, table = op.inputs[0], op.inputs[1]
        vocab, d = table.shape
        m, n, k, dt = ids.numel, d, vocab, table.dtype
        notes = f"one-hot embedding: ({ids.numel} tokens x {vocab} vocab) @ ({vocab} x {d}) on the arrays"
    else:
        vocab, d = op.attrs["table_shape"]
        tokens = op.inputs[0].numel // d
        m, n, k, dt = vocab, d, tokens, op.inputs[0].dtype
        notes = f"one-hot embedding gradient: ({vocab} x {tokens} tokens) @ ({tokens} x {d}) on the arrays"
    return _contraction(ctx, 1, m, n, k, dtype=dt.value, in_bytes=element_bytes(dt),
                        out_bytes=element_bytes(op.outputs[0].dtype), rule="mxu-onehot-embedding", notes=notes, op=op)


@register_rule("tpu", "moe_router")
def _tpu_router(op: Op, ctx: LoweringContext) -> KernelCost:
    x, w = op.inputs
    t, d = x.shape
    e = w.shape[1]
    rest = max(0.0, float(op.flops) - 2.0 * t * d * e)
    g = _contraction(ctx, 1, t, e, d, dtype=op.dtype.value, in_bytes=element_bytes(x.dtype), out_bytes=4.0,
                     rule="mxu-router", vector_flops=rest, dram_bytes=float(op.bytes_read + op.bytes_written),
                     notes="softmax and top-k on the vector unit", op=op)
    return g


@register_rule("tpu", "moe_router_bwd")
def _tpu_router_bwd(op: Op, ctx: LoweringContext) -> KernelCost:
    """The router's backward: the gate is a dense layer (MaxText ``GateLogit``, a ``dot_general`` on the MXU),
    so its gradient is two matmuls, ``dx`` (T x D x E) and ``dW`` (D x E x T), on the MXU; the softmax and
    top-k backward on the vector unit."""
    x, w = op.inputs[0], op.inputs[1]
    t, d = x.shape
    e = w.shape[1]
    ib = element_bytes(x.dtype)
    rest = max(0.0, float(op.flops) - 4.0 * t * d * e)
    gx = _contraction(ctx, 1, t, d, e, dtype=op.dtype.value, in_bytes=ib, out_bytes=ib, rule="mxu-router-bwd",
                      vector_flops=rest, op=op)
    gw = _contraction(ctx, 1, d, e, t, dtype=op.dtype.value, in_bytes=ib, out_bytes=4.0, rule="mxu-router-bwd",
                      op=op)
    return dataclasses.replace(gx, compute_s=gx.compute_s + gw.compute_s, memory_s=gx.memory_s + gw.memory_s,
                               dram_bytes=gx.dram_bytes + gw.dram_bytes, smem_bytes=gx.smem_bytes + gw.smem_bytes,
                               matrix_flops=gx.matrix_flops + gw.matrix_flops, kernels=2,
                               notes="dx and dW matmuls on the MXU; softmax and top-k backward on the vector unit")


@register_rule("tpu", *sorted(VIEW_KINDS))
def _tpu_view(op: Op, ctx: LoweringContext) -> KernelCost:
    return zero_cost("view")


@register_rule("tpu", *sorted(COLLECTIVE_KINDS))
def _tpu_collective(op: Op, ctx: LoweringContext) -> KernelCost:
    sub = _slice_group_context(op, ctx)
    return collective_cost(op, sub, ("ici", "peer", "fabric"), _tpu_roofline,
                           lambda n, link: f"{n} chips in a ring over {link.kind} ({link.name}); "
                                           "raw link bandwidth, per-hop latency per step")


@functools.lru_cache(maxsize=64)
def slice_topology(device_name: str, chips: int) -> tuple[tuple[int, ...], tuple[bool, ...]] | None:
    """(torus shape, wraparound per axis) of a slice of ``chips`` chips of the TPU generation whose
    catalog device is ``device_name`` (None: not a TPU generation or no valid slice of that size).

    Shapes are the catalog's (:func:`hwmodels.catalog.parse_tpu_slice`). Wraparounds follow the
    scaling book (tpus.md @ 0819a7d): on every axis of a 3D slice whose axes are multiples of a
    4x4x4 cube, on an axis of length 16 of a 2D (v5e/v6e) slice, nowhere else.
    """
    from hwmodels.catalog import TPU_GENERATIONS, parse_tpu_slice
    from hwmodels.spec import SpecError as _SpecError

    gen = next((g for g in TPU_GENERATIONS.values() if g.device == device_name), None)
    if gen is None or chips < 1:
        return None
    try:
        sl = parse_tpu_slice(f"tpu-{gen.name}-{chips * gen.cores_per_chip}")
    except _SpecError:
        return None
    shape = tuple(int(a) for a in sl.topology)
    if gen.dims == 3:
        wrap = tuple(all(a % 4 == 0 for a in shape) for _ in shape)
    else:
        wrap = tuple(a == 16 for a in shape)
    return shape, wrap


def _slice_group_context(op: Op, ctx: LoweringContext) -> LoweringContext:
    """``ctx`` with its ICI torus narrowed to the axes ``op``'s group spans in the system's slice
    (:func:`hwmodels.collectives.torus_group_system`); unchanged off a TPU slice's torus."""
    csys = ctx.collectives
    if csys is None or getattr(csys.intra, "topology", "") != "torus":
        return ctx
    topo = slice_topology(ctx.device.name, ctx.group_size // max(1, ctx.nodes))
    n = int(op.attrs.get("group_size", op.attrs.get("devices", 1)) or 1)
    if topo is None or n <= 1:
        return ctx
    from dataclasses import replace

    from hwmodels.collectives import torus_group_system

    narrowed = torus_group_system(csys, topo[0], n, int(op.attrs.get("stride", 1)), topo[1])
    return ctx if narrowed is csys else replace(ctx, collectives=narrowed)


def _tpu_roofline(op: Op, ctx: LoweringContext) -> KernelCost:
    """Fallback: the op's FLOPs at the matrix (contractions) or vector rate against its bytes at HBM rate."""
    dev = ctx.device
    moved = float(op.bytes_read + op.bytes_written)
    flops = float(op.flops)
    matrix = op.macs > 0
    if matrix:
        rate, used, _ = tpu_rate(dev, op.dtype.value, op)
        compute_s = flops / (rate * dev.efficiency.tensor_peak_fraction)
    else:
        used = ""
        compute_s = flops / _vector_rate(dev) if flops else 0.0
    return KernelCost(compute_s=compute_s, memory_s=moved / _hbm(dev) if moved else 0.0, latency_s=0.0,
                      dram_bytes=moved, l2_bytes=0.0, smem_bytes=0.0, matrix_flops=flops if matrix else 0.0,
                      vector_flops=0.0 if matrix else flops, rule="roofline-fallback", matrix_dtype=used,
                      fallback=True, notes=f"no TPU rule for kind {op.kind!r}; roofline at the "
                      f"{'matrix' if matrix else 'vector'} rate and HBM bandwidth")


set_fallback("tpu", _tpu_roofline)


# ------------------------------------------------------------------------------------------------
# fixed-function engines: the op kinds a device can run


@functools.lru_cache(maxsize=64)
def _checked_support(dev_name: str, source_file: str, kinds: tuple[str, ...], ew: tuple[str, ...]) -> None:
    """Refuse an ``[op_support]`` table naming op kinds or elementwise ops the IR does not have (a typo
    would silently refuse a supported op); checked once per table."""
    from nodeperf.suggest import did_you_mean

    where = f"{source_file or dev_name}: op_support"
    known = set(known_op_kinds())
    for k in kinds:
        if k not in known:
            raise SpecError(f"{where}.kinds: unknown op kind; got {k!r}; expected an op kind of the workload IR"
                            f"{did_you_mean(k, sorted(known))}")
    for e in ew:
        if e not in ELEMENTWISE_FLOPS:
            raise SpecError(f"{where}.elementwise_ops: unknown elementwise op; got {e!r}; expected one of the "
                            f"IR's elementwise ops{did_you_mean(e, sorted(ELEMENTWISE_FLOPS))}")


def unsupported_reason(op: Op, dev: DeviceSpec) -> str | None:
    """Why ``dev`` cannot run ``op`` (None when it can), from the device's ``[op_support]`` table."""
    sup = dev.op_support
    if sup is None:
        return None
    _checked_support(dev.name, dev.source_file, sup.kinds, sup.elementwise_ops)
    if op.kind not in sup.kinds:
        return f"op kind {op.kind!r} is not among the kinds the device runs ({', '.join(sup.kinds)})"
    if op.kind in ("elementwise", "elementwise_bwd") and sup.elementwise_ops:
        name = op.attrs.get("op")
        if name not in sup.elementwise_ops:
            return (f"elementwise op {name!r} is not among the elementwise ops the device runs "
                    f"({', '.join(sup.elementwise_ops)})")
    if op.kind == "matmul" and sup.weight_operand_matmul_only:
        b = op.inputs[1] if len(op.inputs) > 1 else None
        if b is None or b.role is not Role.WEIGHT:
            return ("matmul of two activations (the device runs matmul only as a fully connected layer with a "
                    "constant weight operand)")
    return None


def check_op_support(op: Op, dev: DeviceSpec) -> None:
    """Raise :class:`~workloads.ir.UnsupportedOpError` when ``dev`` cannot run ``op``.

    The message names the op, its kind and the device, why, and where the device's list comes from:
    ``op 'layers.0.attn' (attention): not supported on device 'orin-dla': op kind 'attention' is not
    among the kinds the device runs (...); expected an op the device lists in op_support (source: ...)``.
    """
    why = unsupported_reason(op, dev)
    if why is not None:
        src = dev.op_support.source if dev.op_support is not None else ""
        short = src if len(src) <= 160 else src[:157] + "..."
        raise UnsupportedOpError(f"op {op.name!r} ({op.kind}): not supported on device {dev.name!r}: {why}; "
                                 f"expected an op the device lists in op_support of {dev.source_file or dev.name} "
                                 f"(source: {short}); place it on another device")


def _supported_only(fn: Rule) -> Rule:
    """``fn`` behind :func:`check_op_support` (the wrapper keeps the rule's name for reports)."""

    @functools.wraps(fn)
    def rule(op: Op, ctx: LoweringContext) -> KernelCost:
        check_op_support(op, ctx.device)
        return fn(op, ctx)

    return rule


def _guard(rs: RuleSet) -> None:
    """Wrap every TPU rule and the fallback with :func:`check_op_support` (once per rule function)."""
    wrapped: dict[int, Rule] = {}
    for kind, fn in list(rs.rules.items()):
        if id(fn) not in wrapped:
            wrapped[id(fn)] = _supported_only(fn)
        rs.rules[kind] = wrapped[id(fn)]
    if rs.fallback is not None:
        rs.fallback = _supported_only(rs.fallback)


_guard(ruleset("tpu"))
