"""Host synchronisation points in a training step: the step priced per sync interval.

Without a synchronisation the host issues kernels ahead of the GPU and its issue time hides behind the
GPU's work, which is how every op is priced (each kernel at least ``efficiency.launch_overhead_s``). An
op with the ``host_sync`` attribute makes the host wait for the GPU: Megatron-Core's dropless token
dispatchers copy the per-expert token counts to the host and block on them in every MoE layer's forward
pass, because the all-to-all's split sizes and Transformer Engine's grouped GEMM ``m_splits`` are host
lists (NVIDIA/Megatron-LM core_v0.15.0 megatron/core/transformer/moe/token_dispatcher.py,
``MoEAlltoAllTokenDispatcher.preprocess`` sets ``cuda_sync_point = "before_ep_alltoall"`` for dropless
expert parallelism and ``_maybe_dtoh_and_synchronize`` calls ``d2h_event.synchronize()``; core_v0.17.1
fused_a2a.py ``hybrid_ep_dispatch``: without ``num_permuted_tokens``, which the dropless flex dispatcher
does not know, HybridEP reads the size from a GPU tensor, 'which causes a D2H synchronization').

After a sync the GPU idles until the host has issued the next kernels, so the ops between two syncs
take ``max(host issue time, GPU time)`` plus the sync's round trip (``efficiency.host_sync_s``), not the
GPU time alone. The host issue time of an op is its kernels times ``efficiency.framework_op_overhead_s``
(eager PyTorch issues each op from Python: Megatron-Core runs its layers eagerly), or the launch floor
when that is longer (:func:`host_per_kernel_s`). The backward pass has no sync of its own (the splits are saved host
lists), so it sits in the interval that runs from the last forward sync to the end of the graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def host_sync_ops(ops: Sequence[Any]) -> list[int]:
    """Indices of the ops that make the host wait for the GPU (the ``host_sync`` attribute)."""
    return [i for i, op in enumerate(ops) if op.attrs.get("host_sync")]


def sync_interval_excess(records: Sequence[Any], syncs: Sequence[int], forward_ops: int, host_per_kernel_s: float,
                         sync_s: float, skip: Any = None, launch_s: float = 0.0) -> tuple[float, float]:
    """(forward, backward) seconds the syncs add to one graph's priced op times.

    ``records`` are the graph's op costs in op order (``time_s``: the GPU time as priced, ``kernels``);
    ``syncs`` the indices of the sync ops, each ending the interval it is in (the host waits after issuing
    it). Every interval costs ``max(H, G) - G`` more than its priced time ``G``, with ``H`` its kernels
    times ``host_per_kernel_s`` (the kernels one library call launches beside its own,
    :func:`simulator.lowering.gpu.library_launches`, at ``launch_s`` each: Transformer Engine's per-expert
    GEMMs), and each sync ``sync_s``; an interval's excess is charged to the forward
    and backward passes in proportion to their shares of its ``G``. ``skip(record)``: records outside the
    microbatch's passes (the optimizer step), left out. No syncs: nothing added."""
    if not syncs:
        return 0.0, 0.0
    from simulator.lowering.gpu import library_launches

    ends = sorted(set(syncs))
    fwd_extra = bwd_extra = 0.0
    start = 0
    for end in [*ends, len(records) - 1]:
        g_f = g_b = host = 0.0
        for i in range(start, end + 1):
            r = records[i]
            if skip is not None and skip(r):
                continue
            if i < forward_ops:
                g_f += r.time_s
            else:
                g_b += r.time_s
            lib = library_launches(getattr(r, "rule", ""), r.kernels)  # launched in one library call: launch floor
            host += (r.kernels - lib) * host_per_kernel_s + lib * launch_s
        g = g_f + g_b
        excess = max(0.0, host - g)
        if excess > 0.0:
            share = g_f / g if g > 0 else 1.0
            fwd_extra += excess * share
            bwd_extra += excess * (1.0 - share)
        start = end + 1
    return fwd_extra + len(ends) * sync_s, bwd_extra


def host_per_kernel_s(eff: Any, opts: Any) -> float:
    """Host issue time of one kernel in a sync interval: ``efficiency.framework_op_overhead_s`` (an eager
    framework's per-op path), at least the launch floor the options price (``graph_launch_overhead_s``
    with CUDA graphs, else ``launch_overhead_s``)."""
    floor = eff.graph_launch_overhead_s if getattr(opts, "cuda_graphs", False) else eff.launch_overhead_s
    return max(float(eff.framework_op_overhead_s), float(floor))


def launch_floor_s(eff: Any, opts: Any) -> float:
    """Host time of one kernel a library call launches from C++ (no framework op of its own): the launch floor
    the options price (``graph_launch_overhead_s`` with CUDA graphs, else ``launch_overhead_s``)."""
    return float(eff.graph_launch_overhead_s if getattr(opts, "cuda_graphs", False) else eff.launch_overhead_s)
