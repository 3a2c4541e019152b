"""Lowering rules for CPU devices (kind ``"cpu"``, e.g. the host): kernel-library-aware rooflines per op.

Registered with :mod:`simulator.lowering` on import. A CPU runs a network's ops one after another on
its cores through a framework (PyTorch eager) that hands each op to one of several kernel
libraries; they reach different fractions of the SIMD peak, so the rule first decides which path an
op takes, then costs it with that path's fields of :class:`hwmodels.spec.CpuSpec` (``device.cpu``):

* **GEMM** (matmul, batched matmul, router): ``flops / (rate[dtype] * cpu.gemm_peak_fraction * e(m) e(n) e(k))``
  with the small-side efficiency ``e(d) = d / (d + cpu.gemm_half_d)``. bf16/fp16 GEMMs above
  PyTorch's size threshold go through oneDNN instead: ``cpu.dnn_peak_fraction`` in place of the BLAS
  fraction, plus ``cpu.library_call_overhead_s`` per call. Where the CPU lacks the ISA of oneDNN's
  path for the dtype (``cpu.reference_gemm_flops_per_s`` lists it: :func:`hwmodels.host.low_precision_library`),
  PyTorch runs ATen's portable loops on one thread: ``flops / cpu.reference_gemm_flops_per_s[dtype]``
  for a matmul, for the GEMM of a convolution (which then takes the im2col path: oneDNN's convolution
  needs the same ISA) and for the block products of the flash-attention kernel.
* **Convolution**: PyTorch's dispatch (``ConvParams::use_mkldnn``) sends a conv either to oneDNN's
  direct convolution (``cpu.dnn_peak_fraction`` with the same small-side factors on the implicit GEMM
  ``N*P*Q x K x C*R*S``, a reorder of the plain weights into the library's blocked layout on every call,
  and ``cpu.library_call_overhead_s``) or, for small
  single-image inputs, to its im2col + BLAS fallback (``slow_conv2d``): an unfold copy costing
  ``cpu.strided_copy_run_s`` per contiguous run of one output row, then one GEMM per image
  (``m`` = output channels, ``n`` = output pixels, ``k`` = C/g x R x S) as above.
* **Attention**: PyTorch's CPU flash-attention kernel: block GEMMs of ``q_split x kv_split`` query/key
  blocks (the kernel's own constants) at ``cpu.gemm_peak_fraction`` (their operands stay in L1/L2 from
  block to block, so a standalone call's small-side factors do not apply), causal masking skipping whole
  key blocks beyond each query block only, the softmax's vector work and one ``exp`` per computed pair.
* **Vector ops** (elementwise, normalisations, softmax, reductions, copies):
  ``compute_s = flops / (vector_rate * efficiency.vector_peak_fraction) + evaluations * cpu.special_function_s[f]``
  with one ``exp`` or ``tanh`` per element where the op needs one, against
  ``memory_s = bytes / (bandwidth * fraction)`` of the innermost level holding the working set
  (``l2``/``l3`` with ``efficiency.l2_bandwidth_fraction``, ``dram`` with
  ``efficiency.dram_bandwidth_fraction``), shared with the cache inside it when the working set lies
  between that cache's ``capacity_bytes`` and ``spill_bytes`` (:func:`memory_split`); the op takes the larger.
  Layer and group norm add their row-moments pass, ``input elements x cpu.row_moments_s``, after it: a
  Welford recurrence whose subtract and FMA sit on one loop-carried chain runs at their latency and
  does not overlap the row's memory traffic.

Every op also pays ``efficiency.launch_overhead_s``: the framework's dispatch on the
same thread, which does not overlap the op's work on a CPU. A device without a ``cpu`` section
(``device.cpu is None``) is costed by the plain roofline: one contraction fraction
(``efficiency.tensor_peak_fraction``) for every contraction.
"""

from __future__ import annotations

import math

from hwmodels.spec import CpuSpec, DeviceSpec, MemoryLevel, SpecError
from simulator.lowering.common import (
    VIEW_KINDS,
    KernelCost,
    LoweringContext,
    register_rule,
    require_rate,
    set_fallback,
    zero_cost,
)
from workloads.ir import Op
from workloads.semantics import (
    SOFTMAX_FLOPS,
    attention_window,
    banded_block_pairs,
    conv_dims,
    gemm_dims,
)

__all__ = ["cpu_kernel_cost", "CONTRACTION_KINDS", "memory_level_for", "memory_split", "memory_time",
           "conv_path", "SPECIAL_FUNCTION_OF"]

#: Op kinds whose FLOPs run as SIMD FMA contractions (tensor rate).
CONTRACTION_KINDS = frozenset({
    "matmul", "grouped_matmul", "conv1d", "conv2d", "conv1d_bwd_data", "conv2d_bwd_data", "conv1d_bwd_weight",
    "conv2d_bwd_weight", "attention", "attention_bwd", "lstm", "gru", "lstm_cell", "gru_cell", "rnn_bwd",
    "moe_router", "moe_router_bwd", "grouped_matmul_bwd_data", "grouped_matmul_bwd_weight",
})
_CACHE_ORDER = ("l1d", "l1", "l2", "l3")

#: Elementwise ops (attr ``op``) that evaluate one special function per element, and which one.
#: The gelu is the tanh approximation (what the executor runs); the sigmoid family is one exp.
SPECIAL_FUNCTION_OF: dict[str, str] = {
    "exp": "exp", "sigmoid": "exp", "silu": "exp", "swish": "exp", "softplus": "exp", "quick_gelu": "exp",
    "elu": "exp", "tanh": "tanh", "gelu": "tanh",
}
#: Normalisations whose PyTorch CPU kernel computes each row's (group's) mean and variance with
#: ``RowwiseMoments`` (aten/src/ATen/native/cpu/moments_utils.h, used by layer_norm_kernel.cpp and
#: group_norm_kernel.cpp): a Welford recurrence, priced with ``cpu.row_moments_s`` per input element.
ROW_MOMENTS_KINDS = frozenset({"layernorm", "groupnorm"})
#: Op kinds with one exp per element of their (first) input: the softmax family.
_EXP_PER_ELEMENT_KINDS = frozenset({"softmax", "softmax_bwd", "cross_entropy", "cross_entropy_bwd"})

# --- PyTorch's CPU dispatch (framework facts, cited; not empirical factors) -----------------------
#: ``ConvParams::use_mkldnn`` (aten/src/ATen/native/ConvUtils.h, PyTorch 2.x): an fp32 conv of one
#: image with at most 3x3 filters and no groups goes to oneDNN only above this many input elements
#: ("for some case, native is faster"); below it runs the im2col + BLAS ``slow_conv2d``.
TORCH_MKLDNN_CONV_MIN_INPUT_ELEMENTS = 20480
#: ``mkldnn_gemm_min_size`` (aten/src/ATen/native/mkldnn/Matmul.cpp): bf16/fp16 GEMMs with
#: ``m * n * k`` above it go to oneDNN on CPUs with AVX-512 (BW/VL/DQ).
TORCH_MKLDNN_GEMM_MIN_SIZE = 16 * 16 * 16
#: ``flash_attention_kernel_impl`` (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp): query block
#: 256 rows for sequences of at least 768, 64 from 192, else 32; key/value blocks of 512.
TORCH_FLASH_Q_SPLIT = ((768, 256), (192, 64), (0, 32))
TORCH_FLASH_KV_SPLIT = 512


def memory_level_for(device: DeviceSpec, working_set_bytes: float) -> MemoryLevel:
    """The innermost cache level holding ``working_set_bytes``, else the main memory level."""
    caches = {lv.name: lv for lv in device.memory[1:]}
    for name in _CACHE_ORDER:
        lv = caches.get(name)
        if lv is not None and working_set_bytes <= lv.capacity_bytes:
            return lv
    return device.main_memory


def _rate(table: dict[str, float], dtype: str) -> tuple[float, str]:
    if dtype in table:
        return table[dtype], dtype
    if dtype == "tf32" and "fp32" in table:
        return table["fp32"], "fp32"
    return table.get("fp32", next(iter(table.values()))), "fp32"


def memory_split(device: DeviceSpec, working_set_bytes: float) -> tuple[tuple[MemoryLevel, float], ...]:
    """The levels serving a sweep over ``working_set_bytes`` and each one's share of the bytes.

    The innermost level holding the working set serves it all, unless a cache inside it still holds
    part of it: a working set between a cache's ``capacity_bytes`` (the largest it holds whole) and its
    ``spill_bytes`` (from which it holds none) takes the share ``ln(spill / W) / ln(spill / capacity)``
    from that cache and the rest from the level holding W. That is what the host's copy ladder shows
    where a cache's edge is soft (a guest sharing a host's L3 with other tenants; a cache whose
    replacement is not LRU): bandwidth falls with the working set over a range of sizes, not at one.
    """
    caches = {lv.name: lv for lv in device.memory[1:]}
    holder, partial = device.main_memory, None
    for name in _CACHE_ORDER:  # innermost first: the caches before the holder are all smaller than W
        lv = caches.get(name)
        if lv is None:
            continue
        if working_set_bytes <= lv.capacity_bytes:
            holder = lv
            break
        if partial is None and working_set_bytes < lv.spill_bytes:
            partial = lv
    if partial is None:
        return ((holder, 1.0),)
    share = math.log(partial.spill_bytes / working_set_bytes) / math.log(partial.spill_bytes / partial.capacity_bytes)
    return ((partial, share), (holder, 1.0 - share))


def memory_time(device: DeviceSpec, moved: float, working_set: float | None = None) -> tuple[float, float, float, str]:
    """(seconds, bytes from caches, bytes from main memory, where) to move ``moved`` bytes of a sweep over
    ``working_set`` bytes (default ``moved``) from the levels holding them (:func:`memory_split`)."""
    eff = device.efficiency
    ws = moved if working_set is None else working_set
    split = memory_split(device, ws)
    seconds = cache = main = 0.0
    for level, share in split:
        is_main = level is device.main_memory
        frac = eff.dram_bandwidth_fraction if is_main else eff.l2_bandwidth_fraction
        seconds += share * moved / (level.read_bandwidth_bytes_per_s * frac) if moved else 0.0
        main += share * moved if is_main else 0.0
        cache += 0.0 if is_main else share * moved
    where = (f"working set in {split[0][0].name}" if len(split) == 1 else
             f"working set {ws / 2**20:.3g} MiB: " + ", ".join(f"{100 * sh:.0f}% from {lv.name}" for lv, sh in split)
             + f" (between its {split[0][0].capacity_bytes / 2**20:.3g} and {split[0][0].spill_bytes / 2**20:.3g} MiB)")
    return seconds, cache, main, where


def _side(d: float, half: float) -> float:
    return d / (d + half) if d > 0 else 1.0


def gemm_efficiency(cpu: CpuSpec, m: float, n: float, k: float) -> float:
    """Fraction of the tensor peak a BLAS GEMM of ``m x n x k`` sustains (large-size fraction x sides)."""
    return cpu.gemm_peak_fraction * _side(m, cpu.gemm_half_m) * _side(n, cpu.gemm_half_n) * _side(k, cpu.gemm_half_k)


def _reference_rate(device: DeviceSpec, dtype: str) -> float:
    """``cpu.reference_gemm_flops_per_s[dtype]``: nonzero when PyTorch runs ``dtype`` contractions in
    ATen's portable loops on this CPU (no oneDNN path for it), else 0."""
    return float(device.cpu.reference_gemm_flops_per_s.get(dtype, 0.0)) if device.cpu is not None else 0.0


def conv_path(op: Op, device: DeviceSpec) -> str:
    """``"direct"`` (oneDNN) or ``"im2col"`` (BLAS fallback): PyTorch eager's choice for this conv on a CPU."""
    if op.kind in ("conv1d", "conv2d") and _reference_rate(device, op.dtype.value):
        return "im2col"  # oneDNN's convolution needs the ISA its reduced-precision GEMM needs
    if op.kind not in ("conv1d", "conv2d") or op.dtype.value in ("bf16", "fp16"):
        return "direct"
    x, w = op.inputs[0], op.inputs[1]
    a = op.attrs
    stride = a.get("stride", 1)
    dilation = a.get("dilation", 1)
    strided = any(int(s) != 1 for s in (stride if isinstance(stride, tuple | list) else (stride,)))
    dilated = any(int(s) != 1 for s in (dilation if isinstance(dilation, tuple | list) else (dilation,)))
    filt = tuple(int(s) for s in w.shape[2:])
    pointwise = all(f == 1 for f in filt)
    threads = device.compute.units
    if not (strided or dilated or x.shape[0] >= 16 or not pointwise or threads > 1):
        return "im2col"
    groups = int(a.get("groups", 1))
    big_filter = len(filt) >= 2 and filt[-1] > 3 and filt[-2] > 3
    if groups > 1 or big_filter or x.shape[0] > 1 or x.numel > TORCH_MKLDNN_CONV_MIN_INPUT_ELEMENTS:
        return "direct"
    return "im2col"


def _special_evaluations(op: Op) -> tuple[str, float]:
    """(function, evaluations) of the special function an op evaluates per element; ("", 0) if none."""
    if op.kind in ("elementwise", "elementwise_bwd"):
        fn = SPECIAL_FUNCTION_OF.get(str(op.attrs.get("op", "")), "")
        return (fn, float(op.outputs[0].numel)) if fn else ("", 0.0)
    if op.kind in _EXP_PER_ELEMENT_KINDS:
        return "exp", float(op.inputs[0].numel)
    return "", 0.0


def _special_s(device: DeviceSpec, fn: str, count: float) -> float:
    """Seconds for ``count`` evaluations of special function ``fn`` (SpecError if the spec lacks it)."""
    if not fn or not count:
        return 0.0
    table = device.cpu.special_function_s
    if fn not in table:
        raise SpecError(f"{device.source_file or device.name}: cpu.special_function_s.{fn}: missing; got "
                        f"{', '.join(table) or 'no functions'}; expected a time per evaluation such as "
                        f"{fn} = {{ value = \"1 ns\", source = \"...\" }}")
    return count * table[fn]


def _flash_pairs(sq: int, skv: int, causal: bool, window: int = 0) -> tuple[float, int, int]:
    """(query-key pairs the CPU flash kernel computes per head, q block, kv block); a causal sliding
    ``window`` skips the key blocks wholly outside each query block's band."""
    qs = next(q for lo, q in TORCH_FLASH_Q_SPLIT if sq >= lo)
    qs = min(qs, sq)
    kvs = min(TORCH_FLASH_KV_SPLIT, skv)
    if not causal:
        return float(sq * skv), qs, kvs
    if 0 < window < skv:
        return float(banded_block_pairs(sq, skv, window, qs, kvs)), qs, kvs
    pairs = 0
    for m in range(0, sq, qs):
        rows = min(qs, sq - m)
        pairs += rows * min(m + rows, skv)  # keys up to the end of the query block (top-left diagonal)
    return float(pairs), qs, kvs


def _legacy_cost(op: Op, device: DeviceSpec) -> KernelCost:
    """The plain roofline for a CPU without a ``cpu`` section (one contraction fraction)."""
    eff = device.efficiency
    flops = float(op.flops)
    matrix = op.kind in CONTRACTION_KINDS
    if matrix:
        require_rate(device, op.dtype.value, op)
        rate, used = _rate(device.compute.tensor_flops_per_s, op.dtype.value)
        compute_s = flops / (rate * eff.tensor_peak_fraction) if flops else 0.0
    else:
        rate, used = _rate(device.compute.vector_flops_per_s, op.dtype.value)
        compute_s = flops / (rate * eff.vector_peak_fraction) if flops else 0.0
    moved = float(op.bytes_read + op.bytes_written)
    memory_s, cached, main, where = memory_time(device, moved)
    return KernelCost(
        compute_s=compute_s, memory_s=memory_s, latency_s=eff.launch_overhead_s,
        dram_bytes=main, l2_bytes=cached, smem_bytes=0.0,
        matrix_flops=flops if matrix else 0.0, vector_flops=0.0 if matrix else flops,
        rule=f"cpu-{'simd-fma' if matrix else 'vector'}-roofline", matrix_dtype=used if matrix else "",
        notes=where,
    )


def cpu_kernel_cost(op: Op, device: DeviceSpec) -> KernelCost:
    """Cost of ``op`` on a CPU ``device`` (see the module docstring for the model)."""
    eff = device.efficiency
    cpu = device.cpu
    if op.kind in VIEW_KINDS:
        return zero_cost("view")
    if op.kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") and int(op.attrs.get("group_size", 1)) <= 1:
        return zero_cost("collective-noop")
    if cpu is None:
        return _legacy_cost(op, device)
    flops = float(op.flops)
    dtype = op.dtype.value
    moved = float(op.bytes_read + op.bytes_written)
    latency = eff.launch_overhead_s
    vector_flops = 0.0
    notes: list[str] = []
    extra_moved = 0.0
    tile = ""
    if op.kind in CONTRACTION_KINDS:
        require_rate(device, dtype, op)  # no rate for the dtype: refused, not costed at fp32
        rate, used = _rate(device.compute.tensor_flops_per_s, dtype)
        reference = _reference_rate(device, dtype)
        if reference:
            notes.append(f"ATen's portable {dtype} GEMM loops, one thread (no oneDNN {dtype} path on this CPU)")
        if op.kind in ("matmul", "moe_router") and reference:
            b, m, n, k = gemm_dims(op)
            compute_s = flops / reference if flops else 0.0
            rule = "cpu-reference-gemm"
            tile = f"{b}x{m}x{n}x{k}"
        elif op.kind in ("matmul", "moe_router"):
            b, m, n, k = gemm_dims(op)
            e = gemm_efficiency(cpu, m, n, k)
            rule = "cpu-blas-gemm"
            if dtype in ("bf16", "fp16") and m * n * k > TORCH_MKLDNN_GEMM_MIN_SIZE:
                e *= cpu.dnn_peak_fraction / cpu.gemm_peak_fraction
                latency += cpu.library_call_overhead_s
                rule = "cpu-dnn-gemm"
            compute_s = flops / (rate * e) if flops else 0.0
            tile = f"{b}x{m}x{n}x{k}"
            notes.append(f"gemm efficiency {e:.3g}")
        elif op.kind in ("conv1d", "conv2d"):
            compute_s, extra_moved, overhead, rule, tile = _conv_cost(op, device, rate, reference, notes)
            latency += overhead
        elif op.kind == "attention":
            compute_s, vector_flops, rule, tile = _attention_cost(op, device, rate, reference, notes)
        else:
            compute_s = (flops / reference if reference else flops / (rate * cpu.gemm_peak_fraction)) if flops else 0.0
            rule = "cpu-blas-contraction"
        matrix_flops = flops
        matrix_dtype = used
    else:
        rate, _ = _rate(device.compute.vector_flops_per_s, dtype)
        fn, count = _special_evaluations(op)
        compute_s = (flops / (rate * eff.vector_peak_fraction) if flops else 0.0) + _special_s(device, fn, count)
        vector_flops = flops
        matrix_flops = 0.0
        matrix_dtype = ""
        rule = "cpu-vector" + (f"-{fn}" if fn else "")
        if op.kind in ROW_MOMENTS_KINDS and cpu.row_moments_s > 0:
            chain = float(op.inputs[0].numel) * cpu.row_moments_s
            latency += chain  # serial: the latency-bound recurrence does not overlap the row's traffic
            rule = "cpu-vector-row-moments"
            notes.append(f"row moments {chain * 1e6:.3g} us (latency-bound Welford chain)")
    memory_s, cached, main, where = memory_time(device, moved + extra_moved)
    notes.insert(0, where)
    return KernelCost(
        compute_s=compute_s, memory_s=memory_s, latency_s=latency,
        dram_bytes=main, l2_bytes=cached, smem_bytes=0.0,
        matrix_flops=matrix_flops, vector_flops=vector_flops, rule=rule, matrix_dtype=matrix_dtype, tile=tile,
        notes="; ".join(notes),
    )


def _conv_cost(op: Op, device: DeviceSpec, rate: float, reference: float,
               notes: list[str]) -> tuple[float, float, float, str, str]:
    """A CPU convolution (library direct or im2col + GEMM): (compute s, extra bytes, call overhead, rule, tile)."""
    cpu = device.cpu
    assert cpu is not None
    flops = float(op.flops)
    extra_moved = 0.0
    overhead = 0.0
    d = conv_dims(op)
    path = conv_path(op, device)
    if path == "direct":
        e = cpu.dnn_peak_fraction * (gemm_efficiency(cpu, d["gemm_m"], d["gemm_n"], d["gemm_k"])
                                      / cpu.gemm_peak_fraction)
        compute_s = flops / (rate * e) if flops else 0.0
        # the framework hands plain (OIHW) weights to the library, which reorders them into its
        # blocked layout on every call: one more read and write of the weights, before the conv
        w_bytes = float(op.inputs[1].nbytes)
        reorder_s = memory_time(device, 2.0 * w_bytes)[0]
        compute_s += reorder_s
        extra_moved = 2.0 * w_bytes
        overhead = cpu.library_call_overhead_s
        rule = "cpu-dnn-conv"
        notes.append(f"conv efficiency {e:.3g}; weight reorder {reorder_s * 1e6:.3g} us")
        tile = f"{d['gemm_m']}x{d['gemm_n']}x{d['gemm_k']}"
    else:
        gemm_m, gemm_n, gemm_k = d["k"] // d["groups"], d["out_pixels"], d["gemm_k"]
        e = gemm_efficiency(cpu, gemm_m, gemm_n, gemm_k)
        compute_s = (flops / reference if reference else flops / (rate * e)) if flops else 0.0
        out_rows = d["out_pixels"] // max(1, op.outputs[0].shape[-1])
        unfold = not (d["filter_size"] == 1 and _unit_stride_no_pad(op))
        if unfold:
            runs = float(d["n"] * d["c"] * d["filter_size"] * out_rows)
            compute_s += runs * cpu.strided_copy_run_s
            col_bytes = float(d["n"] * d["gemm_k"] * d["groups"] * d["out_pixels"] * op.inputs[0].dtype.bits // 8)
            extra_moved = 2.0 * col_bytes  # written by the unfold, read by the GEMM
            notes.append(f"im2col {runs:.0f} runs")
        rule = "cpu-im2col-gemm"
        if not reference:
            notes.append(f"gemm efficiency {e:.3g}")
        tile = f"{d['n']}x{gemm_m}x{gemm_n}x{gemm_k}"
    return compute_s, extra_moved, overhead, rule, tile


def _attention_cost(op: Op, device: DeviceSpec, rate: float, reference: float,
                    notes: list[str]) -> tuple[float, float, str, str]:
    """A CPU flash-attention kernel: (compute s, vector flops, rule, tile)."""
    cpu = device.cpu
    assert cpu is not None
    eff = device.efficiency
    q, kk, v = op.inputs[:3]
    bsz, heads, sq, dq = q.shape
    skv, dv = kk.shape[2], v.shape[3]
    window = attention_window(op)
    masked = bool(op.attrs.get("causal", False)) and sq != skv and not window  # an explicit mask: every pair
    pairs, qs, kvs = _flash_pairs(sq, skv, bool(op.attrs.get("causal", False)) and not masked, window)
    pairs *= bsz * heads
    # the kernel's block products reuse cache-resident operands (a query block across every key
    # block, a key/value block across every query block) and call the BLAS directly: priced at its
    # large-size fraction, without a standalone call's small-side factors
    e_blk = cpu.gemm_peak_fraction
    compute_s = (2.0 * pairs * (dq + dv) / reference if reference
                 else 2.0 * pairs * (dq + dv) / (rate * e_blk))
    vrate, _ = _rate(device.compute.vector_flops_per_s, "fp32")
    vector_flops = SOFTMAX_FLOPS * pairs
    compute_s += vector_flops / (vrate * eff.vector_peak_fraction) + _special_s(device, "exp", pairs)
    rule = "cpu-flash-attention"
    tile = f"q{qs}xkv{kvs}"
    notes.append(f"{pairs:.4g} pairs computed")
    return compute_s, vector_flops, rule, tile


def _unit_stride_no_pad(op: Op) -> bool:
    """Whether a conv reads its input as is (stride 1, no padding): a 1x1 conv then needs no unfold."""
    a = op.attrs

    def ones(v: object, want: int) -> bool:
        vals = v if isinstance(v, tuple | list) else (v,)
        return all(int(x) == want for x in vals)  # type: ignore[call-overload]

    return ones(a.get("stride", 1), 1) and ones(a.get("padding", 0), 0) and ones(a.get("dilation", 1), 1)


def _rule(op: Op, ctx: LoweringContext) -> KernelCost:
    return cpu_kernel_cost(op, ctx.device)


_ALL_KINDS = (
    "matmul", "grouped_matmul", "conv1d", "conv2d", "conv1d_bwd_data", "conv2d_bwd_data", "conv1d_bwd_weight",
    "conv2d_bwd_weight", "attention", "attention_bwd", "elementwise", "elementwise_bwd", "softmax", "softmax_bwd",
    "layernorm", "rmsnorm", "batchnorm", "layernorm_bwd", "rmsnorm_bwd", "batchnorm_bwd", "reduction", "pool2d",
    "pool2d_bwd", "resize", "embedding", "embedding_bwd", "concat", "split", "slice", "transpose", "reshape",
    "kv_append", "lstm_cell", "gru_cell", "lstm", "gru", "rnn_bwd", "moe_router", "moe_dispatch", "moe_combine",
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "cross_entropy", "cross_entropy_bwd",
    "optimizer_update", "expand", "grouped_matmul_bwd_data", "grouped_matmul_bwd_weight", "groupnorm",
    "groupnorm_bwd", "moe_dispatch_bwd", "moe_combine_bwd", "moe_router_bwd", "mse_loss", "mse_loss_bwd",
)

register_rule("cpu", *_ALL_KINDS)(_rule)
set_fallback("cpu", _rule)
