"""Frozen, SI-unit hardware specifications (devices, systems) and dotted-path access to their fields.

Every numeric field carries unit metadata (``field.metadata["unit"]``) so the TOML loader can parse
human unit strings strictly, and every loaded number has a :class:`Provenance` keyed by its dotted
path in :attr:`DeviceSpec.provenance`. Models read plain floats; provenance is looked up by path.

Dotted paths name fields everywhere (errors, provenance, calibration, sweeps):
``compute.tensor_flops_per_s.bf16``, ``memory.hbm.read_bandwidth_bytes_per_s``,
``efficiency.launch_overhead_s``. Mapping-valued fields (per-dtype rates, memory levels, links) are
addressed by key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from nodeperf.errors import NodeperfError
from nodeperf.suggest import MAX_LISTED_PROBLEMS, did_you_mean

__all__ = [
    "SpecError",
    "Provenance",
    "ClockSpec",
    "ComputeSpec",
    "SMSpec",
    "SystolicSpec",
    "CpuSpec",
    "MemoryLevel",
    "LinkSpec",
    "PowerSpec",
    "DvfsSpec",
    "EnergySpec",
    "EfficiencySpec",
    "OpSupportSpec",
    "DeviceSpec",
    "SystemSpec",
    "get_path",
    "replace_path",
    "spec_field",
    "SPECIAL_FUNCTIONS",
    "MAX_LISTED_PROBLEMS",
]


class SpecError(NodeperfError, ValueError):
    """A hardware spec or overlay is invalid; the message locates every problem.

    ``problems`` holds the located lines the message lists (at most the first
    :data:`MAX_LISTED_PROBLEMS`) and ``count`` how many problems there were in all; for an error
    built from one message they are that message and 1.
    """

    def __init__(self, message: str = "", *, problems: tuple[str, ...] | None = None, count: int | None = None) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) if problems is not None else (str(message),)
        self.count: int = count if count is not None else len(self.problems)


#: Problems of one file listed in an error message; the rest are counted ("... and N more").


#: Special functions whose per-evaluation time a CPU spec gives (``cpu.special_function_s.<name>``).
SPECIAL_FUNCTIONS: tuple[str, ...] = ("exp", "tanh")


def spec_field(unit: str, doc: str, default: Any = dataclasses.MISSING, *, keys: tuple[str, ...] | None = None,
               absent: str | None = None, columns: tuple[str, str] | None = None, **kw: Any) -> Any:
    """A dataclass field carrying its unit and a one-line description.

    Parameters
    ----------
    unit
        Unit of the stored SI value: ``"Hz"``, ``"B"``, ``"B/s"``, ``"s"``, ``"W"``, ``"J/B"``,
        ``"J/FLOP"``, ``"FLOP/s"``, ``"count"`` (integer) or ``"1"`` (dimensionless factor).
    doc
        What the field means.
    keys
        For a mapping-valued field, the keys a file may give (default: the dtypes of
        ``hwmodels.loader.KNOWN_DTYPES``).
    absent
        What the default says when a file does not give the field (a feature the file's device does not
        have): the loader records it as the number's source, ``not modelled: <absent>``.
    columns
        For a table-valued field (``tuple[tuple[int, float], ...]``), what its two columns are (the
        loader's messages name them).
    """
    md: dict[str, Any] = {"unit": unit, "doc": doc}
    if keys is not None:
        md["keys"] = tuple(keys)
    if columns is not None:
        md["columns"] = tuple(columns)
    if absent is not None:
        md["absent"] = absent
    if default is dataclasses.MISSING and "default_factory" not in kw:
        return field(metadata=md, **kw)
    if "default_factory" in kw:
        return field(metadata=md, **kw)
    return field(default=default, metadata=md, **kw)


@dataclass(frozen=True)
class Provenance:
    """Where a number came from: a citation (datasheet, paper + table) or ``measured: file``."""

    source: str
    note: str = ""


@dataclass(frozen=True)
class ClockSpec:
    boost_hz: float = spec_field("Hz", "maximum boost clock of the compute units")
    sustained_hz: float = spec_field(
        "Hz", "clock the dense tensor peak is quoted at / sustained under load"
    )


@dataclass(frozen=True)
class ComputeSpec:
    units: int = spec_field("count", "streaming multiprocessors (NVIDIA), compute units (AMD), TensorCores (TPU)")
    tensor_flops_per_s: dict[str, float] = spec_field(
        "FLOP/s", "dense matrix-unit peak per dtype (FMA = 2 FLOP), whole device"
    )
    vector_flops_per_s: dict[str, float] = spec_field(
        "FLOP/s", "vector/SIMT (non-matrix) peak per dtype, whole device"
    )


@dataclass(frozen=True)
class SMSpec:
    """Per-SM (per-CU) resources that bound occupancy on GPUs."""

    registers_per_sm: int = spec_field("count", "32-bit registers per SM")
    shared_mem_per_sm_bytes: float = spec_field("B", "largest shared-memory carve-out per SM")
    max_shared_mem_per_cta_bytes: float = spec_field("B", "largest shared memory one CTA may use")
    l1_bytes: float = spec_field("B", "unified L1/shared capacity per SM")
    max_threads_per_sm: int = spec_field("count", "resident threads per SM")
    max_ctas_per_sm: int = spec_field("count", "resident thread blocks per SM")
    warp_size: int = spec_field("count", "threads per warp (wavefront)", default=32)
    shared_mem_bytes_per_clk: int = spec_field(
        "count",
        "shared-memory (LDS) bytes one SM can deliver per clock: 32 banks x 4 B on NVIDIA since "
        "compute capability 5.x (CUDA C++ Programming Guide, 'Shared Memory' of the compute-capability "
        "appendix); AMD CDNA LDS also serves 128 B/clk per CU (CDNA3 ISA guide, LDS chapter)",
        default=128,
    )
    sfu_ops_per_clk: int = spec_field(
        "count",
        "special-function results (exp2, rcp, rsqrt) per clock per SM: 16 for compute capability "
        "5.x-9.0 (CUDA C++ Programming Guide, 'Arithmetic Instructions' throughput table)",
        default=16,
    )
    warp_schedulers: int = spec_field(
        "count",
        "warp schedulers per SM, each issuing one instruction of one ready warp per clock: 4 on NVIDIA "
        "compute capability 7.x-10.x (CUDA C++ Programming Guide, compute-capability appendix, 'Architecture': "
        "'4 warp schedulers'; 'at every instruction issue time, each scheduler issues one instruction for one "
        "of its assigned warps that is ready to execute'). Read only by the tile-loop kernels "
        "(hwmodels.tile_loop, EvalOptions.streaming_kernel), which refuse a device whose compute capability is not "
        "the one they were compiled for, so only NVIDIA specs use it; the default carries no meaning for AMD, TPU "
        "or CPU specs",
        default=4,
    )
    warp_mma_flops_per_clk: float = spec_field(
        "count",
        "dense FP16 FLOP per clock per SM of the warp-synchronous mma.sync path (the Ampere-style "
        "instructions FlashAttention-2 and other sm80 kernels issue); 0 means the same as the native "
        "tensor rate. Hopper and datacenter Blackwell reach their datasheet peak only through "
        "asynchronous warpgroup / UMMA instructions, so their warp-level rate is lower",
        default=0.0,
    )
    compute_capability: int = spec_field(
        "count",
        "CUDA compute capability as major x 10 + minor (86 for 8.6; CUDA C++ Programming Guide, 'Compute "
        "Capabilities'). Kernels branch on it: FlashAttention-2's forward launch templates take smaller tiles "
        "on 8.x parts other than 8.0 (is_sm8x: A10, Jetson Orin, L4, L40S)",
        default=0, absent="no compute capability given: kernels take their branch for compute capability 8.0 and later")


@dataclass(frozen=True)
class SystolicSpec:
    """Matrix-unit geometry of a TPU-style chip."""

    rows: int = spec_field("count", "PE rows of one systolic array (MXU)")
    cols: int = spec_field("count", "PE columns of one systolic array (MXU)")
    arrays_per_core: int = spec_field("count", "systolic arrays (MXUs) per core")
    dataflow: str = field(default="ws", metadata={"unit": "", "doc": "os | ws | is", "choices": ("os", "ws", "is")})


@dataclass(frozen=True)
class CpuSpec:
    """How a CPU's math libraries use its cores (kind ``"cpu"``): the empirical factors of the CPU rules.

    A CPU runs a network's ops through several kernel libraries that reach different fractions of the
    SIMD peak (a BLAS GEMM, a direct-convolution library, an im2col + GEMM fallback, vectorised
    special functions), so each has its own field. Every field is calibratable by dotted path
    (``cpu.gemm_peak_fraction``, ``cpu.special_function_s.exp``).
    """

    gemm_peak_fraction: float = spec_field(
        "1", "fraction of compute.tensor_flops_per_s[dtype] a large GEMM of the BLAS library sustains "
        "(matmul, im2col convolutions, the fused-attention kernel's block products)")
    dnn_peak_fraction: float = spec_field(
        "1", "fraction of compute.tensor_flops_per_s[dtype] the primitive library (oneDNN) sustains on a large "
        "direct convolution or bf16/fp16 GEMM")
    gemm_half_m: float = spec_field(
        "1", "GEMM rows m at which the BLAS kernel reaches half its large-size efficiency (efficiency "
        "factor m / (m + gemm_half_m)): register-tile padding and packing not amortised on short sides")
    gemm_half_n: float = spec_field("1", "as gemm_half_m for the GEMM columns n")
    gemm_half_k: float = spec_field(
        "1", "as gemm_half_m for the reduction depth k (loading and storing the accumulator tile)")
    special_function_s: dict[str, float] = spec_field(
        "s", "time per evaluation of a special function (exp, tanh), whole device, beyond the plain "
        "arithmetic of the op", keys=SPECIAL_FUNCTIONS)
    strided_copy_run_s: float = spec_field(
        "s", "time per contiguous run of a strided copy (im2col unfolds an input in runs of one output row), "
        "whole device")
    library_call_overhead_s: float = spec_field(
        "s", "extra per-call cost of the primitive-based library path (oneDNN: direct convolution, "
        "bf16/fp16 GEMM): primitive lookup/creation and layout reorders of small tensors")
    reference_gemm_flops_per_s: dict[str, float] = spec_field(
        "FLOP/s", "rate of the framework's portable GEMM loops, one thread, for a reduced-precision dtype whose "
        "contractions the primitive library cannot run on this CPU (PyTorch without AVX-512 BW/VL/DQ or "
        "AVX-NE-CONVERT for bf16, without AVX512-FP16 or AVX-NE-CONVERT for fp16); a dtype not listed takes the "
        "library path", keys=("bf16", "fp16"), default_factory=dict)
    row_moments_s: float = spec_field(
        "s", "time per input element of a normalisation's row-moments pass, whole device: PyTorch's CPU layer and "
        "group norm (moments_utils.h, RowwiseMoments) update a Welford mean and variance per SIMD vector with a "
        "subtract and an FMA on one loop-carried chain, so the pass runs at their latency, not their throughput, "
        "and does not overlap the row's memory traffic; 0: no separate figure (priced as other vector work)",
        default=0.0)


@dataclass(frozen=True)
class MemoryLevel:
    """One level of the memory hierarchy (device-wide figures unless the name says per-SM)."""

    name: str = field(metadata={"unit": "", "doc": "hbm, l2, smem, rf, vmem, ..."})
    capacity_bytes: float = spec_field("B", "capacity of the level (device total)")
    read_bandwidth_bytes_per_s: float = spec_field("B/s", "peak read bandwidth (device total)")
    write_bandwidth_bytes_per_s: float = spec_field("B/s", "peak write bandwidth (device total)")
    latency_s: float = spec_field("s", "load-to-use latency of a hit in this level")
    energy_j_per_byte: float = spec_field("J/B", "dynamic energy per byte moved at this level")
    spill_bytes: float = spec_field(
        "B", "working set from which a sweep no longer hits this cache at all (0: a sharp edge at capacity_bytes); "
             "between capacity_bytes and it the share of the bytes this level serves falls linearly in log size, "
             "the rest coming from the next level out", default=0.0,
        absent="a sharp edge at capacity_bytes (MemoryLevel.spill_bytes = 0; the host CPU's probes measure a soft one)")
    reserved_bytes: float = spec_field(
        "B", "bytes of the level the device's runtime keeps for itself (a program may use capacity_bytes minus "
             "this); counted by the XLA memory model of TPU training steps", default=0.0,
        absent="no runtime reservation stated (MemoryLevel.reserved_bytes = 0)")
    usable_bytes: float = spec_field(
        "B", "total memory of the level as the device's runtime reports it to a program (torch.cuda."
             "get_device_properties().total_memory, cudaMemGetInfo's total, nvidia-smi's or rocm-smi's total): "
             "the physical stacks less what the driver and ECC keep. capacity_bytes stays the marketed figure; "
             "every fit check, KV-cache sizing and memory report uses this one (:attr:`usable`)", default=0.0,
        absent="no runtime figure stated: a program may use capacity_bytes (MemoryLevel.usable_bytes = 0)")

    @property
    def usable(self) -> Any:
        """Bytes a program may use: ``usable_bytes`` where the catalog states it, else ``capacity_bytes``
        (elementwise when a sweep holds arrays)."""
        u, c = self.usable_bytes, self.capacity_bytes
        if hasattr(u, "shape") or hasattr(c, "shape"):
            import numpy as np

            return np.where(np.asarray(u) > 0, u, c)
        return u if u > 0 else c


@dataclass(frozen=True)
class LinkSpec:
    """A host or peer link of a device."""

    name: str = field(metadata={"unit": "", "doc": "host, peer, ici, ..."})
    kind: str = field(metadata={"unit": "", "doc": "pcie4, pcie5, nvlink3, nvlink4, infinity-fabric, ici"})
    bandwidth_bytes_per_s: float = spec_field("B/s", "bandwidth per direction, all lanes/links together")
    latency_s: float = spec_field("s", "one-way latency of a small message")
    energy_j_per_byte: float = spec_field("J/B", "energy per byte sent", default=0.0)


@dataclass(frozen=True)
class PowerSpec:
    tdp_w: float = spec_field("W", "board / module power limit")
    idle_w: float = spec_field("W", "static power drawn while active but idle (leakage + uncore)")


@dataclass(frozen=True)
class DvfsSpec:
    """Voltage-frequency data that turn the power cap into a clock choice (``[dvfs]``; optional).

    With it, a kernel whose power would exceed ``power.tdp_w`` runs at the highest clock whose power
    fits (:func:`hwmodels.energy.dvfs_kernel`): dynamic power ``C V(f)^2 f`` per unit of work, with
    the voltage on the linear V-f line from ``base_voltage_fraction`` at ``base_hz`` to 1 at
    ``clock.boost_hz``. The ``[energy]`` per-FLOP figures are then those at ``clock.sustained_hz``
    (the clock the peak rates are quoted at) and scale with ``(V(f) / V(sustained))^2``. Without it,
    an over-limit kernel is stretched at constant energy (today's first-order cap).
    """

    base_hz: float = spec_field("Hz", "base clock of the compute units (the lowest clock of the V-f line)")
    base_voltage_fraction: float = spec_field(
        "1", "core voltage at the base clock as a fraction of the voltage at the boost clock (V-f line)")


@dataclass(frozen=True)
class EnergySpec:
    """Dynamic energy coefficients (``[energy]``): arithmetic per FLOP and data transport per byte.

    The per-byte energy of a memory level (``memory.<level>.energy_j_per_byte``) covers the storage
    array and its own I/O; ``dram_path_j_per_byte`` adds the on-die transport of a main-memory byte
    to the compute units (0, not modelled, for devices that give no figure). Bytes that hit in the
    last-level cache are not charged it: the GPU catalog's per-FLOP figures are the whole dynamic
    budget at peak and already cover the operand traffic of the compute-bound kernels that reuse them.
    """

    tensor_j_per_flop: dict[str, float] = spec_field("J/FLOP", "matrix-unit dynamic energy per FLOP by dtype")
    vector_j_per_flop: dict[str, float] = spec_field("J/FLOP", "vector-unit dynamic energy per FLOP by dtype")
    dram_path_j_per_byte: float = spec_field(
        "J/B", "energy per main-memory byte spent on the die outside the DRAM devices: the wires from the "
        "memory PHY through the last-level cache slice to the compute units", default=0.0)
    chain_j_per_flop: dict[str, float] = spec_field(
        "J/FLOP", "vector-unit dynamic energy per FLOP of a dependent FMA chain on register operands, two of the "
        "three loop-invariant (a peak-FLOP or roofline loop: no operand delivery from shared memory and little "
        "operand switching), by dtype; a dtype not listed takes vector_j_per_flop", default_factory=dict)


@dataclass(frozen=True)
class EfficiencySpec:
    """Empirical factors of the performance models: the fields calibration fits.

    Each one is sourced in the catalog (a paper's measurement, a vendor benchmark) and may be
    overridden by a calibration overlay. Models never hard-code these.
    """

    tensor_peak_fraction: float = spec_field(
        "1", "fraction of the dense tensor peak a large, well-tiled GEMM sustains"
    )
    vector_peak_fraction: float = spec_field("1", "fraction of the vector peak sustained")
    dram_bandwidth_fraction: float = spec_field(
        "1", "fraction of peak DRAM bandwidth a large streaming kernel achieves"
    )
    l2_bandwidth_fraction: float = spec_field("1", "fraction of peak L2 bandwidth achieved by plain loads")
    bandwidth_half_size_bytes: float = spec_field(
        "B", "bytes moved at which a streaming kernel reaches half its asymptotic bandwidth"
    )
    launch_overhead_s: float = spec_field("s", "host-side launch + kernel start/finish cost per kernel")
    graph_launch_overhead_s: float = spec_field(
        "s", "per-kernel cost when launched from a captured CUDA graph: the floor of a kernel's time, the period "
        "of a graph-replayed chain of tiny dependent kernels on the chip (device time included), taken as the "
        "larger of it and the kernel's work plus kernel_device_time_s, never added to them"
    )
    framework_op_overhead_s: float = spec_field(
        "s",
        "host time an eager framework (PyTorch eager) spends per op before its kernel reaches the GPU "
        "(Python, dispatcher, allocator, launch); a floor on every op when the host issues ops one by one",
        default=0.0,
    )
    host_sync_s: float = spec_field(
        "s",
        "time a host wait on the GPU adds (a device-to-host copy the host blocks on, then its next launch "
        "reaching an idle GPU): the round trip of a synchronisation point, paid once per sync; 0 where no "
        "figure exists (syncs then cost only the host issue time they expose)",
        default=0.0,
    )
    library_gemm_call_s: float = spec_field(
        "s",
        "host time of one GEMM a library issues from C++ through cuBLASLt with its descriptors built and its "
        "algorithm queried on every call (Transformer Engine's per-expert grouped GEMM), launch included; "
        "0 where no figure exists (such a GEMM then costs the launch floor)",
        default=0.0,
    )
    framework_conv_op_overhead_s: float = spec_field(
        "s",
        "host time an eager framework spends per convolution call issued through cuDNN's convolution API "
        "(Python, dispatcher, cuDNN descriptor/plan lookup, launch); replaces the per-op floor for forward "
        "convolutions when the host issues ops one by one",
        default=0.0,
    )
    framework_module_call_s: float = spec_field(
        "s",
        "host time an eager framework adds to an op issued from an nn.Module holding parameters (Linear, "
        "Embedding, LayerNorm, BatchNorm): the module call's Python around the functional op",
        default=0.0,
    )
    framework_container_call_s: float = spec_field(
        "s",
        "host time of one call of a container nn.Module (a block, a layer, an attention module) that issues "
        "no kernel itself: charged to the first op it issues",
        default=0.0,
    )
    l2_tile_bandwidth_fraction: float = spec_field(
        "1",
        "fraction of the L2 bandwidth figure reached by the bulk asynchronous tile copies of GEMM and "
        "attention kernels (cp.async, TMA)",
        default=1.0,
    )
    l2_tile_sm_port_ratio: float = spec_field(
        "1",
        "rate at which one SM takes in L2 tile traffic while other SMs are idle, as a multiple of its even share "
        "(1 / SMs) of the tile rate (L2 read bandwidth x l2_tile_bandwidth_fraction); the operand panels of a GEMM "
        "whose last wave leaves SMs idle load at min(tile rate, busy SMs x this per-SM rate), and so do the reads "
        "that only some SMs make at once (a split-K hand-off's read of the partner's partial, the first K-slice "
        "of a grid under one wave; writes stay at the share); 1 = a CTA gets its share however many SMs are busy "
        "(no figure); at least 1",
        default=1.0,
    )
    kernel_device_time_s: float = spec_field(
        "s",
        "device-side time every kernel adds beyond its modelled work (the front end's launch of the grid, "
        "the drain and memory fence at its end; GEMM pipeline edges and split-K fixups are modelled "
        "separately), on top of its compute or memory time; the GPU defaults are measured times per "
        "no-work kernel in graph replay (efficiency.toml), 0 where no figure exists; calibration fits it",
        default=0.0,
    )
    weight_dequant_ops_per_element: float = spec_field(
        "1",
        "vector-lane instructions a weight-only quantised GEMM (W4A16/W8A16: Marlin, AWQ, GPTQ kernels) "
        "spends to turn one packed int4/int8 weight into a 16-bit operand in registers, group scale "
        "applied; issued by the same warps as the matrix instructions, once per weight per CTA row "
        "tile; 0 (not modelled) unless the catalog gives it",
        default=0.0,
    )
    simt_gemm_peak_fraction: float = spec_field(
        "1",
        "fraction of the FP32 SIMT (CUDA-core) peak a large SGEMM without TF32 sustains (cuBLAS); below "
        "vector_peak_fraction on SMs with 128 FP32 lanes (4 partitions of 32, one warp instruction issued "
        "per partition per clock), where every FFMA issue slot is shared with the inner loop's shared-memory "
        "loads and address arithmetic; 0 means vector_peak_fraction (no separate figure)",
        default=0.0,
    )
    decode_attention_bandwidth_fraction: float = spec_field(
        "1",
        "fraction of the peak main-memory bandwidth a decode attention kernel (one or a few query rows "
        "per KV head: flash-decoding, masked multi-head attention, XQA, paged decode kernels) sustains "
        "streaming a long 16-bit K/V cache; 0 means dram_bandwidth_fraction (no separate figure)",
        default=0.0,
    )
    gemv_bandwidth_fraction: float = spec_field(
        "1",
        "fraction of the peak main-memory bandwidth a library matrix-vector kernel (a GEMM with one row or one "
        "column: cuBLAS's GEMV kernels at batch-1 decode) sustains streaming its matrix; 0 means "
        "dram_bandwidth_fraction (no separate figure)",
        default=0.0,
    )
    conv_rate_fraction: float = spec_field(
        "1",
        "the rate of the vendor library's implicit-GEMM convolution kernels (cuDNN) as a fraction of the GEMM "
        "figure the model prices a GEMM of the same shape at (tensor_peak_fraction and the tile model): measured "
        "convolution times against the model's time for the same implicit GEMM; 1 where no convolution "
        "measurement on the architecture was found",
        default=1.0,
    )
    gemv_max_rows: int = spec_field(
        "count",
        "the most rows (or columns) of a library GEMM (one batch entry, no implicit operand) that streams its "
        "matrix at gemv_bandwidth_fraction, as the library's GEMV does; moot where gemv_bandwidth_fraction is 0. "
        "The default 64 is the largest M at which cuBLAS's skinny GEMMs were measured at or below the GEMV's rate "
        "(ml-explore/mlx PR #3255, A100, fp16 at N = K = 16384: M = 16 and 64 at 0.815 and 0.773 of 2039 GB/s, "
        "M = 1 at 0.830); calibration may refit it",
        default=64,
    )
    decode_attention_fp8_bandwidth_fraction: float = spec_field(
        "1",
        "the same with an 8-bit K/V cache, whose elements the kernel converts to 16 bit in registers "
        "before the products (so the rate may be set by the conversions, not the memory); 0 means "
        "decode_attention_bandwidth_fraction",
        default=0.0,
    )
    outer_axis_stream_fraction: float = spec_field(
        "1",
        "fraction of the streaming rate a generated kernel reaches when it reads a row-major tensor along its "
        "outer axis and writes it transposed, its loads uncoalesced (Inductor's amax-and-cast of torchao "
        "rowwise's weight-gradient operands, op attribute ``access = 'outer_axis'``); 0 means the streaming "
        "rate (no separate figure)",
        default=0.0,
    )
    dropout_stream_fraction: float = spec_field(
        "1",
        "fraction of the streaming rate a training dropout's forward kernel reaches as a one-op kernel (PyTorch's "
        "``fused_dropout_kernel_vec``: a grid-stride loop that draws Philox4x32-10 numbers between its load and "
        "its stores of the output and the keep-mask), measured against a plain elementwise kernel on the same "
        "board and timer; 0 means the streaming rate (no separate figure). Compiler-generated (fused) dropout "
        "kernels are not priced with it",
        default=0.0,
    )
    mxfp8_quantize_stream_fraction: float = spec_field(
        "1",
        "fraction of the streaming rate Transformer Engine's MXFP8 quantize kernel reaches when it reads a 16-bit "
        "tensor once and writes its rowwise and columnwise e4m3 copies with their E8M0 block scales "
        "(``cast_mxfp8_2D_kernel``; op attribute ``te_quantize = 'mxfp8'``, the per-expert ``split_quantize`` "
        "kernels included), measured against the bytes it moves; 0 means the streaming rate (no separate figure)",
        default=0.0,
    )
    context_fmha_tensor_fraction: float = spec_field(
        "1",
        "the rate TensorRT-LLM's own context-phase fused attention kernels (fmha_v2, "
        "cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention; options.attention_kernel 'trtllm-fmha') reach "
        "on a long prompt's 16-bit self-attention, causal FLOPs over time, as a fraction of the 16-bit tensor "
        "peak: the GPU lowering holds such an op's compute time at least at its FLOPs over this rate (a floor "
        "under the flash-attention kernel's own estimate, which it does not lower); 0 means no measurement "
        "(the flash kernel's estimate alone)",
        default=0.0,
    )
    flash2_causal_fwd_ratio: tuple[tuple[int, float], ...] = spec_field(
        "1",
        "FlashAttention-2's causal forward rate over its non-causal forward rate, by sequence length: rows "
        "[tokens, ratio], the tokens strictly increasing, each ratio in (0, 1]. The GPU lowering divides the "
        "compute time of a causal self-attention forward run by the flash2 kernel by it, interpolated in log2 "
        "of the sequence and held at the end rows outside them (the kernel's CTAs run in launch order, so a "
        "causal launch ends on a tail of its longest query blocks, and its diagonal tiles mask their scores); "
        "empty: ratio 1 (no measurement for the device). Calibration scales it by "
        "flash2_causal_fwd_ratio_scale",
        default=(), columns=("sequence length", "ratio"),
        absent="no measurement of FlashAttention-2's causal forward against its non-causal forward: ratio 1",
    )
    flash2_causal_fwd_ratio_scale: float = spec_field(
        "1",
        "factor on every ratio of flash2_causal_fwd_ratio (the product held at most 1): 1 is the table as "
        "measured; calibration fits it when asked (`calibrate --param efficiency.flash2_causal_fwd_ratio_scale`, "
        "bounds 0.5 to the factor that takes the largest ratio to 1), so one number moves the whole table",
        default=1.0, absent="no causal-forward table to scale (efficiency.flash2_causal_fwd_ratio): 1",
    )
    fp8_promotion_interval: int = spec_field(
        "count",
        "K elements an fp8 GEMM without fast accumulation (cuBLASLt's split accumulator, "
        "CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0) accumulates in the matrix units before it adds the partial sums "
        "into FP32 registers on the vector lanes: one FP32 add per output element per interval; the default 128 "
        "is the interval DeepSeek-V3 states for its own kernel (arXiv 2412.19437, s.3.3.2 'Increasing "
        "Accumulation Precision': N_C = 128, 4 WGMMAs); cuBLAS does not document its own, so the figure is an "
        "assumption calibration may refit",
        default=128,
    )
    linalg_block_size: int = spec_field(
        "count",
        "panel width nb of the blocked dense factorisations and reductions (Cholesky, Householder QR, "
        "tridiagonal and bidiagonal reduction) of the device's linear-algebra library: the trailing "
        "updates are GEMMs of depth nb, the n/nb panels run one after another; the default 32 is "
        "reference LAPACK's ILAENV block size for xGEQRF, xSYTRD and xGEBRD (LAPACK 3.x, ilaenv.f, ISPEC=1)",
        default=32,
    )
    linalg_sweep_row_s: float = spec_field(
        "s",
        "time per row of the active block of one implicit QR sweep of the tridiagonal (bidiagonal) "
        "eigenvalue iteration (LAPACK xSTERF/xSTEQR/xBDSQR): a dependent scalar chain, about two sweeps "
        "per eigenvalue; the default is measured: LAPACK dsterf (SciPy 1.17, one thread) at n = 4096 took "
        "219.7 ms for 4096 x 4097 row-sweeps = 13.1 ns on the 2-core AMD EPYC development VM "
        "(benchmarks/bench_linalg_host.py)",
        default=13.1e-9,
    )


@dataclass(frozen=True)
class OpSupportSpec:
    """The op kinds a fixed-function engine can run (a DLA, an NPU); the lowering refuses the rest.

    A device without this table runs every op kind its lowering rules know. With it, an op whose
    kind is not in ``kinds`` (or an elementwise op whose ``op`` attribute is not in
    ``elementwise_ops``, when that list is given) raises
    :class:`~workloads.ir.UnsupportedOpError` naming the op, its kind and the device, so a
    partitioner can place the op elsewhere and say why.
    """

    kinds: tuple[str, ...] = field(metadata={
        "unit": "", "doc": "op kinds (workloads IR names: conv2d, matmul, pool2d, ...) the engine runs"})
    source: str = field(metadata={
        "unit": "", "cite": True,
        "doc": "where the list comes from (vendor documentation of the supported layers); @refs expand"})
    elementwise_ops: tuple[str, ...] = field(default=(), metadata={
        "unit": "", "doc": "elementwise ``op`` attributes (relu, add, ...) the engine runs; empty: every one"})
    weight_operand_matmul_only: bool = field(default=False, metadata={
        "unit": "", "doc": "matmul runs only with a constant weight operand (a fully connected layer), not "
                           "between two activations"})


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator (GPU, TPU chip, CPU socket) in SI units with per-path provenance."""

    name: str
    kind: str  # "gpu" | "tpu" | "cpu"
    vendor: str
    arch: str
    description: str
    clock: ClockSpec
    compute: ComputeSpec
    memory: tuple[MemoryLevel, ...]  # outermost (e.g. HBM) first
    power: PowerSpec
    energy: EnergySpec
    efficiency: EfficiencySpec
    sm: SMSpec | None = None
    systolic: SystolicSpec | None = None
    links: tuple[LinkSpec, ...] = ()
    provenance: dict[str, Provenance] = field(default_factory=dict, compare=False, hash=False)
    source_file: str = field(default="", compare=False)
    cpu: CpuSpec | None = None  # kind "cpu": kernel-library factors (None: the plain roofline)
    op_support: OpSupportSpec | None = None  # fixed-function engines: the op kinds they run (None: all)
    dvfs: DvfsSpec | None = None  # voltage-frequency data: the power cap picks a clock (None: stretch)

    def level(self, name: str) -> MemoryLevel:
        """The memory level called ``name`` (``"hbm"``, ``"l2"``...); a located error otherwise."""
        for lv in self.memory:
            if lv.name == name:
                return lv
        names = [lv.name for lv in self.memory]
        raise SpecError(_unknown(f"{self.name}: memory.{name}", name, names, "a memory level"))

    def link(self, name: str) -> LinkSpec:
        for ln in self.links:
            if ln.name == name:
                return ln
        names = [ln.name for ln in self.links]
        raise SpecError(_unknown(f"{self.name}: links.{name}", name, names, "a link"))

    @property
    def main_memory(self) -> MemoryLevel:
        """The outermost device memory level (HBM/GDDR/DRAM)."""
        return self.memory[0]

    def source_of(self, path: str) -> Provenance | None:
        """Provenance of the number at ``path`` (None if it was derived, not read)."""
        return self.provenance.get(path)


@dataclass(frozen=True)
class SystemSpec:
    """``count`` identical devices in ``nodes`` nodes: a fabric within a node and, for several nodes,
    the network named by the node configuration ``collectives`` of ``hwmodels/catalog/fabrics.toml``
    (default: the system's own name there), which also costs its collectives."""

    name: str
    description: str
    device: DeviceSpec
    count: int
    fabric: LinkSpec | None = None  # e.g. NVSwitch: per-GPU bandwidth per direction
    nodes: int = 1
    collectives: str = ""

    @property
    def devices_per_node(self) -> int:
        return self.count // max(1, self.nodes)
    provenance: dict[str, Provenance] = field(default_factory=dict, compare=False, hash=False)
    source_file: str = field(default="", compare=False)


# --------------------------------------------------------------------------------------------
# dotted-path access


def _unknown(where: str, got: str, choices: list[str], expected: str) -> str:
    return (f"{where}: unknown name; got {got!r}; expected {expected} ({', '.join(sorted(choices)) or 'none'})"
            f"{did_you_mean(got, choices)}")


def _children(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return list(obj)
    if isinstance(obj, tuple) and obj and hasattr(obj[0], "name"):
        return [x.name for x in obj]
    if dataclasses.is_dataclass(obj):
        return [f.name for f in dataclasses.fields(obj)]
    return []


def _child(obj: Any, key: str, where: str) -> Any:
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
    elif isinstance(obj, tuple) and obj and hasattr(obj[0], "name"):
        for x in obj:
            if x.name == key:
                return x
    elif dataclasses.is_dataclass(obj) and key in {f.name for f in dataclasses.fields(obj)}:
        return getattr(obj, key)
    raise SpecError(_unknown(where, key, _children(obj), "a field"))


def get_path(spec: Any, path: str) -> Any:
    """Value at dotted ``path`` in a spec (``"memory.hbm.read_bandwidth_bytes_per_s"``)."""
    obj = spec
    done: list[str] = []
    for part in path.split("."):
        obj = _child(obj, part, f"{getattr(spec, 'name', 'spec')}: {'.'.join(done + [part])}")
        done.append(part)
    return obj


def replace_path(spec: Any, path: str, value: Any) -> Any:
    """A copy of ``spec`` with the field at dotted ``path`` set to ``value`` (inputs unchanged)."""
    head, _, rest = path.partition(".")
    where = f"{getattr(spec, 'name', 'spec')}: {path}"
    if isinstance(spec, dict):
        if head not in spec:
            raise SpecError(_unknown(where, head, list(spec), "a key"))
        new = dict(spec)
        new[head] = replace_path(spec[head], rest, value) if rest else value
        return new
    if isinstance(spec, tuple) and spec and hasattr(spec[0], "name"):
        names = [x.name for x in spec]
        if head not in names:
            raise SpecError(_unknown(where, head, names, "a name"))
        return tuple(
            (replace_path(x, rest, value) if rest else value) if x.name == head else x for x in spec
        )
    if dataclasses.is_dataclass(spec):
        fnames = [f.name for f in dataclasses.fields(spec)]
        if head not in fnames:
            raise SpecError(_unknown(where, head, fnames, "a field"))
        cur = getattr(spec, head)
        if isinstance(spec, MemoryLevel) and head == "capacity_bytes" and not rest:
            return _with_capacity(spec, value)
        return dataclasses.replace(spec, **{head: replace_path(cur, rest, value) if rest else value})
    raise SpecError(f"{where}: cannot descend into a {type(spec).__name__}; got {head!r}")


def _with_capacity(level: MemoryLevel, value: Any) -> MemoryLevel:
    """``level`` with ``capacity_bytes`` set to ``value``; a stated ``usable_bytes`` keeps its share of the
    capacity (a what-if board with more HBM keeps the runtime's reserve in proportion). Set ``usable_bytes``
    after ``capacity_bytes`` to give it explicitly."""
    u = level.usable_bytes
    if not (hasattr(u, "shape") or u > 0):
        return dataclasses.replace(level, capacity_bytes=value)
    return dataclasses.replace(level, capacity_bytes=value, usable_bytes=u * (value / level.capacity_bytes))


def zero_means_absent() -> frozenset[str]:
    """Names of spec fields a file may set to 0 to say "not present / no separate figure": additive
    times and dimensionless factors whose default is 0 (e.g. ``kernel_device_time_s``,
    ``simt_gemm_peak_fraction``, ``decode_attention_bandwidth_fraction``), each documented with what 0 means,
    and fields declared with an ``absent`` meaning and a default of 0 (``MemoryLevel.spill_bytes``)."""
    import sys

    mod = sys.modules[__name__]
    return frozenset(
        f.name for cls in vars(mod).values() if isinstance(cls, type) and dataclasses.is_dataclass(cls)
        for f in dataclasses.fields(cls)
        if (f.metadata.get("unit") in ("s", "1") or "absent" in f.metadata) and f.default == 0.0
    )
