"""Collective ops of a graph costed by the fabric-level collective models of :mod:`hwmodels.collectives`.

A system spec names its node configuration in the fabric catalog (``collectives = "dgx-h100"``;
by default the system's own name, when the catalog has it). A collective op carries
``group_size`` (devices in its group) and ``stride`` (rank distance between group members: 1 for
tensor-parallel groups, which Megatron-LM places innermost; ``tp`` for data-parallel groups; the
stage stride for pipeline sends). With ``devices_per_node`` devices per node the group spans
``ceil(n * stride / devices_per_node)`` nodes (``n`` when members are a node or more apart), and
the library's tuner (:func:`hwmodels.collectives.select_algorithm`) picks the algorithm and
protocol as NCCL does, named in the op's rule.

Sizes follow nccl-tests: an all-gather's size is its whole output, a reduce-scatter's its whole
input, an all-reduce's its buffer, a send/receive its message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from simulator.lowering.common import KernelCost, LoweringContext, Rule, ring_collective, zero_cost
from workloads.ir import Op

__all__ = ["collective_cost", "engine_all_reduce_cost", "collective_system_for", "fabric_collective_cost", "group_nodes", "KIND_TO_COLLECTIVE"]

#: Graph op kinds and the collective (nccl-tests name) that costs them.
KIND_TO_COLLECTIVE = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
                      "all_to_all": "all_to_all", "broadcast": "broadcast", "send": "send_recv", "recv": "send_recv"}


def group_size(op: Op, ctx: Any) -> int:
    """Devices in ``op``'s group: its ``group_size``, or for a collective micro-workload its ``devices``
    (0: every device of the system evaluated)."""
    if "devices" in op.attrs:
        return int(op.attrs["devices"]) or int(getattr(ctx, "group_size", 1))
    return int(op.attrs.get("group_size", 1))


@lru_cache(maxsize=64)
def _catalog_system(name: str) -> Any:
    from hwmodels.collectives import fabric_catalog

    return fabric_catalog().systems.get(name.strip().lower())


def collective_system_for(system: Any) -> Any:
    """The fabric-catalog node configuration of a system spec (None: not described there)."""
    name = getattr(system, "collectives", "") or getattr(system, "name", "")
    if not name:
        return None
    csys = _catalog_system(str(name))
    if csys is not None and getattr(system, "nodes", 1) > 1:  # TPU slices over DCN: one node per slice
        from hwmodels.collectives import is_multislice, slice_system

        if is_multislice(csys):
            return slice_system(csys, system.devices_per_node)
    return csys


def group_nodes(n: int, stride: int, devices_per_node: int) -> int:
    """Nodes a group of ``n`` ranks ``stride`` apart spans, ranks filling nodes in order."""
    if n <= 1:
        return 1
    if stride >= devices_per_node:
        return n
    return max(1, math.ceil(n * stride / devices_per_node))


#: DeepEP's normal kernels (NVLink and RDMA forwarding) measured between nodes: the per-GPU RDMA "bottleneck
#: bandwidth" (bytes/s) of (dispatch, combine) by EP size, on H800 with one ConnectX-7 InfiniBand 400 Gb/s NIC per
#: GPU, 4096 tokens, hidden 7168, top-8 experts (FP8 dispatch, BF16 combine): deepseek-ai/DeepEP docs/legacy.md,
#: "Normal kernels with NVLink and RDMA forwarding" @ dd758ca. Its test (tests/legacy/test_internode.py) counts the
#: RDMA bytes once per destination node of a token, its own node included, as
#: :func:`workloads.zoo.transformer.dispatch_copies` sizes the op. Used for a DeepEP all-to-all across nodes at a
#: measured EP size on a fabric with one NIC of :data:`DEEPEP_MEASURED_NIC_BYTES_PER_S` per device.
DEEPEP_INTERNODE_BYTES_PER_S = {16: (43e9, 43e9), 32: (58e9, 57e9), 64: (51e9, 50e9)}
#: The measured setup's NIC: ConnectX-7 400 Gb/s per GPU (DeepEP docs/legacy.md, "~50 GB/s maximum bandwidth").
DEEPEP_MEASURED_NIC_BYTES_PER_S = 400e9 / 8


def _deepep_measured_rate(op: Op, csys: Any, n: int, nodes: int) -> float | None:
    """DeepEP's measured internode rate for ``op`` (a deduplicated expert-parallel all-to-all over ``n`` ranks
    on ``nodes`` nodes): dispatch for the forward dispatch and the combine's backward, combine otherwise; None
    where no measurement applies (one node, another EP size, another NIC)."""
    inter = getattr(csys, "inter", None)
    if not op.attrs.get("dedup_tokens") or nodes <= 1 or n not in DEEPEP_INTERNODE_BYTES_PER_S or inter is None:
        return None
    try:
        nic = float(inter.link_bandwidth_bytes_per_s) * int(inter.links_per_device)
    except TypeError:  # a swept (array) bandwidth: no single measured setup
        return None
    if int(getattr(csys, "nics_per_node", 0)) != int(csys.devices_per_node) or abs(nic - DEEPEP_MEASURED_NIC_BYTES_PER_S) > 1.0:
        return None
    dispatch = ("dispatch" in op.name) != op.name.endswith(".bwd")
    return DEEPEP_INTERNODE_BYTES_PER_S[n][0 if dispatch else 1]


def _size(op: Op, n: int = 1, nodes: int = 1) -> float:
    if op.attrs.get("size_bytes"):  # a micro-workload states nccl-tests' size
        return float(op.attrs["size_bytes"])
    if op.attrs.get("dedup_tokens"):  # DeepEP: a token once per destination rank, between nodes once per node
        from workloads.zoo.transformer import dispatch_copies

        a = op.attrs
        copies = dispatch_copies(int(a["dedup_experts"]), int(a["dedup_top_k"]), nodes if nodes > 1 else n,
                                 str(a.get("dedup_routing", "uniform")))
        return float(a["dedup_tokens"]) * copies * float(a["dedup_row_bytes"])
    if op.kind == "all_gather":
        return float(op.outputs[0].nbytes)
    if op.kind == "recv":
        return float(op.outputs[0].nbytes)
    if op.kind == "send":  # a scatter/gather send carries 1/shards of its tensor
        return float(op.inputs[0].nbytes) / int(op.attrs.get("shards", 1))
    return float(op.inputs[0].nbytes)


def fabric_collective_cost(op: Op, csys: Any, nodes_available: int = 1, n: int | None = None) -> KernelCost:
    """Cost of collective ``op`` over ``n`` devices (default its ``group_size``) on node configuration
    ``csys`` (its tuner's fastest algorithm)."""
    from hwmodels.collectives import (
        bus_bandwidth_factor,
        is_multislice,
        multislice_collective,
        select_algorithm,
    )

    n = int(op.attrs.get("group_size", 1)) if n is None else n
    if n <= 1:
        return zero_cost("collective-noop")
    stride = int(op.attrs.get("stride", 1))
    dpn = int(csys.devices_per_node)
    nodes = group_nodes(n, stride, dpn)
    if nodes > 1 and (csys.inter is None or nodes > nodes_available):
        where = "the system has one node" if nodes_available <= 1 else f"the system has {nodes_available} nodes"
        raise ValueError(f"op {op.name!r} ({op.kind}): a group of {n} devices {stride} apart spans {nodes} nodes of "
                         f"{dpn}; {where}; expected a group within the system")
    coll = KIND_TO_COLLECTIVE[op.kind]
    size = _size(op, n, nodes)
    measured = _deepep_measured_rate(op, csys, n, nodes)
    if measured:  # DeepEP's own kernels, at their measured rate (its kernel's whole time)
        return KernelCost(0.0, size / measured, 0.0, 2.0 * size * bus_bandwidth_factor(coll, n), 0.0, 0.0, 0.0,
                          float(op.flops), kernel_time_included=True, rule=f"deepep-measured-{coll}",
                          notes=f"{n} devices on {nodes} nodes of {csys.name}; DeepEP internode "
                                f"{measured / 1e9:.0f} GB/s (DeepEP docs/legacy.md, EP {n})")
    if nodes > 1 and is_multislice(csys):  # ICI inside each slice, DCN across slices
        res = multislice_collective(coll, size, n, csys, nodes)
    else:
        res = select_algorithm(coll, size, n, csys, n_nodes=nodes if nodes > 1 else None)
    t, lat = float(res.time_s), float(res.latency_s)
    where = f"{nodes} nodes of {csys.name}" if nodes > 1 else csys.name
    # device memory traffic: each byte on the bus is read from one buffer and written to another
    dram = 2.0 * size * bus_bandwidth_factor(coll, n)
    # the fabric model's time is a whole collective call as nccl-tests / rccl-tests time it (its kernel's
    # launch and drain included): no per-kernel device time is added to it
    return KernelCost(0.0, t - lat, lat, dram, 0.0, 0.0, 0.0, float(op.flops), kernel_time_included=True,
                      rule=f"{res.algorithm}-{res.protocol}-{coll}",
                      notes=f"{n} devices on {where}; busbw {float(res.busbw_bytes_per_s) / 1e9:.1f} GB/s "
                            f"({res.algorithm}, {res.protocol})")


def engine_all_reduce_cost(op: Op, ctx: LoweringContext, n: int) -> KernelCost | None:
    """A tensor-parallel all-reduce run by the serving engine's own kernel (``options.all_reduce_kernel``, e.g.
    vLLM's custom all-reduce: :func:`hwmodels.collectives.engine_all_reduce`), one node only; None where the engine
    hands it to NCCL or no published table covers the fabric and group size."""
    kernel = str(getattr(ctx.options, "all_reduce_kernel", "nccl") or "nccl")
    if kernel == "nccl" or op.kind != "all_reduce" or "devices" in op.attrs:
        return None
    csys = ctx.collectives
    if group_nodes(n, int(op.attrs.get("stride", 1)), int(csys.devices_per_node)) > 1:
        return None
    from hwmodels.collectives import bus_bandwidth_factor, engine_all_reduce

    size = _size(op, n)
    res = engine_all_reduce(kernel, size, n, csys, cuda_graphs=bool(getattr(ctx.options, "cuda_graphs", False)),
                            copy_bytes_per_s=float(ctx.device.main_memory.read_bandwidth_bytes_per_s))
    if res is None:
        return None
    dram = 2.0 * size * bus_bandwidth_factor("all_reduce", n) + (2.0 * size if res.copy_s else 0.0)
    return KernelCost(0.0, res.time_s, 0.0, dram, 0.0, 0.0, 0.0, float(op.flops), kernel_time_included=True,
                      rule=f"{kernel}-{res.stage}-all_reduce",
                      notes=f"{n} devices on {csys.name}; the engine's own kernel ({res.stage}"
                            f"{', input copied into its buffer' if res.copy_s else ''})")


def collective_cost(op: Op, ctx: LoweringContext, link_names: tuple[str, ...], fallback: Rule,
                    describe: Callable[[int, Any], str]) -> KernelCost:
    """A collective over ``group_size`` devices: free alone; on a system the fabric catalog describes,
    the library's fastest algorithm (:func:`fabric_collective_cost`); else a ring over the system
    fabric or the device's first link named in ``link_names`` at its raw bandwidth; ``fallback``
    when there is no such link."""
    n = group_size(op, ctx)
    if n <= 1:
        return zero_cost("collective-noop")
    if n > ctx.group_size and "devices" in op.attrs:
        raise ValueError(f"op {op.name!r} ({op.kind}): n={n} devices; got a system of {ctx.group_size}; expected "
                         f"n <= {ctx.group_size}")
    if ctx.collectives is not None:  # the library's algorithms over the node's fabrics and network
        engine = engine_all_reduce_cost(op, ctx, n)
        if engine is not None:
            return engine
        return fabric_collective_cost(op, ctx.collectives, ctx.nodes, n)
    link = ctx.fabric
    if link is None:
        link = next((ln for ln in ctx.device.links if ln.name in link_names), None)
    if link is None:
        return fallback(op, ctx)
    return ring_collective(op, link, n, describe(n, link))
