"""Graph analyses: totals, breakdowns by kind and group, critical path and peak live activation memory."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from workloads.ir import Op, OpGraph, Role

__all__ = ["Totals", "totals", "breakdown", "critical_path", "peak_live_bytes", "VIEW_KINDS", "group_prefix"]

#: Kinds whose outputs alias their input's storage (no new memory, no data movement).
VIEW_KINDS = frozenset({"reshape", "split", "slice"})
#: Kinds updating their first input's storage in place.
INPLACE_KINDS = frozenset({"kv_append"})


@dataclass(frozen=True)
class Totals:
    ops: int
    flops: int
    macs: int
    params: int
    weight_bytes: int
    bytes_read: int
    bytes_written: int
    kv_cache_bytes: int
    peak_activation_bytes: int


def totals(graph: OpGraph) -> Totals:
    """Whole-graph figures (params count each distinct weight tensor once)."""
    return Totals(
        ops=len(graph),
        flops=graph.flops,
        macs=graph.macs,
        params=graph.params,
        weight_bytes=graph.weight_bytes,
        bytes_read=sum(op.bytes_read for op in graph),
        bytes_written=sum(op.bytes_written for op in graph),
        kv_cache_bytes=graph.role_bytes(Role.KV_CACHE),
        peak_activation_bytes=peak_live_bytes(graph),
    )


def group_prefix(group: str, depth: int | None) -> str:
    """The first ``depth`` dotted components of a group path (all when None)."""
    if depth is None or not group:
        return group or "(top)"
    return ".".join(group.split(".")[:depth])


def breakdown(graph: OpGraph, by: str = "kind", depth: int | None = None) -> dict[str, dict[str, int]]:
    """Per-kind (``by="kind"``), per-category or per-group (``by="group"``, truncated to ``depth``) sums.

    Returns ``{key: {"ops", "flops", "bytes", "params"}}`` sorted by descending FLOPs then key.
    """
    acc: dict[str, dict[str, int]] = defaultdict(lambda: {"ops": 0, "flops": 0, "bytes": 0, "params": 0})
    for op in graph:
        if by == "kind":
            key = op.kind if op.kind != "elementwise" else f"elementwise.{op.attrs.get('op')}"
        elif by == "category":
            key = op.category
        elif by == "group":
            key = group_prefix(op.group, depth)
        else:
            raise ValueError(f"breakdown by: got {by!r}; expected 'kind', 'category' or 'group'")
        a = acc[key]
        a["ops"] += 1
        a["flops"] += op.flops
        a["bytes"] += op.bytes_read + op.bytes_written
        a["params"] += op.params
    return dict(sorted(acc.items(), key=lambda kv: (-kv[1]["flops"], kv[0])))


def critical_path(graph: OpGraph, weight: Callable[[Op], float] | None = None) -> tuple[list[str], float]:
    """Longest dependency chain by ``weight`` (default: FLOPs); returns (op names, total weight)."""
    w = weight or (lambda op: float(op.flops))
    best: dict[str, float] = {}
    prev: dict[str, str | None] = {}
    for op in graph:  # topological order
        p = None
        base = 0.0
        for pred in graph.predecessors(op.name):
            if best[pred] > base or p is None and best[pred] >= base:
                base, p = best[pred], pred
        best[op.name] = base + w(op)
        prev[op.name] = p
    if not best:
        return [], 0.0
    end = max(best, key=lambda n: (best[n], n))
    path = []
    cur: str | None = end
    while cur is not None:
        path.append(cur)
        cur = prev[cur]
    return path[::-1], best[end]


def peak_live_bytes(graph: OpGraph, roles: Iterable[Role] = (Role.ACTIVATION,)) -> int:
    """Peak bytes of live tensors with ``roles`` along the graph's topological order.

    A tensor is live from its producer (or the start, for graph inputs) to its last consumer; view
    outputs alias their base tensor (extending its life, adding no bytes); at each op its inputs and
    outputs are live together. Graph outputs stay live to the end.
    """
    roleset = set(roles)
    base: dict[str, str] = {}
    for op in graph:
        if op.kind in VIEW_KINDS or op.kind in INPLACE_KINDS:
            src = op.inputs[0].name
            for t in op.outputs:
                base[t.name] = base.get(src, src)

    def root(name: str) -> str:
        return base.get(name, name)

    n = len(graph)
    last: dict[str, int] = {}
    first: dict[str, int] = {}
    size: dict[str, int] = {}
    for i, op in enumerate(graph):
        for t in op.outputs:
            r = root(t.name)
            if r == t.name and t.role in roleset:
                first[r] = i
                size[r] = t.nbytes
            last[r] = max(last.get(r, i), i)
        for t in op.inputs:
            r = root(t.name)
            if r not in first and r == t.name and t.role in roleset:
                first[r] = 0
                size[r] = t.nbytes
            last[r] = max(last.get(r, i), i)
    produced = {t.name for op in graph for t in op.outputs}
    consumed = {t.name for op in graph for t in op.inputs}
    for name in produced - consumed:
        r = root(name)
        if r in size:
            last[r] = n - 1
    delta = [0] * (n + 1)
    for r, s in size.items():
        delta[first[r]] += s
        delta[last.get(r, first[r]) + 1] -= s
    peak = cur = 0
    for i in range(n):
        cur += delta[i]
        peak = max(peak, cur)
    return peak
