"""Device-memory capacity check: weights, live activations, KV cache, gradients and optimizer state."""

from __future__ import annotations

from hwmodels.spec import DeviceSpec
from simulator.report import MemoryCheck
from workloads.analysis import peak_live_bytes
from workloads.ir import OpGraph, Role

__all__ = ["check_memory"]


def check_memory(graph: OpGraph, device: DeviceSpec) -> MemoryCheck:
    """What ``graph`` needs resident in ``device``'s main memory versus its capacity.

    Weights, KV cache, gradients and optimizer state count every distinct tensor of that role;
    activations count the peak of live activation tensors along the execution order
    (:func:`workloads.analysis.peak_live_bytes`). The prediction is made whether or not it fits;
    the report marks it infeasible and says by how much.

    Examples
    --------
    >>> from workloads.ir import GraphBuilder
    >>> b = GraphBuilder("fc", dtype="bf16"); x = b.input("x", (8, 1024)); w = b.weight("w", (1024, 1024))
    >>> y = b.op("matmul", [x, w])
    >>> # check_memory(b.build(), device).weights_bytes == 2 * 1024 * 1024
    """
    return MemoryCheck(
        weights_bytes=int(graph.weight_bytes),
        activations_bytes=int(peak_live_bytes(graph)),
        kv_cache_bytes=int(graph.role_bytes(Role.KV_CACHE)),
        gradients_bytes=int(graph.role_bytes(Role.GRADIENT)),
        optimizer_state_bytes=int(graph.role_bytes(Role.OPTIMIZER_STATE)),
        capacity_bytes=float(device.main_memory.capacity_bytes),
        device=device.name,
    )
