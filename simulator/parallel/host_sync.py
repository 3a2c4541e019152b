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

After a sync the GPU idles until the host has issued the next kernel, and from then on it can run only
what the host has already issued: one in-order queue, each kernel starting at the later of its issue and
the end of the kernel before it (:func:`interval_time`). The ops between two syncs therefore take at least
``max(host issue time, GPU time)`` and at most their sum, plus the sync's round trip
(``efficiency.host_sync_s``), not the GPU time alone: where the host issues a run of cheap kernels
(a router's and a dispatcher's small ops) the GPU waits for each, and the host time of those ops is exposed
even when the interval's GPU time exceeds its host time as a whole. The host issue time of an op is its kernels times ``efficiency.framework_op_overhead_s``
(eager PyTorch issues each op from Python: Megatron-Core runs its layers eagerly), or the launch floor
when that is longer (:func:`host_per_kernel_s`). The backward pass has no sync of its own (the splits are saved host
lists), so it sits in the interval that runs from the last forward sync to the end of the graph.

Megatron-Core's pipeline schedules without virtual stages exchange activations and gradients with
``torch.distributed.batch_isend_irecv`` and then call ``torch.cuda.synchronize()`` (``batch_p2p_comm`` and
``batch_p2p_sync``, both True by default: megatron/core/pipeline_parallel/p2p_communication.py
``P2PCommunicator._communicate``, model_parallel_config.py @ core_v0.15.0): a device-wide wait after every
exchange. In the 1F1B steady phase a stage exchanges once after each forward (``send_forward_recv_backward``)
and once after each backward (``send_backward_recv_forward``), so each ``send`` op of a stage graph ends an
interval (:func:`pipeline_send_ops`; the first stage's backward and the last stage's forward send nothing, and
exchange nothing: ``is_first_stage``/``is_last_stage`` skip the call). The backward then starts from an idle
GPU as the forward does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def host_sync_ops(ops: Sequence[Any]) -> list[int]:
    """Indices of the ops that make the host wait for the GPU (the ``host_sync`` attribute)."""
    return [i for i, op in enumerate(ops) if op.attrs.get("host_sync")]


def pipeline_send_ops(ops: Sequence[Any]) -> list[int]:
    """Indices of a stage graph's pipeline sends (``send`` ops of the ``pipeline`` group, forward and backward):
    the exchanges after which Megatron-Core's batched point-to-point path synchronises the device."""
    return [i for i, op in enumerate(ops) if op.kind == "send" and op.group.split(".")[0] == "pipeline"]


def interval_time(ops: Sequence[tuple[float, float, int]]) -> float:
    """Seconds an in-order stream takes to run ``ops`` = ``(host_s, gpu_s, kernels)`` issued one after another
    by a host that starts with the GPU idle (just after a synchronisation).

    An op without kernels (a view, or work fused into the kernel before it) launches nothing: its GPU time
    follows the stream's, its host time the host's. An op's ``kernels`` share its host and GPU time evenly; kernel ``j`` starts at the later of its issue
    (the host's running total) and the end of the kernel before it. For ``k`` kernels of ``h`` host and
    ``g`` GPU seconds each, issued from ``t`` onto a stream free at ``f``, the last ends at
    ``max(f + k g, t + h + k g)`` when ``g >= h`` and ``max(f + k g, t + k h + g)`` otherwise (the latest
    kernel to wait for its issue is the first or the last). At least ``max(sum host, sum gpu)``, at most
    their sum."""
    t = f = 0.0
    for host, gpu, kernels in ops:
        if kernels <= 0:  # a view, or work priced inside the kernel before it (fused): no launch of its own
            t += host
            f += gpu
            continue
        k = int(kernels)
        h, g = host / k, gpu / k
        f = max(f + k * g, (t + h + k * g) if g >= h else (t + k * h + g))
        t += host
    return f


def sync_interval_excess(records: Sequence[Any], syncs: Sequence[int], forward_ops: int, host_per_kernel_s: float,
                         sync_s: float, skip: Any = None, launch_s: float = 0.0,
                         host_ops: Sequence[Any] = (), gemm_calls: Sequence[int] = (),
                         gemm_call_s: float = 0.0) -> tuple[float, float]:
    """(forward, backward) seconds the syncs add to one graph's priced op times.

    ``records`` are the graph's op costs in op order (``time_s``: the GPU time as priced, ``kernels``);
    ``syncs`` the indices of the sync ops, each ending the interval it is in (the host waits after issuing
    it). Every interval costs :func:`interval_time` of its ops minus their priced time ``G`` more, an op's
    host time being its kernels times ``host_per_kernel_s`` (the kernels one library call launches beside
    its own, :func:`simulator.lowering.gpu.library_launches`, at ``launch_s`` each: Transformer Engine's
    per-expert GEMMs), and each sync ``sync_s``; an interval's excess is charged to the forward and backward
    passes in proportion to their shares of its ``G``, each sync's ``sync_s`` to the pass it is in. ``host_ops[i]``: framework ops record ``i`` stands for
    beside its kernels, issued before them (an int) or ``(before, after)`` them, each
    ``host_per_kernel_s`` of issue and no GPU time. ``skip(record)``: records outside the microbatch's
    passes (the optimizer step), left out. ``gemm_calls[i]``: how many of record ``i``'s library launches are GEMMs
    its library builds and selects per call (:func:`per_expert_gemm_calls`), each ``gemm_call_s`` of issue instead
    of ``launch_s`` when that is longer. No syncs: nothing added."""
    if not syncs:
        return 0.0, 0.0
    from simulator.lowering.gpu import library_launches

    ends = sorted(set(syncs))
    fwd_extra = bwd_extra = 0.0
    start = 0
    for end in [*ends, len(records) - 1]:
        g_f = g_b = 0.0
        ops: list[tuple[float, float, int]] = []
        for i in range(start, end + 1):
            r = records[i]
            if skip is not None and skip(r):
                continue
            if i < forward_ops:
                g_f += r.time_s
            else:
                g_b += r.time_s
            lib = library_launches(getattr(r, "rule", ""), r.kernels)  # launched in one library call: launch floor
            before, after = _host_only(host_ops, i)  # framework ops the op stands for beside its kernels
            if before:  # issued before the op's own kernels; their GPU time (tiny kernels) is not priced
                ops.append((before * host_per_kernel_s, 0.0, before))
            fw = r.kernels - lib  # the framework call's own kernels first, then those its library launches
            share = fw / r.kernels if r.kernels > 0 else 1.0
            ops.append((fw * host_per_kernel_s, r.time_s * share, fw))
            if lib:
                calls = min(int(lib), gemm_calls[i] if i < len(gemm_calls) else 0)
                lib_host = lib * launch_s + calls * max(0.0, gemm_call_s - launch_s)
                ops.append((lib_host, r.time_s * (1.0 - share), lib))
            if after:
                ops.append((after * host_per_kernel_s, 0.0, after))
        g = g_f + g_b
        excess = max(0.0, interval_time(ops) - g)
        if excess > 0.0:
            share = g_f / g if g > 0 else 1.0
            fwd_extra += excess * share
            bwd_extra += excess * (1.0 - share)
        start = end + 1
    in_fwd = sum(1 for e in ends if e < forward_ops)  # each sync's round trip to the pass it is in
    return fwd_extra + in_fwd * sync_s, bwd_extra + (len(ends) - in_fwd) * sync_s


#: Op kinds of an MoE layer's expert GEMMs (forward, input gradient, weight gradient).
GROUPED_GEMM_KINDS = frozenset({"grouped_matmul", "grouped_matmul_bwd_data", "grouped_matmul_bwd_weight"})


def per_expert_gemm_calls(op: Any) -> int:
    """GEMMs an expert-GEMM op's one framework call issues from C++ after its first: ``experts_active - 1`` when the
    stack runs one GEMM per expert (``per_expert_streams``), else 0.

    Transformer Engine's ``general_grouped_gemm`` (NVIDIA/TransformerEngine v2.9,
    transformer_engine/common/gemm/cublaslt_gemm.cu ``multi_stream_cublas_gemm``) calls ``nvte_cublas_gemm_v2`` once
    per expert, and each ``cublas_gemm`` creates its matmul descriptor, four matrix layouts and a preference, sets
    their attributes, calls ``cublasLtMatmulAlgoGetHeuristic``, launches and destroys them: the per-call path whose
    host time ``efficiency.library_gemm_call_s`` states. The first GEMM is the framework call's own kernel.

    >>> from types import SimpleNamespace as NS
    >>> per_expert_gemm_calls(NS(kind="grouped_matmul", attrs={"per_expert_streams": 4, "experts_active": 16}))
    15
    >>> per_expert_gemm_calls(NS(kind="grouped_matmul", attrs={"experts_active": 16}))
    0
    """
    if op.kind not in GROUPED_GEMM_KINDS or int(op.attrs.get("per_expert_streams", 0)) <= 0:
        return 0
    active = int(op.attrs["experts_active"]) if "experts_active" in op.attrs else int(op.inputs[0].shape[0])
    return max(active - 1, 0)


def _host_only(host_ops: Sequence[Any], i: int) -> tuple[int, int]:
    """(before, after): the framework ops without priced kernels record ``i`` stands for."""
    v = host_ops[i] if i < len(host_ops) else 0
    return (int(v[0]), int(v[1])) if isinstance(v, tuple) else (int(v), 0)


def host_per_kernel_s(eff: Any, opts: Any) -> float:
    """Host issue time of one kernel in a sync interval: ``efficiency.framework_op_overhead_s`` (an eager
    framework's per-op path), at least the launch floor the options price (``graph_launch_overhead_s``
    with CUDA graphs, else ``launch_overhead_s``)."""
    floor = eff.graph_launch_overhead_s if getattr(opts, "cuda_graphs", False) else eff.launch_overhead_s
    return max(float(eff.framework_op_overhead_s), float(floor))


def gemm_call_s(eff: Any, opts: Any) -> float:
    """Host time of one GEMM a library builds and selects per call (``efficiency.library_gemm_call_s``); under
    CUDA graphs the replay skips that host work, so the graph launch floor (:func:`launch_floor_s`)."""
    if getattr(opts, "cuda_graphs", False):
        return launch_floor_s(eff, opts)
    return float(getattr(eff, "library_gemm_call_s", 0.0))


def launch_floor_s(eff: Any, opts: Any) -> float:
    """Host time of one kernel a library call launches from C++ (no framework op of its own): the launch floor
    the options price (``graph_launch_overhead_s`` with CUDA graphs, else ``launch_overhead_s``)."""
    return float(eff.graph_launch_overhead_s if getattr(opts, "cuda_graphs", False) else eff.launch_overhead_s)
