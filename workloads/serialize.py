"""Versioned JSON save/load of OpGraphs with an exact round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nodeperf.files import read_text_file
from workloads.dtypes import DType
from workloads.ir import (
    GRAPH_FORMAT,
    GRAPH_VERSION,
    Attrs,
    GraphError,
    Op,
    OpGraph,
    Role,
    TensorSpec,
    UnsupportedOpError,
)

__all__ = ["FORMAT", "VERSION", "graph_to_json", "graph_from_json", "save_graph", "load_graph", "read_json",
           "is_saved_graph"]

FORMAT = GRAPH_FORMAT
VERSION = GRAPH_VERSION


def graph_to_json(graph: OpGraph) -> dict[str, Any]:
    """A JSON-able dict: tensors listed once, ops referring to them by name (:meth:`OpGraph.to_json`)."""
    return graph.to_json()


def graph_from_json(data: dict[str, Any], where: str = "<json>") -> OpGraph:
    """Rebuild (and re-validate) a graph from :func:`graph_to_json` output.

    Parameters
    ----------
    data
        The parsed JSON object.
    where
        Names the source (a file path) at the start of every error message.

    Raises
    ------
    GraphError
        Another format or version, a missing or malformed field, or a graph that does not validate;
        one line starting with ``where``.
    UnsupportedOpError
        An op kind the semantics registry does not know.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise GraphError(f"{where}: format: not a nodeperf graph; got {got!r}; expected {FORMAT!r}")
    if data.get("version") != VERSION:
        raise GraphError(f"{where}: version: unsupported graph version; got {data.get('version')!r}; expected {VERSION} "
                         "(save it again with this version of nodeperf)")
    for key, kind in (("name", str), ("tensors", list), ("ops", list), ("meta", dict)):
        if key not in data and key != "meta":
            raise GraphError(f"{where}: {key}: missing field; got fields {', '.join(sorted(data))}; expected {key!r}")
        if key in data and not isinstance(data[key], kind):
            raise GraphError(f"{where}: {key}: wrong type; got {type(data[key]).__name__}; expected {kind.__name__}")
    tensors: dict[str, TensorSpec] = {}
    for i, t in enumerate(data["tensors"]):
        try:
            tensors[t["name"]] = TensorSpec(t["name"], tuple(t["shape"]), DType(t["dtype"]), Role(t["role"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise GraphError(f"{where}: tensors[{i}]: {exc}; expected name, shape, dtype, role") from None
    ops = []
    for i, o in enumerate(data["ops"]):
        try:
            ops.append(Op(o["name"], o["kind"], tuple(tensors[n] for n in o["inputs"]),
                          tuple(tensors[n] for n in o["outputs"]), Attrs(o.get("attrs", {})), o.get("group", "")))
        except (KeyError, TypeError, AttributeError) as exc:
            name = o.get("name", "?") if isinstance(o, dict) else "?"
            raise GraphError(f"{where}: ops[{i}] ({name}): unknown tensor or field {exc}; expected name, kind, "
                             "inputs and outputs naming listed tensors") from None
    try:
        return OpGraph(data["name"], ops, data.get("meta", {}))
    except UnsupportedOpError as exc:
        raise UnsupportedOpError(f"{where}: {exc}") from None
    except ValueError as exc:
        raise GraphError(f"{where}: {exc}") from None


def save_graph(graph: OpGraph, path: str | Path) -> None:
    """Write ``graph`` to ``path`` as versioned JSON (:data:`FORMAT`, :data:`VERSION`); see :func:`load_graph`."""
    Path(path).write_text(json.dumps(graph_to_json(graph), separators=(",", ":"), sort_keys=False))


def read_json(path: str | Path) -> Any:
    """Parse the JSON file at ``path``.

    Raises
    ------
    FileNotFoundError
        When it does not exist.
    GraphError
        Unreadable, not UTF-8, or invalid (truncated) JSON, located as ``file:line:col``.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such graph file; expected a JSON written by `nodeperf graph MODEL --save FILE`")
    text = read_text_file(p, what="a UTF-8 JSON file", error=GraphError)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON; got {exc.msg}; expected a complete JSON "
                         "document (was the file truncated?)") from None
    except RecursionError:
        raise GraphError(f"{p}: JSON nested too deeply to read; expected a graph or config of a few levels") from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise GraphError(f"{p}: unreadable JSON value; got {exc}; expected numbers of ordinary size") from None


def is_saved_graph(data: Any) -> bool:
    """Whether parsed JSON claims to be a saved graph (a ``format`` field naming nodeperf's)."""
    return isinstance(data, dict) and str(data.get("format", "")).startswith("nodeperf.")


def load_graph(path: str | Path) -> OpGraph:
    """Read a graph written by :func:`save_graph` (shapes are re-inferred and checked).

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    GraphError
        Invalid JSON, another format or version, or a graph that does not validate; located in the file.
    """
    return graph_from_json(read_json(path), str(path))
