"""Streaming kernels that stage one tile per thread block and then loop over its elements (CUB's bulk-copy
``cub::DeviceTransform``): their bytes in flight per SM, and the time Little's law gives them on an SM.

Such a kernel does not stream at the device's streaming rate by itself. Each block copies its tile into shared
memory (one ``cp.async.bulk`` per input; on sm_80, CUB's ``memcpy_async`` kernel, 16 B per thread with
``cp.async``, the copy loop counted in the prologue), waits for it, runs a loop of one element per thread per iteration, stores
the results and exits; the SM then starts the next block. An SM therefore holds at most its resident blocks' tiles
in flight (CUB sizes the tiles so that they reach a stated number of bytes per SM), and each tile's round trip is
the memory latency, its wait for the DRAM the SMs share, and its wait for its SM's warp schedulers to issue the
block's instructions. :func:`tile_loop_time` solves that closed loop by mean-value analysis (Reiser & Lavenberg,
"Mean-Value Analysis of Closed Multichain Queuing Networks", JACM 27(2), 1980; Lazowska et al., "Quantitative
System Performance", 1984, ch. 6 and 7) with the resident blocks as its customers, one class per SM
(:func:`shared_memory_throughput`). Its asymptotes are the two bounds of Little's law: the tiles in flight over
their round trip, and the busier centre's rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwmodels.gpu import GpuParams

__all__ = ["TileLoopKernel", "TILE_LOOP_KERNELS", "ITEMS_PER_THREAD_NO_INPUT", "tile_loop_items_per_thread",
           "tile_loop_launch_items", "tile_loop_resident_blocks", "shared_memory_throughput", "tile_loop_time",
           "tile_loop_issue_time"]


@dataclass(frozen=True)
class TileLoopKernel:
    """One compiled tile-loop kernel: CUB's launch policy for an architecture and the instructions of its loop.

    Attributes
    ----------
    compute_capability
        The architecture (major x 10 + minor) the policy and the instruction counts are for.
    block_threads
        Threads per block (the policy's ``block_threads``).
    min_bytes_in_flight
        Bytes loaded per SM the launch sizes its tiles to reach (``arch_to_min_bytes_in_flight``), B.
    max_items_per_thread
        Largest items per thread the sizing loop tries.
    registers_per_thread
        Registers of the compiled kernel (``ptxas -v``); they bound the resident blocks.
    loop_instructions
        SASS instructions a warp issues per iteration of the full-tile loop (one element per thread).
    prologue_instructions
        SASS instructions a warp issues outside that loop in an inner block (set-up, the bulk copy by the
        elected thread averaged over the block's warps, the barrier wait, the loop set-up).
    spreads_small_inputs
        Whether the launch lowers the items per thread so that a small input still fills every SM's resident
        blocks (``spread_out_items_per_thread``: ``min(items, ceil(numel / (sms x block_threads x occupancy)))``,
        at least 1); otherwise it stops raising them only once one tile covers the whole input.
    dtype
        The element type of the kernel's inputs and output (the IR's dtype name).
    ir_ops
        The IR elementwise ``op`` attributes the kernel's functor computes.
    source
        Where the policy and the counts come from.
    """

    compute_capability: int
    block_threads: int
    min_bytes_in_flight: int
    max_items_per_thread: int
    registers_per_thread: int
    loop_instructions: float
    prologue_instructions: float
    spreads_small_inputs: bool
    dtype: str
    ir_ops: tuple[str, ...]
    source: str


_CCCL_2502 = ("NVIDIA/cccl @ b52534bf04 (2025-02-19, the base of pull request #3825): "
              "cub/device/dispatch/tuning/tuning_transform.cuh policy1000 = bulkcopy_policy<128, 1000> (ublkcp, "
              "arch_to_min_bytes_in_flight: 48 KiB for sm_arch >= 900), dispatch_transform.cuh "
              "configure_ublkcp_kernel (items per thread 1, 2, ... while < max_items_per_thread 32, until "
              "occupancy x tile x loaded bytes >= min_bif, or as soon as the tile covers num_items: lines 681-710, no "
              "spreading over the SMs), transform_kernel_ublkcp (one tile per block, "
              "'unroll 1' loop)")
_CCCL_2601 = ("NVIDIA/cccl @ 92bbfbd128 (2026-01-30, the base of pull request #7391): tuning_transform.cuh "
              "policy_selector (sm_100: ublkcp, async_block_size 128; arch_to_min_bytes_in_flight 64 KiB 'B200', "
              "since pull request #4790), dispatch_transform.cuh configure_async_kernel (items per thread up to "
              "and including 32, then spread_out_items_per_thread: min(items, ceil_div(num_items, sm_count x "
              "block_threads x max_occupancy)) clamped to [1, 32]), kernels/kernel_transform.cuh transform_kernel_ublkcp ('NOUNROLL' loop)")
_CCCL_2512 = ("NVIDIA/cccl @ 29397ba3bc (2025-12-18, the base of pull request #7019): tuning_transform.cuh policy800 "
              "(memcpy_async, block_threads 256; arch_to_min_bytes_in_flight: 16 KiB for 800 <= sm_arch < 900), "
              "dispatch_transform.cuh configure_async_kernel (items per thread 1, 2, ... up to and including 32 until "
              "occupancy x tile x loaded bytes >= min_bif, then spread_out_items_per_thread), "
              "kernels/kernel_transform.cuh transform_kernel_ldgsts (each thread copies 16 B per step with "
              "cp.async.cg into shared memory, cp.async.wait_group 0, __syncthreads, then a 'NOUNROLL' loop of one "
              "element per thread)")
_CCCL_2506 = ("NVIDIA/cccl @ 8cb5e8a9df (2025-06-25, the base of pull request #4976): tuning_transform.cuh policy800 "
              "(memcpy_async, 256 threads; arch_to_min_bytes_in_flight 16 KiB 'A100'), dispatch_transform.cuh "
              "configure_async_kernel (items per thread up to and including 32 until occupancy x tile x loaded "
              "bytes >= min_bif, or as soon as the tile covers num_items; no spreading), kernels/transform.cuh "
              "transform_kernel_impl<memcpy_async> (cooperative_groups::memcpy_async of each input by the whole "
              "block, cooperative_groups::wait, then a 'NOUNROLL' loop of one element per thread)")
_SASS80 = ("SASS of the kernel compiled from that commit's headers by nvcc 13.0 (V13.0.88) for sm_80 and read with "
           "nvdisasm; registers from ptxas -v")
_SASS = ("SASS of the kernel compiled from that commit's headers by nvcc 13.0 (V13.0.88) for sm_100a and read "
         "with nvdisasm; registers from ptxas -v")

#: The tile-loop kernels whose code was read, by the name a measurement gives (``EvalOptions.streaming_kernel``).
#: Keys: ``cub-ublkcp@<cccl commit>:<functor>-<dtype>``.
TILE_LOOP_KERNELS: dict[str, TileLoopKernel] = {
    # babelstream 'mul' b = scalar * c on int8 (cub/benchmarks/bench/transform/babelstream1.cu): full-tile loop
    # LDS.U8, IADD3, VIADD, LEA.HI.X.SX32, ISETP, IMAD, STG.E.U8, @!P0 EXIT, VIADD, IADD3, IMAD.MOV, BRA = 12;
    # prologue 46 per warp + the elected thread's 30 (bulk copy, mbarrier) over 4 warps = 53.5
    "cub-ublkcp@b52534bf04:mul-int8": TileLoopKernel(
        compute_capability=100, block_threads=128, min_bytes_in_flight=48 * 1024, max_items_per_thread=31,
        registers_per_thread=32, loop_instructions=12, prologue_instructions=53.5,
        spreads_small_inputs=False, dtype="int8", ir_ops=("scale",),
        source=f"{_CCCL_2502}; {_SASS} (32 registers)"),
    # pytorch.cu 'add' (cuda::std::plus<> on __half: HADD2): 2 LDS.U16, UIADD3, 2 IMAD.U32, ISETP, IMAD.WIDE, HADD2,
    # STG.E.U16, @!P0 EXIT, 3 VIADD, BRA = 14; prologue 48 per warp + warp 0's 42 (elect, two bulk copies) / 4 = 58.5
    "cub-ublkcp@92bbfbd128:add-fp16": TileLoopKernel(
        compute_capability=100, block_threads=128, min_bytes_in_flight=64 * 1024, max_items_per_thread=32,
        registers_per_thread=12, loop_instructions=14, prologue_instructions=58.5,
        spreads_small_inputs=True, dtype="fp16", ir_ops=("add",),
        source=f"{_CCCL_2601}; {_SASS} (12 registers)"),
    # pytorch.cu 'div' (cuda::std::divides<> on __half: cuda_fp16.hpp __hdiv = two HADD2.F32 conversions,
    # MUFU.RCP (rcp.approx.ftz.f32), FMUL, F2FP.F16.F32.PACK_AB, two HSETP2 + PLOP3 for the small-result test and a
    # predicated FFMA, FFMA, F2FP refinement, issued whether taken or not): 25 per iteration; same prologue
    "cub-ublkcp@92bbfbd128:div-fp16": TileLoopKernel(
        compute_capability=100, block_threads=128, min_bytes_in_flight=64 * 1024, max_items_per_thread=32,
        registers_per_thread=12, loop_instructions=25, prologue_instructions=58.5,
        spreads_small_inputs=True, dtype="fp16", ir_ops=("div",),
        source=f"{_CCCL_2601}; {_SASS} (12 registers)"),
    # babelstream 'mul' b = scalar * c on int8, sm_80 (cub/benchmarks/bench/transform/babelstream.cu): full-tile
    # loop LDS.U8, IMAD.MOV, IADD3, ISETP, IADD3, IMAD, IMAD.MOV, IADD3, STG.E.U8, IMAD.X, BRA = 11; prologue of an
    # inner block 13 + 8 + the copy loop's 9 (3 predicated-off LDS, LDGSTS.E.BYPASS.128, ...) in the 4 of 8 warps
    # whose threads hold a 16 B piece of the 2 KiB tile + 3 + 7 (wait, barrier) + 7 (loop set-up) + EXIT = 43.5
    "cub-ldgsts@29397ba3bc:mul-int8": TileLoopKernel(
        compute_capability=80, block_threads=256, min_bytes_in_flight=16 * 1024, max_items_per_thread=32,
        registers_per_thread=20, loop_instructions=11, prologue_instructions=43.5,
        spreads_small_inputs=True, dtype="int8", ir_ops=("scale",),
        source=f"{_CCCL_2512}; {_SASS80} (20 registers)"),
    # babelstream 'triad' a = b + scalar * c on int8, sm_80: full-tile loop 2 LDS.U8, IADD3, ISETP, 2 IADD3, IMAD
    # (the multiply-add), IMAD.MOV, IADD3, IMAD.MOV, IMAD.X, STG.E.U8, BRA = 13; prologue of an inner block 15 + per
    # input the cg::memcpy_async set-up (20 + 3, and 11 + 4) and its 16 B loop (7 + 12 a step) in the 2 of 8 warps
    # whose threads hold a piece of the 1 KiB tile, 27.75 + 20.75 + 8 (wait, barrier) + 10 (loop set-up) + EXIT = 82.5
    "cub-cgmemcpy@8cb5e8a9df:triad-int8": TileLoopKernel(
        compute_capability=80, block_threads=256, min_bytes_in_flight=16 * 1024, max_items_per_thread=32,
        registers_per_thread=18, loop_instructions=13, prologue_instructions=82.5,
        spreads_small_inputs=False, dtype="int8", ir_ops=("add",),
        source=f"{_CCCL_2506}; {_SASS80} (18 registers)"),
}


def tile_loop_resident_blocks(k: TileLoopKernel, p: GpuParams) -> Any:
    """Blocks of ``k`` one SM holds: the fewest of its thread, block and register limits (shared memory, a few KiB
    per tile, does not bind)."""
    by_threads = np.floor(np.asarray(p.max_threads_per_sm, dtype=float) / k.block_threads)
    by_regs = np.floor(np.asarray(p.registers_per_sm, dtype=float) / (k.registers_per_thread * k.block_threads))
    return np.minimum(np.minimum(by_threads, np.asarray(p.max_ctas_per_sm, dtype=float)), by_regs)


#: Items per thread of a transform with no input streams (``prefetch_policy_t::items_per_thread_no_input = 2``,
#: "the kernel is just filling", cub/device/dispatch/tuning/tuning_transform.cuh at both commits of
#: :data:`TILE_LOOP_KERNELS`; such a transform takes the fallback kernel there: ``use_fallback`` on
#: ``no_input_streams``).
ITEMS_PER_THREAD_NO_INPUT = 2


def tile_loop_items_per_thread(k: TileLoopKernel, resident: Any, loaded_bytes: float) -> Any:
    """Items per thread CUB's launch picks: the first of 1, 2, ... at which ``resident`` blocks' tiles of
    ``loaded_bytes`` per element reach ``k.min_bytes_in_flight`` per SM, else ``k.max_items_per_thread``;
    :data:`ITEMS_PER_THREAD_NO_INPUT` when nothing is loaded. ``resident`` may be an array (one per hardware
    variant); a scalar gives an int."""
    res = np.asarray(resident, dtype=float)
    if float(loaded_bytes) <= 0:
        ipt = np.full(res.shape, float(ITEMS_PER_THREAD_NO_INPUT))
    else:
        per_item = np.maximum(res, 1.0) * k.block_threads * float(loaded_bytes)
        ipt = np.clip(np.ceil(k.min_bytes_in_flight / per_item), 1, k.max_items_per_thread)
    return int(ipt) if ipt.ndim == 0 else ipt


def tile_loop_launch_items(k: TileLoopKernel, numel: float, resident: Any, sms: Any, loaded_bytes: float) -> Any:
    """Items per thread of the launch over ``numel`` elements: :func:`tile_loop_items_per_thread`, lowered for a
    small input as ``k``'s launch does (:attr:`TileLoopKernel.spreads_small_inputs`), per hardware variant."""
    ipt = np.asarray(tile_loop_items_per_thread(k, resident, loaded_bytes), dtype=float)
    if k.spreads_small_inputs:  # fill every SM's resident blocks
        cap = np.maximum(1.0, np.ceil(float(numel) / (np.asarray(sms, dtype=float) * k.block_threads * resident)))
    else:  # stop once one tile covers the input
        cap = max(1.0, math.ceil(float(numel) / k.block_threads))
    return np.minimum(ipt, cap)


def shared_memory_throughput(issue_s: Any, memory_s: Any, delay_s: Any, per_sm: Any, sms: Any,
                             *, tolerance: float = 1e-12, max_steps: int = 100000) -> Any:
    """Tiles per second one SM completes when every SM holds ``per_sm`` tiles that cycle through a delay
    (``delay_s``), the SM's own instruction issue (``issue_s`` per tile) and the DRAM the ``sms`` SMs share
    (``memory_s`` per tile at the whole chip's rate).

    A closed network of ``sms`` symmetric classes, each pinned to its SM's issue centre and all sharing one
    memory centre, solved by the Bard-Schweitzer approximation of mean-value analysis (P. Schweitzer,
    "Approximate analysis of multiclass closed networks of queues", 1979; Y. Bard, "Some extensions to multiclass
    queueing network analysis", 1979): with ``q_i``, ``q_m`` one class's mean queues, ``R_i = D_i (1 + q_i (N -
    1) / N)``, ``R_m = d_m (1 + S q_m - q_m / N)``, ``X = N / (Z + R_i + R_m)``, iterated to a fixed point. One
    customer on one SM is exact: ``X = 1 / (Z + D_i + d_m)``. ``per_sm`` may differ by hardware variant (an array).
    """
    di, dm, z = (np.asarray(v, dtype=float) for v in (issue_s, memory_s, delay_s))
    n, s = np.maximum(1.0, np.asarray(per_sm, dtype=float)), np.asarray(sms, dtype=float)
    qi = qm = np.broadcast_to(n / 2.0, np.broadcast(di, dm, z, s, n).shape)
    x = n / (z + di + dm)
    for _ in range(max_steps):
        ri = di * (1.0 + qi * (n - 1.0) / n)
        rm = dm * (1.0 + s * qm - qm / n)
        x_new = n / (z + ri + rm)
        qi, qm = 0.5 * (qi + x_new * ri), 0.5 * (qm + x_new * rm)
        if np.all(np.abs(x_new - x) <= tolerance * np.abs(x_new)):
            return x_new
        x = x_new
    return x


def tile_loop_time(numel: float, loaded_bytes: float, stored_bytes: float, k: TileLoopKernel, p: GpuParams, *,
                   warp_schedulers: Any, warp_size: int, smem_latency_s: Any = 0.0) -> Any:
    """Time (s) of a tile-loop kernel over ``numel`` elements that loads ``loaded_bytes`` and stores
    ``stored_bytes`` per element, on the device of ``p`` with ``warp_schedulers`` per SM (each issues one warp
    instruction per clock) and warps of ``warp_size`` threads.

    Each SM cycles its resident blocks (:func:`tile_loop_resident_blocks`) through a delay (the DRAM latency
    ``p.dram_latency_s``, then one shared-memory load latency ``smem_latency_s`` per item per thread: the loop is
    not unrolled, so each iteration's store waits for its own load), the DRAM the busy SMs share (the tile's bytes
    read and written at ``dram_bytes_per_s x dram_fraction``) and its own warp schedulers (the block's warps x
    (prologue + items per thread x loop instructions) over ``warp_schedulers x clock``); the time is the busiest
    SM's tiles (``ceil(tiles / sms)``) over the throughput of that loop (:func:`shared_memory_throughput`).
    Every quantity is per hardware variant (any field of ``p`` may be an array): each variant's time is the
    time of that variant alone. A kernel no SM can hold one block of is a ValueError.
    """
    resident, sms, ipt, tiles, tiles_per_sm = _launch(k, numel, p, loaded_bytes)
    stream = np.asarray(p.dram_bytes_per_s, dtype=float) * np.asarray(p.dram_fraction, dtype=float)
    memory_s = k.block_threads * ipt * (float(loaded_bytes) + float(stored_bytes)) / stream  # at the chip's rate
    issue_s = _issue_s(k, ipt, p, warp_schedulers, warp_size)
    customers = np.maximum(1.0, np.minimum(resident, tiles_per_sm))
    delay_s = np.asarray(p.dram_latency_s, dtype=float) + ipt * np.asarray(smem_latency_s, dtype=float)
    x = shared_memory_throughput(issue_s, memory_s, delay_s, customers, np.minimum(sms, tiles))
    return tiles_per_sm / x


def tile_loop_issue_time(numel: float, loaded_bytes: float, k: TileLoopKernel, p: GpuParams, *,
                         warp_schedulers: Any, warp_size: int) -> Any:
    """Time (s) the busiest SM's warp schedulers spend issuing its tiles' instructions in the launch
    :func:`tile_loop_time` prices (its tiles x one tile's issue time): the part of that time that runs at the SM
    clock. It never exceeds :func:`tile_loop_time` (the loop's throughput is at most one tile per issue time)."""
    _, _, ipt, _, tiles_per_sm = _launch(k, numel, p, loaded_bytes)
    return tiles_per_sm * _issue_s(k, ipt, p, warp_schedulers, warp_size)


def _launch(k: TileLoopKernel, numel: float, p: GpuParams, loaded_bytes: float) -> tuple[Any, Any, Any, Any, Any]:
    """The launch of ``k`` over ``numel`` elements per hardware variant of ``p``: resident blocks per SM, SMs,
    items per thread, tiles and the busiest SM's tiles; no resident block is a ValueError."""
    resident = tile_loop_resident_blocks(k, p)
    if np.any(resident < 1):
        raise ValueError(f"tile-loop kernel of {k.block_threads} threads x {k.registers_per_thread} registers: "
                         f"resident blocks per SM; got {np.min(resident):g}; expected at least 1 (the SM's thread, "
                         "block and register limits hold no block of it)")
    sms = np.asarray(p.sms, dtype=float)
    ipt = tile_loop_launch_items(k, numel, resident, sms, loaded_bytes)
    tiles = np.ceil(float(numel) / (k.block_threads * ipt))
    return resident, sms, ipt, tiles, np.ceil(tiles / sms)  # the busiest SM's tiles


def _issue_s(k: TileLoopKernel, ipt: Any, p: GpuParams, warp_schedulers: Any, warp_size: int) -> Any:
    """One tile's issue time (s) on its SM: the block's warps x (prologue + ``ipt`` x loop instructions) over
    ``warp_schedulers`` instructions per clock."""
    warps = math.ceil(k.block_threads / warp_size)
    return warps * (k.prologue_instructions + ipt * k.loop_instructions) / (
        np.asarray(warp_schedulers, dtype=float) * np.asarray(p.clock_hz, dtype=float))
