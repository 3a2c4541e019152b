"""Versioned JSON save/load of OpGraphs with an exact round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workloads.dtypes import DType
from workloads.ir import Attrs, GraphError, Op, OpGraph, Role, TensorSpec

__all__ = ["FORMAT", "VERSION", "graph_to_json", "graph_from_json", "save_graph", "load_graph"]

FORMAT = "nodeperf.opgraph"
VERSION = 1


def graph_to_json(graph: OpGraph) -> dict[str, Any]:
    """A JSON-able dict: tensors listed once, ops referring to them by name."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": graph.name,
        "meta": graph.meta.to_json(),
        "tensors": [t.to_json() for t in graph.tensors.values()],
        "ops": [op.to_json() for op in graph.ops],
    }


def graph_from_json(data: dict[str, Any], where: str = "<json>") -> OpGraph:
    """Rebuild (and re-validate) a graph from :func:`graph_to_json` output."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GraphError(f"{where}: not a nodeperf graph; got format {data.get('format') if isinstance(data, dict) else type(data).__name__!r}; expected {FORMAT!r}")
    if data.get("version") != VERSION:
        raise GraphError(f"{where}: unsupported graph version; got {data.get('version')!r}; expected {VERSION}")
    tensors: dict[str, TensorSpec] = {}
    for i, t in enumerate(data["tensors"]):
        try:
            tensors[t["name"]] = TensorSpec(t["name"], tuple(t["shape"]), DType(t["dtype"]), Role(t["role"]))
        except (KeyError, ValueError) as exc:
            raise GraphError(f"{where}: tensors[{i}]: {exc}; expected name, shape, dtype, role") from None
    ops = []
    for i, o in enumerate(data["ops"]):
        try:
            ops.append(Op(o["name"], o["kind"], tuple(tensors[n] for n in o["inputs"]),
                          tuple(tensors[n] for n in o["outputs"]), Attrs(o.get("attrs", {})), o.get("group", "")))
        except KeyError as exc:
            raise GraphError(f"{where}: ops[{i}] ({o.get('name', '?')}): unknown tensor or field {exc}") from None
    return OpGraph(data["name"], ops, data.get("meta", {}))


def save_graph(graph: OpGraph, path: str | Path) -> None:
    Path(path).write_text(json.dumps(graph_to_json(graph), separators=(",", ":"), sort_keys=False))


def load_graph(path: str | Path) -> OpGraph:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise GraphError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON; {exc.msg}") from None
    return graph_from_json(data, str(p))
