"""Lowering rules for CPU devices (kind ``"cpu"``, e.g. the host): a cache-aware roofline per op.

Registered with :mod:`simulator.lowering` on import. Each op costs

* ``compute_s = flops / (rate[dtype] * fraction)``, with the SIMD FMA rate of
  ``compute.tensor_flops_per_s`` and ``efficiency.tensor_peak_fraction`` for contractions (matmul,
  conv, attention, recurrent cells, the router GEMM) and ``compute.vector_flops_per_s`` with
  ``efficiency.vector_peak_fraction`` for everything else (a dtype the device lacks runs as fp32);
* ``memory_s = bytes / (bandwidth * fraction)`` where bytes are the op's compulsory traffic and the
  level is the innermost one whose capacity holds that working set (``l2``, ``l3``, else main
  memory ``dram``); cache levels use ``efficiency.l2_bandwidth_fraction``, main memory
  ``efficiency.dram_bandwidth_fraction``;
* ``latency_s = efficiency.launch_overhead_s``: the framework's per-op dispatch on the same
  thread, which does not overlap the op's own work on a CPU (so it adds, rather than acting as the
  engine's launch floor, which it then always exceeds).

Compute and memory overlap (the kernel takes the larger). Views cost nothing.
"""

from __future__ import annotations

from hwmodels.spec import DeviceSpec, MemoryLevel
from simulator.lowering import KernelCost, LoweringContext, register_rule, set_fallback
from workloads.ir import Op

__all__ = ["cpu_kernel_cost", "CONTRACTION_KINDS", "memory_level_for"]

#: Op kinds whose FLOPs run as SIMD FMA contractions (tensor_peak_fraction).
CONTRACTION_KINDS = frozenset({
    "matmul", "grouped_matmul", "conv1d", "conv2d", "conv1d_bwd_data", "conv2d_bwd_data", "conv1d_bwd_weight",
    "conv2d_bwd_weight", "attention", "attention_bwd", "lstm", "gru", "lstm_cell", "gru_cell", "rnn_bwd",
    "moe_router", "moe_router_bwd", "grouped_matmul_bwd_data", "grouped_matmul_bwd_weight",
})
_VIEWS = frozenset({"reshape", "split", "slice"})
_CACHE_ORDER = ("l1d", "l1", "l2", "l3")


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


def cpu_kernel_cost(op: Op, device: DeviceSpec) -> KernelCost:
    """Cost of ``op`` on a CPU ``device`` (see the module docstring for the model)."""
    if op.kind in _VIEWS:
        return KernelCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, rule="view", kernels=0)
    if op.kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") and int(op.attrs.get("group_size", 1)) <= 1:
        return KernelCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, rule="collective-noop", kernels=0)
    eff = device.efficiency
    flops = float(op.flops)
    matrix = op.kind in CONTRACTION_KINDS
    if matrix:
        rate, used = _rate(device.compute.tensor_flops_per_s, op.dtype.value)
        compute_s = flops / (rate * eff.tensor_peak_fraction) if flops else 0.0
    else:
        rate, used = _rate(device.compute.vector_flops_per_s, op.dtype.value)
        compute_s = flops / (rate * eff.vector_peak_fraction) if flops else 0.0
    moved = float(op.bytes_read + op.bytes_written)
    level = memory_level_for(device, moved)
    main = level is device.main_memory
    frac = eff.dram_bandwidth_fraction if main else eff.l2_bandwidth_fraction
    memory_s = moved / (level.read_bandwidth_bytes_per_s * frac) if moved else 0.0
    return KernelCost(
        compute_s=compute_s, memory_s=memory_s, latency_s=eff.launch_overhead_s,
        dram_bytes=moved if main else 0.0, l2_bytes=0.0 if main else moved, smem_bytes=0.0,
        matrix_flops=flops if matrix else 0.0, vector_flops=0.0 if matrix else flops,
        rule=f"cpu-{'simd-fma' if matrix else 'vector'}-roofline", matrix_dtype=used if matrix else "",
        notes=f"working set in {level.name}",
    )


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
