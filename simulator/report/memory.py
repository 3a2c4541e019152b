"""Device-memory capacity check: weights, live activations, KV cache, gradients and optimizer state."""

from __future__ import annotations

from hwmodels.spec import DeviceSpec
from simulator.report import MemoryCheck
from workloads.analysis import INPLACE_KINDS, VIEW_KINDS
from workloads.ir import OpGraph, Role

__all__ = ["check_memory", "peak_activation_bytes"]


def check_memory(graph: OpGraph, device: DeviceSpec) -> MemoryCheck:
    """What ``graph`` needs resident in ``device``'s main memory versus its capacity.

    Weights, KV cache, gradients and optimizer state count every distinct tensor of that role;
    activations count the peak of live activation tensors along the execution order
    (:func:`peak_activation_bytes`, computed once per graph object). The prediction is made whether
    or not it fits; the report marks it infeasible and says by how much.

    Examples
    --------
    >>> from workloads.ir import GraphBuilder
    >>> b = GraphBuilder("fc", dtype="bf16"); x = b.input("x", (8, 1024)); w = b.weight("w", (1024, 1024))
    >>> y = b.op("matmul", [x, w])
    >>> # check_memory(b.build(), device).weights_bytes == 2 * 1024 * 1024
    """
    return MemoryCheck(
        weights_bytes=int(graph.weight_bytes),
        activations_bytes=int(graph.memo("peak_activation_bytes", lambda: peak_activation_bytes(graph))),
        kv_cache_bytes=int(graph.role_bytes(Role.KV_CACHE)),
        gradients_bytes=int(graph.role_bytes(Role.GRADIENT)),
        optimizer_state_bytes=int(graph.role_bytes(Role.OPTIMIZER_STATE)),
        capacity_bytes=float(device.main_memory.capacity_bytes),
        device=device.name,
    )


def peak_activation_bytes(graph: OpGraph) -> int:
    """Peak bytes of live activation tensors: :func:`workloads.analysis.peak_live_bytes` with its
    default roles, in one pass over the ops.

    A tensor is live from its producer (from the start, for a graph input) to its last consumer
    (to the end, for a graph output); a view or an in-place update aliases its base tensor,
    extending its life and adding no bytes; at each op its inputs and outputs are live together.
    """
    act = Role.ACTIVATION
    base: dict[str, str] = {}  # view / in-place output -> base tensor
    first: dict[str, int] = {}
    size: dict[str, int] = {}
    last: dict[str, int] = {}
    ops = graph.ops
    for i, op in enumerate(ops):
        for t in op.inputs:
            name = t.name
            r = base.get(name, name)
            if r == name and r not in first and t.role is act:
                first[r] = 0
                size[r] = t.nbytes
            last[r] = i  # ops come in order: the latest use so far
        if op.kind in VIEW_KINDS or op.kind in INPLACE_KINDS:
            src = op.inputs[0].name
            src = base.get(src, src)
            for t in op.outputs:
                base[t.name] = src
                last[src] = i
            continue
        for t in op.outputs:
            name = t.name
            if t.role is act:
                first[name] = i
                size[name] = t.nbytes
            last[name] = i
    n = len(ops)
    for name in graph.tensors:  # graph outputs (produced, never read) keep their base live to the end
        if graph.producer(name) is not None and not graph.consumer_names(name):
            r = base.get(name, name)
            if r in size:
                last[r] = n - 1
    delta = [0] * (n + 1)
    for r, s in size.items():
        delta[first[r]] += s
        delta[last.get(r, first[r]) + 1] -= s
    peak = cur = 0
    for d in delta[:n]:
        cur += d
        if cur > peak:
            peak = cur
    return peak
