"""Analytical GPU kernel models (tiled GEMM, fused attention, streaming kernels) over spec numbers.

Everything here is a pure function of numbers: problem sizes, a kernel's tile configuration and
the hardware parameters collected in :class:`GpuParams`. Hardware parameters may be numpy arrays
of any (common) shape; results broadcast over them, so a sweep evaluates thousands of hardware
variants of one kernel in a single call. Graph ops are mapped onto these functions by
``simulator.lowering``; nothing here knows about graphs.

Model summary
-------------
*GEMM* (also batched GEMM and implicit-GEMM convolution). For every candidate CTA tile of the
architecture (the tile shapes CUTLASS instantiates and cuBLAS selects among) and every split-K
factor: occupancy from registers, shared memory, threads and the CTA limit; CTAs spread over SMs
in waves, the busiest SM processing ``ceil(ctas / sms)`` CTAs (wave quantization, partial last
wave included); per CTA, tensor-core time of the padded tile versus the time to move its operand
panels from L2 into the SM (with thread-block-cluster multicast on Hopper and later), the time to feed the tensor cores from shared memory (warp tiles), and
device-wide DRAM time with L2 reuse (compulsory traffic when the operands fit in L2, else the unique
panels of each wave; the A panels of an implicit-GEMM convolution cost the input elements they touch,
halo included, not their im2col size: :class:`ImplicitOperand`). The kernel takes the largest of these plus one DRAM latency for the pipeline
prologue and the pipeline's two edges, exposed once per kernel for a persistent (warp-specialised)
kernel and once per round of co-resident CTAs for one that launches a CTA per tile
(:func:`gemm_edge_rounds`): before any math the first K-slice's operand panels must arrive, after the
last load one slice of math remains (so ``N`` slices take ``N * max(load, math) + min(load, math)``),
and the C tile's store reaches L2 (its bytes at the SM's share of the L2 bandwidth, plus one L2 latency). Split-K adds its serial fixup: the CTAs of
one output tile add their fp32 partials in turn, each after the previous one's flag, so
``split - 1`` hand-offs of two L2 latencies plus reading and writing the fp32 tile; every split CTA
also moves its partial through L2. All of these are catalog numbers (L2 bandwidth and latency,
tile sizes), no fitted factor. Each CTA's K loop is also a chain of dependent loads: a shared-memory stage is refilled
only after the math that read it, so with ``stages`` buffers and a load latency ``L`` every group
of ``stages`` iterations waits ``max(0, L - (stages - 1) * t_iter)`` on top of its math
(:func:`pipeline_stall_s`); libraries size ``stages`` so this is zero for large tiles, and it
shows only for small-tile, shallow-pipeline kernels. The candidate with the
lowest time is chosen, as a heuristic library does. Each term is a function of its own over the
candidates' :class:`GemmLaunch` (:func:`gemm_main_loop_s`, :func:`gemm_smem_feed_s`,
:func:`gemm_l2_panels_s`, :func:`gemm_dram_bytes`, :func:`gemm_pipeline_edges_s`,
:func:`gemm_split_k_fixup_s`, :func:`gemm_k_loop_stall_s`); :func:`gemm` composes them and names
the largest in ``bound_term`` (:data:`GEMM_TERMS`).

*Fused attention* (flash-attention style). Query blocks are CTAs; per query-key pair the SM spends
tensor-core time on the two (forward) or five (backward) contractions and vector time on the online
softmax (one special-function exp and a few FP32 ALU operations per score). Two kernel designs:
FlashAttention-2 style (warp-level ``mma.sync``, at ``warp_mma_scale`` of the native rate on Hopper
and Blackwell; softmax serialised with the matmuls) and warp-specialised designs (FlashAttention-3/4,
cuDNN: native asynchronous MMA, softmax overlapped so a pair costs ``max`` of the two; FlashAttention-3's
backward on Hopper serialises them, :data:`FLASH3_SOFTMAX_OVERLAP`). K and V
panels are read once per query block from L2 (shared by a CTA pair in Blackwell's 2-CTA mode);
the backward streams the Q and dO panels past each key block's CTA and sends every fp32 dQ
partial to L2 once (the add is done there: atomics or TMA reduce-adds); DRAM sees Q, K, V, O once,
and the backward's preprocess and dQ-convert kernels (:func:`attention_bwd_passes`) run around it.
The terms are :func:`attention_grid` (CTAs and their pairs), :func:`attention_matmul_s`,
:func:`attention_softmax_s`, :func:`attention_compute_s` and :func:`attention_traffic_bytes`;
:func:`attention` composes them and names the largest in ``bound_term`` (:data:`ATTENTION_TERMS`).

Operand panels of GEMM and attention kernels move as bulk asynchronous tile copies (``cp.async``
on Ampere/Ada, TMA on Hopper/Blackwell) and reach ``efficiency.l2_tile_bandwidth_fraction`` of
the L2 figure; streaming kernels' plain loads reach ``efficiency.l2_bandwidth_fraction``. A GEMM's CTAs
each take their SM's even share of that tile rate in a full wave; in a last wave that leaves SMs idle they
take up to ``efficiency.l2_tile_sm_port_ratio`` times it, within the whole tile rate
(:func:`gemm_l2_panels_s`); so do the reads that only some SMs make at once, a split-K hand-off's read and a
grid's first K-slice (:func:`gemm_serial_l2_s_per_byte`; writes stay at the share). Attention's L2 term is its
whole traffic at the tile rate.

*Streaming kernels* (elementwise, norms, softmax, reductions, gathers, copies): bytes over an
achieved bandwidth that follows ``B * s / (s + s_half)`` in the bytes moved ``s`` (the launch and
tail of a small kernel), from L2 when the working set is resident there, else from DRAM; compute on
the FP32 vector units. :func:`roofline` is the generic fallback.

Every empirical factor (achieved fractions of peak, the half-bandwidth size) comes from the
device's :class:`~hwmodels.spec.EfficiencySpec`; no factor is a literal here.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from hwmodels.spec import DeviceSpec, SpecError

__all__ = [
    "TileCandidate",
    "tile_family",
    "tile_candidates",
    "GpuParams",
    "gpu_params",
    "simt_gemm_fraction",
    "KernelEstimate",
    "GemmEstimate",
    "masked_mha_decode",
    "MASKED_MHA_SOURCE",
    "GemmPower",
    "ImplicitOperand",
    "GemmLaunch",
    "gemm_launch",
    "gemm_occupancy",
    "gemm_main_loop_s",
    "gemm_smem_bytes_per_cta",
    "gemm_smem_return_bytes_per_cta",
    "gemm_smem_feed_s",
    "SIMT_WARP_LANES_TALL",
    "SMEM_RETURN_BYTES_PER_LANE_CLK",
    "gemm_l2_bytes_per_cta",
    "gemm_l2_panels_s",
    "gemm_l2_port_s_per_byte",
    "gemm_dram_bytes",
    "gemm_split_k_fixup_s",
    "gemm_busy_l2_s_per_byte",
    "gemm_serial_l2_s_per_byte",
    "gemm_edge_rounds",
    "gemm_pipeline_edges_s",
    "gemm_k_loop_stall_s",
    "GEMM_TERMS",
    "gemm",
    "AttentionGrid",
    "attention_grid",
    "attention_matmul_s",
    "attention_softmax_s",
    "attention_compute_s",
    "attention_traffic_bytes",
    "attention_bwd_passes",
    "attention_edges_s",
    "FLASH2_TILES_SOURCE",
    "FLASH2_FWD_KV_BLOCK",
    "FLASH2_BWD_Q_BLOCK",
    "FLASH2_HEAD_DIMS",
    "Flash2Tile",
    "flash2_tile",
    "FLASH2_PTXAS_REGISTERS",
    "FLASH2_COMPILED_SOURCE",
    "flash2_rescale_ops_per_score",
    "FLASH2_ISA_REGISTERS",
    "FLASH2_ELEMENT_BYTES",
    "flash2_ctas_per_sm",
    "FLASH2_EDGE_FAMILIES",
    "ATTENTION_TERMS",
    "attention",
    "streaming",
    "roofline",
    "achieved_bandwidth",
    "SPLIT_K_FACTORS",
    "SOFTMAX_SFU_OPS_PER_SCORE",
    "ELEMENTWISE_INSTRUCTIONS",
    "ELEMENTWISE_BWD_INSTRUCTIONS",
    "elementwise_work",
    "SOFTMAX_ALU_OPS_PER_SCORE",
    "DQ_ACCUM_BYTES",
    "FLASH2_LIBRARY_FRACTION",
    "ATTENTION_KERNELS",
    "BLACKWELL_CTA_PAIR",
    "DECODE_MIN_KEYS_PER_SPLIT",
    "MIN_PIPELINE_DEPTH",
    "pipeline_stall_s",
    "PRUNE_MIN_VARIANTS",
    "GEMM_BLOCK_VARIANTS",
    "BOUND_SLACK",
    "BOUNDED_MAX_PAIRS",
    "BOUNDED_MIN_FLOP_PER_BYTE",
]

ArrayLike = Any  # float | np.ndarray

#: Split-K factors a library considers for skinny shapes (cuBLAS/CUTLASS split-K "slices").
SPLIT_K_FACTORS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)

# Online-softmax work per query-key score of a flash-attention tile (FlashAttention-2 algorithm,
# Dao 2023, Algorithm 1): one exp2 on the special-function unit; scale-and-max, subtract (fused
# multiply-add), row-sum and the convert to 16 bits on the FP32 ALUs. Backward (Algorithm 2):
# recompute P = exp(S - L) (one exp2, one FMA), dS = P * (dP - D) (two), two converts.
SOFTMAX_SFU_OPS_PER_SCORE = {"fwd": 1.0, "bwd": 1.0}
SOFTMAX_ALU_OPS_PER_SCORE = {"fwd": 4.0, "bwd": 5.0}
#: Passes of a warp-specialised (``"flash3"``) attention kernel whose softmax overlaps the matmuls of
#: another tile. FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608) describes both overlaps for the
#: forward pass only: pingpong scheduling of two warpgroups (section 3.1) and intra-warpgroup
#: overlapping of softmax with the GEMMs (section 3.2); its backward (appendix B) is warp-specialised
#: for the loads and the dQ accumulation, and its recompute of P and its dS = P * (dP - D) sit between
#: dependent GEMMs (S -> P -> dV; dP -> dS -> dK, dQ), so a backward pair pays matmuls plus softmax.
#: The paper's figures put the backward below the forward at head dim 128 on an H100 SXM5
#: (backward 316 / 424 / 501 / 542 / 559 / 561 TFLOP/s at sequence length 512 ... 16k, non-causal).
FLASH3_SOFTMAX_OVERLAP = frozenset({"fwd"})  # documentation of the default of attention(bwd_softmax_overlap=False)
#: Tile families whose ``"flash3"`` forward does not hide the online softmax's exponential behind the
#: tensor cores: a pair costs the contractions at the instruction rate plus the MUFU ``exp2``, or the
#: contractions at the library fraction, whichever is longer (:func:`attention_pair_s`). FlashAttention-3
#: (Shah et al. 2024, arXiv 2407.08608, section 3.1) overlaps them by pingpong scheduling "though in
#: practice the pingpong scheduling is not as clean as depicted"; its Fig. 5 (H100 80GB SXM5, BF16/FP16,
#: 16k tokens, non-causal, bar labels of ``assets/flash3_fp16_fwd.png`` in Dao-AILab/flash-attention)
#: gives 497 / 648 / 756 TFLOP/s at head dim 64 / 128 / 256 against 495 / 659 / 772 from this sum
#: (989 TFLOP/s dense, 16 ``exp2`` per SM per clock; no parameter chosen), where a full overlap gives
#: 675 / 772 / 772: the exponential's share of a pair doubles at head dim 64 (section 3.1: "exponential
#: can take 50% of the cycle compared to matmul" at 128). Blackwell's FlashAttention-4 computes part of
#: its exponentials with a polynomial on the FMA units (Zadouri et al., arXiv 2603.05451), so it is not
#: listed; the ``"flash3"`` backward on Hopper already serialises the whole softmax
#: (:data:`FLASH3_SOFTMAX_OVERLAP`).
FLASH3_EXP_EXPOSED_FAMILIES = frozenset({"sm90"})
#: Passes of a FlashAttention-2 style (``"flash2"``) kernel whose ``mma.sync`` contractions are charged
#: the GEMM library's tensor fraction (``efficiency.tensor_peak_fraction``, a cuBLAS/DeepGEMM figure) on
#: top of the instruction rate. Both are, although the papers' charts say the forward is not: at head
#: dim 128 its measured rate is the ``mma.sync`` instruction rate plus the serial softmax on both GPUs
#: measured. A100 80GB SXM4 (Dao 2023, arXiv 2307.08691, Fig. 5(b), non-causal, 16k tokens): 200 / 224 /
#: 222 / 225 TFLOP/s at sequence 2k ... 16k against 207 without the fraction (``2 * 256`` FLOP per pair
#: at 2048 FLOP/clk/SM plus one MUFU exp2 and four FP32 instructions per score) and 188 with it (0.869);
#: H100 80GB SXM5 (Shah et al. 2024, arXiv 2407.08608, Fig. 5(c)): 362 / 368 / 370 / 370 against 351
#: without and 291 with it (0.78). Overlapping the softmax (``max``) with the fraction instead gives 271
#: on the A100 (+20%). So the forward is not charged the fraction (the measured rate of the mechanism the
#: kernel uses), although that makes the training group worse (the H100 torchtitan rows, already priced
#: fast, get faster: the costs the slow attention stood in for are listed in docs/accuracy.md,
#: "FlashAttention-2 at the mma.sync rate", the causal launch-order tail first). The backward needs it: at the instruction rate it would be priced at
#: 228-250 (A100) and 375-409 (H100) TFLOP/s against 187-196 (Dao 2023, Fig. 6(b)) and 291-322 (Shah et
#: al. 2024, Fig. 6(b)); with it 205-223 and 307-330. There it stands for backward costs the model does
#: not carry (five contractions whose operands come from shared memory through ``ldmatrix``, P and dS
#: through shared memory, dQ by atomics), not for a GEMM library's.
FLASH2_LIBRARY_FRACTION = frozenset({"bwd"})
#: Bytes per element of the fp32 dQ accumulator a backward CTA sends to L2 for every partial dQ.
DQ_ACCUM_BYTES = 4.0

#: Fused-attention kernel designs :func:`attention` models (see its ``kernel`` parameter).
ATTENTION_KERNELS: tuple[str, ...] = ("flash2", "flash3")
#: The fused attention PyTorch runs for fp32 inputs: ``scaled_dot_product_attention`` tries FlashAttention, then the
#: memory-efficient kernel, then the math path (pytorch/pytorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
#: ``select_sdp_backend``; the cuDNN backend of later releases among the first); FlashAttention and
#: cuDNN accept fp16/bf16 only (``check_tensor_dtype`` with ``flash_dtypes = {kHalf, kBFloat16}``), the
#: memory-efficient kernel also ``kFloat`` (``use_mem_efficient_attention``), so fp32 takes the memory-efficient
#: kernel, and Inductor lowers the SDPA call to the same aten op. That kernel is xFormers' CUTLASS one
#: (aten/src/ATen/native/transformers/cuda/mem_eff_attention/): ``gemm_kernel_utils.h`` ``DefaultGemmType``
#: gives ``float`` on compute capability >= 8.0 ``OpClassTensorOp``, instruction 16x8x8, ``OpMultiplyAddFastF32``
#: (CUTLASS's 3xTF32, whatever ``allow_tf32`` says), and the SIMT FFMA fallback (``OpClassSimt``) below 8.0;
#: ``kernels/cutlassF.h`` ``dispatch_cutlassF_f32_sm80`` instantiates the forward for fp32 as
#: ``AttentionKernel<float, Sm80, true, 64, 64, 64>``, ``<..., 64, 128, 128>``, ``<..., 32, 128, 65536>``
#: (kQueriesPerBlock, kKeysPerBlock, kMaxK; the launch takes the first whose kMaxK holds the head dim), and
#: ``kernels/cutlassB.h`` ``dispatch_cutlassB_f32_sm80`` the backward with 64 keys a block (kBlockSizeJ) in every
#: fp32 instantiation (64x64 k32/k64/k128/k65536, 128x64 k128/k65536).
MEM_EFFICIENT_SOURCE = (
    "pytorch/pytorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (check_tensor_dtype: flash fp16/bf16 only; "
    "use_mem_efficient_attention: also float), cuda/mem_eff_attention/gemm_kernel_utils.h DefaultGemmType (float, "
    "sm80+: OpClassTensorOp, OpMultiplyAddFastF32; else OpClassSimt), kernels/cutlassF.h dispatch_cutlassF_f32_sm80, "
    "kernels/cutlassB.h dispatch_cutlassB_f32_sm80")
#: TF32 MMAs per fp32 product under CUTLASS's ``OpMultiplyAddFastF32`` (3xTF32: each operand split into a TF32
#: ``big`` and ``small`` part, ``big*big + big*small + small*big``; NVIDIA/cutlass
#: include/cutlass/gemm/warp/mma_tensor_op_fast_f32.h, examples/27_ampere_3xtf32_fast_accurate_tensorop_gemm).
FAST_F32_MMAS = 3
#: The memory-efficient kernel's fp32 forward: query rows per CTA (kQueriesPerBlock) by the largest head dim each
#: instantiation holds (kMaxK), in dispatch order (:data:`MEM_EFFICIENT_SOURCE`, ``dispatch_cutlassF_f32_sm80``).
MEM_EFF_F32_FWD_QUERIES: tuple[tuple[int, int], ...] = ((64, 64), (128, 64), (65536, 32))
#: The memory-efficient kernel's fp32 backward: keys per CTA (kBlockSizeJ), the same in every fp32 instantiation
#: (``dispatch_cutlassB_f32_sm80``).
MEM_EFF_F32_BWD_KEYS = 64
#: Compute capability from which the fp32 kernel's contractions are 3xTF32 tensor-core MMAs (``DefaultGemmType``).
MEM_EFF_TENSOR_OP_MIN_CC = 80


def mem_efficient_f32_block(head_dim: int, *, backward: bool, batch_heads: int = 0, seq_kv: int = 0) -> int:
    """Rows a CTA of PyTorch's memory-efficient fp32 attention owns: the forward's queries per block of the first
    instantiation whose kMaxK holds ``head_dim`` (:data:`MEM_EFF_F32_FWD_QUERIES`); the backward's keys, one block of
    :data:`MEM_EFF_F32_BWD_KEYS` a CTA (``num_splits_key = ceil(num_keys / kBlockSizeJ)``), or every key of its head
    when :func:`mem_efficient_bwd_key_splits` keeps one split (``batch_heads`` sequences times heads)."""
    if backward:
        return MEM_EFF_F32_BWD_KEYS if mem_efficient_bwd_key_splits(batch_heads, seq_kv) > 1 else max(1, seq_kv)
    return next(rows for max_k, rows in MEM_EFF_F32_FWD_QUERIES if head_dim <= max_k)


#: Grid size (sequences times heads) from which the memory-efficient backward keeps one key split for short key
#: sequences, and the key blocks such a sequence holds at most (``_efficient_attention_backward`` in
#: aten/src/ATen/native/transformers/cuda/attention_backward.cu, "Keys splitting heuristic":
#: ``parallelism_without_split_key >= 256 && p.num_keys <= 2 * Kernel::kBlockSizeJ``).
MEM_EFF_BWD_NO_SPLIT_GRID = 256
MEM_EFF_BWD_NO_SPLIT_KEY_BLOCKS = 2


def mem_efficient_bwd_key_splits(batch_heads: int, seq_kv: int) -> int:
    """Key splits of the memory-efficient fp32 backward (``p.num_splits_key``, attention_backward.cu): one CTA per
    block of :data:`MEM_EFF_F32_BWD_KEYS` keys, or 1 where the grid is already large and the keys few
    (:data:`MEM_EFF_BWD_NO_SPLIT_GRID`, :data:`MEM_EFF_BWD_NO_SPLIT_KEY_BLOCKS`)."""
    if batch_heads >= MEM_EFF_BWD_NO_SPLIT_GRID and seq_kv <= MEM_EFF_BWD_NO_SPLIT_KEY_BLOCKS * MEM_EFF_F32_BWD_KEYS:
        return 1
    return max(1, -(-seq_kv // MEM_EFF_F32_BWD_KEYS))


def mem_efficient_f32_bwd_passes(batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int, head_dim_v: int,
                                 p: GpuParams) -> tuple[KernelEstimate, int]:
    """The kernels PyTorch launches around the memory-efficient fp32 backward: (their cost, how many).

    ``_efficient_attention_backward`` (attention_backward.cu) computes the per-row ``delta`` outside the kernel
    for fp32 (kernel_backward.h: ``kKernelComputesDelta = kIsHalf && ...``) as ``(grad_out.to(kFloat) *
    out.to(kFloat)).sum(-1).transpose(-2, -1).contiguous()``: a multiply writing a full fp32 product (the ``.to``
    are no-ops on fp32), its row sum, and a copy of the sums; with more than one key split
    (:func:`mem_efficient_bwd_key_splits`, ``should_zero_workspace``) it clears the fp32 dQ workspace
    (``workspace.zero_()``, about one float a dQ element). The kernel writes dQ itself: no postprocess pass."""
    rows = batch * heads * seq_q
    prod = rows * head_dim_v * 4.0
    passes = [streaming(2 * prod, prod, float(rows * head_dim_v), p),
              streaming(prod, rows * 4.0, float(rows * head_dim_v), p),
              streaming(rows * 4.0, rows * 4.0, 0.0, p)]
    if mem_efficient_bwd_key_splits(batch * heads, seq_kv) > 1:
        passes.append(streaming(0.0, rows * head_dim * 4.0, 0.0, p))
    t = _scalar_or(sum(_a(e.time_s) for e in passes))
    return KernelEstimate(time_s=t, compute_s=_scalar_or(sum(_a(e.compute_s) for e in passes)),
                          memory_s=_scalar_or(sum(_a(e.memory_s) for e in passes)), latency_s=t,
                          dram_bytes=_scalar_or(sum(_a(e.dram_bytes) for e in passes)),
                          l2_bytes=_scalar_or(sum(_a(e.l2_bytes) for e in passes)), smem_bytes=0.0,
                          details=(("vector_flops", float(2 * rows * head_dim_v)),)), len(passes)


def mem_efficient_f32_params(p_tf32: GpuParams, p_simt: GpuParams, compute_capability: int) -> GpuParams:
    """The contraction rate of PyTorch's memory-efficient fp32 attention (:data:`MEM_EFFICIENT_SOURCE`): from
    compute capability 8.0 (:data:`MEM_EFF_TENSOR_OP_MIN_CC`) warp-level TF32 ``mma.sync`` (``p_tf32``, the device's
    TF32 rate with its ``warp_mma_scale``), each fp32 product :data:`FAST_F32_MMAS` of them; below it SIMT FFMA
    (``p_simt``, the fp32 rate at the SGEMM fraction, no tensor-core scale)."""
    if compute_capability >= MEM_EFF_TENSOR_OP_MIN_CC:
        return dataclasses.replace(p_tf32, matrix_flops_per_s=_a(p_tf32.matrix_flops_per_s) / FAST_F32_MMAS)
    return dataclasses.replace(p_simt, warp_mma_scale=1.0)


#: CTAs of one Blackwell 2-CTA (paired) MMA: the pair shares its operand panel loads. FlashAttention-4
#: uses this mode "to reduce shared memory traffic and atomic adds in the backward" (Zadouri et al.,
#: arXiv 2603.05451, abstract).
BLACKWELL_CTA_PAIR = 2
#: Where the FlashAttention-2 tile sizes below are read from: ``csrc/flash_attn/src/flash_fwd_launch_template.h``
#: and ``flash_bwd_launch_template.h`` of Dao-AILab/flash-attention v2.7.4.post1 (``run_mha_fwd_hdim*`` and
#: ``run_mha_bwd_hdim*``, every branch: :func:`flash2_tile`), and the kernels' prologue and epilogue from ``flash_fwd_kernel.h``
#: (``compute_attn_1rowblock``: Q and the first K block are copied in and waited on before the first
#: QK^T; O is rescaled, written to shared memory and copied out after the last PV) and ``flash_bwd_kernel.h``
#: (``compute_dq_dk_dv_1colblock``: K, V and the first Q and dO blocks in; dK and dV out at the end).
FLASH2_TILES_SOURCE = ("Dao-AILab/flash-attention v2.7.4.post1 csrc/flash_attn/src/flash_fwd_launch_template.h "
                       "(Flash_fwd_kernel_traits<Headdim, kBlockM, kBlockN, ...>), flash_bwd_launch_template.h "
                       "(Flash_bwd_kernel_traits<Headdim, kBlockM, kBlockN, ...>), flash_fwd_kernel.h, flash_bwd_kernel.h")
#: FlashAttention-2 forward: keys per K block (``kBlockN``) by the head dim the kernel is instantiated for
#: (the smallest one at least the head dim), without dropout on compute capability 8.0, 9.0 and later (not 8.x
#: with x > 0) with the shared memory of an A100 or H100; :func:`flash2_tile` gives every branch.
FLASH2_FWD_KV_BLOCK = {32: 128, 64: 128, 96: 64, 128: 64, 160: 32, 192: 64, 256: 64}
#: FlashAttention-2 backward: query rows per Q/dO block (``kBlockM``) by head dim with at least 144 KB of shared
#: memory per block; each CTA owns a block of keys (``kBlockN``, :func:`flash2_tile`).
FLASH2_BWD_Q_BLOCK = {32: 128, 64: 128, 96: 64, 128: 64, 160: 64, 192: 64, 256: 64}
#: Head dims FlashAttention-2 instantiates its kernels for (``HEADDIM_SWITCH`` in ``csrc/flash_attn/src/
#: static_switch.h``, v2.7.4.post1): a head dim runs the smallest one at least it.
FLASH2_HEAD_DIMS = (32, 64, 96, 128, 160, 192, 256)
#: Tile families whose ``"flash2"`` launches are FlashAttention-2's CUDA kernels with the tiles above, so each
#: CTA's edges are priced (:func:`attention_edges_s`): sm80 and later (FlashAttention-2 runs on Ampere, Ada,
#: Hopper and, compiled for sm_100 from v2.7.4's CUDA 12.8 builds, Blackwell), with the tiles of :func:`flash2_tile`
#: (compute capability 8.1-8.9 takes its own, ``is_sm8x``: the A10, L4, L40S and Orin parts of this catalog,
#: 8.6-8.9). Not Volta/Turing (FlashAttention-2 does not build for them; their rows run other kernels) nor CDNA
#: (Composable Kernel tiles): not priced there.
FLASH2_EDGE_FAMILIES = frozenset({"sm80", "sm90", "sm100"})
#: Where the compiled figures of FlashAttention-2's forward kernels come from (``hwmodels/measurements/
#: flash2_compiled.csv``): the v2.7.4.post1 kernel templates (cutlass at the pinned submodule commit c506e167) built
#: with nvcc 13.0 (V13.0.88) and setup.py's device flags (``-O3 --use_fast_math``, ``-gencode
#: arch=compute_XX,code=sm_XX``) for sm_80, sm_90 and sm_100, ``-Xptxas -v`` read for registers and spills and the
#: main key/value loop of the SASS counted per iteration. The v2.7.4.post1 wheels were built with CUDA 12.4.1
#: (``.github/workflows/publish.yml``), whose setup.py emits sm_80 and sm_90 code only (sm_100 from CUDA 12.8), and
#: no PTX: a B200 runs a source build's sm_100 code.
FLASH2_COMPILED_SOURCE = ("nvcc 13.0 -Xptxas -v, flash-attention v2.7.4.post1, sm_80/sm_90/sm_100 "
                          "(hwmodels/measurements/flash2_compiled.csv)")
#: Registers per thread of FlashAttention-2 kernel instantiations, keyed (backward, head dim, ``kBlockM``,
#: ``kBlockN``, ``kNWarps``): the forward kernels as compiled (:data:`FLASH2_COMPILED_SOURCE`; the same count for
#: sm_80, sm_90 and sm_100, causal or not): ``<128, 128, 64, 4>`` and ``<64, 128, 128, 4>`` 255 with spills,
#: ``<128, 128, 32, 4>`` 255, ``<128, 64, 64, 4>`` 182. Dao-AILab/flash-attention issue #1630 quotes an older
#: build of the same sm_80 kernels at 255 (172 bytes of spill stores) and 180; issue #340 gives ``<256, 128, 64,
#: 8>`` (not compiled here): 240, and 255 with spills in another specialisation (the larger is kept). An
#: instantiation neither gives is taken at :data:`FLASH2_ISA_REGISTERS`.
FLASH2_PTXAS_REGISTERS = {(False, 128, 128, 64, 4): 255, (False, 64, 128, 128, 4): 255, (False, 128, 128, 32, 4): 255,
                          (False, 128, 64, 64, 4): 182, (False, 256, 128, 64, 8): 255}
#: Registers one thread can address (the PTX/SASS limit, "255 registers per thread" in the CUDA C++ Programming
#: Guide's table of technical specifications per compute capability), where ptxas caps the kernels above (spilling
#: past it): the figure for an instantiation no ptxas report quotes.
FLASH2_ISA_REGISTERS = 255
#: Bytes per element of a FlashAttention-2 kernel's Q, K, V (and dO) tiles in shared memory: v2.7.4 instantiates
#: its kernels for ``cutlass::half_t`` and ``cutlass::bfloat16_t`` only (``FP16_SWITCH``, ``static_switch.h``), and
#: sizes ``kSmemSize`` by ``sizeof(Element)`` (``kernel_traits.h``).
FLASH2_ELEMENT_BYTES = 2

# Registers a GEMM thread holds besides its accumulators and operand fragments: pointers, indices,
# predicates, loop counters. CUTLASS mainloops use about two dozen (their ptxas reports); this only
# matters for occupancy of small tiles.
_GEMM_ADDRESS_REGISTERS = 24
#: Keys per block of the split-KV (flash-decoding) kernel: the key sequence is split over CTAs until
#: every SM has work, at most one split per key block. FlashAttention-2's ``set_params_splitkv``
#: (csrc/flash_attn/flash_api.cpp) uses blocks of 256 keys for head_dim <= 64 (128 up to 128, 64
#: above); the model uses 256 for every head size.
DECODE_MIN_KEYS_PER_SPLIT = 256
#: Smallest number of K-slices of operands a library GEMM main loop has in flight: every kernel of
#: the tile tables at least double-buffers its global loads. CUTLASS's two-stage mainloops
#: (``MmaPipelined``, sm70/sm75) load slice k+1 into registers while slice k is computed; Tensile
#: kernels with one LDS buffer issue the next ``DepthU`` slice's global reads ahead of the math
#: (solution parameter ``PrefetchGlobalRead`` = 1 or 2 in hipBLASLt library logic). The CDNA tiles
#: with ``stages=1`` (one LDS buffer) therefore pipeline two slices deep.
MIN_PIPELINE_DEPTH = 2
# Shared memory reserved by the runtime per resident CTA (CUDA C++ Programming Guide, compute
# capability 8.x/9.0: "1 KB of shared memory is reserved for system use" per block).
_SMEM_RESERVED_PER_CTA_BYTES = 1024
#: Lanes of a SIMT warp along (M, N) when its warp tile is taller than wide; (4, 8) otherwise,
#: swapped: CUTLASS ``detail::simt_get_warp_threads_m`` returns ``kM > kN ? 8 : 4``
#: (include/cutlass/gemm/threadblock/default_mma_core_simt.h, CUTLASS 2.x/3.x).
SIMT_WARP_LANES_TALL = (8, 4)
#: Bytes shared memory returns to one lane per clock: NVIDIA's L1/shared return path delivers
#: 128 B/clock per SM = one 32-bit register for each of a warp's 32 lanes, so an ``LDS.128`` takes 4
#: requests whatever the lanes' addresses (a broadcast to lanes sharing a word saves no return
#: cycles; only the sm70/sm75 thread-pair rule halves it). NVIDIA Developer Forums, 'Unexpected
#: shared memory bank conflict' (2019), https://forums.developer.nvidia.com/t/77228 (reply 2). With
#: ``sm.shared_mem_bytes_per_clk`` = 128 this is the SM's figure split over 32 lanes.
SMEM_RETURN_BYTES_PER_LANE_CLK = 4


# ------------------------------------------------------------------------------------------------
# candidate tiles


@dataclass(frozen=True)
class TileCandidate:
    """One GEMM kernel configuration as a library instantiates it.

    Attributes
    ----------
    tile_m, tile_n, tile_k
        CTA tile (elements).
    stages
        Shared-memory pipeline depth (operand panels in flight).
    warps_m, warps_n
        Warp (or warpgroup, on Hopper) grid over the CTA tile; the warp tile is
        ``tile_m / warps_m x tile_n / warps_n``.
    threads
        Threads per CTA (including producer warps of warp-specialised kernels).
    cluster_m, cluster_n
        Thread-block cluster: CTAs along M share (multicast) the B panel, CTAs along N the A panel.
    producer_threads
        Threads of a data-movement (TMA producer) warpgroup that do no math (0: none).
    simt
        A CUDA-core (FFMA) tile: every lane reads its own thread tile's operands from shared memory
        (:meth:`smem_return_scale`).
    """

    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    warps_m: int
    warps_n: int
    threads: int
    cluster_m: int = 1
    cluster_n: int = 1
    producer_threads: int = 0
    simt: bool = False

    @property
    def thread_tile(self) -> tuple[int, int]:
        """Accumulators one lane holds (M x N) in a SIMT tile: CUTLASS arranges a warp's 32 lanes
        8 x 4 when the warp tile is taller than wide, else 4 x 8
        (``detail::simt_get_warp_threads_m``, include/cutlass/gemm/threadblock/default_mma_core_simt.h),
        so a 32 x 64 warp tile gives 8 x 8 per lane and a 32 x 32 one 8 x 4."""
        wm, wn = self.tile_m // self.warps_m, self.tile_n // self.warps_n
        lanes_m = SIMT_WARP_LANES_TALL[0] if wm > wn else SIMT_WARP_LANES_TALL[1]
        return max(1, wm // lanes_m), max(1, wn // (32 // lanes_m))

    def smem_return_scale(self) -> float:
        """Register words shared memory returns per distinct word the warps read, per K step.

        A tensor-core warp loads its warp tile's A rows and B columns once (``ldmatrix``
        fragments): 1. A SIMT lane loads its own ``thread_m + thread_n`` operands, and shared memory
        returns one 32-bit register per lane per clock whether or not lanes share an address
        (:data:`SMEM_RETURN_BYTES_PER_LANE_CLK`), so a warp costs ``32 * (thread_m + thread_n)``
        register returns against the ``warp_m + warp_n`` distinct words it needs."""
        if not self.simt:
            return 1.0
        tm, tn = self.thread_tile
        wm, wn = self.tile_m / self.warps_m, self.tile_n / self.warps_n
        return 32.0 * (tm + tn) / (wm + wn)

    @property
    def persistent(self) -> bool:
        """Whether the kernel is persistent (one CTA per SM walks the output tiles, overlapping one
        tile's prologue and epilogue with the next tile's main loop): the warp-specialised families
        (``producer_threads > 0``), as CUTLASS 3.x builds them for sm90 and sm100 (the
        ``KernelTmaWarpSpecializedCooperative`` / ``Pingpong`` schedules with a persistent tile
        scheduler); the sm70/sm80, CDNA and SIMT families launch one CTA per output tile."""
        return self.producer_threads > 0

    @property
    def name(self) -> str:
        c = f"_c{self.cluster_m}x{self.cluster_n}" if self.cluster_m * self.cluster_n > 1 else ""
        return f"{self.tile_m}x{self.tile_n}x{self.tile_k}_s{self.stages}{c}"

    def smem_bytes(self, in_bytes: float) -> float:
        """Shared memory of the operand pipeline (bytes)."""
        return self.stages * (self.tile_m + self.tile_n) * self.tile_k * in_bytes

    def registers_per_thread(self, in_bytes: float, reg_limit: int = 255) -> int:
        """Accumulators + operand fragments + addressing of a math thread, capped at the ISA limit.

        Warp-specialised kernels (``producer_threads > 0``: Hopper wgmma, Blackwell UMMA) read
        operands straight from shared memory, so they hold no operand fragments.
        """
        math_threads = self.threads - self.producer_threads
        acc = self.tile_m * self.tile_n / math_threads  # fp32 accumulators
        wm, wn = self.tile_m / self.warps_m, self.tile_n / self.warps_n
        frag = 2 * (wm + wn) * 16 * in_bytes / (32 * 4) if self.producer_threads == 0 else 0.0
        return int(min(reg_limit, math.ceil(acc + frag + _GEMM_ADDRESS_REGISTERS)))


def _t(m: int, n: int, k: int, st: int, wm: int, wn: int, th: int, cm: int = 1, cn: int = 1) -> TileCandidate:
    # 256/384-thread tiles of the warp-specialised families carry one 128-thread producer warpgroup
    return TileCandidate(m, n, k, st, wm, wn, th, cm, cn, 0)


def _ws(m: int, n: int, k: int, st: int, wm: int, wn: int, th: int, cm: int = 1, cn: int = 1) -> TileCandidate:
    return TileCandidate(m, n, k, st, wm, wn, th, cm, cn, 128)


# Tile tables. Volta/Turing: CUTLASS generator.py GenerateSM70_TensorOp_884 / GenerateSM75_TensorOp_1688
# tile descriptions (128x256x32, 256x128x32, 128x128x32, 64x128x32, 128x64x32, 64x64x32; 2 stages).
# Ampere/Ada: GenerateSM80_TensorOp_16816 (256x128x32 s3 [4,2,1], 128x256x32 s3, 256x64x32 s4,
# 64x256x32 s4, 128x128x32 s5, 128x64x32 s6, 64x128x32 s6, 64x64x32 s10, and the k=64 variants).
# Hopper: GenerateSM90_TensorOp_16b_WGMMA_gemm (warp-specialised: one producer + two consumer
# warpgroups, tiles 64/128/256 x 64/128/256 x 64, clusters 1x1, 2x1, 1x2, 2x2; stages as many as fit in
# 227 KiB). Blackwell: SM100 UMMA tiles 128/256 x 64..256 with 2-SM (and 2x2) clusters. Small-M tiles (16/32 rows) stand for the GEMV-like
# kernels libraries use when M is tiny (decode).
_SM70 = (
    _t(128, 256, 32, 2, 2, 4, 256), _t(256, 128, 32, 2, 4, 2, 256), _t(128, 128, 32, 2, 2, 2, 128),
    _t(128, 64, 32, 2, 2, 2, 128), _t(64, 128, 32, 2, 2, 2, 128), _t(64, 64, 32, 2, 2, 2, 128),
    _t(32, 128, 32, 2, 1, 4, 128), _t(16, 128, 64, 2, 1, 4, 128),
)
_SM80 = (
    _t(256, 128, 32, 3, 4, 2, 256), _t(128, 256, 32, 3, 2, 4, 256), _t(256, 64, 32, 4, 4, 1, 128),
    _t(64, 256, 32, 4, 1, 4, 128), _t(128, 128, 32, 5, 2, 2, 128), _t(128, 128, 64, 4, 2, 2, 128),
    _t(128, 64, 32, 6, 2, 2, 128), _t(64, 128, 32, 6, 2, 2, 128), _t(64, 64, 32, 10, 2, 2, 128),
    _t(64, 64, 64, 5, 2, 2, 128), _t(32, 128, 64, 4, 1, 4, 128), _t(16, 128, 128, 4, 1, 4, 128),
    _t(16, 64, 128, 4, 1, 2, 64),
)
_SM90 = (
    _ws(128, 256, 64, 4, 2, 1, 384, 2, 2), _ws(256, 128, 64, 4, 2, 1, 384, 2, 2),
    _ws(128, 256, 64, 4, 2, 1, 384, 2, 1), _ws(256, 128, 64, 4, 2, 1, 384, 1, 2),
    _ws(128, 256, 64, 4, 2, 1, 384), _ws(256, 128, 64, 4, 2, 1, 384),
    _ws(128, 128, 64, 6, 2, 1, 384, 2, 2), _ws(128, 128, 64, 6, 2, 1, 384, 2, 1),
    _ws(128, 128, 64, 6, 2, 1, 384), _ws(64, 256, 64, 5, 1, 1, 256), _ws(128, 64, 64, 8, 2, 1, 384),
    _ws(64, 128, 64, 8, 1, 1, 256), _ws(64, 64, 64, 10, 1, 1, 256), _ws(64, 128, 128, 4, 1, 1, 256),
    _ws(64, 64, 128, 6, 1, 1, 256),
)
_SM100 = (
    _ws(256, 256, 64, 3, 2, 1, 384, 2, 2), _ws(256, 128, 64, 4, 2, 1, 384, 2, 2),
    _ws(256, 128, 64, 4, 2, 1, 384, 2, 1), _ws(128, 256, 64, 4, 1, 1, 256, 2, 1),
    _ws(128, 256, 64, 4, 1, 1, 256), _ws(128, 128, 64, 6, 1, 1, 256, 2, 1), _ws(128, 128, 64, 6, 1, 1, 256),
    _ws(128, 64, 64, 8, 1, 1, 256), _ws(128, 64, 128, 4, 1, 1, 256), _ws(64, 128, 64, 8, 1, 1, 256),
    _ws(64, 64, 128, 6, 1, 1, 256),
)
# AMD CDNA2/3 (hipBLASLt/Tensile macro tiles MT256x256x64, MT256x128x64, MT128x128x64, ... on 64 KB
# LDS; wave64, 256 threads) — ROCm hipBLASLt library logic files name tiles as MT<m>x<n>x<k>.
_CDNA = (
    _t(256, 256, 64, 1, 2, 2, 256), _t(256, 128, 64, 1, 2, 2, 256), _t(128, 256, 64, 1, 2, 2, 256),
    _t(128, 128, 64, 2, 2, 2, 256), _t(128, 64, 64, 2, 2, 2, 256), _t(64, 128, 64, 2, 2, 2, 256),
    _t(64, 64, 64, 2, 2, 2, 256), _t(32, 64, 128, 2, 1, 2, 128), _t(16, 64, 128, 2, 1, 2, 128),
)
# SIMT (CUDA-core) SGEMM/DGEMM: CUTLASS GenerateSM50_Simt tiles (128x128x8, 128x64x8, 64x64x8,
# 32x32x8), 2 stages.
def _simt(m: int, n: int, k: int, st: int, wm: int, wn: int, th: int) -> TileCandidate:
    return TileCandidate(m, n, k, st, wm, wn, th, simt=True)


_SIMT = (
    _simt(128, 128, 8, 2, 4, 2, 256), _simt(128, 64, 8, 2, 2, 2, 128), _simt(64, 128, 8, 2, 2, 2, 128),
    _simt(64, 64, 8, 2, 2, 2, 128), _simt(32, 64, 8, 2, 1, 2, 64), _simt(32, 32, 8, 2, 1, 1, 32),
)
_FAMILIES: dict[str, tuple[TileCandidate, ...]] = {
    "sm70": _SM70, "sm80": _SM80, "sm90": _SM90, "sm100": _SM100, "cdna": _CDNA, "simt": _SIMT,
}
_ARCH_FAMILY = {
    "volta": "sm70", "turing": "sm70", "sm70": "sm70", "sm75": "sm70", "gv100": "sm70", "tu104": "sm70",
    "ampere": "sm80", "ada": "sm80", "ada-lovelace": "sm80", "ada lovelace": "sm80", "sm80": "sm80",
    "sm86": "sm80", "sm89": "sm80", "ga100": "sm80", "ad102": "sm80", "ad104": "sm80",
    "hopper": "sm90", "sm90": "sm90", "gh100": "sm90",
    "blackwell": "sm100", "sm100": "sm100", "gb100": "sm100", "gb200": "sm100", "gb202": "sm100",
    "cdna": "cdna", "cdna2": "cdna", "cdna3": "cdna", "cdna4": "cdna", "gfx90a": "cdna", "gfx942": "cdna",
}


def tile_family(arch: str) -> str:
    """Tile-table family of an architecture name (``"hopper"`` -> ``"sm90"``); SpecError if unknown."""
    key = arch.strip().lower().replace("_", "-")
    if key in _ARCH_FAMILY:
        return _ARCH_FAMILY[key]
    for name, fam in _ARCH_FAMILY.items():
        if key.startswith(name):
            return fam
    raise SpecError(
        f"arch: no GEMM tile table for this architecture; got {arch!r}; expected one of "
        f"{', '.join(sorted(set(_ARCH_FAMILY)))}"
    )


#: Operand width (bytes) the tensor-core tile tables above are written for (16-bit types).
_TABLE_OPERAND_BYTES = 2.0


@functools.lru_cache(maxsize=64)
def tile_candidates(arch: str, matrix_unit: bool = True, in_bytes: float = _TABLE_OPERAND_BYTES
                    ) -> tuple[TileCandidate, ...]:
    """Candidate CTA tiles a library would consider on ``arch`` (SIMT tiles when not ``matrix_unit``).

    Tensor-core tiles keep the same K depth in *bytes* across operand widths, as the CUTLASS
    generators instantiate them (e.g. SM90 WGMMA: K = 64 for 16-bit types, 32 for tf32, 128 for
    fp8; SM80: 32/64 for 16-bit, 16/32 for tf32), so ``in_bytes`` scales each tile's K.
    """
    if not matrix_unit:
        return _SIMT
    base = _FAMILIES[tile_family(arch)]
    if in_bytes == _TABLE_OPERAND_BYTES:
        return base
    scale = _TABLE_OPERAND_BYTES / in_bytes
    return tuple(dataclasses.replace(t, tile_k=max(8, int(t.tile_k * scale))) for t in base)


# ------------------------------------------------------------------------------------------------
# hardware parameters


@dataclass(frozen=True)
class GpuParams:
    """Numbers a GPU kernel model needs, for one compute dtype; any field may be a numpy array.

    Build from a spec with :func:`gpu_params`; vary fields with :func:`dataclasses.replace` to
    sweep. Units are SI and per device unless the name says per SM.
    """

    sms: ArrayLike
    clock_hz: ArrayLike
    matrix_flops_per_s: ArrayLike  # rate of the contraction path for this dtype (tensor or SIMT)
    matrix_fraction: ArrayLike  # achievable fraction of that rate (tensor_ or vector_peak_fraction)
    vector_flops_per_s: ArrayLike  # FP32 SIMT rate (FMA = 2)
    vector_fraction: ArrayLike
    sfu_ops_per_s: ArrayLike  # special-function results per second, whole device
    smem_bytes_per_s_per_sm: ArrayLike
    l2_bytes_per_s: ArrayLike
    l2_fraction: ArrayLike
    l2_capacity_bytes: ArrayLike
    dram_bytes_per_s: ArrayLike
    dram_fraction: ArrayLike
    dram_latency_s: ArrayLike
    bandwidth_half_size_bytes: ArrayLike
    registers_per_sm: ArrayLike
    smem_per_sm_bytes: ArrayLike
    max_smem_per_cta_bytes: ArrayLike
    max_threads_per_sm: ArrayLike
    max_ctas_per_sm: ArrayLike
    warp_mma_scale: ArrayLike = 1.0  # warp-level mma.sync rate / native tensor rate (<= 1)
    l2_tile_fraction: ArrayLike = 1.0  # fraction of L2 bandwidth bulk tile copies (cp.async/TMA) reach
    # one SM's L2 tile intake while other SMs idle, over its even share of the tile rate (>= 1; 1: the share)
    l2_port_ratio: ArrayLike = 1.0
    l2_latency_s: ArrayLike = 0.0  # load-to-use latency of an L2 hit (split-K fixup hand-offs)
    uses_matrix_unit: bool = True
    # DRAM fraction a decode attention kernel streams a long K/V cache at, 16-bit and 8-bit K/V
    # (efficiency.decode_attention_bandwidth_fraction and ..._fp8_...); None: dram_fraction
    decode_dram_fraction: ArrayLike | None = None
    decode_fp8_dram_fraction: ArrayLike | None = None
    # DRAM fraction a library GEMM with one row or column (its GEMV kernel), or up to gemv_max_rows of them,
    # streams its matrix at (efficiency.gemv_bandwidth_fraction); None: dram_fraction
    gemv_dram_fraction: ArrayLike | None = None
    # the most rows (or columns) of a library GEMM read at gemv_dram_fraction (efficiency.gemv_max_rows)
    gemv_max_rows: ArrayLike = 1


def gemv_params(p: GpuParams, rows: int = 1) -> GpuParams:
    """``p`` with the DRAM fraction of a library matrix-vector product (``p.gemv_dram_fraction``) where a library
    GEMM of ``rows`` rows (or columns, the fewer) is within ``p.gemv_max_rows`` (``efficiency.gemv_max_rows``): the
    rate at which the library's GEMV, or a skinny GEMM, streams its matrix; ``p`` itself where the device has no
    such figure or the product is wider (element by element for arrays: hardware variants)."""
    if p.gemv_dram_fraction is None:
        return p
    if np.ndim(p.gemv_max_rows) == 0:
        return p if rows > p.gemv_max_rows else dataclasses.replace(p, dram_fraction=p.gemv_dram_fraction)
    return dataclasses.replace(p, dram_fraction=np.where(rows <= _a(p.gemv_max_rows), p.gemv_dram_fraction,
                                                         p.dram_fraction))


def decode_attention_fraction(p: GpuParams, kv_bytes: float) -> ArrayLike:
    """DRAM fraction at which a decode attention kernel streams a K/V cache of ``kv_bytes``-wide
    elements: the 8-bit figure for an 8-bit (or narrower) cache, the 16-bit figure otherwise (fp32 too),
    ``p.dram_fraction`` where the device has no figure."""
    d16 = p.dram_fraction if p.decode_dram_fraction is None else p.decode_dram_fraction
    if kv_bytes <= 1 and p.decode_fp8_dram_fraction is not None:
        return p.decode_fp8_dram_fraction
    return d16


def attention_dram_fraction(p: GpuParams, kv_bytes: float, decode: bool) -> ArrayLike:
    """DRAM fraction an attention kernel streams at: a decode kernel's measured rate for its K/V width
    (:func:`decode_attention_fraction`), else ``p.dram_fraction``."""
    return decode_attention_fraction(p, kv_bytes) if decode else p.dram_fraction


def _nonzero_or(x: ArrayLike, fallback: ArrayLike) -> ArrayLike:
    """``x`` where it is set (> 0), else ``fallback``, element by element for arrays (a spec field's 0 = no figure)."""
    if np.ndim(x) == 0 and np.ndim(fallback) == 0:
        return x if float(x) > 0 else fallback
    return np.where(_a(x) > 0, x, fallback)


def _l2_level(dev: DeviceSpec) -> Any:
    for lv in dev.memory:
        if lv.name.lower() in ("l2", "llc", "l2_cache"):
            return lv
    if len(dev.memory) > 1:
        return dev.memory[1]
    return dev.memory[0]


def _num(x: ArrayLike) -> ArrayLike:
    """``float(x)`` for a number; a float array for an array (a spec holding hardware variants)."""
    return float(x) if np.ndim(x) == 0 else np.asarray(x, dtype=float)


def simt_gemm_fraction(dev: DeviceSpec, dtype: str) -> ArrayLike:
    """Achievable fraction of the SIMT rate of ``dtype`` for a contraction on the CUDA cores.

    An FP32 GEMM without TF32 (SGEMM) reaches ``efficiency.simt_gemm_peak_fraction`` of the FP32
    peak where the catalog gives that measured figure (SMs of 128 FP32 lanes: each FFMA issue slot is
    shared with the inner loop's shared-memory loads and address arithmetic); otherwise, and for other
    dtypes, ``efficiency.vector_peak_fraction``.
    """
    eff = dev.efficiency
    sg = eff.simt_gemm_peak_fraction
    if dtype != "fp32":
        return eff.vector_peak_fraction
    if np.ndim(sg) == 0 and np.ndim(eff.vector_peak_fraction) == 0:
        return sg if sg > 0 else eff.vector_peak_fraction
    return np.where(_a(sg) > 0, _a(sg), _a(eff.vector_peak_fraction))  # hardware variants (sweeps)


def _port_ratio(dev: DeviceSpec) -> ArrayLike:
    """``efficiency.l2_tile_sm_port_ratio``, checked: one SM cannot take in less than its even share."""
    r = dev.efficiency.l2_tile_sm_port_ratio
    if bool(np.any(~(_a(r) >= 1.0))):
        raise SpecError(f"{dev.name}: efficiency.l2_tile_sm_port_ratio: got {r!r}; expected a number >= 1 "
                        "(1: a CTA takes its even share of the L2 tile rate however many SMs are busy)")
    return r


def gpu_params(dev: DeviceSpec, dtype: str, *, allow_tf32: bool = False) -> GpuParams:
    """Collect the numbers of ``dev`` the kernel models use, for contractions in ``dtype``.

    The contraction path is the tensor (matrix) unit when ``compute.tensor_flops_per_s`` has the
    dtype (fp32 maps to tf32 only with ``allow_tf32``; without it fp32 runs on a native FP32 matrix
    rate where the table lists one, ``tensor_flops_per_s.fp32``: CDNA's MFMA F32), else the SIMT
    vector rate of the dtype, at :func:`simt_gemm_fraction` of it.
    Numeric fields of ``dev`` may hold numpy arrays of hardware variants (a sweep); the parameters
    then broadcast over them.

    Raises
    ------
    SpecError
        The device has no GPU SM section or no rate at all for ``dtype``.
    """
    if dev.sm is None:
        raise SpecError(f"{dev.name}: sm: missing; got no [sm] section; expected a GPU spec with SM resources")
    tensor = dev.compute.tensor_flops_per_s
    vector = dev.compute.vector_flops_per_s
    key = "tf32" if dtype == "fp32" and allow_tf32 and "tf32" in tensor else dtype
    # fp32 without TF32 stays off a reduced-precision matrix path; a native FP32 matrix rate (CDNA's
    # MFMA F32, listed as tensor fp32) is the path such a GEMM takes
    if key in tensor and not (dtype == "fp32" and not allow_tf32 and "fp32" not in tensor):
        rate, frac, matrix = tensor[key], dev.efficiency.tensor_peak_fraction, True
    elif dtype in vector:
        rate, frac, matrix = vector[dtype], simt_gemm_fraction(dev, dtype), False
    elif dtype in ("int32", "int64", "bool") and "fp32" in vector:
        rate, frac, matrix = vector["fp32"], dev.efficiency.vector_peak_fraction, False
    else:
        have = sorted(set(tensor) | set(vector))
        raise SpecError(
            f"{dev.name}: compute: no throughput for dtype; got {dtype!r}; expected one of {', '.join(have)} "
            f"(choose one with --dtype)"
        )
    v32 = vector["fp32"] if "fp32" in vector else (max(vector.values()) if vector else rate)
    l2 = _l2_level(dev)
    hbm = dev.main_memory
    sm = dev.sm
    clock = dev.clock.sustained_hz
    warp_scale: ArrayLike = 1.0
    native16 = tensor.get("fp16", tensor.get("bf16", 0.0))
    wm = sm.warp_mma_flops_per_clk
    if all(np.ndim(x) == 0 for x in (wm, native16, dev.compute.units, clock)):
        if wm > 0 and native16 > 0:
            warp_scale = min(1.0, wm * dev.compute.units * clock / native16)
    else:  # a spec holding arrays of hardware variants (sweeps): the same rule, element by element
        on = (_a(wm) > 0) & (_a(native16) > 0)
        warp_scale = np.where(on, np.minimum(1.0, wm * dev.compute.units * clock / np.where(on, native16, 1.0)), 1.0)
    d16 = _nonzero_or(dev.efficiency.decode_attention_bandwidth_fraction, dev.efficiency.dram_bandwidth_fraction)
    return GpuParams(
        sms=_num(dev.compute.units),
        clock_hz=clock,
        matrix_flops_per_s=rate,
        matrix_fraction=frac,
        vector_flops_per_s=v32,
        vector_fraction=dev.efficiency.vector_peak_fraction,
        sfu_ops_per_s=_num(sm.sfu_ops_per_clk) * dev.compute.units * clock,
        smem_bytes_per_s_per_sm=_num(sm.shared_mem_bytes_per_clk) * clock,
        l2_bytes_per_s=l2.read_bandwidth_bytes_per_s,
        l2_fraction=dev.efficiency.l2_bandwidth_fraction,
        l2_capacity_bytes=l2.capacity_bytes if l2 is not hbm else 0.0,
        dram_bytes_per_s=hbm.read_bandwidth_bytes_per_s,
        dram_fraction=dev.efficiency.dram_bandwidth_fraction,
        dram_latency_s=hbm.latency_s,
        bandwidth_half_size_bytes=dev.efficiency.bandwidth_half_size_bytes,
        registers_per_sm=_num(sm.registers_per_sm),
        smem_per_sm_bytes=sm.shared_mem_per_sm_bytes,
        max_smem_per_cta_bytes=sm.max_shared_mem_per_cta_bytes,
        max_threads_per_sm=_num(sm.max_threads_per_sm),
        max_ctas_per_sm=_num(sm.max_ctas_per_sm),
        warp_mma_scale=warp_scale,
        l2_tile_fraction=dev.efficiency.l2_tile_bandwidth_fraction,
        l2_port_ratio=_port_ratio(dev),
        l2_latency_s=l2.latency_s if l2 is not hbm else hbm.latency_s,
        uses_matrix_unit=matrix,
        decode_dram_fraction=d16,
        decode_fp8_dram_fraction=_nonzero_or(dev.efficiency.decode_attention_fp8_bandwidth_fraction, d16),
        gemv_dram_fraction=_nonzero_or(dev.efficiency.gemv_bandwidth_fraction, dev.efficiency.dram_bandwidth_fraction),
        gemv_max_rows=dev.efficiency.gemv_max_rows,
    )


# ------------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class KernelEstimate:
    """Device-side time of one kernel and its traffic per memory level (arrays broadcast like the inputs).

    ``time_s = max(compute_s, memory_s) + latency_s``; launch overhead is added by the caller.
    """

    time_s: ArrayLike
    compute_s: ArrayLike
    memory_s: ArrayLike
    latency_s: ArrayLike
    dram_bytes: ArrayLike
    l2_bytes: ArrayLike
    smem_bytes: ArrayLike
    details: tuple[tuple[str, Any], ...] = ()
    bound_term: Any = ""  # the model's largest named term (str, or array of str); "" when it names none


@dataclass(frozen=True)
class GemmEstimate(KernelEstimate):
    """A GEMM estimate with the chosen kernel: tile, split-K, CTAs, waves and occupancy."""

    tile: Any = ""  # str for a scalar device, array of str otherwise
    split_k: ArrayLike = 1
    ctas: ArrayLike = 0
    waves: ArrayLike = 0.0
    ctas_per_sm: ArrayLike = 0
    bound_level: Any = ""
    fixup_s: ArrayLike = 0.0  # split-K serial reduction, part of latency_s
    edge_s: ArrayLike = 0.0  # pipeline edges (first slice's load or last slice's math; C store), part of latency_s
    stall_s: ArrayLike = 0.0  # K-loop load stall not hidden under the memory time, part of latency_s


def _a(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=float)


def _ip(ufunc: Any, a: Any, b: Any) -> Any:
    """``ufunc(a, b)``, written into ``a`` when ``a`` is a writable array of the broadcast shape.

    Sweeps over many hardware variants make these arrays large; updating them in place avoids a
    fresh allocation per operation. Cached (read-only) arrays and smaller operands are never written.
    """
    if isinstance(a, np.ndarray) and a.flags.writeable:
        shape = np.shape(b)  # (the same shape or a scalar, the common cases, need no broadcast check)
        if shape == a.shape or not shape or np.broadcast_shapes(a.shape, shape) == a.shape:
            return ufunc(a, b, out=a)
    return ufunc(a, b)


def _scalar_or(x: np.ndarray) -> ArrayLike:
    return float(x) if np.ndim(x) == 0 else x


# ------------------------------------------------------------------------------------------------
# GEMM


def pipeline_stall_s(iterations: ArrayLike, stages: ArrayLike, latency_s: ArrayLike,
                     iteration_s: ArrayLike) -> ArrayLike:
    """Time one CTA's K loop waits for operands beyond its first load and its math (s).

    A main loop of ``iterations`` K-slices runs on ``stages`` shared-memory buffers. The loads of
    the first ``stages`` slices are issued at once; the load of slice ``i + stages`` may start only
    when the math of slice ``i`` has released its buffer, and arrives ``latency_s`` later. With
    ``iteration_s`` of math per slice, slice ``i`` completes at
    ``done[i] = max(done[i - stages] + latency_s, done[i - 1]) + iteration_s`` (``done[i] =
    latency_s + (i + 1) * iteration_s`` for the first ``stages``), whose closed form is

    ``done[N - 1] = latency_s + N * iteration_s + floor((N - 1) / stages) * max(0, latency_s -
    (stages - 1) * iteration_s)``.

    This returns the last term: zero when ``stages - 1`` slices of math cover a load's latency
    (the usual case: libraries choose ``stages`` for it), else one partly exposed latency per
    group of ``stages`` slices. Broadcasts over all arguments.

    Parameters
    ----------
    iterations
        K-slices the CTA computes (``ceil(k / tile_k)``).
    stages
        Slices in flight (shared-memory pipeline depth).
    latency_s
        Latency of one operand load (s).
    iteration_s
        Math time of one slice (s).
    """
    n = _a(iterations)
    s = _a(stages)
    groups = np.floor(np.maximum(n - 1.0, 0.0) / s)
    return groups * np.maximum(0.0, _a(latency_s) - (s - 1.0) * _a(iteration_s))


@functools.lru_cache(maxsize=256)
def _static(candidates: tuple[TileCandidate, ...], splits: tuple[int, ...], in_bytes: float) -> dict[str, np.ndarray]:
    """Per-(candidate, split) constant arrays, cached: tile sizes, warps, registers, shared memory."""
    rows = [(c, s) for c in candidates for s in splits]
    col = lambda f: np.array([f(c, s) for c, s in rows], float)  # noqa: E731
    out = {
        "tile_m": col(lambda c, s: c.tile_m), "tile_n": col(lambda c, s: c.tile_n),
        "tile_k": col(lambda c, s: c.tile_k), "split": col(lambda c, s: s),
        "cluster_m": col(lambda c, s: c.cluster_m), "cluster_n": col(lambda c, s: c.cluster_n),
        "warps": col(lambda c, s: c.warps_m * c.warps_n),
        "threads": col(lambda c, s: c.threads),
        "registers": col(lambda c, s: c.registers_per_thread(in_bytes) * c.threads),
        "pipeline_smem_bytes": col(lambda c, s: c.smem_bytes(in_bytes)),
        "depth": col(lambda c, s: max(c.stages, MIN_PIPELINE_DEPTH)),
        "name": np.array([c.name for c, _ in rows]),
        "persistent": col(lambda c, s: 1.0 if c.persistent else 0.0),
        "smem_return_scale": col(lambda c, s: c.smem_return_scale()),
    }
    out["warp_m"] = out["tile_m"] / col(lambda c, s: c.warps_m)
    out["warp_n"] = out["tile_n"] / col(lambda c, s: c.warps_n)
    for v in out.values():
        v.setflags(write=False)
    return out


@functools.lru_cache(maxsize=1024)
def _touched(extent: int, out: int, filt: int, stride: int, dilation: int, pad: int) -> int:
    """Positions of an input axis of ``extent`` that some output position reads: the union of
    ``o * stride + f * dilation - pad`` over ``o < out`` and ``f < filt``, inside ``[0, extent)``."""
    hit = np.zeros(extent, dtype=bool)
    starts = np.arange(out, dtype=np.int64) * stride - pad
    for f in range(filt):  # one pass per filter tap
        x = starts + f * dilation
        hit[x[(x >= 0) & (x < extent)]] = True
    return int(np.count_nonzero(hit))


@dataclass(frozen=True)
class ImplicitOperand:
    """The A operand of an implicit-GEMM convolution, which DRAM sees as its source tensor.

    An implicit-GEMM kernel never writes the im2col matrix: each CTA gathers its A panel from the
    source tensor (NHWC) into shared memory (NVIDIA CUTLASS, "Implicit GEMM Convolution",
    ``media/docs/implicit_gemm_convolution.md``: the activation tile iterators compute the NHWC
    address of every element of the virtual ``[N*P*Q, R*S*C]`` matrix; cuDNN's
    ``IMPLICIT_GEMM``/``IMPLICIT_PRECOMP_GEMM`` algorithms likewise). The K loop advances the
    channel block outermost and the filter taps innermost, so a split-K share of K covers a share of
    the channels. Hence a panel of ``rows`` GEMM rows over the whole reduction reads, from DRAM, the
    source elements those rows touch (:meth:`panel_elements`), halo included, and never more than its
    im2col size; and the whole operand, when it stays in L2, is the source tensor once
    (:attr:`unique_elements`). L2 -> SM and shared-memory traffic keep the im2col size: every
    CTA loads ``rows x k`` elements.

    Build with :meth:`fprop` (rows: output pixels; source: the input), :meth:`dgrad` (rows: the
    input-gradient pixels; source: the output gradient) or :meth:`wgrad` (rows: the filter taps
    ``(c, r, s)``; the source, the input, is indexed by the reduction over ``N*P*Q``).

    Attributes
    ----------
    images, channels
        Batch images and source channels per group.
    source
        Source positions read per spatial axis (:func:`_touched`; all of them for a padded conv).
    extent
        Extent of the GEMM row index per spatial axis (output pixels for fprop).
    halo
        Extra source positions per spatial axis that a run of consecutive rows reads at its edges
        (``(R - 1) * dilation + 1 - stride`` for fprop, when positive).
    taps
        Filter taps ``R * S`` (wgrad: rows per source channel).
    by_reduction
        Wgrad: rows are filter taps and the source is indexed by the reduction.
    """

    images: int
    channels: int
    source: tuple[int, ...]
    extent: tuple[int, ...]
    halo: tuple[float, ...]
    taps: int = 1
    by_reduction: bool = False

    @staticmethod
    def fprop(images: int, channels: int, in_spatial: tuple[int, ...], out_spatial: tuple[int, ...],
              filt: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
              pad: tuple[int, ...]) -> ImplicitOperand:
        """Forward conv: output pixel rows over the input ``in_spatial`` (``pad``: leading padding per axis)."""
        src = tuple(_touched(h, o, f, s, d, p)
                    for h, o, f, s, d, p in zip(in_spatial, out_spatial, filt, stride, dilation, pad, strict=True))
        halo = tuple(float(max(0, (f - 1) * d + 1 - s)) for f, s, d in zip(filt, stride, dilation, strict=True))
        return ImplicitOperand(images, channels, src, tuple(out_spatial), halo, math.prod(filt))

    @staticmethod
    def dgrad(images: int, channels: int, dy_spatial: tuple[int, ...], dx_spatial: tuple[int, ...],
              filt: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> ImplicitOperand:
        """Data gradient: rows are the pixels of dX, each reading a window of ``ceil(effective filter /
        stride)`` positions of dY per axis (``channels``: dY's)."""
        halo = tuple(float(max(0, math.ceil(((f - 1) * d + 1) / s) - 1))
                     for f, s, d in zip(filt, stride, dilation, strict=True))
        return ImplicitOperand(images, channels, tuple(dy_spatial), tuple(dx_spatial), halo, math.prod(filt))

    @staticmethod
    def wgrad(images: int, channels: int, in_spatial: tuple[int, ...], out_spatial: tuple[int, ...],
              filt: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
              pad: tuple[int, ...]) -> ImplicitOperand:
        """Weight gradient: rows are the filter taps ``(c, r, s)``; a panel of rows covers
        ``rows / (R*S)`` channels (at least one) of the input, over every image and position read."""
        fw = ImplicitOperand.fprop(images, channels, in_spatial, out_spatial, filt, stride, dilation, pad)
        return dataclasses.replace(fw, halo=(0.0,) * len(fw.halo), by_reduction=True)

    @property
    def unique_elements(self) -> float:
        """Source elements read at least once (per group)."""
        return float(self.images * self.channels * math.prod(self.source))

    def panel_elements(self, rows: ArrayLike) -> np.ndarray:
        """Source elements a panel of ``rows`` consecutive GEMM rows touches over the whole reduction.

        Rows run over the last spatial axis fastest. A panel of ``t = rows / W`` whole rows of the
        row index (``W`` its last extent) reads ``t * a + h`` source rows (``a``: source rows per row,
        ``h``: the halo) of the full source width, but no more than the images it spans hold; a
        shorter panel reads ``a + h`` source rows of ``rows * a_w + h_w`` source columns. Leading
        axes beyond two are folded into the rows. Wgrad panels cover ``max(1, rows / taps)``
        channels of the whole source.
        """
        r = _a(rows)
        if self.by_reduction:
            ch = np.minimum(float(self.channels), np.maximum(1.0, r / self.taps))
            return ch * float(self.images * math.prod(self.source))
        ext, src, halo = self.extent, self.source, self.halo
        if len(ext) == 1:  # conv1d: one row of the row index per image
            ext, src, halo = (1, *ext), (1, *src), (0.0, *halo)
        lead_ext, lead_src = math.prod(ext[:-1]), math.prod(src[:-1])
        width, src_w = ext[-1], src[-1]
        a_h, h_h = lead_src / lead_ext, halo[-2]
        a_w, h_w = src_w / width, halo[-1]
        t = r / width
        whole = np.minimum(t * a_h + h_h, np.ceil(t / lead_ext) * lead_src) * src_w
        part = min(a_h + h_h, lead_src) * np.minimum(r * a_w + h_w, src_w)
        return float(self.channels) * np.where(r >= width, whole, part)

    def panel_scale(self, rows: ArrayLike, k: int) -> np.ndarray:
        """DRAM bytes of an A panel of ``rows`` rows per byte of its im2col panel (``rows x k``): at most 1."""
        r = _a(rows)
        return np.minimum(1.0, self.panel_elements(r) / (r * float(k)))


@dataclass(frozen=True)
class GemmLaunch:
    """The grids that candidate GEMM kernels (tile x split-K factor) launch for one problem.

    ``m``, ``n``, ``k``, ``batch``, ``in_bytes``, ``out_bytes``, ``b_shared`` and ``a_operand``
    describe the problem; every other field is an array with one entry per candidate (tiles outer, split-K
    factors inner), or whatever shape :meth:`pick` indexed them with. Build with :func:`gemm_launch`.

    Attributes
    ----------
    tile_m, tile_n, tile_k, split, cluster_m, cluster_n
        CTA tile (elements), split-K factor and thread-block cluster.
    warps, warp_m, warp_n
        Math warps (warpgroups) per CTA and their warp tile.
    threads, registers, pipeline_smem_bytes, depth
        Per CTA: threads, registers, shared memory of the operand pipeline (bytes) and K-slices in
        flight (at least :data:`MIN_PIPELINE_DEPTH`).
    tiles_m, tiles_n
        Output tiles along M and N.
    k_split, k_padded
        K of one split, and of one CTA padded to whole ``tile_k`` slices (padded tiles do full math).
    ctas
        CTAs of the launch (``batch * tiles_m * tiles_n * split``).
    rows, cols
        Rows of A and columns of B one CTA loads: ``min(tile_m, m)`` and ``min(tile_n, n)``
        (predicated loads skip the padding).
    name
        Kernel name of the tile (``"128x256x64_s4_c2x1"``).
    a_operand
        The implicit-GEMM A operand (:class:`ImplicitOperand`), or None: A is a plain matrix.
    a_elements
        Elements of A that DRAM delivers at least once per batch entry: ``m * k``, or the source
        tensor of an implicit operand.
    a_scale
        DRAM bytes of one CTA's A panel per byte it loads into the SM (1 for a plain matrix;
        :meth:`ImplicitOperand.panel_scale` of ``rows``).
    persistent
        1 for a persistent kernel (:attr:`TileCandidate.persistent`), else 0.
    smem_return_scale
        Register words shared memory returns per distinct operand word a CTA reads
        (:meth:`TileCandidate.smem_return_scale`: 1 for tensor-core tiles).
    resident_bytes
        Operand bytes (A and B) already in L2 when the kernel starts, read from there instead of DRAM
        where A and B fit in L2 (:func:`gemm_dram_bytes`); 0 by default.
    """

    m: int
    n: int
    k: int
    batch: int
    in_bytes: float
    out_bytes: float
    b_shared: bool
    a_operand: ImplicitOperand | None
    a_elements: float
    tile_m: np.ndarray
    tile_n: np.ndarray
    tile_k: np.ndarray
    split: np.ndarray
    cluster_m: np.ndarray
    cluster_n: np.ndarray
    warps: np.ndarray
    warp_m: np.ndarray
    warp_n: np.ndarray
    threads: np.ndarray
    registers: np.ndarray
    pipeline_smem_bytes: np.ndarray
    depth: np.ndarray
    tiles_m: np.ndarray
    tiles_n: np.ndarray
    k_split: np.ndarray
    k_padded: np.ndarray
    ctas: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    name: np.ndarray
    a_scale: np.ndarray
    persistent: np.ndarray
    smem_return_scale: np.ndarray
    resident_bytes: float = 0.0

    def pick(self, index: Any) -> GemmLaunch:
        """The candidates at ``index`` (an integer array: one choice per hardware variant).

        Returns a view with the attributes of a :class:`GemmLaunch`; its per-candidate fields are
        indexed on first use (a sweep reads only some of them, for every hardware variant).
        """
        return cast(GemmLaunch, _PickedLaunch(self, index))


_PROBLEM_FIELDS = ("m", "n", "k", "batch", "in_bytes", "out_bytes", "b_shared", "a_operand", "a_elements",
                   "resident_bytes")
_LAUNCH_ARRAYS = tuple(f.name for f in dataclasses.fields(GemmLaunch) if f.name not in _PROBLEM_FIELDS)


class _PickedLaunch:
    """:meth:`GemmLaunch.pick`'s view of ``launch`` at the candidates ``index``."""

    def __init__(self, launch: GemmLaunch, index: Any) -> None:
        self._launch, self._index = launch, index

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._launch, name)
        if name in _LAUNCH_ARRAYS:
            value = np.take(value, self._index)
        self.__dict__[name] = value  # indexed once
        return value


def gemm_launch(m: int, n: int, k: int, candidates: tuple[TileCandidate, ...],
                split_k: tuple[int, ...] = SPLIT_K_FACTORS, *, batch: int = 1, in_bytes: float = 2.0,
                out_bytes: float = 2.0, b_shared: bool = False,
                a_operand: ImplicitOperand | None = None, l2_resident_bytes: float = 0.0) -> GemmLaunch:
    """The grid of every (tile, split-K) candidate for ``batch`` GEMMs ``C[m,n] = A[m,k] @ B[k,n]``.

    Every (tile, split) pair is a candidate whatever the shape: each one's time grows with m, n
    and k, so the minimum does too (a larger GEMM is never predicted faster). ``a_operand``: A is
    the implicit im2col matrix of a convolution (:class:`ImplicitOperand`), whose DRAM traffic is
    its source tensor's. ``l2_resident_bytes``: operand bytes already in L2 (:attr:`GemmLaunch.resident_bytes`).
    """
    st = _static(tuple(candidates), tuple(split_k), float(in_bytes))
    tm, tn, tk, sk = st["tile_m"], st["tile_n"], st["tile_k"], st["split"]
    tiles_m = np.ceil(m / tm)
    tiles_n = np.ceil(n / tn)
    k_split = np.ceil(k / sk)
    rows = np.minimum(tm, m)
    if a_operand is None:
        a_elements, a_scale = float(m) * float(k), np.ones_like(rows)
    else:
        a_elements = min(float(m) * float(k), a_operand.unique_elements)
        a_scale = a_operand.panel_scale(rows, k)
    return GemmLaunch(
        m=m, n=n, k=k, batch=batch, in_bytes=in_bytes, out_bytes=out_bytes, b_shared=b_shared,
        a_operand=a_operand, a_elements=a_elements,
        tiles_m=tiles_m, tiles_n=tiles_n, k_split=k_split, k_padded=np.ceil(k_split / tk) * tk,
        ctas=batch * tiles_m * tiles_n * sk, rows=rows, cols=np.minimum(tn, n), a_scale=a_scale,
        resident_bytes=float(l2_resident_bytes), **{f: st[f] for f in _LAUNCH_ARRAYS if f in st},
    )


def gemm_occupancy(launch: GemmLaunch, p: GpuParams) -> tuple[np.ndarray, np.ndarray]:
    """(CTAs resident per SM, whether the candidate fits at all), over hardware x candidates.

    Residency is limited by registers, shared memory (with the runtime's per-CTA reserve), threads
    and the CTA limit; it is at least 1 (an infeasible candidate is flagged, not dropped). Any of
    these limits may be an array of hardware variants, alone or with others; both results then have
    the broadcast shape (hardware x candidates).
    """
    ex = (Ellipsis, None)  # hardware arrays gain a trailing candidate axis
    occ = np.minimum(
        np.minimum(np.floor(_a(p.registers_per_sm)[ex] / launch.registers),
                   np.floor(_a(p.smem_per_sm_bytes)[ex] / (launch.pipeline_smem_bytes + _SMEM_RESERVED_PER_CTA_BYTES))),
        np.minimum(np.floor(_a(p.max_threads_per_sm)[ex] / launch.threads), _a(p.max_ctas_per_sm)[ex]),
    )
    feasible = (occ >= 1) & (launch.pipeline_smem_bytes <= _a(p.max_smem_per_cta_bytes)[ex])
    occ = np.maximum(occ, 1.0)
    if occ.shape != feasible.shape:  # one hardware shape for both (any SM limit may vary alone)
        shape = np.broadcast_shapes(occ.shape, feasible.shape)
        occ, feasible = np.broadcast_to(occ, shape), np.broadcast_to(feasible, shape)
    return occ, feasible


# Terms of the GEMM model. Each broadcasts over its arguments: a launch's candidate arrays and
# hardware numbers (arrays over hardware variants with a trailing candidate axis in gemm()).
# ``busiest_ctas`` is the CTAs the busiest SM runs, ``ceil(ctas / sms)`` (wave quantization,
# partial last wave included).


def gemm_main_loop_s(launch: GemmLaunch, busiest_ctas: ArrayLike, flops_per_s_per_sm: ArrayLike) -> ArrayLike:
    """Main-loop math of the busiest SM (s): its CTAs' padded tiles, ``2 * tile_m * tile_n * k_padded``
    FLOP each, at one SM's share of the achievable tensor-core (or SIMT) rate."""
    return _ip(np.multiply, busiest_ctas * (2.0 * launch.tile_m * launch.tile_n * launch.k_padded),
               1.0 / flops_per_s_per_sm)


def gemm_smem_bytes_per_cta(launch: GemmLaunch) -> ArrayLike:
    """Shared memory -> math units traffic of one CTA (bytes): every warp reads its warp tile's A
    rows and B columns over the padded K."""
    return launch.warps * (launch.warp_m + launch.warp_n) * launch.k_padded * launch.in_bytes


def gemm_smem_return_bytes_per_cta(launch: GemmLaunch) -> ArrayLike:
    """Bytes shared memory returns to one CTA's lanes over its K loop: :func:`gemm_smem_bytes_per_cta`
    times :attr:`GemmLaunch.smem_return_scale` (a SIMT lane reads its own operands, one register per
    lane per clock)."""
    return gemm_smem_bytes_per_cta(launch) * launch.smem_return_scale


def gemm_smem_feed_s(launch: GemmLaunch, busiest_ctas: ArrayLike, smem_bytes_per_s_per_sm: ArrayLike) -> ArrayLike:
    """Time the busiest SM's shared memory takes to feed its math units (s): the bytes it returns to
    the lanes (:func:`gemm_smem_return_bytes_per_cta`) at its per-clock rate."""
    return _ip(np.multiply, busiest_ctas * gemm_smem_return_bytes_per_cta(launch), 1.0 / smem_bytes_per_s_per_sm)


def gemm_l2_bytes_per_cta(launch: GemmLaunch) -> ArrayLike:
    """L2 -> SM traffic of one CTA (bytes): its A and B operand panels over its K split (a cluster
    multicasts the panel its CTAs share) and its C tile; under split-K the C tile is an fp32
    partial that every CTA writes and all but one read back (``4 * (2 - 1/split)`` bytes/element)."""
    sk = launch.split
    return ((launch.rows / launch.cluster_n + launch.cols / launch.cluster_m) * launch.k_split * launch.in_bytes
            + launch.rows * launch.cols * np.where(sk > 1, 4.0 * (2.0 - 1.0 / sk), launch.out_bytes))


def gemm_l2_panels_s(launch: GemmLaunch, busiest_ctas: ArrayLike, l2_s_per_byte: ArrayLike,
                     sms: ArrayLike | None = None, port_s_per_byte: ArrayLike | None = None) -> ArrayLike:
    """Time the busiest SM's operand panels and C tiles take at its share of the L2 (s);
    ``l2_s_per_byte`` is ``sms / (L2 bandwidth * l2_tile_fraction)``.

    With ``port_s_per_byte`` (s per byte at one SM's own L2 intake, :func:`gemm_l2_port_s_per_byte`;
    ``inf``: none) and ``sms``, a last wave that leaves SMs idle is not held to the share: its CTAs load
    at the larger per-SM rate while their sum stays within the tile rate, ``min(tile rate, busy SMs x
    port rate)``. The full waves keep the share; the time is the larger of the whole grid's traffic at
    the tile rate and the full waves at the share plus one CTA's traffic at the port, and never more
    than every wave at the share."""
    per_cta = gemm_l2_bytes_per_cta(launch)
    shared = _ip(np.multiply, busiest_ctas * per_cta, l2_s_per_byte)
    if port_s_per_byte is None:
        return shared
    whole = launch.ctas / sms * per_cta * l2_s_per_byte  # the grid's traffic at the tile rate
    last = (busiest_ctas - 1.0) * per_cta * l2_s_per_byte + per_cta * port_s_per_byte
    return np.minimum(shared, np.maximum(whole, last))


def gemm_l2_port_s_per_byte(p: GpuParams) -> ArrayLike:
    """Seconds per byte at one SM's own L2 tile intake, ``sms / (L2 bandwidth * l2_tile_fraction *
    l2_port_ratio)`` (:attr:`GpuParams.l2_port_ratio`); ``inf`` where the ratio is 1 (no figure: a CTA
    gets its share of the tile rate however many SMs are busy)."""
    return _port_s_per_byte(_a(p.sms) / (_a(p.l2_bytes_per_s) * _a(p.l2_tile_fraction)), _a(p.l2_port_ratio))


def _port_s_per_byte(share: Any, ratio: Any) -> Any:
    return np.where(ratio > 1.0, share / np.where(ratio > 1.0, ratio, 1.0), np.inf)


def gemm_busy_l2_s_per_byte(l2_s_per_byte: ArrayLike, sms: ArrayLike, busy_sms: ArrayLike,
                            port_ratio: ArrayLike) -> ArrayLike:
    """Seconds per byte at which each of ``busy_sms`` SMs takes in L2 data that only they read at that
    moment (a split-K hand-off, the first K-slice of a grid under one wave): their even split of the whole
    tile rate, ``l2_s_per_byte * busy_sms / sms`` (``l2_s_per_byte``: one SM's share with every SM busy),
    but no faster than one SM's own intake, ``l2_s_per_byte / port_ratio`` (:attr:`GpuParams.l2_port_ratio`).
    The share itself where the ratio is 1 (no figure) or every SM takes part."""
    busy = np.minimum(busy_sms, sms)
    ratio = np.maximum(port_ratio, 1.0)
    return np.where(port_ratio > 1.0, np.maximum(l2_s_per_byte * busy / sms, l2_s_per_byte / ratio), l2_s_per_byte)


def gemm_serial_l2_s_per_byte(launch: GemmLaunch, l2_s_per_byte: ArrayLike, sms: ArrayLike,
                              port_ratio: ArrayLike) -> tuple[ArrayLike, ArrayLike]:
    """(split-K hand-off, first K-slice) seconds per byte at which SMs take in L2 data while others take
    in none (:func:`gemm_busy_l2_s_per_byte`): a hand-off reads one fp32 tile per output tile in flight,
    so ``min(ctas, sms) / split`` SMs read together; a round's first K-slice is loaded by the
    ``min(ctas, sms)`` SMs holding its CTAs. Only reads: ``l2_port_ratio`` is an intake figure (an
    all-SM read plateau), so writes (the hand-off's sum, the C store) stay at the share."""
    busy = np.minimum(launch.ctas, sms)
    return (gemm_busy_l2_s_per_byte(l2_s_per_byte, sms, busy / launch.split, port_ratio),
            gemm_busy_l2_s_per_byte(l2_s_per_byte, sms, busy, port_ratio))


def gemm_dram_bytes(launch: GemmLaunch, sms: ArrayLike, ctas_per_sm: ArrayLike,
                    l2_capacity_bytes: ArrayLike) -> ArrayLike:
    """DRAM traffic of the launch (bytes).

    When A and B fit in L2 they are read once (compulsory traffic), less the bytes of them already in
    L2 when the kernel starts (``launch.resident_bytes``); otherwise each wave of
    resident CTAs (``sms * ctas_per_sm``, a near-square block of ``r x c`` output tiles) streams
    the unique panels it needs, ``(r * rows * a_scale + c * cols) * k_split * in_bytes``, and never
    less than A and B once. C is written once; split-K's fp32 partials (written and read back) reach
    DRAM only when they do not fit in L2.

    For an implicit-GEMM convolution (``launch.a_operand``) "A once" is the source tensor once
    (``a_elements``) and a panel's DRAM bytes are those of the source elements it touches, halo
    included (``a_scale``, :meth:`ImplicitOperand.panel_scale`): an input element is read from DRAM
    once per wave column group of CTAs that needs it, and once more for each row panel whose halo
    reaches it.
    """
    g = launch
    m, n, batch = g.m, g.n, g.batch
    ab = _operand_bytes(g)
    c_bytes = batch * m * n * g.out_bytes
    need = ab > l2_capacity_bytes
    cold = np.maximum(ab - g.resident_bytes, 0.0)  # A and B once, less what L2 already holds
    if np.any(need):
        # (full-size arrays over hardware x candidates are updated in place: sweeps are memory-bound)
        conc = _ip(np.minimum, sms * ctas_per_sm, g.ctas)  # CTAs resident at once
        r = np.sqrt(conc)
        np.round(r, out=r)
        r = _ip(np.minimum, _ip(np.maximum, r, 1.0), g.tiles_m)
        cc = conc / r
        np.ceil(cc, out=cc)
        cc = _ip(np.minimum, cc, g.tiles_n * g.split)
        a_rows = g.rows if g.a_operand is None else g.rows * g.a_scale  # DRAM rows of an A panel
        streamed = _ip(np.add, _ip(np.multiply, r, a_rows), _ip(np.multiply, cc, g.cols))
        streamed = _ip(np.multiply, streamed, g.k_split * g.in_bytes)
        streamed = _ip(np.multiply, streamed, g.ctas / conc)  # waves of resident CTAs
        streamed = _ip(np.maximum, streamed, ab)
        operands = streamed if np.all(need) else np.where(need, streamed, cold)
    else:
        operands = cold
    partials = np.where(g.split > 1, 2.0 * g.split * batch * m * n * 4.0, 0.0)
    return operands + (c_bytes + np.where(partials <= l2_capacity_bytes, 0.0, partials))


def _operand_bytes(g: GemmLaunch) -> float:
    """A and B once (bytes): the DRAM traffic of the operands when they fit in L2."""
    return g.batch * g.a_elements * g.in_bytes + (1 if g.b_shared else g.batch) * g.k * g.n * g.in_bytes


# The two serial terms below are sums of bytes moved at one SM's share of the L2 and L2 round
# trips; gemm() adds the bytes and the round trips of both before converting them to time, with
# as few full-size array operations as possible (sweeps).


def _fixup_l2_work(launch: GemmLaunch) -> tuple[ArrayLike, ArrayLike]:
    # (bytes, L2 latencies): per hand-off, read and write the fp32 tile; wait on the flag and publish it
    return (launch.split - 1.0) * 2.0 * launch.rows * launch.cols * 4.0, 2.0 * (launch.split - 1.0)


def _c_store_l2_work(launch: GemmLaunch) -> tuple[ArrayLike, ArrayLike]:
    # (bytes, L2 latencies) of the last tile's C store (fp32 partial under split-K)
    return launch.rows * launch.cols * np.where(launch.split > 1, 4.0, launch.out_bytes), 1.0


def _slice_work(launch: GemmLaunch) -> tuple[ArrayLike, ArrayLike]:
    # (operand bytes, FLOP) of one K-slice of one CTA
    slice_bytes = (launch.rows / launch.cluster_n + launch.cols / launch.cluster_m) * launch.tile_k * launch.in_bytes
    return slice_bytes, 2.0 * launch.tile_m * launch.tile_n * launch.tile_k


def _first_or_last_slice_s(launch: GemmLaunch, l2_s_per_byte: ArrayLike, s_per_flop: ArrayLike) -> ArrayLike:
    # the cheaper of the first K-slice's operand panels and the last K-slice's math
    slice_bytes, slice_flops = _slice_work(launch)
    return _ip(np.minimum, l2_s_per_byte * slice_bytes, slice_flops * s_per_flop)


def gemm_split_k_fixup_s(launch: GemmLaunch, l2_s_per_byte: ArrayLike, l2_latency_s: ArrayLike,
                         read_s_per_byte: ArrayLike | None = None) -> ArrayLike:
    """Split-K serial fixup (s): the ``split`` CTAs of one output tile add their fp32 partials in
    turn, so ``split - 1`` hand-offs, each two L2 latencies (wait on the previous CTA's flag, publish
    its own) plus reading and writing the fp32 tile at one SM's share of the L2; the read at
    ``read_s_per_byte`` where given (the intake of the SMs that make it: :func:`gemm_serial_l2_s_per_byte`).
    Zero without split-K."""
    fix_bytes, hops = _fixup_l2_work(launch)
    if read_s_per_byte is None:
        return hops * l2_latency_s + fix_bytes * l2_s_per_byte
    return hops * l2_latency_s + 0.5 * fix_bytes * (l2_s_per_byte + read_s_per_byte)


def gemm_edge_rounds(launch: GemmLaunch, busiest_ctas: ArrayLike, ctas_per_sm: ArrayLike) -> ArrayLike:
    """Rounds of tiles whose pipeline edges the busiest SM exposes: 1 for a persistent kernel (it
    overlaps every other tile's edges); otherwise the rounds of ``q = min(ctas_per_sm, busiest_ctas)``
    co-resident CTAs it runs, ``ceil(busiest_ctas / q)`` (the rounds :func:`gemm_k_loop_stall_s` counts):
    a CTA of a non-persistent kernel loads its first K-slice and stores its C tile itself, and the
    CTAs of one round start together."""
    q = np.minimum(ctas_per_sm, busiest_ctas)
    return np.where(launch.persistent > 0, 1.0, np.ceil(busiest_ctas / q))


def gemm_pipeline_edges_s(launch: GemmLaunch, l2_s_per_byte: ArrayLike, l2_latency_s: ArrayLike,
                          flops_per_s_per_sm: ArrayLike, rounds: ArrayLike = 1.0,
                          load_s_per_byte: ArrayLike | None = None) -> ArrayLike:
    """Pipeline edges (s), exposed once per round of tiles (``rounds``, :func:`gemm_edge_rounds`: 1 for a
    persistent kernel): before any math the first K-slice's operand panels must arrive (at
    ``load_s_per_byte`` where given, the intake of the SMs that load them: :func:`gemm_serial_l2_s_per_byte`;
    else at one SM's share of the L2) and after the last load one slice of math remains, so ``N`` slices take
    ``N * max(load, math) + min(load, math)``; the round's C tiles (fp32 partials under split-K) then reach L2
    at one SM's share of its bandwidth, plus one L2 latency."""
    store_bytes, hops = _c_store_l2_work(launch)
    load = l2_s_per_byte if load_s_per_byte is None else load_s_per_byte
    return rounds * (hops * l2_latency_s + store_bytes * l2_s_per_byte
                     + _first_or_last_slice_s(launch, load, 1.0 / flops_per_s_per_sm))


def gemm_k_loop_stall_s(launch: GemmLaunch, busiest_ctas: ArrayLike, ctas_per_sm: ArrayLike,
                        flops_per_s_per_sm: ArrayLike, latency_s: ArrayLike) -> ArrayLike:
    """K-loop load stall of the busiest SM (s), :func:`pipeline_stall_s` per CTA: the SM runs its
    CTAs in rounds of ``q = min(ctas_per_sm, busiest_ctas)`` co-resident CTAs sharing its math
    units, so one K-slice of one CTA takes ``q * t_slice``."""
    q = np.minimum(ctas_per_sm, busiest_ctas)
    t_iter = q * 2.0 * launch.tile_m * launch.tile_n * launch.tile_k / flops_per_s_per_sm
    return np.ceil(busiest_ctas / q) * pipeline_stall_s(launch.k_padded / launch.tile_k, launch.depth, latency_s,
                                                        t_iter)


#: Named terms of the GEMM model, in the order :attr:`KernelEstimate.bound_term` prefers on ties:
#: main-loop math, DRAM traffic, L2 operand panels, shared-memory feed (these four overlap), the
#: prologue's DRAM latency, the split-K fixup, the pipeline edges and the exposed K-loop stall.
GEMM_TERMS: tuple[str, ...] = ("main-loop", "dram", "l2", "smem", "prologue", "split-k fixup", "edges",
                               "k-loop stall")


def _largest_term(names: tuple[str, ...], values: tuple[ArrayLike, ...]) -> Any:
    """Name of the largest of ``values`` (first on ties): a str, or an array of str over hardware."""
    vals = [_a(v) for v in values]
    idx = np.zeros(np.broadcast_shapes(*(v.shape for v in vals)), dtype=np.intp)
    top = vals[0]
    for i, v in enumerate(vals[1:], 1):  # (a loop of whole-array passes: argmax over a stacked axis is slow)
        larger = v > top
        idx = np.where(larger, i, idx)
        top = np.where(larger, v, top)
    return names[int(idx)] if idx.ndim == 0 else np.array(names).take(idx)


def _gather(x: ArrayLike, full: tuple[int, ...], rows: tuple[np.ndarray, ...], cols: np.ndarray) -> np.ndarray:
    return np.broadcast_to(x, full)[rows + (cols,)]


@dataclass(frozen=True)
class _Hardware:
    """Per-variant numbers the GEMM terms read, each with a trailing candidate axis of length 1."""

    sms: np.ndarray
    rate_sm: np.ndarray  # achievable FLOP/s of one SM
    l2_share: np.ndarray  # s per byte at one SM's share of the L2 tile bandwidth
    l2_port_ratio: np.ndarray  # one SM's L2 intake while SMs idle over its share (1: the share)
    latency: np.ndarray  # DRAM latency (s): the prologue
    l2_lat: np.ndarray
    smem_bw: np.ndarray  # shared-memory bytes/s of one SM
    s_per_dram_byte: np.ndarray
    l2_capacity: np.ndarray


def _hardware(p: GpuParams) -> _Hardware:
    ex = (Ellipsis, None)  # hardware arrays gain a trailing candidate axis
    sms = _a(p.sms)[ex]
    return _Hardware(
        sms=sms, rate_sm=(_a(p.matrix_flops_per_s) * _a(p.matrix_fraction))[ex] / sms,
        l2_share=sms / (_a(p.l2_bytes_per_s) * _a(p.l2_tile_fraction))[ex],
        l2_port_ratio=_a(p.l2_port_ratio)[ex],
        latency=_a(p.dram_latency_s)[ex], l2_lat=_a(p.l2_latency_s)[ex], smem_bw=_a(p.smem_bytes_per_s_per_sm)[ex],
        s_per_dram_byte=(1.0 / (_a(p.dram_bytes_per_s) * _a(p.dram_fraction)))[ex],
        l2_capacity=_a(p.l2_capacity_bytes)[ex],
    )


def _serial_work(launch: GemmLaunch) -> tuple[ArrayLike, ...]:
    """Per-candidate work of the serial terms: the split-K fixup's and the C store's (bytes, L2
    latencies) and one K-slice's (operand bytes, FLOP)."""
    return (*_fixup_l2_work(launch), *_c_store_l2_work(launch), *_slice_work(launch))


def _serial_parts(work: tuple[ArrayLike, ...], l2_share: ArrayLike, latency: ArrayLike,
                  l2_lat: ArrayLike) -> tuple[ArrayLike, ArrayLike, ArrayLike]:
    """The parts of :func:`_serial_s` that the s per FLOP does not enter: (prologue and split-K fixup,
    the C store of one round, the first slice's load)."""
    fix_bytes, fix_hops, store_bytes, store_hops, slice_bytes, _ = work
    fixed = _ip(np.add, l2_share * fix_bytes, latency + l2_lat * fix_hops)
    return fixed, _ip(np.add, l2_share * store_bytes, l2_lat * store_hops), l2_share * slice_bytes


def _serial_join(parts: tuple[ArrayLike, ArrayLike, ArrayLike], rounds: ArrayLike, slice_flops: ArrayLike,
                 s_per_flop: ArrayLike) -> ArrayLike:
    """:func:`_serial_s` from its :func:`_serial_parts` (written into them where they are arrays)."""
    fixed, edges, slice_load = parts
    edges = _ip(np.add, edges, _ip(np.minimum, slice_load, slice_flops * s_per_flop))
    return _ip(np.add, fixed, _ip(np.multiply, rounds, edges))


def _serial_s(work: tuple[ArrayLike, ...], rounds: ArrayLike, l2_share: ArrayLike, latency: ArrayLike,
              l2_lat: ArrayLike, s_per_flop: ArrayLike) -> ArrayLike:
    """The serial time of :func:`_terms` (s): prologue and split-K fixup once, the pipeline edges (C store,
    the cheaper of the first slice's load and the last slice's math) once per round of tiles; ``work`` is
    :func:`_serial_work`'s (as :func:`gemm_split_k_fixup_s` and :func:`gemm_pipeline_edges_s` sum them)."""
    return _serial_join(_serial_parts(work, l2_share, latency, l2_lat), rounds, work[5], s_per_flop)


@dataclass(frozen=True)
class _Terms:
    """Every candidate's terms on every hardware variant (:func:`_terms`), broadcast like their inputs."""

    occ: Any
    feasible: Any
    busiest: Any
    t_compute: Any
    t_smem: Any
    t_l2: Any
    dram: Any
    t_dram: Any
    t_mem: Any
    fixed: Any
    total: Any  # without the K-loop stall; infeasible candidates not yet set aside


def _terms(launch: GemmLaunch, p: GpuParams, hw: _Hardware) -> _Terms:
    """The terms of :func:`_select`'s time of every candidate of ``launch`` (its fields may also be
    one array per (variant, candidate) pair, with ``hw``'s numbers gathered to match: every operation
    is element by element, so a pair gets, bit for bit, what the full arrays give it)."""
    occ, feasible = gemm_occupancy(launch, p)
    busiest = np.ceil(launch.ctas / hw.sms)  # CTAs of the busiest SM (wave quantization)

    # overlapped: the main loop's math against its operand traffic at each level
    t_compute = gemm_main_loop_s(launch, busiest, hw.rate_sm)
    t_smem = gemm_smem_feed_s(launch, busiest, hw.smem_bw)
    t_l2 = (gemm_l2_panels_s(launch, busiest, hw.l2_share) if not _has_port(hw)
            else gemm_l2_panels_s(launch, busiest, hw.l2_share, hw.sms, _port_s_per_byte(hw.l2_share, hw.l2_port_ratio)))
    dram = gemm_dram_bytes(launch, hw.sms, occ, hw.l2_capacity)
    t_dram = dram * hw.s_per_dram_byte
    t_mem = _ip(np.maximum, np.maximum(t_smem, t_l2), t_dram)

    # serial: prologue + split-K fixup once per kernel, pipeline edges (C store and first or last
    # slice) once per round of tiles (gemm_edge_rounds: once for a persistent kernel)
    rounds = gemm_edge_rounds(launch, busiest, occ)
    if _has_port(hw):  # hand-off reads and first slices taken in by SMs that read alone (gemm_serial_l2_s_per_byte)
        fix_share, edge_share = gemm_serial_l2_s_per_byte(launch, hw.l2_share, hw.sms, hw.l2_port_ratio)
        fixed = (gemm_split_k_fixup_s(launch, hw.l2_share, hw.l2_lat, fix_share) + hw.latency
                 + gemm_pipeline_edges_s(launch, hw.l2_share, hw.l2_lat, hw.rate_sm, rounds, edge_share))
    else:
        fixed = _serial_s(_serial_work(launch), rounds, hw.l2_share, hw.latency, hw.l2_lat, 1.0 / hw.rate_sm)
    total = _ip(np.add, np.maximum(t_compute, t_mem), fixed)
    return _Terms(occ, feasible, busiest, t_compute, t_smem, t_l2, dram, t_dram, t_mem, fixed, total)


@dataclass(frozen=True)
class GemmPower:
    """What the board's power limit charges every candidate kernel of a GEMM, so that the tile and split-K
    are chosen by their time at the clock the limit leaves them (:func:`gemm`'s ``power``).

    A tuner picks its kernel by speed on the board it runs on (TensorRT's builder, autotuners; cuBLAS's fixed
    heuristic is assumed tuned on the board at its own limit: docs/accuracy.md, "The kernel chosen under the
    limit"), and a board held at its power limit runs
    each candidate at the clock that candidate's power allows: a candidate that moves more bytes (a
    narrower tile, a split-K partial sum through L2) draws more of the budget and is slowed more. The
    fields are the engine's own energy model (:mod:`hwmodels.energy`, ``simulator.engines.analytical``):
    ``j_per_flop`` the matrix (or SIMT) path's energy per FLOP, ``j_per_dram_byte`` (DRAM devices plus
    the on-die path), ``j_per_l2_byte``, ``j_per_smem_byte``; ``idle_w``, ``tdp_w``; with a ``[dvfs]``
    table (``dvfs`` True) the V-f line (``ref_hz``, ``base_hz``, ``boost_hz``, ``base_voltage_fraction``:
    :func:`hwmodels.energy.dvfs_kernel`), else the constant-energy stretch
    (:func:`hwmodels.energy.power_capped_time`); ``device_s``: the device time the engine adds to every
    kernel beyond its modelled work (``efficiency.kernel_device_time_s``), over which the power is averaged
    too. Fields may be arrays over hardware variants.
    """

    j_per_flop: Any
    j_per_dram_byte: Any
    j_per_l2_byte: Any
    j_per_smem_byte: Any
    idle_w: Any
    tdp_w: Any
    dvfs: bool = False
    ref_hz: Any = 0.0
    base_hz: Any = 0.0
    boost_hz: Any = 0.0
    base_voltage_fraction: Any = 0.0
    device_s: Any = 0.0


def _capped_times(launch: GemmLaunch, power: GemmPower, t_c: np.ndarray, t_m: np.ndarray, total: np.ndarray,
                  dram: np.ndarray) -> np.ndarray:
    """Every candidate's time (s) at the clock ``power``'s limit leaves it (:class:`GemmPower`): ``total``
    (its time at the reference clock, K-loop stall included), stretched where its dynamic power (the math
    at the path's energy per FLOP, its DRAM, L2 and shared-memory bytes at theirs) over ``total`` plus the
    idle power exceeds the limit."""
    from hwmodels.energy import dvfs_kernel, power_capped_time

    ex = (Ellipsis, None)  # per-variant numbers gain the trailing candidate axis
    f = {k: np.asarray(getattr(power, k), dtype=float)[ex] for k in (
        "j_per_flop", "j_per_dram_byte", "j_per_l2_byte", "j_per_smem_byte", "idle_w", "tdp_w", "ref_hz", "base_hz",
        "boost_hz", "base_voltage_fraction", "device_s")}
    total = total + f["device_s"]
    core = 2.0 * launch.batch * launch.m * launch.n * launch.k * f["j_per_flop"]
    panels = (launch.tile_m + launch.tile_n) * launch.k_padded * launch.in_bytes
    smem = launch.ctas * (gemm_smem_bytes_per_cta(launch) + panels)
    move = (dram * f["j_per_dram_byte"] + launch.ctas * gemm_l2_bytes_per_cta(launch) * f["j_per_l2_byte"]
            + smem * f["j_per_smem_byte"])
    if not power.dvfs:
        return np.asarray(power_capped_time(total, core + move, f["idle_w"], f["tdp_w"])[0], dtype=float) - f["device_s"]
    k = dvfs_kernel(compute_s=t_c, memory_s=t_m, fixed_s=total - np.maximum(t_c, t_m), floor_s=0.0 * total,
                    core_j=core + 0.0 * total, other_j=move + 0.0 * total, ref_hz=f["ref_hz"], base_hz=f["base_hz"],
                    boost_hz=f["boost_hz"], base_voltage_fraction=f["base_voltage_fraction"], idle_w=f["idle_w"],
                    tdp_w=f["tdp_w"])
    return np.asarray(k.time_s, dtype=float) - f["device_s"]


def _capped_choice(launch: GemmLaunch, tm: _Terms, hw: _Hardware, power: GemmPower) -> dict[str, Any]:
    """:func:`_select`'s keys for the candidate whose time under the power limit is the least
    (:func:`_capped_times`), every candidate timed with its K-loop stall; the time reported is its time
    at the reference clock (the engine applies the limit to the chosen kernel as to any other)."""
    full = np.broadcast_shapes(tm.total.shape, tm.occ.shape, tm.t_compute.shape)
    b = functools.partial(np.broadcast_to, shape=full)
    stall = gemm_k_loop_stall_s(launch, b(tm.busiest), b(tm.occ), b(hw.rate_sm), b(hw.latency))
    t_c, t_m, fixed = b(tm.t_compute), b(tm.t_mem), b(tm.fixed)
    busy = np.maximum(t_c + stall, t_m)
    total = np.where(b(tm.feasible), busy + fixed, np.inf)
    capped = np.where(np.isfinite(total), _capped_times(launch, power, t_c, t_m, np.where(np.isfinite(total), total, 0.0),
                                                        b(tm.dram)), np.inf)
    if capped.shape != full:  # the power fields vary over variants where the hardware numbers do not
        full = capped.shape
        b = functools.partial(np.broadcast_to, shape=full)
        t_c, t_m, fixed, busy, total = b(t_c), b(t_m), b(fixed), b(busy), b(total)
    best = np.asarray(np.argmin(capped, axis=-1))
    if not np.all(np.isfinite(np.take_along_axis(capped, best[..., None], axis=-1))):
        raise SpecError(f"gemm m={launch.m} n={launch.n} k={launch.k}: no candidate tile fits the SM resources")

    def pick(x: Any) -> Any:
        return np.take_along_axis(b(x), best[..., None], axis=-1)[..., 0]

    exposed = np.array(pick(busy - np.maximum(t_c, t_m)), dtype=float)
    return {
        "best": best, "time": np.array(pick(total), dtype=float), "exposed": exposed, "hit": np.zeros(best.shape, bool),
        "exposed_any": exposed > 0, "latency_s": pick(fixed) + exposed,
        "t_c": pick(t_c), "t_s": pick(tm.t_smem), "t_l": pick(tm.t_l2), "t_d": pick(tm.t_dram), "t_m": pick(t_m),
        "dram": pick(tm.dram), "occ": pick(tm.occ), "prologue": pick(hw.latency),
    }


# The values of the chosen candidate :func:`_select` returns per hardware variant.
_CHOICE = ("best", "time", "exposed", "latency_s", "t_c", "t_s", "t_l", "t_d", "t_m", "dram", "occ", "prologue")


def _select(launch: GemmLaunch, p: GpuParams, hw: _Hardware, retime: bool = True) -> dict[str, Any]:
    """Every candidate of ``launch`` timed on every hardware variant, and the one a heuristic library
    picks, with its terms (keys :data:`_CHOICE`, plus ``"hit"``: the variants whose choice exposes a
    K-loop stall).

    The stall-free choice (first minimum of the total: a deterministic tie-break in table order)
    stands wherever its own K-loop stall (:func:`gemm_k_loop_stall_s`) hides under its memory time;
    a stall only lengthens a candidate, so elsewhere (``retime``) every candidate is re-timed with
    its stall.
    """
    tm = _terms(launch, p, hw)
    occ, feasible, busiest, fixed, total = tm.occ, tm.feasible, tm.busiest, tm.fixed, tm.total
    t_compute, t_smem, t_l2, dram, t_dram, t_mem = tm.t_compute, tm.t_smem, tm.t_l2, tm.dram, tm.t_dram, tm.t_mem
    if not np.all(feasible):
        total = np.where(feasible, total, np.inf)
    full = np.broadcast_shapes(total.shape, occ.shape)  # the SM limits alone may vary
    if total.shape != full:
        total = np.broadcast_to(total, full)
    ncand = full[-1]
    rows = tuple(np.indices(full[:-1]))
    best = np.asarray(np.argmin(total, axis=-1))
    t_best = _gather(total, full, rows, best)  # the minimum (NaN where argmin found one)
    if not np.all(np.isfinite(t_best)):
        raise SpecError(
            f"gemm m={launch.m} n={launch.n} k={launch.k}: no candidate tile fits the SM resources; got shared "
            f"memory {p.smem_per_sm_bytes} B/SM and {p.registers_per_sm} registers/SM; expected room for one CTA"
        )

    def stall_at(rows: tuple[np.ndarray, ...], cols: np.ndarray) -> np.ndarray:
        g = functools.partial(_gather, full=full, rows=rows, cols=cols)
        return gemm_k_loop_stall_s(launch.pick(cols), g(busiest), g(occ), g(hw.rate_sm), g(hw.latency))

    t_cb, t_mb = _gather(t_compute, full, rows, best), _gather(t_mem, full, rows, best)
    exposed = np.array(np.maximum(t_cb + stall_at(rows, best), t_mb) - np.maximum(t_cb, t_mb), dtype=float)
    time = np.array(t_best + exposed, dtype=float)
    hit = exposed > 0
    exposed_any = hit.copy()
    if retime and np.any(hit):
        rh = tuple(ix[hit][:, None] for ix in rows)
        cols = np.arange(ncand)
        t_ch, t_mh = _gather(t_compute, full, rh, cols), _gather(t_mem, full, rh, cols)
        busy = np.maximum(t_ch + stall_at(rh, cols), t_mh)
        tot = np.where(_gather(feasible, full, rh, cols), busy + _gather(fixed, full, rh, cols), np.inf)
        b_h = np.argmin(tot, axis=-1)[..., None]
        best[hit] = b_h[..., 0]
        time[hit] = np.take_along_axis(tot, b_h, axis=-1)[..., 0]
        exposed[hit] = np.take_along_axis(busy - np.maximum(t_ch, t_mh), b_h, axis=-1)[..., 0]
        hit = np.zeros_like(hit)

    def pick(x: np.ndarray) -> Any:  # the chosen candidate's value, per hardware variant
        if np.ndim(x) <= 1:  # the same for every variant: a plain take (sweeps)
            return np.take(np.broadcast_to(x, full[-1:]), best)
        return np.take_along_axis(np.broadcast_to(x, full), best[..., None], axis=-1)[..., 0]

    return {
        "best": best, "time": time, "exposed": exposed, "hit": hit, "exposed_any": exposed_any,
        "latency_s": _gather(fixed, full, rows, best) + exposed,
        "t_c": pick(t_compute), "t_s": pick(t_smem), "t_l": pick(t_l2), "t_d": pick(t_dram), "t_m": pick(t_mem),
        "dram": pick(dram), "occ": pick(occ), "prologue": pick(hw.latency),
    }


#: Hardware variants from which :func:`gemm` first sets aside the candidates no variant can choose
#: (:func:`_survivors`); for fewer the check costs more than it saves. Only speed depends on it.
PRUNE_MIN_VARIANTS = 16


@dataclass
class _Pruned:
    """The candidates some variant can choose (:func:`_survivors`), cached per launch and keys."""

    keep: np.ndarray  # for the stall-free choice
    sub: GemmLaunch
    keep_s: np.ndarray | None  # for the re-timing with K-loop stalls (None: all candidates)
    sub_s: GemmLaunch | None
    stalls: bool = False  # the last call re-timed most variants: re-time all at once (speed only)


_SURVIVORS: dict[tuple[Any, ...], _Pruned | None] = {}
_SURVIVORS_MAX = 512


def _undominated(keys: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Indices of the feasible candidates (columns of ``keys``) with no earlier feasible candidate
    that is no larger in every key (row)."""
    ncand = keys.shape[1]
    no_larger = np.all(keys[:, :, None] <= keys[:, None, :], axis=0)  # [i, j]: i nowhere larger than j
    no_larger &= ok[:, None] & np.triu(np.ones((ncand, ncand), dtype=bool), 1)  # i feasible, before j
    return np.flatnonzero(ok & ~no_larger.any(axis=0))


def _survivors(key: tuple[Any, ...], launch: GemmLaunch, p: GpuParams, hw: _Hardware) -> _Pruned | None:
    """The candidates that some hardware variant can choose (:class:`_Pruned`: for the stall-free
    choice and, where derivable, for the re-timing with K-loop stalls), or None where this is not
    shown cheaply (then all are timed). Cached per launch, SM limits and fixed hardware numbers.

    Each term of :func:`_select` is built from per-candidate numbers (the keys below) and per-variant
    hardware numbers by products with non-negative numbers, quotients by positive ones, sums,
    maxima, minima and ceilings: IEEE-754 rounding is monotone in each operand of each of these, so a
    candidate whose every key is no larger than another's is nowhere slower, in floating point too.
    A candidate is set aside when an earlier feasible one (table order: the tie-break) is no larger
    in every key: the first minimum is then never it. This holds for all variants at once when the
    keys are per-candidate only: the SM limits (occupancy, feasibility) and the DRAM bytes do not
    vary, the hardware is one axis of variants, and its numbers are finite and >= 0. The K-loop
    stall (:func:`gemm_k_loop_stall_s`) grows with the CTA rounds and the stall groups and shrinks
    with the pipeline depth and the math of one slice; with those four keys (the last two negated)
    the same argument covers the re-timing, when the SM count does not vary. An implicit-GEMM A
    operand (:class:`ImplicitOperand`) enters only through the DRAM bytes, a per-candidate key that
    :func:`gemm_dram_bytes` forms here exactly as in :func:`_select`; the launch (and so the key of
    the cache) carries it.
    """
    limits = (p.registers_per_sm, p.smem_per_sm_bytes, p.max_threads_per_sm, p.max_ctas_per_sm,
              p.max_smem_per_cta_bytes)
    if any(np.size(x) != 1 for x in limits):  # occupancy and feasibility vary
        return None
    hw_arrays = tuple(getattr(hw, f.name) for f in dataclasses.fields(hw))
    hw_shape = np.broadcast_shapes(*(x.shape for x in hw_arrays))
    if len(hw_shape) != 2 or hw_shape[0] < PRUNE_MIN_VARIANTS:
        return None
    if not all(bool(np.all(np.isfinite(x) & (x >= 0))) for x in hw_arrays) or not bool(np.all(hw.sms > 0)):
        return None
    # the keys below depend on the launch, the SM limits, the hardware numbers that do not vary and
    # which ones do: a call with the same of these finds its answer without recomputing them
    sig = (key, tuple(np.asarray(x).item() for x in limits),
           tuple(x.item() if x.size == 1 else None for x in hw_arrays))
    if sig in _SURVIVORS:
        return _SURVIVORS[sig]
    got = _survivors_of(launch, p, hw)
    if len(_SURVIVORS) >= _SURVIVORS_MAX:
        _SURVIVORS.clear()
    _SURVIVORS[sig] = got
    return got


def _survivors_of(launch: GemmLaunch, p: GpuParams, hw: _Hardware) -> _Pruned | None:
    if (hw.sms.size > 1 or hw.l2_capacity.size > 1) and bool(np.any(_operand_bytes(launch) > hw.l2_capacity)):
        return None  # the operands' waves depend on the SM count or the L2 capacity (as below, found sooner)
    occ, feasible = gemm_occupancy(launch, p)
    dram = gemm_dram_bytes(launch, hw.sms, occ, hw.l2_capacity)
    if np.ndim(dram) > 1:  # the operands' waves depend on the SM count or the L2 capacity
        return None
    busiest = np.ceil(launch.ctas / hw.sms)
    per_candidate = busiest.ndim <= 1
    fix_bytes, fix_hops = _fixup_l2_work(launch)
    store_bytes, store_hops = _c_store_l2_work(launch)
    slice_bytes, slice_flops = _slice_work(launch)

    # Each node of the total is (its exact per-candidate value, []) where no hardware number in it
    # varies (computed as _select computes it), else (None, the keys it grows with).
    def leaf(value: Any, keys: list[Any], *hw_numbers: np.ndarray, busy: bool = False) -> tuple[Any, list[Any]]:
        if all(x.size == 1 for x in hw_numbers) and (per_candidate or not busy):
            return value(), []
        return None, keys

    def busy_keys(per_cta: Any) -> list[Any]:  # the busiest SM's CTAs times a per-CTA quantity
        return [busiest * per_cta] if per_candidate else [launch.ctas, per_cta]

    def join(op: Any, *nodes: tuple[Any, list[Any]]) -> tuple[Any, list[Any]]:
        if all(v is not None for v, _ in nodes):
            return op(*(v for v, _ in nodes)), []
        return None, keys_of(*nodes)

    def keys_of(*nodes: tuple[Any, list[Any]]) -> list[Any]:
        return [x for v, ks in nodes for x in ([v] if v is not None else ks)]

    t_c = leaf(lambda: gemm_main_loop_s(launch, busiest, hw.rate_sm),
               busy_keys(2.0 * launch.tile_m * launch.tile_n * launch.k_padded), hw.rate_sm, busy=True)
    t_s = leaf(lambda: gemm_smem_feed_s(launch, busiest, hw.smem_bw), busy_keys(gemm_smem_return_bytes_per_cta(launch)),
               hw.smem_bw, busy=True)
    t_l = leaf(lambda: gemm_l2_panels_s(launch, busiest, hw.l2_share), busy_keys(gemm_l2_bytes_per_cta(launch)),
               hw.l2_share, busy=True)
    t_d = leaf(lambda: dram * hw.s_per_dram_byte, [dram], hw.s_per_dram_byte)
    t_mem = join(np.maximum, join(np.maximum, t_s, t_l), t_d)
    serial = join(np.add, leaf(lambda: hw.l2_share * fix_bytes, [fix_bytes], hw.l2_share),
                  leaf(lambda: hw.latency + hw.l2_lat * fix_hops, [fix_hops], hw.latency, hw.l2_lat))
    store = join(np.add, leaf(lambda: hw.l2_share * store_bytes, [store_bytes], hw.l2_share),
                 leaf(lambda: hw.l2_lat * store_hops, [store_hops], hw.l2_lat))
    edge = join(np.add, store, join(np.minimum, leaf(lambda: hw.l2_share * slice_bytes, [slice_bytes], hw.l2_share),
                                    leaf(lambda: slice_flops * (1.0 / hw.rate_sm), [slice_flops], hw.rate_sm)))
    # the edges' rounds grow with the CTAs and shrink with the occupancy (a persistent kernel: one round,
    # no larger than any; a non-persistent candidate, ctas >= 1, never dominates a persistent one)
    other = 1.0 - launch.persistent
    rounds = leaf(lambda: gemm_edge_rounds(launch, busiest, occ), [launch.ctas * other, -occ * other], hw.sms,
                  busy=True)
    fixed = join(np.add, serial, join(np.multiply, rounds, edge))
    keys = keys_of(join(np.add, join(np.maximum, t_c, t_mem), fixed))
    keys_stall = keys_of(t_c, t_mem, fixed)  # the re-timing adds the stall to the math alone
    ncand = launch.ctas.shape[0]
    ok = np.broadcast_to(feasible, (ncand,))
    if not ok.any():
        return None  # no candidate fits: the full path raises

    def stacked(xs: list[Any]) -> np.ndarray:
        return np.stack([np.broadcast_to(np.asarray(x, dtype=float), (ncand,)) for x in xs])

    k = stacked(keys)
    k_stall = None
    if per_candidate:  # the K-loop stall's keys, as gemm_k_loop_stall_s and pipeline_stall_s form them
        q = np.minimum(occ, busiest)
        groups = np.floor(np.maximum(launch.k_padded / launch.tile_k - 1.0, 0.0) / launch.depth)
        slice_math = q * 2.0 * launch.tile_m * launch.tile_n * launch.tile_k
        k_stall = stacked(keys_stall + [np.ceil(busiest / q), groups, -(launch.depth - 1.0), -slice_math])
    keep = _undominated(k, ok)
    keep_s = None if k_stall is None else _undominated(k_stall, ok)
    return _Pruned(keep, _sub_launch(launch, keep), keep_s, None if keep_s is None else _sub_launch(launch, keep_s))


def _sub_launch(launch: GemmLaunch, keep: np.ndarray) -> GemmLaunch:
    return dataclasses.replace(launch, **{f: _frozen(getattr(launch, f)[keep]) for f in _LAUNCH_ARRAYS})


def _frozen(x: np.ndarray) -> np.ndarray:
    x.setflags(write=False)
    return x


@functools.lru_cache(maxsize=1024)
def _cached_launch(m: int, n: int, k: int, candidates: tuple[TileCandidate, ...], split_k: tuple[int, ...],
                   batch: int, in_bytes: float, out_bytes: float, b_shared: bool,
                   a_operand: ImplicitOperand | None, l2_resident_bytes: float = 0.0) -> GemmLaunch:
    g = gemm_launch(m, n, k, candidates, split_k, batch=batch, in_bytes=in_bytes, out_bytes=out_bytes,
                    b_shared=b_shared, a_operand=a_operand, l2_resident_bytes=l2_resident_bytes)
    for f in _LAUNCH_ARRAYS:
        v = getattr(g, f)
        if v.flags.writeable:
            v.setflags(write=False)
    return g


def _variant_rows(p: GpuParams, rows: np.ndarray | slice, n: int) -> GpuParams:
    """``p`` restricted to the hardware variants ``rows`` (indices or a slice of a one-axis sweep of ``n``)."""
    kw = {}
    for f in dataclasses.fields(p):
        v = getattr(p, f.name)
        if isinstance(v, np.ndarray) and v.ndim == 1 and v.shape[0] == n:
            kw[f.name] = v[rows]
    return dataclasses.replace(p, **kw)


#: Hardware variants :func:`gemm` times at once in a one-axis sweep: its (variants x candidates)
#: arrays then stay in the CPU caches. Only speed depends on it.
GEMM_BLOCK_VARIANTS = 2048


def _pruned_choice(pr: _Pruned, launch: GemmLaunch, p: GpuParams, hw: _Hardware) -> dict[str, Any] | None:
    """:func:`_select`'s choice over the surviving candidates ``pr`` (indices into ``launch``), or
    None where no time term varies (then all candidates are timed)."""
    if pr.stalls and pr.keep_s is not None:  # every variant timed with the stalls at once
        choice = _select(pr.sub_s, p, hw)
        choice["best"] = pr.keep_s[choice["best"]]
        pr.stalls = bool(np.mean(choice.pop("exposed_any")) > 0.5)
        return choice
    choice = _select(pr.sub, p, hw, retime=False)
    choice["best"] = pr.keep[choice["best"]]
    hit = choice.pop("hit")
    choice.pop("exposed_any")
    if hit.ndim != 1:
        return None
    if np.any(hit):  # those variants' choice exposes a stall: re-time them with the stalls
        rows = np.flatnonzero(hit)
        ph = _variant_rows(p, rows, hit.shape[0])
        again = _select(launch if pr.sub_s is None else pr.sub_s, ph, _hardware(ph))
        if pr.keep_s is not None:
            again["best"] = pr.keep_s[again["best"]]
        for name in _CHOICE:
            choice[name][rows] = again[name]
        pr.stalls = rows.shape[0] > 0.5 * hit.shape[0]
    return choice


def gemm(
    m: int,
    n: int,
    k: int,
    p: GpuParams,
    candidates: tuple[TileCandidate, ...],
    *,
    batch: int = 1,
    in_bytes: float = 2.0,
    out_bytes: float = 2.0,
    b_shared: bool = False,
    split_k: tuple[int, ...] = SPLIT_K_FACTORS,
    a_operand: ImplicitOperand | None = None,
    power: GemmPower | None = None,
    l2_resident_bytes: float = 0.0,
) -> GemmEstimate:
    """Time of ``batch`` GEMMs ``C[m,n] = A[m,k] @ B[k,n]`` with the best candidate tile and split-K.

    Parameters
    ----------
    m, n, k, batch
        Problem sizes (elements); ``batch`` independent GEMMs in one launch (batched GEMM, conv
        groups, attention heads).
    p
        Hardware parameters (arrays broadcast).
    candidates
        Tiles to choose among (:func:`tile_candidates`).
    in_bytes, out_bytes
        Bytes per element of the operands and of C.
    b_shared
        True when all batch entries share one B (counted once in DRAM traffic).
    split_k
        Split-K factors to consider; split-K partial sums (fp32) are reduced through L2/DRAM by a
        serial fixup (``fixup_s`` of the result).
    a_operand
        A is the implicit im2col matrix of a convolution (:class:`ImplicitOperand`, per batch
        entry: one conv group): every candidate's DRAM term, and so the choice of tile, the memory
        time and the bound term, counts the source tensor's traffic (:func:`gemm_dram_bytes`); the
        L2 and shared-memory terms keep the im2col panels the CTAs load.
    power
        The board's power limit and the energy model (:class:`GemmPower`): the candidate chosen is
        the fastest at the clock the limit leaves each one (:func:`_capped_choice`), not the fastest
        at the reference clock; every candidate is then timed on every variant. None: power-blind.
    l2_resident_bytes
        A and B bytes already in L2 at the start (:attr:`GemmLaunch.resident_bytes`).

    Returns
    -------
    GemmEstimate
        Arrays over the hardware shape; ``tile``/``split_k``/``waves`` describe the chosen kernel.
        ``compute_s`` is the main loop's math (:func:`gemm_main_loop_s`), ``memory_s`` the largest
        of the shared-memory feed, the L2 panels and the DRAM traffic (:func:`gemm_smem_feed_s`,
        :func:`gemm_l2_panels_s`, :func:`gemm_dram_bytes`); ``latency_s`` is the prologue (one
        DRAM latency), the pipeline edges (:func:`gemm_pipeline_edges_s`, once per round of tiles of a
        non-persistent kernel: :func:`gemm_edge_rounds`), the split-K fixup
        (:func:`gemm_split_k_fixup_s`), plus the part of the K-loop load stall
        (:func:`gemm_k_loop_stall_s`) not hidden under ``memory_s``. ``bound_term`` names the
        largest of these (:data:`GEMM_TERMS`).

    Notes
    -----
    Over a one-axis sweep of at least :data:`PRUNE_MIN_VARIANTS` hardware variants, candidates that
    no variant can choose are first set aside (:func:`_survivors`: an earlier candidate is no larger
    in every per-candidate quantity of the terms); the variants whose choice exposes a K-loop stall
    are then re-timed over all candidates. The result is the same, bit for bit, as timing every
    candidate on every variant.

    Examples
    --------
    A 4096^3 BF16 GEMM is compute-bound on any modern GPU; its time is close to
    ``2 * 4096**3 / (peak * tensor_peak_fraction)`` (see the tests for hand-worked cases).
    """
    if min(m, n, k, batch) < 1:
        raise ValueError(f"gemm: sizes must be positive; got m={m}, n={n}, k={k}, batch={batch}; expected >= 1")
    key = (m, n, k, tuple(candidates), tuple(split_k), batch, in_bytes, out_bytes, b_shared, a_operand, float(l2_resident_bytes))
    launch = _cached_launch(*key)
    hw = _hardware(p)
    if power is not None:
        return _gemm_estimate(launch, _capped_choice(launch, _terms(launch, p, hw), hw, power), p, hw, in_bytes)
    return _gemm_estimate(launch, _gemm_choice(key, launch, p, hw), p, hw, in_bytes)


def _flop_per_byte(launch: GemmLaunch) -> float:
    return 2.0 * launch.batch * launch.m * launch.n * launch.k / (
        _operand_bytes(launch) + launch.batch * launch.m * launch.n * launch.out_bytes)


def _has_port(hw: _Hardware) -> bool:
    """Whether any variant's SMs take in L2 tile traffic faster than their share when SMs idle
    (:func:`gemm_l2_panels_s`); the pruned and bounded sweep paths do not cover that term, so such
    variants time every candidate (:func:`_select`)."""
    return bool(np.any(hw.l2_port_ratio > 1.0))


def _gemm_choice(key: tuple[Any, ...], launch: GemmLaunch, p: GpuParams, hw: _Hardware) -> dict[str, Any]:
    """:func:`_select`'s choice, by the fastest of its exact paths: each variant's own bounds
    (:func:`_bounded_choice`) where candidates cannot be set aside for all variants at once
    (:func:`_survivors`), or where they can but the SM count is fixed, the tiles run on the matrix unit
    (SIMT tiles expose K-loop stalls on most variants) and the GEMM does enough math per byte for the
    bounds to be tight; else the candidates set aside for all variants (:func:`_blocked_choice`); else
    every candidate (:func:`_select`)."""
    if _few_variants(hw) or _has_port(hw):
        return _select(launch, p, hw)
    choice = None
    if _survivors(key, launch, p, hw) is None:  # (cached)
        choice = _bounded_choice(key, launch, p, hw)
    elif hw.sms.size == 1 and p.uses_matrix_unit and _flop_per_byte(launch) >= BOUNDED_MIN_FLOP_PER_BYTE:
        choice = _bounded_choice(key, launch, p, hw, BOUNDED_MAX_PAIRS)
    if choice is None:
        choice = _blocked_choice(key, launch, p, hw)
    return _select(launch, p, hw) if choice is None else choice


def _blocked_choice(key: tuple[Any, ...], launch: GemmLaunch, p: GpuParams, hw: _Hardware) -> dict[str, Any] | None:
    """:func:`_select`'s choice over the surviving candidates (:func:`_survivors`) of a one-axis sweep, in
    blocks of :data:`GEMM_BLOCK_VARIANTS` variants whose arrays stay in the CPU caches; None where the
    candidates are not pruned (then all are timed)."""
    pr = _survivors(key, launch, p, hw)
    if pr is None:
        return None
    n_var = int(np.broadcast_shapes(*(getattr(hw, f.name).shape for f in dataclasses.fields(hw)))[0])
    parts = []
    for lo in range(0, n_var, GEMM_BLOCK_VARIANTS):
        if n_var <= GEMM_BLOCK_VARIANTS:
            part = _pruned_choice(pr, launch, p, hw)
        else:
            pb = _variant_rows(p, slice(lo, lo + GEMM_BLOCK_VARIANTS), n_var)
            part = _pruned_choice(pr, launch, pb, _hardware(pb))
        if part is None:
            return None
        parts.append(part)
    return parts[0] if len(parts) == 1 else {f: np.concatenate([c[f] for c in parts]) for f in _CHOICE}


# With the SM count (or the L2 capacity) varied, a candidate's waves and DRAM bytes differ from
# variant to variant, and no candidate can be set aside for all variants at once (:func:`_survivors`).
# :func:`_bounded_choice` groups the variants by SM count and L2 capacity, sets candidates aside per
# group, and has each variant time only the candidates its own lower bound cannot rule out.

#: Relative slack of the bounds :func:`_bounded_choice` sets candidates aside with: far above the
#: rounding of the few operations that form them, so a candidate set aside is slower than the bound
#: in any rounding. Only speed depends on it.
BOUND_SLACK = 1e-9
#: Candidates per variant (on average) above which :func:`_bounded_choice` gives way to the candidates
#: set aside for all variants at once (:func:`_survivors`), where those can be. Only speed depends on it.
BOUNDED_MAX_PAIRS = 5
#: FLOP per byte of A, B and C once below which a GEMM's bounds are loose (its memory and serial times,
#: near-equal over the candidates, decide), so that :func:`_bounded_choice` is not tried where candidates
#: can be set aside for all variants at once. Only speed depends on it.
BOUNDED_MIN_FLOP_PER_BYTE = 256.0
_LOG_CLIP = 745.0  # |log| of every positive finite double is below it
_LOG_BAND = 2048.0  # offset between the log-keys of two groups: wider than two clips


def _few_variants(hw: _Hardware) -> bool:
    """Fewer hardware variants than :data:`PRUNE_MIN_VARIANTS` (one device: the usual case)."""
    return max(hw.sms.size, hw.rate_sm.size, hw.l2_share.size, hw.latency.size, hw.l2_lat.size, hw.smem_bw.size,
               hw.s_per_dram_byte.size, hw.l2_capacity.size) < PRUNE_MIN_VARIANTS


def _variant_count(p: GpuParams, hw: _Hardware) -> int | None:
    """Variants of a one-axis sweep :func:`_bounded_choice` takes (at least :data:`PRUNE_MIN_VARIANTS`;
    finite, non-negative hardware numbers; positive SM count and rates; SM limits the same for all), else None."""
    if _few_variants(hw):
        return None
    hw_arrays = tuple(getattr(hw, f.name) for f in dataclasses.fields(hw))
    limits = (p.registers_per_sm, p.smem_per_sm_bytes, p.max_threads_per_sm, p.max_ctas_per_sm,
              p.max_smem_per_cta_bytes)
    if any(np.size(x) != 1 for x in limits):
        return None
    shape = np.broadcast_shapes(*(x.shape for x in hw_arrays))
    if len(shape) != 2 or shape[0] < PRUNE_MIN_VARIANTS:
        return None
    if not all(bool(np.all(np.isfinite(x) & (x >= 0))) for x in hw_arrays):
        return None
    if not all(bool(np.all(x > 0)) for x in (hw.sms, hw.rate_sm, hw.smem_bw, hw.l2_share, hw.s_per_dram_byte)):
        return None
    return int(shape[0])


@dataclass(frozen=True)
class _Sweep:
    """A one-axis sweep of ``n`` variants in group order (variants of one SM count and L2 capacity
    together): ``order`` (original index of each), ``gid`` (group of each), ``starts`` (first position
    of each group); per-variant hardware numbers in that order (a float where all variants share it)."""

    n: int
    order: np.ndarray | None  # None: the given order (one group)
    gid: np.ndarray
    starts: np.ndarray
    mult: np.ndarray  # (4, n): s per FLOP, per shared-memory byte, per L2 byte, per DRAM byte of the busiest SM
    sms: Any
    cap: Any
    rate_sm: Any
    l2_share: Any
    latency: Any
    l2_lat: Any
    serial_per_group: bool  # the hardware numbers of the serial time (but s per FLOP) are one per group
    mult_per_group: tuple[bool, ...]  # which rows of ``mult`` are one number per group


def _sweep(hw: _Hardware, n: int) -> _Sweep:
    def flat(x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x.reshape(-1), (n,))

    sms, cap = flat(hw.sms), flat(hw.l2_capacity)
    order: np.ndarray | None = None
    if hw.sms.size == 1 and hw.l2_capacity.size == 1:  # one group, in the given order
        gid, starts = np.zeros(n, dtype=np.intp), np.zeros(1, dtype=np.intp)
    else:
        order = np.argsort(sms) if hw.l2_capacity.size == 1 else np.lexsort((sms, cap))  # (any order in a group)
        s, c = sms[order], cap[order]
        new = np.r_[True, (s[1:] != s[:-1]) | (c[1:] != c[:-1])]
        gid, starts = np.cumsum(new) - 1, np.flatnonzero(new)

    def var(x: np.ndarray) -> Any:
        if x.size == 1:
            return float(x.reshape(-1)[0])
        return flat(x) if order is None else flat(x)[order]

    mult = np.stack([np.broadcast_to(var(x), (n,)) for x in (1.0 / hw.rate_sm, 1.0 / hw.smem_bw, hw.l2_share,
                                                             hw.s_per_dram_byte)])
    serial = [var(x) for x in (hw.l2_share, hw.latency, hw.l2_lat)]

    def per_group(x: Any) -> bool:
        return np.ndim(x) == 0 or np.array_equal(x, x[starts][gid])

    return _Sweep(n, order, gid, starts, mult, var(hw.sms), var(hw.l2_capacity), var(hw.rate_sm), *serial,
                  all(per_group(x) for x in serial),
                  tuple(x.size == 1 or per_group(m) for x, m in zip((hw.rate_sm, hw.smem_bw, hw.l2_share,
                                                                      hw.s_per_dram_byte), mult, strict=True)))


def _at(x: Any, rows: np.ndarray | None) -> Any:
    return x if np.ndim(x) == 0 or rows is None else x[rows]


@dataclass(frozen=True)
class _GroupTables:
    """Per group and candidate (flat index ``group * candidates + candidate``): the four per-candidate
    factors of the overlapped terms of :func:`_terms` (main-loop FLOP, shared-memory, L2 and DRAM bytes of
    the busiest SM or of the launch, formed as there; infinite for a candidate that does not fit), the
    rounds of pipeline edges and, where :attr:`_Sweep.serial_per_group`, the serial time's parts."""

    keys: np.ndarray  # (4, groups, candidates)
    rounds: np.ndarray  # (groups, candidates)
    serial: np.ndarray | None  # (5, groups * candidates): _serial_parts, rounds, slice FLOP
    work: tuple[ArrayLike, ...]  # :func:`_serial_work`, per candidate
    occ: np.ndarray  # CTAs resident per SM, per candidate
    fixed_overlap: np.ndarray | None  # (groups * candidates): the largest product of the keys whose
    #                                   variant number is one per group (None: none is)
    varying: tuple[int, ...]  # the other keys
    live: np.ndarray  # ``keys``, infinite also for a candidate set aside in its group (:func:`_dominated_in_groups`)


_GROUP_KEYS: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
_GROUP_KEYS_MAX = 16  # (an entry is 5 numbers and a flag per group and candidate)


def _group_tables(key: tuple[Any, ...], launch: GemmLaunch, sw: _Sweep, occ: np.ndarray,
                  ok: np.ndarray) -> _GroupTables:
    def per_group(x: Any) -> np.ndarray:
        return np.broadcast_to(np.reshape(_at(x, sw.starts), (-1, 1)), (sw.starts.shape[0], 1))

    gs, gc = per_group(sw.sms), per_group(sw.cap)
    # the keys, rounds and dominance depend on the problem, the groups' SM counts and L2 capacities and
    # the SM limits only: a sweep in chunks, or a second call, finds them without recomputing them
    sig = (key, gs.tobytes(), gc.tobytes(), np.asarray(occ).tobytes(), ok.tobytes())
    got = _GROUP_KEYS.get(sig)
    if got is None:
        busiest = np.ceil(launch.ctas / gs)
        keys = np.empty((4,) + busiest.shape)
        np.multiply(busiest, 2.0 * launch.tile_m * launch.tile_n * launch.k_padded, out=keys[0])
        np.multiply(busiest, gemm_smem_return_bytes_per_cta(launch), out=keys[1])
        np.multiply(busiest, gemm_l2_bytes_per_cta(launch), out=keys[2])
        keys[3] = gemm_dram_bytes(launch, gs, occ, gc)
        keys[:, :, ~ok] = np.inf
        rounds = gemm_edge_rounds(launch, busiest, occ)
        got = (keys, rounds, np.where(_dominated_in_groups(keys, rounds, _ordered_pairs(key, launch, ok)), np.inf, keys))
        for x in got:
            x.setflags(write=False)
        if len(_GROUP_KEYS) >= _GROUP_KEYS_MAX:
            _GROUP_KEYS.clear()
        _GROUP_KEYS[sig] = got
    keys, rounds, live = got
    work = _serial_work(launch)
    serial = None
    if sw.serial_per_group:
        parts = _serial_parts(work, per_group(sw.l2_share), per_group(sw.latency), per_group(sw.l2_lat))
        serial = np.stack([np.broadcast_to(x, rounds.shape) for x in (*parts, rounds, work[5])]).reshape(5, -1)
    fixed = [i for i in range(4) if sw.mult_per_group[i]]
    overlap = None
    if fixed:  # the same products as per variant: the group's number is each of its variants'
        overlap = np.max(keys[fixed] * sw.mult[fixed][:, sw.starts, None], axis=0).reshape(-1)
    return _GroupTables(keys, rounds, serial, work, occ, overlap, tuple(i for i in range(4) if i not in fixed),
                        live)


_ORDERED_PAIRS: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}


def _ordered_pairs(key: tuple[Any, ...], launch: GemmLaunch, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(earlier, later) candidates of the same tile or the same split-K factor, the earlier one fitting and
    nowhere larger in the serial work (:func:`_serial_work`), grouped by the later one; cached per launch."""
    sig = (key, ok.tobytes())
    got = _ORDERED_PAIRS.get(sig)
    if got is None:
        ncand = ok.shape[0]
        work = np.stack([np.broadcast_to(np.asarray(w, dtype=float), (ncand,)) for w in _serial_work(launch)])
        pre = np.all(work[:, :, None] <= work[:, None, :], axis=0)  # [i, j]: i nowhere larger than j
        pre &= ok[:, None] & np.triu(np.ones((ncand, ncand), dtype=bool), 1)
        pre &= (launch.name[:, None] == launch.name[None, :]) | (launch.split[:, None] == launch.split[None, :])
        pj, pi = np.nonzero(pre.T)
        if len(_ORDERED_PAIRS) >= _SURVIVORS_MAX:
            _ORDERED_PAIRS.clear()
        got = _ORDERED_PAIRS[sig] = (pi, pj)
    return got


def _dominated_in_groups(keys: np.ndarray, rounds: np.ndarray, pairs: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per group and candidate: whether an earlier candidate of ``pairs`` (:func:`_ordered_pairs`) is no
    larger in any per-candidate number of the group's times either (``keys``, the ``rounds`` of pipeline
    edges), so that it is never the first minimum (:func:`_survivors`' argument, per group)."""
    pi, pj = pairs
    out = np.zeros(rounds.shape[::-1], dtype=bool)  # candidates x groups
    if pj.shape[0] == 0:
        return out.T
    by_cand = [np.ascontiguousarray(k.T) for k in (*keys, rounds)]  # rows: candidates
    dom = by_cand[0][pi] <= by_cand[0][pj]
    for k in by_cand[1:]:
        dom &= k[pi] <= k[pj]
    js, at = np.unique(pj, return_index=True)
    out[js] = np.logical_or.reduceat(dom, at, axis=0)
    return out.T


def _overlapped(tables: _GroupTables, sw: _Sweep, flat: np.ndarray, size: np.ndarray | None = None) -> np.ndarray:
    """The overlapped time of the candidates ``flat``, one per variant or ``size`` per variant in turn:
    ``max(t_compute, t_mem)`` of :func:`_terms` bit for bit, the largest of the four products of a key
    and a variant's number, formed as there (those of a number one per group, from the group table)."""
    keys = tables.keys.reshape(4, -1)
    lb = None if tables.fixed_overlap is None else np.take(tables.fixed_overlap, flat)
    for i in tables.varying:
        prod = np.take(keys[i], flat)
        prod *= sw.mult[i] if size is None else np.repeat(sw.mult[i], size)
        lb = prod if lb is None else np.maximum(lb, prod, out=lb)
    return lb


def _per_pair(x: Any, size: np.ndarray | None) -> Any:
    """A per-variant number for each pair: ``size`` pairs per variant in turn (None: one)."""
    return x if np.ndim(x) == 0 or size is None else np.repeat(x, size)


def _pair_time(tables: _GroupTables, sw: _Sweep, size: np.ndarray | None, flat: np.ndarray,
               lb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_terms`' (serial time, total) of the (variant, candidate) pairs ``flat`` (``size`` per variant
    in turn; None: one) of overlapped time ``lb`` (:func:`_overlapped`): the same operations, element by
    element."""
    spf = _per_pair(sw.mult[0], size)
    if tables.serial is not None:
        s = np.take(tables.serial, flat, axis=1)
        fixed = _serial_join((s[0], s[1], s[2]), s[3], s[4], spf)
    else:
        ncand = tables.rounds.shape[1]
        cand = flat % ncand
        work = tuple(w if np.ndim(w) == 0 else np.take(w, cand) for w in tables.work)
        parts = _serial_parts(work, _per_pair(sw.l2_share, size), _per_pair(sw.latency, size),
                              _per_pair(sw.l2_lat, size))
        fixed = _serial_join(parts, np.take(tables.rounds, flat), work[5], spf)
    return fixed, lb + fixed


def _candidates_within(tables: _GroupTables, sw: _Sweep, which: np.ndarray,
                       limit: np.ndarray) -> tuple[np.ndarray, ...]:
    """The (variant, candidate) pairs that may be a variant's first minimum: (pairs of each variant, flat
    indices, overlapped times), variant by variant. They include every candidate whose overlapped time is within
    the variant's ``limit`` that no earlier one dominates in the group (:attr:`_GroupTables.live`).

    Each variant takes a prefix of its group's candidates in the order of one key (``which``, per group:
    :func:`_prefix_keys`), up to where that key alone exceeds the limit (a few more where the values are
    within 1e-6 relative). One search serves all groups: the log-keys of group ``g`` lie in their own
    band, ``g * _LOG_BAND +- _LOG_CLIP``."""
    keys = tables.keys
    _, ngroups, ncand = keys.shape
    lim = np.minimum(limit / sw.mult, 1e300)  # (4, n): the most each key may be
    gid = sw.gid
    lim_w = lim[which[gid], np.arange(sw.n)] * (1.0 + 1e-6)
    chosen = tables.live[which, np.arange(ngroups)]
    order = np.argsort(chosen, axis=1)
    band = np.log(np.take_along_axis(chosen, order, axis=1))
    np.clip(band, -_LOG_CLIP, _LOG_CLIP, out=band)
    band += (np.arange(ngroups) * _LOG_BAND)[:, None]
    q = np.log(lim_w)
    q = np.clip(q, -_LOG_CLIP, _LOG_CLIP, out=q) + gid * _LOG_BAND
    size = np.searchsorted(band.reshape(-1), q, side="right") - gid * ncand
    order += (np.arange(ngroups) * ncand)[:, None]  # flat indices
    flat = np.take(order, np.arange(size.sum()) + np.repeat(gid * ncand - (np.cumsum(size) - size), size))
    return size, flat, _overlapped(tables, sw, flat, size)


def _bounded_choice(key: tuple[Any, ...], launch: GemmLaunch, p: GpuParams, hw: _Hardware,
                    max_pairs: float = math.inf) -> dict[str, Any] | None:
    """:func:`_select`'s choice on a one-axis sweep (:func:`_variant_count`; the SM count and L2 capacity
    may vary), each variant timing only the candidates that may be its first minimum; None where this
    does not apply (then all candidates are timed).

    Variants of one SM count and L2 capacity form a group: each candidate's waves, DRAM bytes and
    rounds of pipeline edges are the same across it (:func:`_group_tables`), and a candidate that an
    earlier one matches or beats in every per-candidate number is set aside for the group
    (:func:`_dominated_in_groups`). Every candidate's time is at least its overlapped time plus the
    prologue's DRAM latency and one L2 latency (the C store's), and the overlapped time is the largest
    of four products of a group-table number and a variant's hardware number. A candidate whose bound
    exceeds, by :data:`BOUND_SLACK`, the time of the group's candidate of least overlapped time on its
    first variant, timed on the variant, cannot be its first minimum; the others are timed exactly, as
    :func:`_terms` times them (the same operations, element by element), so the choice and every term
    are :func:`_select`'s, bit for bit. None also where a sample of variants keeps more than
    ``max_pairs`` candidates on average (:func:`_prefix_keys`: the bounds are loose, near-equal terms or
    much serial time).
    """
    n = _variant_count(p, hw)
    if n is None:
        return None
    occ, feasible = gemm_occupancy(launch, p)
    ok = np.broadcast_to(feasible, launch.ctas.shape)
    if not ok.any():
        return None  # no candidate fits: the full path raises
    sw = _sweep(hw, n)
    tables = _group_tables(key, launch, sw, occ, ok)
    serial = None if tables.serial is None else (tables.serial[0] + tables.serial[3] * tables.serial[1])
    floor = np.broadcast_to(sw.latency, (n,)) + sw.l2_lat  # every candidate's serial time is at least this
    sample = np.unique(np.r_[sw.starts, np.linspace(0, n - 1, 16).astype(np.intp)])
    if max_pairs < math.inf:  # about: each sampled variant bounded by its least overlapped plus serial time
        at = np.max(tables.live[:, sw.gid[sample]] * sw.mult[:, sample, None], axis=0)
        if serial is not None:
            at += serial.reshape(tables.rounds.shape)[sw.gid[sample]]
        if _prefix_keys(tables, sw, sample, np.min(at, axis=1) - floor[sample])[1] > max_pairs:
            return None
    # a first guess per group: the least overlapped time on its first variant (and the serial time but
    # its last slice, where that is one number per group)
    at_first = np.max(tables.keys * sw.mult[:, sw.starts, None], axis=0)  # (groups, candidates)
    if serial is not None:
        at_first += serial.reshape(at_first.shape)
    flat = sw.gid * ok.shape[0] + np.argmin(at_first, axis=1)[sw.gid]
    bound = _pair_time(tables, sw, None, flat, _overlapped(tables, sw, flat))[1]
    limit = bound * (1.0 + BOUND_SLACK) - floor
    which = _prefix_keys(tables, sw, sample, limit[sample])[0]
    return _pairs_choice(key, launch, p, tables, sw, *_candidates_within(tables, sw, which, limit))


def _prefix_keys(tables: _GroupTables, sw: _Sweep, sample: np.ndarray,
                 limit: np.ndarray) -> tuple[np.ndarray, float]:
    """(per group, the key whose prefixes (:func:`_candidates_within`) are shortest on the ``sample`` of
    variants of the group, bounded by ``limit``; the mean prefix over the sample)."""
    g = sw.gid[sample]
    live = tables.live[:, g, :]  # (4, sample, candidates)
    count = np.sum(live <= (limit / sw.mult[:, sample])[:, :, None], axis=2)  # (4, sample)
    per_group = np.stack([np.bincount(g, weights=c, minlength=tables.rounds.shape[0]) for c in count])
    which = np.argmin(per_group, axis=0)
    return which, float(np.mean(count[which[g], np.arange(g.shape[0])]))


def _pairs_choice(key: tuple[Any, ...], launch: GemmLaunch, p: GpuParams, tables: _GroupTables, sw: _Sweep,
                  size: np.ndarray, flat: np.ndarray, lb: np.ndarray) -> dict[str, Any] | None:
    """:func:`_select`'s choice among the pairs (``size`` per variant in turn; every candidate that may be
    a variant's first minimum among them), in the variants' original order. Variants whose choice exposes a
    K-loop stall are re-timed with every candidate's stall (:func:`_blocked_choice`, else :func:`_select`)."""
    if np.min(size) < 1:
        return None
    starts = np.cumsum(size) - size
    total = _pair_time(tables, sw, size, flat, lb)[1]
    low = np.minimum.reduceat(total, starts)
    if not np.all(np.isfinite(low)):
        return None
    # the first candidate in table order of those of least time (in one group, flat order is table order)
    fb = np.minimum.reduceat(np.where(total == np.repeat(low, size), flat, np.iinfo(flat.dtype).max), starts)
    fixed = _pair_time(tables, sw, None, fb, _overlapped(tables, sw, fb))[0]
    best = fb - sw.gid * tables.rounds.shape[1]
    t = np.take(tables.keys.reshape(4, -1), fb, axis=1) * sw.mult  # main loop, shared memory, L2, DRAM
    t_m = np.maximum(np.maximum(t[1], t[2]), t[3])
    occ = np.broadcast_to(tables.occ, launch.ctas.shape)[best]
    latency = np.array(np.broadcast_to(sw.latency, (sw.n,)), dtype=float)
    stall = gemm_k_loop_stall_s(launch.pick(best), np.ceil(launch.ctas[best] / sw.sms), occ, sw.rate_sm, latency)
    exposed = np.array(np.maximum(t[0] + stall, t_m) - np.maximum(t[0], t_m), dtype=float)
    got = {"best": best, "time": low + exposed, "exposed": exposed, "latency_s": fixed + exposed,
           "t_c": t[0], "t_s": t[1], "t_l": t[2], "t_d": t[3], "t_m": t_m, "dram": np.take(tables.keys[3], fb),
           "occ": occ, "prologue": latency}
    choice = got
    if sw.order is not None:  # back to the variants' order
        choice = {}
        for name, x in got.items():
            choice[name] = np.empty_like(x)
            choice[name][sw.order] = x
    hit = np.flatnonzero(choice["exposed"] > 0)
    if hit.shape[0]:  # those variants' choice exposes a K-loop stall: re-time them with every candidate's
        ph = _variant_rows(p, hit, sw.n)
        hh = _hardware(ph)
        redo = _blocked_choice(key, launch, ph, hh)
        redo = _select(launch, ph, hh) if redo is None else redo
        for name in _CHOICE:
            choice[name][hit] = redo[name]
    return choice


def _gemm_estimate(launch: GemmLaunch, choice: dict[str, Any], p: GpuParams, hw: _Hardware,
                   in_bytes: float) -> GemmEstimate:
    """The :class:`GemmEstimate` of the candidate ``choice`` picked (:func:`_select`'s keys)."""
    best = choice["best"]
    chosen = launch.pick(best)
    hs, hl = hw.l2_share[..., 0], hw.l2_lat[..., 0]
    hf = he = None
    if _has_port(hw):
        hf, he = gemm_serial_l2_s_per_byte(chosen, hs, hw.sms[..., 0], hw.l2_port_ratio[..., 0])
    t_fix = _scalar_or(gemm_split_k_fixup_s(chosen, hs, hl, hf))
    rounds = gemm_edge_rounds(chosen, np.ceil(chosen.ctas / hw.sms[..., 0]), choice["occ"])
    t_edge = _scalar_or(gemm_pipeline_edges_s(chosen, hs, hl, hw.rate_sm[..., 0], rounds, he))
    t_c, t_s, t_l, t_d, t_m = (_scalar_or(choice[f]) for f in ("t_c", "t_s", "t_l", "t_d", "t_m"))
    exposed = choice["exposed"]

    def take(x: np.ndarray) -> ArrayLike:  # a per-candidate number of the chosen candidate
        return _scalar_or(np.take(x, best))

    ctas, cta_per_sm = take(launch.ctas), _scalar_or(choice["occ"])
    # shared memory traffic: the warp-tile reads plus the operand panels written into it
    panels = (launch.tile_m + launch.tile_n) * launch.k_padded * in_bytes
    smem_total = launch.ctas * (gemm_smem_bytes_per_cta(launch) + panels)
    return GemmEstimate(
        time_s=_scalar_or(choice["time"]),
        compute_s=t_c,
        memory_s=t_m,
        latency_s=_scalar_or(choice["latency_s"]),
        dram_bytes=_scalar_or(choice["dram"]),
        l2_bytes=take(launch.ctas * gemm_l2_bytes_per_cta(launch)),
        smem_bytes=take(smem_total),
        tile=str(chosen.name) if np.ndim(chosen.name) == 0 else chosen.name,
        split_k=_scalar_or(chosen.split),
        ctas=ctas,
        waves=_scalar_or(_a(ctas) / (_a(p.sms) * _a(cta_per_sm))),
        ctas_per_sm=cta_per_sm,
        bound_level=_largest_term(("dram", "l2", "smem"), (t_d, t_l, t_s)),
        fixup_s=t_fix,
        edge_s=t_edge,
        stall_s=_scalar_or(exposed),
        bound_term=_largest_term(GEMM_TERMS, (t_c, t_d, t_l, t_s, choice["prologue"], t_fix, t_edge, exposed)),
    )


# ------------------------------------------------------------------------------------------------
# streaming (bandwidth-bound) kernels


#: Per element of a forward elementwise op as eager PyTorch's CUDA kernels compile it (fp32 opmath
#: for fp16/bf16 too; precise math library, no --use_fast_math): ``(MUFU ops, FP32 arithmetic
#: instructions)``, the latter FFMA/FMUL/FADD/FSETP only (integer, select and conversion
#: instructions are not counted). Counted from the library's instruction sequences:
#:
#: * ``sin``/``cos``: libdevice ``__nv_sinf``/``__nv_cosf`` (the CUDA math headers'
#:   ``__internal_trig_reduction_kernel`` + ``__internal_sin_cos_kernel``): FMUL (a * 2/pi), three
#:   FFMA Cody-Waite residual, FSETP (|a| >= 105615, Payne-Hanek slow path not taken), FMUL (t^2),
#:   five FFMA polynomial, one FFMA sign flip = 11 FP32 + 1 compare = 12; no MUFU (the precise sinf
#:   is a polynomial; MUFU.SIN is the ``__sinf`` fast path only).
#: * ``exp``: libdevice ``__nv_expf``: FFMA.SAT, FFMA.RM, FADD, two FFMA (log2 e, high and low),
#:   FMUL by the 2^j scale = 6, plus one MUFU.EX2.
#: * ``reciprocal``/``div``: IEEE ``div.rn.f32`` (nvcc's default -prec-div=true): MUFU.RCP, then
#:   Newton and remainder FFMAs (4 for 1/x, 5 for a/b).
#: * ``rsqrt``: ``rsqrtf`` = one MUFU.RSQ; ``sqrt``: ``sqrt.rn.f32`` = MUFU.RSQ + 4 FFMA/FMUL refinement.
#: * ``log``: libdevice ``__nv_logf``: mantissa/exponent split (2), 8-term FFMA polynomial, FMUL,
#:   two FFMA = 13; no MUFU (it does not use lg2.approx).
#: * ``erf``: CUDA ``erff``: two polynomial branches (|x| < 0.921875: 7 FFMA on x^2; else 9 FFMA on
#:   |x| then 1 - exp2 through MUFU.EX2 and 3 FP32 ops), approximate count as N. Juffa describes it
#:   (NVIDIA developer forum, 'Accuracy-optimized implementation of erff(), without performance
#:   impact', 2022); a warp of mixed arguments executes both branches: 1 MUFU + 19 FP32.
#: * ``gelu``: ``torch.nn.functional.gelu`` default (approximate='none'), x * 0.5 * (1 + erf(x / sqrt 2)):
#:   erf + FMUL, FADD, two FMUL = 1 MUFU + 23.
#: * ``tanh``: ``tanhf``: |x| >= 0.6 as 1 - 2 / (exp(2x) + 1) (MUFU.EX2 + MUFU.RCP, about 6 FP32),
#:   else an odd polynomial (about 5 FFMA); both branches per warp: 2 MUFU + 11 (approximate count).
#: * ``sigmoid`` = 1 / (1 + exp(-x)): exp + FADD + IEEE division = 2 MUFU + 12; ``silu``/``swish``
#:   x / (1 + exp(-x)): 2 MUFU + 12; ``quick_gelu`` x * sigmoid(1.702 x): 2 MUFU + 14.
#: * ``dropout`` (training; the lowering charges these only to a dropout op with ``attrs training``):
#:   PyTorch's ``fused_dropout_kernel_vec`` (pytorch/pytorch ``aten/src/ATen/native/cuda/Dropout.cu``:
#:   "philox generates 128 bits of randomness at a time", ``UNROLL = 4``, one ``curand_uniform4`` per
#:   four elements) draws Philox4x32-10: ten rounds of ``_philox4x32round`` (CUDA
#:   ``curand_philox4x32_x.h``: two ``mulhilo32``, each a ``__umulhi`` and a 32-bit multiply), so 40
#:   integer multiplies per four elements, 10 per element. They run on the FMA pipe beside FP32
#:   arithmetic (NVIDIA developer forum, 'Separate CUDA core pipeline for FP16 and FP32', NVIDIA
#:   reply: on GA100 "FMA pipe handles IMAD, IDP, and FP32 operations"; on GA10x and GH100 the
#:   FMAheavy pipe, half the FP32 lanes, so the count is a lower bound there) and are counted as FP32
#:   slots here. Per element then ``_curand_uniform``'s FFMA (after an I2F, not counted), the
#:   ``rand < p`` FSETP and ``src * rand * scale`` (two FMUL in fp32 opmath): 0 MUFU + 14. The XORs
#:   and key additions of each round (LOP3, IADD3: the ALU pipe) are not counted.
#:
#: Ops not listed keep the semantic count of ``workloads.semantics.ELEMENTWISE_FLOPS`` and one SFU
#: evaluation per element where :func:`simulator.lowering.common.sfu_ops` counts one.
ELEMENTWISE_INSTRUCTIONS: dict[str, tuple[int, int]] = {
    "sin": (0, 12), "cos": (0, 12), "exp": (1, 6), "reciprocal": (1, 4), "div": (1, 5),
    "rsqrt": (1, 0), "sqrt": (1, 4), "log": (0, 13), "erf": (1, 19), "gelu": (1, 23), "tanh": (2, 11),
    "sigmoid": (2, 12), "silu": (2, 12), "swish": (2, 12), "quick_gelu": (2, 14), "dropout": (0, 14),
}


#: Per element of the gradient (dx from dy) of a unary elementwise op as eager PyTorch computes it:
#: ``(MUFU ops, FP32 instructions)``, from the backward formulas of tools/autograd/derivatives.yaml
#: (pytorch/pytorch) with the forward counts of :data:`ELEMENTWISE_INSTRUCTIONS` for each special
#: function the formula evaluates again:
#:
#: * ``sin``: ``grad * self.cos()`` = a precise cos (0 + 12) and an FMUL: (0, 13); ``cos``:
#:   ``grad * -self.sin()``: (0, 13).
#: * ``exp``: ``grad * result``: one FMUL, no special function (the saved output): (0, 1).
#: * ``tanh``: ``tanh_backward(grad, result)`` = grad * (1 - y^2): FFMA + FMUL (0, 2); ``sigmoid``:
#:   ``sigmoid_backward(grad, result)`` = grad * y * (1 - y): (0, 3).
#: * ``log``: ``grad.div(self)``: IEEE division (1, 5); ``reciprocal``: ``-grad * (result * result)``:
#:   (0, 2); ``rsqrt``: ``-0.5 * grad * result.pow(3)``: (0, 4); ``sqrt``: ``grad / (2 * result)``:
#:   FMUL + division (1, 6).
#: * ``erf``: ``2 / sqrt(pi) * exp(-self.pow(2)) * grad``: exp (1, 6) + FMUL x^2 + two FMUL: (1, 9).
#: * ``gelu`` (approximate='none'): ``gelu_backward`` (aten/src/ATen/native/cuda/ActivationGeluKernel.cu):
#:   cdf = 0.5 * (1 + erf(x / sqrt 2)), pdf = exp(-x^2 / 2) / sqrt(2 pi), dy * (cdf + x * pdf): erf (1, 19)
#:   + exp (1, 6) + 6 FMUL/FFMA: (2, 31).
#: * ``silu``/``swish``: ``silu_backward`` (ActivationSiluKernel.cu): s = 1 / (1 + exp(-x)),
#:   dy * s * (1 + x * (1 - s)): sigmoid (2, 12) + 4: (2, 16); ``quick_gelu`` (x * sigmoid(1.702 x),
#:   differentiated as written): sigmoid (2, 12) + 5: (2, 17).
#:
#: Unlisted ops (binary ops, ``pow``, ``softplus``) keep their semantic backward count and one SFU
#: evaluation per element where :func:`simulator.lowering.common.sfu_ops` counts one.
ELEMENTWISE_BWD_INSTRUCTIONS: dict[str, tuple[int, int]] = {
    "sin": (0, 13), "cos": (0, 13), "exp": (0, 1), "tanh": (0, 2), "sigmoid": (0, 3), "log": (1, 5),
    "reciprocal": (0, 2), "rsqrt": (0, 4), "sqrt": (1, 6), "erf": (1, 9), "gelu": (2, 31), "silu": (2, 16),
    "swish": (2, 16), "quick_gelu": (2, 17),
}


def elementwise_work(fn: str, numel: float, *, backward: bool = False) -> tuple[float, float] | None:
    """``(FP32 FLOP-equivalents, MUFU ops)`` of an elementwise op ``fn`` over ``numel`` elements from
    :data:`ELEMENTWISE_INSTRUCTIONS` (forward) or :data:`ELEMENTWISE_BWD_INSTRUCTIONS` (``backward``:
    the gradient of a unary op); each FP32 instruction is one FMA slot: 2 FLOP of the vector rate,
    and an FMA's energy. None when the op is not listed."""
    counts = (ELEMENTWISE_BWD_INSTRUCTIONS if backward else ELEMENTWISE_INSTRUCTIONS).get(fn)
    if counts is None:
        return None
    mufu, fp32 = counts
    return 2.0 * fp32 * numel, float(mufu) * numel


def achieved_bandwidth(bytes_moved: ArrayLike, peak_bytes_per_s: ArrayLike, fraction: ArrayLike,
                       half_size_bytes: ArrayLike) -> ArrayLike:
    """Achieved bandwidth of a streaming kernel moving ``bytes_moved``: ``B*f * s / (s + s_half)``."""
    s = _a(bytes_moved)
    return _a(peak_bytes_per_s) * _a(fraction) * s / (s + _a(half_size_bytes))


def streaming(
    bytes_read: ArrayLike,
    bytes_written: ArrayLike,
    flops: ArrayLike,
    p: GpuParams,
    *,
    l2_resident_bytes: ArrayLike = 0.0,
    sfu_ops: ArrayLike = 0.0,
) -> KernelEstimate:
    """A bandwidth-bound kernel: reads, writes and FP32 vector work, overlapped.

    Parameters
    ----------
    bytes_read, bytes_written
        Compulsory traffic of the kernel (bytes).
    flops
        FP32 vector operations (FMA = 2).
    l2_resident_bytes
        Part of ``bytes_read`` already resident in L2 (just produced by the previous kernel); it
        is read at L2 bandwidth instead of DRAM bandwidth.
    sfu_ops
        Special-function evaluations (exp, rsqrt) on the SFU pipe.

    Returns
    -------
    KernelEstimate
        ``memory_s`` follows the achieved-bandwidth curve of :func:`achieved_bandwidth` on the
        total bytes moved, so small kernels reach only part of the peak.
    """
    rd, wr = _a(bytes_read), _a(bytes_written)
    res = np.minimum(_a(l2_resident_bytes), rd)
    total = rd + wr
    dram_part = rd - res + wr
    half = _a(p.bandwidth_half_size_bytes)
    # the half-bandwidth size models launch/tail inefficiency of the whole kernel; it applies to
    # the bytes moved regardless of the level they come from
    scale = (total + half) / np.maximum(total, 1.0)
    t_dram = dram_part * scale / (_a(p.dram_bytes_per_s) * _a(p.dram_fraction))
    t_l2 = res * scale / (_a(p.l2_bytes_per_s) * _a(p.l2_fraction))
    t_mem = t_dram + t_l2
    t_vec = _a(flops) / (_a(p.vector_flops_per_s) * _a(p.vector_fraction))
    t_sfu = _a(sfu_ops) / _a(p.sfu_ops_per_s)
    t_comp = np.maximum(t_vec, t_sfu)  # the FMA and MUFU pipes issue side by side
    lat = _a(p.dram_latency_s) * np.ones_like(t_mem + t_comp)
    time = np.maximum(t_comp, t_mem) + lat
    return KernelEstimate(
        time_s=_scalar_or(time), compute_s=_scalar_or(t_comp + 0 * time), memory_s=_scalar_or(t_mem + 0 * time),
        latency_s=_scalar_or(lat), dram_bytes=_scalar_or(dram_part + 0 * time), l2_bytes=_scalar_or(total + 0 * time),
        smem_bytes=0.0,
    )


def roofline(flops: ArrayLike, bytes_moved: ArrayLike, p: GpuParams, matrix: bool = False) -> KernelEstimate:
    """Fallback for ops without a rule: ``max(flops / achievable peak, bytes / achievable DRAM bandwidth)``."""
    rate = (_a(p.matrix_flops_per_s) * _a(p.matrix_fraction)) if matrix else (_a(p.vector_flops_per_s) * _a(p.vector_fraction))
    t_c = _a(flops) / rate
    t_m = _a(bytes_moved) / (_a(p.dram_bytes_per_s) * _a(p.dram_fraction))
    lat = _a(p.dram_latency_s) * np.ones_like(t_c + t_m)
    time = np.maximum(t_c, t_m) + lat
    return KernelEstimate(
        time_s=_scalar_or(time), compute_s=_scalar_or(t_c + 0 * time), memory_s=_scalar_or(t_m + 0 * time),
        latency_s=_scalar_or(lat), dram_bytes=_scalar_or(_a(bytes_moved) + 0 * time), l2_bytes=_scalar_or(_a(bytes_moved) + 0 * time),
        smem_bytes=0.0,
    )


# ------------------------------------------------------------------------------------------------
# fused attention


def _window_pairs(sq: int, skv: int, window: int, block_q: int, block_kv: int) -> float:
    """Pairs per head a block-sparse kernel computes under a causal window of ``window`` keys: each
    block of ``block_q`` query rows skips the ``block_kv``-key blocks wholly before its first row's band
    and computes every key from there up to each row's own position (the diagonal exact, as causal)."""
    total = 0
    for m in range(0, sq, block_q):
        p0 = max(0, m + skv - sq)
        p1 = min(m + block_q, sq) - 1 + skv - sq
        if p1 >= p0:
            lo = (max(0, p0 - window + 1) // block_kv) * block_kv
            total += (p1 + 1) * (p1 + 2) // 2 - p0 * (p0 + 1) // 2 - (p1 - p0 + 1) * lo
    return float(total)


def _pairs(sq: int, skv: int, causal: bool, last_rows: int, window: int = 0,
           block_q: int = 128) -> tuple[float, float]:
    """(query-key pairs of all ``sq`` queries, pairs of the last ``last_rows`` queries) per head.

    Causal masks are aligned to the end of the key sequence: query ``i`` sees keys ``<= i + skv - sq``;
    a sliding ``window`` (> 0, causal only) also drops the keys ``window`` or more positions behind it,
    in whole key blocks of ``block_q`` keys (:func:`_window_pairs`).
    """
    if causal and 0 < window < skv:
        return (_window_pairs(sq, skv, window, block_q, block_q),
                _window_pairs(min(last_rows, sq), skv, window, block_q, block_q))
    if not causal:
        return float(sq * skv), float(last_rows * skv)
    if sq <= skv:
        total = sq * (skv - sq) + sq * (sq + 1) // 2
    else:
        total = skv * (skv + 1) // 2
    lo = skv - last_rows + 1  # pairs of the first of the last rows
    heavy = last_rows * skv - last_rows * (last_rows - 1) // 2 if lo >= 1 else skv * (skv + 1) // 2
    return float(total), float(heavy)


@dataclass(frozen=True)
class AttentionGrid:
    """How a fused-attention launch spreads its query-key pairs over CTAs (:func:`attention_grid`).

    Attributes
    ----------
    batch, heads_q, heads_kv, seq_q, seq_kv, block_q, backward
        The problem and the kernel's query rows per CTA.
    decode
        Flash-decoding layout: the query heads sharing a KV head packed into one tile, the keys
        split over CTAs.
    ctas
        CTAs launched (an array when it depends on the SM count: decode).
    kv_splits
        Key splits per KV head (1 unless decode).
    pad
        Padded over real query rows of a tile (short blocks are padded up to ``min_mma_rows``).
    head_pairs
        Query-key pairs of one head (causal: the visible ones).
    pairs
        Pairs of the whole launch, ``batch * heads_q * head_pairs``.
    heaviest_pairs
        Pairs of the heaviest CTA.
    q_panels
        Blocks the CTAs own, so times each streamed panel is read from L2: forward, K/V once per query
        block; backward, Q/dO once per key block.
    """

    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_kv: int
    block_q: int
    backward: bool
    decode: bool
    ctas: ArrayLike
    kv_splits: ArrayLike
    pad: float
    head_pairs: float
    pairs: float
    heaviest_pairs: ArrayLike
    q_panels: float


def attention_grid(batch: int, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, sms: ArrayLike, *,
                   causal: bool = False, backward: bool = False, block_q: int = 128,
                   min_mma_rows: int = 64, window: int = 0, block_kv: int = 0, seq_kv_max: int = 0) -> AttentionGrid:
    """The CTAs of a fused-attention launch and the query-key pairs each computes.

    Query blocks of ``block_q`` rows are CTAs; backward, key blocks of ``block_q`` keys are (FlashAttention-2's
    ``run_flash_bwd_seqk_parallel``: ``grid_n(num_n_block, b, h)``, ``num_n_block = ceil(seqlen_k / kBlockN)``;
    FlashAttention-3 alike), the heaviest the first (:func:`_key_block_pairs`). When the queries of one KV head are fewer than
    ``block_q`` (forward only: decode), the kernel follows flash-decoding: the query heads sharing
    a KV head are packed into one tile and the keys are split over CTAs until every one of the
    ``sms`` SMs has work (at most one split per :data:`DECODE_MIN_KEYS_PER_SPLIT` keys). A causal
    sliding ``window`` (tokens, 0: none) skips the key blocks outside the band (:func:`_pairs`). A causal forward
    given ``block_kv`` (a FlashAttention-2 tile's ``kBlockN``; 0: the visible pairs only) computes whole key blocks
    across the diagonal (:func:`_causal_block_pairs`).

    A decode batch of sequences with different contexts (``seq_kv_max`` > ``seq_kv``: ``seq_kv`` their mean, the
    longest ``seq_kv_max``) is one launch as the split-KV kernels run it: the splits
    are chosen for the longest sequence, each a fixed share of its keys, so its CTAs are the heaviest and a short
    sequence's later splits hold no keys; the pairs, and the K/V traffic, stay the batch's sum.
    """
    group = heads_q // max(1, heads_kv)
    decode = seq_q * group < block_q and not backward
    if decode:
        rows = seq_q * group  # packed query rows per KV head
        ctas_base = batch * heads_kv
        longest = max(seq_kv, seq_kv_max)
        kv_splits = np.clip(np.floor(_a(sms) / ctas_base), 1.0,
                            max(1.0, math.ceil(longest / DECODE_MIN_KEYS_PER_SPLIT)))
        head_pairs, _ = _pairs(seq_q, seq_kv, causal, seq_q, window, block_q)
        heavy = head_pairs if longest == seq_kv else _pairs(seq_q, longest, causal, seq_q, window, block_q)[0]
        # one CTA holds all rows of its KV head
        return AttentionGrid(batch, heads_q, heads_kv, seq_q, seq_kv, block_q, backward, True,
                             ctas=ctas_base * kv_splits, kv_splits=kv_splits, pad=max(rows, min_mma_rows) / rows,
                             head_pairs=head_pairs, pairs=batch * heads_q * head_pairs,
                             heaviest_pairs=heavy * group / kv_splits, q_panels=1.0)
    own = seq_kv if backward else seq_q  # the sequence whose blocks the CTAs own
    rows_blk = min(block_q, own)
    blocks = math.ceil(own / block_q)
    head_pairs, heavy_pairs = _pairs(seq_q, seq_kv, causal, rows_blk, window, block_q)
    if backward and not (causal and 0 < window < seq_kv):
        heavy_pairs = _key_block_pairs(seq_q, seq_kv, causal, rows_blk)
    if block_kv and causal and not backward and not 0 < window < seq_kv:
        head_pairs, heavy_pairs = _causal_block_pairs(seq_q, seq_kv, block_q, block_kv)
    return AttentionGrid(batch, heads_q, heads_kv, seq_q, seq_kv, block_q, backward, False,
                         ctas=float(batch * heads_q * blocks), kv_splits=1.0,
                         pad=max(rows_blk, min_mma_rows) / rows_blk, head_pairs=head_pairs,
                         pairs=batch * heads_q * head_pairs, heaviest_pairs=heavy_pairs, q_panels=float(blocks))


def _causal_block_pairs(sq: int, skv: int, block_q: int, block_kv: int) -> tuple[float, float]:
    """(pairs per head, pairs of the heaviest CTA) a causal forward computes in whole key blocks: the CTA of
    query block ``i`` runs key blocks up to ``ceil(((i + 1) * block_q + skv - sq) / block_kv)`` (FlashAttention-2
    ``flash_fwd_kernel.h``, ``compute_attn_1rowblock``: ``n_block_max``), masking its last ones after QK^T, so
    the masked pairs of those blocks are computed too (at most ``skv`` keys a row)."""
    i = np.arange(-(-sq // block_q), dtype=np.int64)  # query blocks
    rows = np.minimum(block_q, sq - i * block_q)
    blocks = np.clip(-(-((i + 1) * block_q + skv - sq) // block_kv), 0, -(-skv // block_kv))
    pairs = rows * np.minimum(skv, blocks * block_kv)
    return float(pairs.sum()), float(pairs.max(initial=0))


def _key_block_pairs(sq: int, skv: int, causal: bool, rows: int) -> float:
    """Pairs of the heaviest backward CTA, the one owning the first ``rows`` keys: every query sees them, or,
    causal (aligned to the end of the keys: query ``i`` sees keys ``<= i + skv - sq``), the queries from key
    ``j``'s own position on (``sq - max(0, j - (skv - sq))`` of them, at least 0)."""
    if not causal:
        return float(rows * sq)
    off = skv - sq
    return float(sum(max(0, sq - max(0, j - off)) for j in range(rows)))


def attention_matmul_s(grid: AttentionGrid, p: GpuParams, head_dim: int, head_dim_v: int, *,
                       kernel: str = "flash2") -> ArrayLike:
    """Tensor-core time of one query-key pair on one SM (s).

    Forward: the QK^T and PV contractions, ``2 * (head_dim + head_dim_v)`` FLOP; backward five
    contractions (S and dP recomputed, dV, dQ, dK), ``2 * (3 * head_dim + 2 * head_dim_v)``; on
    tiles padded to the smallest MMA (``grid.pad``). ``"flash2"`` kernels issue warp-level
    ``mma.sync`` at ``p.warp_mma_scale`` of the native rate, times ``p.matrix_fraction`` in the passes
    of :data:`FLASH2_LIBRARY_FRACTION`; ``"flash3"`` at ``p.matrix_fraction`` of the native rate.
    """
    library = kernel == "flash3" or ("bwd" if grid.backward else "fwd") in FLASH2_LIBRARY_FRACTION
    rate = _a(p.matrix_flops_per_s) * (_a(p.matrix_fraction) if library else 1.0) / _a(p.sms)
    if kernel != "flash3":
        rate = rate * _a(p.warp_mma_scale)
    flops = 2.0 * ((3 * head_dim + 2 * head_dim_v) if grid.backward else (head_dim + head_dim_v))
    return flops * grid.pad / rate


def attention_softmax_s(p: GpuParams, *, backward: bool = False) -> ArrayLike:
    """Online-softmax time of one query-key score on one SM (s): :data:`SOFTMAX_SFU_OPS_PER_SCORE`
    special-function results and :data:`SOFTMAX_ALU_OPS_PER_SCORE` FP32 instructions."""
    direction = "bwd" if backward else "fwd"
    sfu_rate_sm = _a(p.sfu_ops_per_s) / _a(p.sms)
    return SOFTMAX_SFU_OPS_PER_SCORE[direction] / sfu_rate_sm + SOFTMAX_ALU_OPS_PER_SCORE[direction] / _alu_rate_sm(p)


def _alu_rate_sm(p: GpuParams) -> ArrayLike:
    """FP32 instructions one SM issues per second at the achieved vector rate."""
    return _a(p.vector_flops_per_s) / 2.0 * _a(p.vector_fraction) / _a(p.sms)


def attention_compute_s(grid: AttentionGrid, pair_s: ArrayLike, sms: ArrayLike) -> ArrayLike:
    """Compute time of the launch (s): the busiest SM's CTAs (``ceil(ctas / sms)``, average pairs
    each) or the heaviest CTA alone (causal), whichever is longer, at ``pair_s`` per pair."""
    return np.maximum(np.ceil(grid.ctas / _a(sms)) * (grid.pairs / grid.ctas) * pair_s, grid.heaviest_pairs * pair_s)


def _flash2_block(table: dict[int, int], head_dim: int) -> int:
    """The entry of a FlashAttention-2 tile table (:data:`FLASH2_FWD_KV_BLOCK`, :data:`FLASH2_BWD_Q_BLOCK`) for
    the instantiation a head dim runs (the smallest listed head dim at least ``head_dim``; the largest beyond)."""
    return table[min((d for d in table if d >= head_dim), default=max(table))]


@dataclass(frozen=True)
class Flash2Tile:
    """One FlashAttention-2 kernel instantiation as its launch template picks it (:func:`flash2_tile`).

    Attributes
    ----------
    block_m, block_n
        Query rows and keys per block (``kBlockM``, ``kBlockN``). A forward CTA owns ``block_m`` query rows and
        steps through K/V blocks of ``block_n`` keys; a backward CTA owns ``block_n`` keys and steps through
        Q/dO blocks of ``block_m`` rows (:meth:`own_rows`, :meth:`step_rows`).
    warps
        Warps per CTA (``kNWarps``).
    v_in_regs, double_buffer
        Backward only: V held in registers (``Is_V_in_regs``) and the Q/dO blocks double-buffered in shared
        memory (not ``No_double_buffer``). Recorded as the template states them; the model does not price them.
    """

    block_m: int
    block_n: int
    warps: int = 4
    v_in_regs: bool = False
    double_buffer: bool = True

    def own_rows(self, backward: bool) -> int:
        """Rows of the block a CTA owns: query rows forward, keys backward."""
        return self.block_n if backward else self.block_m

    def step_rows(self, backward: bool) -> int:
        """Rows of the blocks a CTA steps through: keys forward, query rows backward."""
        return self.block_m if backward else self.block_n

    def smem_bytes(self, head_dim: int, backward: bool) -> int:
        """Shared memory of one CTA (bytes) as ``kernel_traits.h`` (v2.7.4.post1) sizes it for the instantiated
        ``head_dim`` (:data:`FLASH2_HEAD_DIMS`), in :data:`FLASH2_ELEMENT_BYTES`: forward ``kSmemSize``, the Q block
        and the K and V blocks (``kSmemQSize + kSmemKVSize``; no launched forward shares Q's with K's); backward
        ``kSmemSize1colblock`` (what ``run_flash_bwd_seqk_parallel`` launches with), the Q and dO blocks (three
        with Q double-buffered, else two), then K and V with the P and dS blocks, or with V in registers the larger
        of K and V and half of them with P and dS."""
        e, m, n = FLASH2_ELEMENT_BYTES, self.block_m, self.block_n
        if not backward:
            return (m + 2 * n) * head_dim * e
        qdo = m * head_dim * (3 if self.double_buffer else 2) * e
        kv, pds = 2 * n * head_dim * e, 2 * m * n * e
        return qdo + (max(kv, kv // 2 + pds) if self.v_in_regs else kv + pds)

    def registers_per_thread(self, head_dim: int, backward: bool) -> int:
        """Registers a thread of this instantiation holds: :data:`FLASH2_PTXAS_REGISTERS` where a ptxas report
        quotes it, else :data:`FLASH2_ISA_REGISTERS`."""
        key = (backward, head_dim, self.block_m, self.block_n, self.warps)
        return FLASH2_PTXAS_REGISTERS.get(key, FLASH2_ISA_REGISTERS)


def _flash2_fwd_tile(hd: int, sm8x: bool, smem_per_sm: float, smem_per_block: float, dropout: bool,
                     causal: bool) -> Flash2Tile:
    """``run_mha_fwd_hdim{hd}`` of ``flash_fwd_launch_template.h`` (v2.7.4.post1): ``Flash_fwd_kernel_traits<hd,
    kBlockM, kBlockN, kNWarps, ...>`` by ``is_sm8x`` (compute capability 8.x, x > 0), dropout, causal and, at
    head dim 256, the shared memory per block and per SM (``cudaDevAttrMaxSharedMemoryPerBlockOptin``,
    ``cudaDevAttrMaxSharedMemoryPerMultiprocessor``)."""
    tile = Flash2Tile
    if hd == 32:
        return tile(128, 128)
    if hd == 64:
        return tile(128, 64) if dropout else tile(128, 128)
    if hd == 96:
        return tile(64, 64) if sm8x and causal else tile(128, 64)
    if hd == 128:
        if dropout or (sm8x and not causal):
            return tile(128, 32)
        return tile(64, 64) if sm8x else tile(128, 64)
    if hd == 160:
        if sm8x:
            return tile(64, 64) if causal else tile(128, 64, 8)
        return tile(128, 32)
    if hd == 192:
        return tile(64, 64) if dropout else tile(128, 64, 8)
    # "For A100, we want to run with 128 x 64 (128KB smem). For H100 we want to run with 64 x 64 (96KB smem)
    # since then we can get 2 CTAs per SM."
    a100_like = smem_per_block >= 2 * hd * (128 + 2 * 64) and smem_per_sm < 4 * hd * (64 + 2 * 64)
    return tile(128, 64, 8) if a100_like else tile(64, 64)


def _flash2_bwd_tile(hd: int, smem_per_block: float, dropout: bool) -> Flash2Tile:
    """``run_mha_bwd_hdim{hd}`` of ``flash_bwd_launch_template.h`` (v2.7.4.post1): ``Flash_bwd_kernel_traits<hd,
    kBlockM, kBlockN, kNWarps, ..., Is_V_in_regs, No_double_buffer>`` by the shared memory per block
    (``cudaDevAttrMaxSharedMemoryPerBlockOptin``) and dropout. At head dim 256 below 144 KB (sm86, sm89) v2.7.4
    launches only the no-dropout kernel; the model prices that tile with dropout too."""
    kib, tile = 1024, Flash2Tile
    if hd == 32:
        return tile(128, 128, 8, v_in_regs=not (dropout and smem_per_block >= 2 * ((3 * 128 + 2 * 128) * hd
                                                                                    + 2 * 128 * 128)))
    if hd == 64:
        return tile(128, 128, 8) if smem_per_block >= 144 * kib else tile(64, 128, 8, v_in_regs=True)
    if hd == 96:
        return tile(64, 128, 8, v_in_regs=not (dropout and smem_per_block >= 116 * kib))
    if hd == 128:
        return tile(64, 128, 8) if smem_per_block >= 144 * kib else tile(64, 64, 8, v_in_regs=True)
    if hd == 160:
        return tile(64, 64, 8, double_buffer=smem_per_block >= 116 * kib)
    if hd == 192:
        big = smem_per_block >= 136 * kib
        return tile(64, 64, 8, v_in_regs=not big, double_buffer=big)
    if smem_per_block >= 144 * kib:  # 176 KB and more (H100) double-buffers; the A100 does not
        return tile(64, 64, 8, double_buffer=smem_per_block >= 176 * kib)
    return tile(64, 32, 8, v_in_regs=True, double_buffer=False)


def flash2_tile(head_dim: int, *, backward: bool, compute_capability: int, smem_per_sm: float,
                smem_per_block: float, dropout: bool = False, causal: bool = False) -> Flash2Tile:
    """The tile FlashAttention-2 v2.7.4's launch templates choose (:data:`FLASH2_TILES_SOURCE`).

    ``head_dim`` runs the smallest instantiation at least it (:data:`FLASH2_HEAD_DIMS`; the largest beyond,
    which v2.7.4 refuses); ``compute_capability`` is major x 10 + minor (``is_sm8x``: 81 to 89); the shared
    memory figures are bytes, the device's ``sm.shared_mem_per_sm_bytes`` and ``sm.max_shared_mem_per_cta_bytes``
    (what the templates read from ``cudaDeviceGetAttribute``)."""
    hd = min((d for d in FLASH2_HEAD_DIMS if d >= head_dim), default=FLASH2_HEAD_DIMS[-1])
    if backward:
        return _flash2_bwd_tile(hd, smem_per_block, dropout)
    return _flash2_fwd_tile(hd, 80 < compute_capability < 90, smem_per_sm, smem_per_block, dropout, causal)


def flash2_rescale_ops_per_score(tile: Flash2Tile, head_dim: int) -> float:
    """FP32 multiplies per query-key score a FlashAttention-2 forward spends rescaling its output accumulator.

    Every key block after the first, ``Softmax::softmax_rescale_o`` multiplies each query row's ``kHeadDim``
    accumulators of O by the row's correction ``exp2(m_old - m_new)``, and the epilogue's
    ``normalize_softmax_lse`` multiplies them once more by ``1 / row_sum`` (Dao-AILab/flash-attention v2.7.4.post1
    ``csrc/flash_attn/src/softmax.h``; Dao 2023, Algorithm 1): ``kHeadDim`` multiplies per row per key block,
    ``kHeadDim / kBlockN`` per score, on the instantiated head dim (:data:`FLASH2_HEAD_DIMS`). The compiled main
    loop shows them (:data:`FLASH2_COMPILED_SOURCE`: 136 FMUL a thread per iteration at head dim 128 for 64 scores,
    72 at head dim 64 for 128, the row corrections included); :data:`SOFTMAX_ALU_OPS_PER_SCORE` counts none."""
    hd = min((d for d in FLASH2_HEAD_DIMS if d >= head_dim), default=FLASH2_HEAD_DIMS[-1])
    return hd / tile.block_n


def flash2_ctas_per_sm(tile: Flash2Tile, head_dim: int, backward: bool, p: GpuParams) -> ArrayLike:
    """CTAs of a FlashAttention-2 launch resident on one SM at once (at least 1), by the CUDA occupancy rules
    :func:`gemm_occupancy` applies: the SM's registers over the CTA's (:meth:`Flash2Tile.registers_per_thread`
    times ``32 * warps`` threads), its shared memory over the CTA's (:meth:`Flash2Tile.smem_bytes` plus the
    runtime's reserve), its thread and CTA limits; ``head_dim`` runs its instantiation (:data:`FLASH2_HEAD_DIMS`)."""
    hd = min((d for d in FLASH2_HEAD_DIMS if d >= head_dim), default=FLASH2_HEAD_DIMS[-1])
    threads = 32 * tile.warps
    occ = np.minimum(
        np.minimum(np.floor(_a(p.registers_per_sm) / (tile.registers_per_thread(hd, backward) * threads)),
                   np.floor(_a(p.smem_per_sm_bytes) / (tile.smem_bytes(hd, backward) + _SMEM_RESERVED_PER_CTA_BYTES))),
        np.minimum(np.floor(_a(p.max_threads_per_sm) / threads), _a(p.max_ctas_per_sm)))
    return _scalar_or(np.maximum(occ, 1.0))


def attention_edges_s(grid: AttentionGrid, p: GpuParams, head_dim: int, head_dim_v: int, pair_s: ArrayLike,
                      sms: ArrayLike, *, in_bytes: float = 2.0, step_rows: int | None = None,
                      ctas_per_sm: ArrayLike = 1.0) -> ArrayLike:
    """Pipeline edges of a FlashAttention-2 launch on its busiest SM (s), the attention counterpart of
    :func:`gemm_pipeline_edges_s` for a kernel that launches a CTA per tile (:data:`FLASH2_TILES_SOURCE`).

    Every CTA waits for its first tiles before any math (forward: the Q block and the first K block of
    :data:`FLASH2_FWD_KV_BLOCK` keys; backward: its K and V blocks and the first Q and dO blocks of
    :data:`FLASH2_BWD_Q_BLOCK` rows) and stores its output tile after the last one (forward O, backward dK
    and dV, in the input width): the cheaper of the first load and the last block's math (``pair_s`` a
    query-key pair), plus the store at one SM's share of the L2 bandwidth and one L2 latency, once per round
    of co-resident CTAs the busiest SM runs, as :func:`gemm_edge_rounds` counts a non-persistent GEMM's:
    ``ceil(b / q)`` for the ``b = ceil(ctas / sms)`` CTAs it runs, ``q = min(ctas_per_sm, b)`` resident at once
    (:func:`flash2_ctas_per_sm`; 1: every CTA's edges exposed). A resident CTA's main loop keeps the tensor cores
    busy while another loads its first blocks or stores its output, so the CTAs of a round expose one edge.
    ``step_rows`` is the tile's block the CTA steps through (:meth:`Flash2Tile.step_rows`; None: the tables
    above)."""
    l2_s_per_byte = _a(p.sms) / (_a(p.l2_bytes_per_s) * _a(p.l2_tile_fraction))
    rows = min(grid.block_q, grid.seq_kv if grid.backward else grid.seq_q)  # the CTA's own block: keys or queries
    if step_rows is None:
        step_rows = _flash2_block(FLASH2_BWD_Q_BLOCK if grid.backward else FLASH2_FWD_KV_BLOCK, head_dim)
    if grid.backward:
        other = min(step_rows, grid.seq_q)
        first, store = (rows + other) * (head_dim + head_dim_v), rows * (head_dim + head_dim_v)
    else:
        other = min(step_rows, grid.seq_kv)
        first, store = (rows + other) * head_dim, rows * head_dim_v
    load = first * in_bytes * l2_s_per_byte
    edge = _a(p.l2_latency_s) + store * in_bytes * l2_s_per_byte + np.minimum(load, rows * other * _a(pair_s))
    busiest = np.ceil(grid.ctas / _a(sms))
    return np.ceil(busiest / np.minimum(_a(ctas_per_sm), busiest)) * edge


def _flash2_edges_s(grid: AttentionGrid, p: GpuParams, head_dim: int, head_dim_v: int, pair_s: ArrayLike,
                    sms: ArrayLike, in_bytes: float, causal_rate_ratio: Any, step_rows: int | None,
                    ctas_per_sm: ArrayLike = 1.0) -> ArrayLike:
    """:func:`attention_edges_s` as :func:`attention` adds it. Where a measured causal/non-causal rate ratio
    prices a causal launch (``causal_rate_ratio`` given, not None, whatever its value: 1 included), that ratio
    already holds everything the causal kernel does differently, its CTAs' edges among it: the edges are then
    the non-causal launch's, scaled by the visible share of the pairs like its compute, at the same ratio."""
    edges = attention_edges_s(grid, p, head_dim, head_dim_v, pair_s, sms, in_bytes=in_bytes, step_rows=step_rows,
                              ctas_per_sm=ctas_per_sm)
    if causal_rate_ratio is None:
        return edges
    visible = grid.head_pairs / max(1.0, float(grid.seq_q * grid.seq_kv))
    return edges * visible / causal_rate_ratio


def attention_traffic_bytes(grid: AttentionGrid, head_dim: int, head_dim_v: int, *, in_bytes: float = 2.0,
                            kv_sharing: int = 1, kernel: str = "flash2") -> tuple[ArrayLike, ArrayLike]:
    """(DRAM bytes, L2 bytes) of the launch.

    DRAM sees Q, K, V and O once (backward: Q, K, V, dO read, dK, dV written and the fp32 dQ
    accumulator; O, the accumulator's clearing and dQ are :func:`attention_bwd_passes`). Every query
    block reads the K and V panels it can see from L2 (shared by ``kv_sharing`` CTAs; decode reads
    K and V once). The backward streams the Q and dO panels past each key block's CTA (the same
    volume) and sends every fp32 dQ partial to L2 once, :data:`DQ_ACCUM_BYTES` per element (the
    add is done at L2). With grouped KV heads the backward's CTAs are per query head: FlashAttention-2
    writes dK and dV per query head (``kernel="flash2"``; ``mha_bwd`` sums the groups afterwards), FA3
    adds them into fp32 accumulators per KV head at L2 (``"flash3"``), which go back to DRAM once.
    Split-KV partial outputs (fp32) are written and read back.
    """
    g = grid
    batch, heads_q, seq_q, seq_kv = g.batch, g.heads_q, g.seq_q, g.seq_kv
    q_bytes = batch * heads_q * seq_q * head_dim * in_bytes
    o_bytes = batch * heads_q * seq_q * head_dim_v * in_bytes
    kv_bytes = batch * g.heads_kv * seq_kv * (head_dim + head_dim_v) * in_bytes
    visible = g.head_pairs / max(1.0, float(seq_q * seq_kv))  # causal blocks skip masked panels
    q_panels = g.q_panels
    streamed = seq_q if g.backward else seq_kv  # the Q and dO panels past each key block, or K and V past each query block
    kv_panels = batch * heads_q * q_panels * streamed * (head_dim + head_dim_v) * in_bytes * max(visible, 1.0 / q_panels)
    kv_panels = kv_panels / max(1, kv_sharing)
    if g.decode:
        kv_panels = kv_bytes
    if g.backward:
        # the main kernel reads q, k, v, dO (and the per-row lse and dO.O sums); writes dK, dV. Each
        # CTA owns one key block (K, V read once) and streams the Q and dO panels of every visible
        # query block (FlashAttention-2, Algorithm 2; FA3/FA4 likewise): the same volume as the
        # forward's K/V panels. dQ is accumulated in fp32 by reductions performed at L2
        # (``red``/``atomicAdd`` in FA2, ``cp.reduce.async.bulk ... .add.f32`` TMA reduce-adds in
        # FA3/FA4) into an accumulator that goes back to DRAM once; reading O, clearing that
        # accumulator and converting it to dQ are separate kernels (:func:`attention_bwd_passes`).
        q_accum = batch * heads_q * seq_q * head_dim * DQ_ACCUM_BYTES
        kv_grads = kv_bytes  # dK, dV written in the input width, once per KV head
        kv_grad_l2 = 0.0
        if g.heads_kv < heads_q:
            expanded = batch * heads_q * seq_kv * (head_dim + head_dim_v)
            if kernel == "flash3":  # fp32 adds at L2 from every query head, one write-back per KV head
                kv_grads = kv_bytes / in_bytes * DQ_ACCUM_BYTES
                kv_grad_l2 = expanded * DQ_ACCUM_BYTES - kv_grads
            else:  # one gradient per query head
                kv_grads = expanded * in_bytes
        dram = q_bytes + o_bytes + kv_bytes + kv_grads + q_accum
        kv_blocks = q_panels  # the backward's CTAs own key blocks
        dq_partials = batch * heads_q * kv_blocks * seq_q * head_dim * DQ_ACCUM_BYTES * max(visible, 1.0 / kv_blocks)
        dq_partials = dq_partials / max(1, kv_sharing)
        l2 = dram + kv_panels + dq_partials + kv_grad_l2
    else:
        dram = q_bytes + kv_bytes + o_bytes
        l2 = q_bytes + o_bytes + kv_panels
    partials = batch * heads_q * seq_q * head_dim_v * 4.0 * g.kv_splits * 2 * (_a(g.kv_splits) > 1)
    return dram + partials, l2 + partials


def attention_bwd_passes(batch: int, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, head_dim: int,
                         head_dim_v: int, p: GpuParams, *, in_bytes: float = 2.0, kernel: str = "flash2"
                         ) -> tuple[KernelEstimate, int]:
    """The kernels a fused-attention backward launches around its main kernel: (their cost, how many).

    FlashAttention-2 (``csrc/flash_attn/src/flash_bwd_launch_template.h``, ``run_flash_bwd_seqk_parallel``)
    and FlashAttention-3 (``hopper/flash_bwd_launch_template.h``, ``run_flash_bwd``) both launch a
    preprocess kernel (``flash_bwd_dot_do_o_kernel`` / ``FlashAttnBwdPreprocess``: reads O and dO, writes
    the per-row sum of dO * O in fp32 and clears the fp32 dQ accumulator) and, after the main kernel, a
    postprocess kernel (``flash_bwd_convert_dq_kernel`` / ``FlashAttnBwdPostprocessConvertdQ``: reads the
    accumulator, writes dQ scaled, in the input width). With grouped KV heads, FA3 accumulates dK and dV
    in fp32 per KV head and converts them in one more kernel each; FA2 writes them per query head and
    sums the groups, one reduction kernel each (``csrc/flash_attn/flash_api.cpp`` ``mha_bwd``: ``at::sum_out``
    over the group dimension). Each pass is a streaming kernel (:func:`streaming`); their times add to
    the main kernel's (the returned estimate's ``time_s``, all of it serial, is also its ``latency_s``).
    """
    rows = batch * heads_q * seq_q
    o_bytes = rows * head_dim_v * in_bytes
    accum = rows * head_dim * DQ_ACCUM_BYTES
    flops = [2.0 * rows * head_dim_v, float(rows * head_dim)]  # dO.O row sums; dQ scaled
    passes = [streaming(2 * o_bytes, accum + rows * 4.0, flops[0], p),
              streaming(accum, rows * head_dim * in_bytes, flops[1], p)]
    if heads_kv < heads_q:
        keys = batch * heads_kv * seq_kv
        for width in (head_dim, head_dim_v):  # dK, then dV
            if kernel == "flash3":  # fp32 accumulator per KV head -> input width
                flops.append(0.0)
                passes.append(streaming(keys * width * DQ_ACCUM_BYTES, keys * width * in_bytes, 0.0, p))
            else:  # per-query-head gradients summed over each group
                expanded = batch * heads_q * seq_kv * width * in_bytes
                flops.append(expanded / in_bytes)
                passes.append(streaming(expanded, keys * width * in_bytes, flops[-1], p))

    def total(field: str) -> Any:
        return _scalar_or(sum(_a(getattr(e, field)) for e in passes))

    t = total("time_s")
    return KernelEstimate(time_s=t, compute_s=total("compute_s"), memory_s=total("memory_s"), latency_s=t,
                          dram_bytes=total("dram_bytes"), l2_bytes=total("l2_bytes"), smem_bytes=0.0,
                          details=(("vector_flops", float(sum(flops))),)), len(passes)


#: Named terms of the attention model, in the order :attr:`KernelEstimate.bound_term` prefers on
#: ties: the contractions (QK^T and PV forward) and the online softmax (their share of the
#: compute time), DRAM and L2 traffic, and the prologue's DRAM latency.
ATTENTION_TERMS: tuple[str, ...] = ("matmuls", "softmax", "dram", "l2", "prologue")


def _attention_bound_term(t_mma: ArrayLike, t_soft: ArrayLike, t_pair: ArrayLike, t_compute: ArrayLike,
                          t_dram: ArrayLike, t_l2: ArrayLike, t_mem: ArrayLike, lat: ArrayLike) -> Any:
    """The largest term of :data:`ATTENTION_TERMS` (first on ties). Of the overlapped compute and
    memory sides only the longer one counts: the larger of the matmuls' and the softmax's shares
    of the compute time (``t_compute * t / t_pair``), or the slower memory level; then the prologue
    when it is longer still. (Whole-array passes written out: sweeps call this for every variant.)"""
    compute_side = _a(t_compute >= t_mem)
    top = np.where(compute_side, t_compute * np.maximum(t_mma, t_soft) / t_pair, t_mem)
    idx = np.where(compute_side, np.where(t_mma >= t_soft, 0, 1), np.where(t_dram >= t_l2, 2, 3))
    idx = np.where(lat > top, 4, idx)
    return ATTENTION_TERMS[int(idx)] if idx.ndim == 0 else np.array(ATTENTION_TERMS).take(idx)


def attention(
    batch: int,
    heads_q: int,
    heads_kv: int,
    seq_q: int,
    seq_kv: int,
    head_dim: int,
    head_dim_v: int,
    p: GpuParams,
    *,
    causal: bool = False,
    in_bytes: float = 2.0,
    backward: bool = False,
    block_q: int = 128,
    min_mma_rows: int = 64,
    kernel: str = "flash2",
    kv_sharing: int = 1,
    bwd_softmax_overlap: bool = False,
    window: int = 0,
    causal_rate_ratio: Any = None,
    exp_exposed: bool = False,
    cta_edges: bool = True,
    tile: Flash2Tile | None = None,
    seq_kv_max: int = 0,
    fp32_mem_efficient: bool = False,
) -> KernelEstimate:
    """Fused (flash-style) attention forward or backward for one launch.

    Parameters
    ----------
    batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v
        Shapes (GQA/MQA when ``heads_kv < heads_q``).
    causal
        Keep only pairs at or below the end-aligned diagonal.
    backward
        The backward kernel (five contractions per pair, softmax recomputed).
    block_q
        Query rows per CTA (FlashAttention-2/3 use 128 on Ampere and Hopper).
    min_mma_rows
        Smallest M a tile computes; short query blocks (decode) are padded up to it.
    kernel
        Kernel design (one of :data:`ATTENTION_KERNELS`). ``"flash2"``: FlashAttention-2 style,
        warp-synchronous ``mma.sync`` (contractions at ``p.warp_mma_scale`` of the native tensor
        rate) with the online softmax serialised between the two matmuls of each warp.
        ``"flash3"``: warp-specialised kernels with asynchronous matrix instructions
        (FlashAttention-3 on Hopper, FlashAttention-4 on Blackwell, cuDNN fused attention): native
        tensor rate, and the softmax of one tile overlaps the matmuls of another, so a pair costs
        ``max(matmul, softmax)`` instead of their sum.
    kv_sharing
        CTAs that share each K/V panel load (:data:`BLACKWELL_CTA_PAIR` for the 2-CTA MMA mode of
        FlashAttention-4 on Blackwell); divides the L2 panel traffic and, backward, the dQ
        accumulation traffic.
    window
        A causal sliding window in keys (0: none): each query block visits only the key blocks
        (``block_q`` keys each) that meet its band, so compute and K/V panel traffic scale with the
        visited blocks (FlashAttention-2/3 ``window_size``; :func:`attention_grid`).
    bwd_softmax_overlap
        Whether a ``"flash3"`` backward overlaps its softmax with the matmuls as the forward does.
        False for FlashAttention-3 on Hopper (:data:`FLASH3_SOFTMAX_OVERLAP`).
    causal_rate_ratio
        A measured causal/non-causal rate ratio the compute time is divided by (None: no measurement; the GPU
        lowering passes :func:`flash2_causal_forward_ratio` for a causal FlashAttention-2 forward where the
        device's ``efficiency.flash2_causal_fwd_ratio`` gives a measured table).
    exp_exposed
        A ``"flash3"`` forward whose exponentials are not hidden behind the tensor cores
        (:data:`FLASH3_EXP_EXPOSED_FAMILIES`, :func:`attention_pair_s`).
    cta_edges
        Price each CTA's pipeline edges of a ``"flash2"`` launch (:func:`attention_edges_s`; the GPU lowering
        passes it for :data:`FLASH2_EDGE_FAMILIES`).
    tile
        A ``"flash2"`` launch's tile (:func:`flash2_tile`): its CTAs own ``tile.own_rows(backward)`` rows (in
        place of ``block_q``), their edges load first blocks of ``tile.step_rows(backward)`` rows, and the CTAs
        resident on an SM at once (:func:`flash2_ctas_per_sm`) expose one edge a round; a causal forward without
        ``causal_rate_ratio`` computes whole key blocks of ``tile.block_n`` across the diagonal
        (:func:`attention_grid` ``block_kv``). Without a tile every CTA's edges are exposed.
    seq_kv_max
        A decode batch of mixed contexts: its longest sequence's keys (``seq_kv`` the mean; 0: every sequence
        at ``seq_kv``), which sets the splits and the heaviest CTA (:func:`attention_grid`).
    fp32_mem_efficient
        PyTorch's memory-efficient fp32 kernel (:data:`MEM_EFFICIENT_SOURCE`; the caller passes its rate,
        :func:`mem_efficient_f32_params`, and its ``block_q``, :func:`mem_efficient_f32_block`, with a ``"flash2"``
        kernel and no tile): a backward launches the passes of :func:`mem_efficient_f32_bwd_passes`.

    Returns
    -------
    KernelEstimate
        ``compute_s`` is tensor-core plus softmax vector time per SM (:func:`attention_matmul_s`,
        :func:`attention_softmax_s`), spread over the query-block CTAs in waves
        (:func:`attention_grid`, :func:`attention_compute_s`); ``memory_s`` the K/V panel traffic
        from L2 and the compulsory DRAM traffic (:func:`attention_traffic_bytes`), whichever takes
        longer. ``bound_term`` names the largest term (:data:`ATTENTION_TERMS`).

    Notes
    -----
    When the queries of one KV head are fewer than ``block_q`` (decode), the kernel follows
    flash-decoding: the query heads sharing a KV head are packed into one tile and the keys are
    split over CTAs until every SM has work; partial outputs (fp32) are reduced afterwards.
    """
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"attention: kernel: unknown design; got {kernel!r}; expected one of {', '.join(ATTENTION_KERNELS)}")
    sms = _a(p.sms)
    tile = tile if kernel == "flash2" else None
    block_q = tile.own_rows(backward) if tile is not None else block_q
    # a causal forward's CTAs compute whole key blocks where no measured causal ratio already holds them
    block_kv = tile.block_n if tile is not None and causal_rate_ratio is None else 0
    grid = attention_grid(batch, heads_q, heads_kv, seq_q, seq_kv, sms, causal=causal, backward=backward,
                          block_q=block_q, min_mma_rows=min_mma_rows, window=window, block_kv=block_kv,
                          seq_kv_max=seq_kv_max)
    # the rescaled accumulators are the output's: head_dim_v of them a query row
    rescale = flash2_rescale_ops_per_score(tile, head_dim_v) if tile is not None and not backward and not grid.decode else 0.0
    t_mma, t_soft, t_pair, t_compute = _attention_compute(grid, p, head_dim, head_dim_v, kernel, backward, sms,
                                                          bwd_softmax_overlap, exp_exposed, rescale)
    ratio = 1.0 if causal_rate_ratio is None else causal_rate_ratio
    if not np.all((np.asarray(ratio) > 0.0) & (np.asarray(ratio) <= 1.0)):
        raise ValueError(f"attention: causal_rate_ratio; got {causal_rate_ratio!r}; expected a number in (0, 1]")
    t_compute = t_compute / ratio
    if kernel == "flash2" and cta_edges and not grid.decode:  # a CTA per tile loads its first tiles, stores its own
        occ = flash2_ctas_per_sm(tile, head_dim, backward, p) if tile else 1.0  # co-resident CTAs hide edges
        t_compute = t_compute + _flash2_edges_s(grid, p, head_dim, head_dim_v, t_pair, sms, in_bytes,
                                                causal_rate_ratio, tile.step_rows(backward) if tile else None, occ)

    dram, l2, t_dram, t_l2, t_mem = _attention_memory(grid, p, head_dim, head_dim_v, in_bytes, kv_sharing, kernel)
    lat = _a(p.dram_latency_s) * np.ones_like(t_mem + t_compute)
    time = np.maximum(t_compute, t_mem) + lat
    z = 0 * time  # zeros of the hardware shape
    group = heads_q // max(1, heads_kv)
    tile_rows = max(1, min(block_q, seq_q * (group if grid.decode else 1)))
    smem = grid.pairs * (head_dim + head_dim_v) * in_bytes * 2 / tile_rows
    bound = _attention_bound_term(t_mma, t_soft, t_pair, t_compute, t_dram, t_l2, t_mem, lat)
    kernels, pass_flops = 1, 0.0
    if backward and fp32_mem_efficient:  # PyTorch's eager delta and workspace clear around the kernel, serial
        passes, n_passes = mem_efficient_f32_bwd_passes(batch, heads_q, seq_q, seq_kv, head_dim, head_dim_v, p)
    elif backward:  # the preprocess and postprocess kernels around the main one, serial
        passes, n_passes = attention_bwd_passes(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v, p,
                                                in_bytes=in_bytes, kernel=kernel)
    if backward:
        kernels += n_passes
        pass_flops = dict(passes.details)["vector_flops"]
        time, lat = time + _a(passes.time_s), lat + _a(passes.time_s)
        dram, l2 = _a(dram) + _a(passes.dram_bytes), _a(l2) + _a(passes.l2_bytes)
    return _attention_estimate(grid, z, time, t_compute, t_mem, lat, dram, l2, float(smem), bound,
                               (("kernel", kernel), ("block_q", block_q), ("rescale_ops_per_score", rescale)), kernels,
                               pass_flops)


#: Where the per-query-head decode kernel's grid and loads are read from: TensorRT-LLM's masked multi-head
#: attention, the generation-phase kernel of its releases before the grouped-query (XQA) kernels.
MASKED_MHA_SOURCE = (
    "NVIDIA/TensorRT-LLM docs/source/gpt_attention.md @ 138f96d45f90b9667426f7c47297d8c06bafac73 (v0.5): the "
    "generation phase runs the masked multi-head attention kernel, 'a single CUDA thread-block per head'; "
    "cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/decoderMaskedMultiheadAttentionLaunch.h "
    "mmha_launch_kernel_ex: grid {num_heads, batch_size, seq_len_tile}, and decoderMaskedMultiheadAttentionTemplate.h: "
    "hi = blockIdx.x (the query head), hi_kv = hi / (num_heads / num_kv_heads), K and V loaded with plain vector "
    "loads and the products on the CUDA cores")


def masked_mha_decode(batch: int, heads_q: int, heads_kv: int, seq_kv: int, head_dim: int, head_dim_v: int,
                      p: GpuParams, *, q_bytes: float = 2.0, kv_bytes: float = 2.0) -> KernelEstimate:
    """One decode step's attention run as a masked multi-head attention kernel (:data:`MASKED_MHA_SOURCE`).

    One CTA per (sequence, query head) reads the whole K/V cache of its KV head: with grouped KV heads
    (``heads_kv < heads_q``) each K/V head is read by the ``heads_q / heads_kv`` CTAs of its group. Those CTAs
    are adjacent in launch order (``blockIdx.x`` is the query head), so they run together and L2 serves the
    repeats: DRAM sees Q, O and the cache once (at the decode kernel's measured fraction for the K/V width,
    :func:`decode_attention_fraction`), L2 sees the cache once per query head, at the plain-load L2 rate
    (``l2_fraction``: the loads are not bulk tile copies). The dot products run on the CUDA cores
    (FP32 FMA, ``vector_fraction`` of the SIMT rate); the kernel takes the longer of the two, plus one DRAM
    latency.
    """
    group = max(1, heads_q // max(1, heads_kv))
    cache = float(batch * heads_kv * seq_kv * (head_dim + head_dim_v)) * kv_bytes
    qo = float(batch * heads_q * (head_dim + head_dim_v)) * q_bytes
    dram, l2 = qo + cache, qo + group * cache
    t_dram = dram / (_a(p.dram_bytes_per_s) * _a(decode_attention_fraction(p, kv_bytes)))
    t_l2 = l2 / (_a(p.l2_bytes_per_s) * _a(p.l2_fraction))
    t_mem = np.maximum(t_dram, t_l2)
    flops = 2.0 * batch * heads_q * seq_kv * (head_dim + head_dim_v)
    t_compute = flops / (_a(p.vector_flops_per_s) * _a(p.vector_fraction))
    lat = _a(p.dram_latency_s) * np.ones_like(t_mem + t_compute)
    z = 0 * lat
    bound = np.where(lat > np.maximum(t_compute, t_mem), "latency", np.where(
        t_compute >= t_mem, "simt", np.where(t_dram >= t_l2, "dram", "l2")))
    return KernelEstimate(
        time_s=_scalar_or(np.maximum(t_compute, t_mem) + lat), compute_s=_scalar_or(t_compute + z),
        memory_s=_scalar_or(t_mem + z), latency_s=_scalar_or(lat), dram_bytes=_scalar_or(dram + z),
        l2_bytes=_scalar_or(l2 + z), smem_bytes=0.0,
        details=(("kernel", "masked-mha"), ("ctas", batch * heads_q), ("kv_reads", group), ("decode", True),
                 ("vector_flops", flops)),
        bound_term=str(bound) if np.ndim(bound) == 0 else bound)


def flash2_causal_forward_ratio(seq: int, table: tuple[tuple[int, float], ...], scale: Any = 1.0) -> Any:
    """FlashAttention-2's causal/non-causal forward rate ratio at ``seq`` tokens from a device's measured
    ``table`` of (tokens, ratio) rows (``efficiency.flash2_causal_fwd_ratio``: the H100 figures of Shah et al.
    2024, Fig. 5(c)/(d), in the Hopper defaults): linear in log2 of the sequence, the end rows held outside
    it, times ``scale`` (``efficiency.flash2_causal_fwd_ratio_scale``, what calibration fits) and held at most 1;
    1 for an empty table (no measurement). ``scale`` may be an array (hardware variants of a sweep); the
    result is then an array of the same shape."""
    if not table:
        return 1.0
    x = math.log2(max(1, seq))
    xs = [math.log2(n) for n, _ in table]
    ratio = np.minimum(1.0, scale * float(np.interp(x, xs, [r for _, r in table])))
    return float(ratio) if np.ndim(ratio) == 0 else ratio


def _attention_compute(grid: AttentionGrid, p: GpuParams, head_dim: int, head_dim_v: int, kernel: str,
                       backward: bool, sms: Any, bwd_overlap: bool = False,
                       exp_exposed: bool = False, rescale_ops: float = 0.0) -> tuple[Any, Any, Any, Any]:
    """(matmul, softmax, per-pair and whole-kernel compute time) of a fused-attention kernel: a pair's
    matmuls and softmax serialised (``flash2``, and the ``flash3`` backward unless ``bwd_overlap``:
    :data:`FLASH3_SOFTMAX_OVERLAP`) or overlapped (``flash3``; :func:`attention_pair_s`), spread over
    the CTAs in waves; ``rescale_ops`` FP32 multiplies a score of the output accumulator's rescaling join the
    softmax (:func:`flash2_rescale_ops_per_score`)."""
    t_mma = attention_matmul_s(grid, p, head_dim, head_dim_v, kernel=kernel)
    t_soft = attention_softmax_s(p, backward=backward) + rescale_ops / _alu_rate_sm(p)
    overlap = kernel == "flash3" and (not backward or bwd_overlap)
    t_pair = attention_pair_s(t_mma, t_soft, p, overlap=overlap,
                              exp_exposed=exp_exposed and kernel == "flash3" and not backward)
    return t_mma, t_soft, t_pair, attention_compute_s(grid, t_pair, sms)


def attention_pair_s(t_mma: ArrayLike, t_soft: ArrayLike, p: GpuParams, *, overlap: bool,
                     exp_exposed: bool = False) -> ArrayLike:
    """Compute time of one query-key pair on one SM (s) from its contractions (``t_mma``, at the
    library fraction for ``"flash3"``) and its online softmax (``t_soft``): their sum (serial), their
    maximum (``overlap``), or with ``exp_exposed`` (:data:`FLASH3_EXP_EXPOSED_FAMILIES`) the longer of
    the contractions at the library fraction and the contractions at the instruction rate (``t_mma``
    times ``p.matrix_fraction``) plus the special-function ``exp2`` of each score
    (:data:`SOFTMAX_SFU_OPS_PER_SCORE`)."""
    if not overlap:
        return t_mma + t_soft
    if not exp_exposed:
        return np.maximum(t_mma, t_soft)
    t_exp = SOFTMAX_SFU_OPS_PER_SCORE["fwd"] / (_a(p.sfu_ops_per_s) / _a(p.sms))
    return np.maximum(np.maximum(t_mma, t_soft), t_mma * _a(p.matrix_fraction) + t_exp)


def _attention_estimate(grid: AttentionGrid, z: Any, time: Any, t_compute: Any, t_mem: Any, lat: Any, dram: Any, l2: Any,
                        smem: float, bound: Any, head: tuple[tuple[str, Any], ...], kernels: int,
                        pass_flops: float) -> KernelEstimate:
    """The :class:`KernelEstimate` of an attention kernel, every array at the hardware shape (of ``z``, zeros)."""
    return KernelEstimate(
        time_s=_scalar_or(time), compute_s=_scalar_or(t_compute + z), memory_s=_scalar_or(t_mem + z),
        latency_s=_scalar_or(lat + z), dram_bytes=_scalar_or(_a(dram) + z), l2_bytes=_scalar_or(_a(l2) + z),
        smem_bytes=smem,
        details=(*head, ("ctas", _scalar_or(_a(grid.ctas) + z)), ("kv_splits", _scalar_or(_a(grid.kv_splits) + z)),
                 ("kernels", kernels), ("decode", grid.decode), ("pass_vector_flops", pass_flops),
                 ("head_pairs", grid.head_pairs)),
        bound_term=bound,
    )


def _attention_memory(grid: AttentionGrid, p: GpuParams, head_dim: int, head_dim_v: int, in_bytes: float,
                      kv_sharing: int, kernel: str) -> tuple[Any, Any, Any, Any, Any]:
    """(DRAM bytes, L2 bytes, DRAM time, L2 time, memory time) of a fused-attention kernel: the
    compulsory traffic and the K/V panels (:func:`attention_traffic_bytes`) at their achieved rates."""
    dram, l2 = attention_traffic_bytes(grid, head_dim, head_dim_v, in_bytes=in_bytes, kv_sharing=kv_sharing,
                                       kernel=kernel)
    # a decode kernel streams the K/V cache at its own measured rate (decode_attention_fraction)
    t_dram = dram / (_a(p.dram_bytes_per_s) * _a(attention_dram_fraction(p, in_bytes, grid.decode)))
    t_l2 = l2 / (_a(p.l2_bytes_per_s) * _a(p.l2_tile_fraction))
    return dram, l2, t_dram, t_l2, np.maximum(t_dram, t_l2)
