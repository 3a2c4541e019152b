"""The operator-graph IR: tensors, ops and the validated, frozen DAG that every prediction starts from.

An :class:`OpGraph` is built once (usually through :class:`GraphBuilder`), validated (unique names,
single producers, shapes re-inferred by the per-kind semantics registry, no cycles) and then never
mutated. Ops are stored in a deterministic topological order.

Example
-------
>>> from workloads.ir import GraphBuilder
>>> b = GraphBuilder("mlp", dtype="bf16")
>>> x = b.input("x", (8, 1024))
>>> w = b.weight("fc.weight", (1024, 4096))
>>> y = b.op("matmul", [x, w], name="fc")
>>> g = b.build()
>>> g.flops, g.params
(67108864, 4194304)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any

from nodeperf.errors import NodeperfError
from nodeperf.suggest import MAX_LISTED_PROBLEMS, did_you_mean, format_problems
from workloads.dtypes import DType, parse_dtype

if TYPE_CHECKING:  # networkx is imported on first use (nx_graph, predecessors, a sort): it costs start-up time
    import networkx as nx

__all__ = [
    "GraphError",
    "UnsupportedOpError",
    "Role",
    "TensorSpec",
    "Attrs",
    "Op",
    "OpGraph",
    "GraphBuilder",
    "register_semantics",
    "MAX_LISTED_PROBLEMS",
    "format_problems",
]



#: Format name and version of a saved graph (:meth:`OpGraph.to_json`, :mod:`workloads.serialize`).
GRAPH_FORMAT = "nodeperf.opgraph"
GRAPH_VERSION = 1


class _Registry:
    """The per-kind semantics the IR looks op kinds up in, set by :func:`register_semantics`.

    The semantics registry (:mod:`workloads.semantics`) is built on this module's types, so this module
    does not import it: ``workloads/__init__`` registers it explicitly, before any graph is built.
    """

    semantics_of: Callable[..., Any] | None = None
    check_op: Callable[[Op], None] | None = None


_REGISTRY = _Registry()


def register_semantics(semantics_of: Callable[..., Any], check_op: Callable[[Op], None]) -> None:
    """Install the op semantics the IR uses: ``semantics_of(kind, where=...)`` returns a kind's entry
    (``infer``, ``flops``, ``macs``, ``bytes_rw``, ``params``) or raises :class:`UnsupportedOpError`;
    ``check_op(op)`` re-infers an op's output shapes and raises :class:`GraphError` on a mismatch.

    ``import workloads`` registers :mod:`workloads.semantics` (its :func:`~workloads.semantics.semantics_of`
    and :func:`~workloads.semantics.check_op`); a later call replaces the registration.
    """
    _REGISTRY.semantics_of = semantics_of
    _REGISTRY.check_op = check_op


def _registry() -> _Registry:
    if _REGISTRY.semantics_of is None or _REGISTRY.check_op is None:
        raise RuntimeError("workloads.ir: no op semantics registered; got none; expected "
                           "workloads.ir.register_semantics(semantics_of, check_op) to have been called "
                           "(import workloads registers workloads.semantics)")
    return _REGISTRY


class GraphError(NodeperfError, ValueError):
    """A graph is malformed (shapes, cycles, duplicate names); the message names the op."""


class UnsupportedOpError(NodeperfError, NotImplementedError):
    """An op kind (or an imported operator type) has no semantics; the message names the node."""


class Role(StrEnum):
    """What a tensor is for; decides how memory is accounted."""

    ACTIVATION = "activation"
    WEIGHT = "weight"
    KV_CACHE = "kv_cache"
    GRADIENT = "gradient"
    OPTIMIZER_STATE = "optimizer_state"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor's static description: name, shape (ints >= 0), dtype and role."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    role: Role = Role.ACTIVATION

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Storage size in bytes (sub-byte types rounded up per tensor)."""
        return (self.numel * self.dtype.bits + 7) // 8

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype.value, "role": self.role.value}


#: Types whose values an attribute keeps as they are.
_ATOMS = frozenset({int, float, str, bool, type(None)})


def _freeze(v: Any) -> Any:
    if type(v) in _ATOMS:
        return v
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return Attrs(v)
    if isinstance(v, Enum):
        return v.value
    return v


class Attrs(dict):
    """An immutable, picklable mapping of op attributes (sequences stored as tuples)."""

    __slots__ = ()

    def __init__(self, data: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        super().__init__(data)  # then converted in place where needed (string keys, frozen values)
        atoms = _ATOMS
        thaw: list[str] = []
        for k, v in dict.items(self):
            if type(k) is not str:  # convert every item, in the order given
                items = (data.items() if isinstance(data, Mapping) else data if isinstance(data, list | tuple)
                         else list(dict.items(self)))  # an iterator was consumed: its items as the dict kept them
                dict.clear(self)
                dict.update(self, [(str(k), _freeze(v)) for k, v in items])
                return
            if type(v) not in atoms and not (type(v) is tuple and all(type(x) in atoms for x in v)):
                thaw.append(k)
        for k in thaw:  # (a value replaced keeps its key's place)
            dict.__setitem__(self, k, _freeze(dict.__getitem__(self, k)))

    def _ro(self, *a: Any, **k: Any) -> None:
        raise TypeError("op attributes are immutable; build a new Op instead")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _ro  # type: ignore[assignment]

    def __missing__(self, key: str) -> Any:
        # a required attribute read by shape inference or a cost rule: one located error, not a KeyError
        raise GraphError(f"missing attribute {key!r}; got attributes {sorted(self) or 'none'}; expected {key!r} set")

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))  # keys are distinct: the order is the keys' order

    def __reduce__(self) -> tuple[Any, ...]:
        return (Attrs, (dict(self),))

    def to_json(self) -> dict[str, Any]:
        def conv(v: Any) -> Any:
            if isinstance(v, tuple):
                return [conv(x) for x in v]
            if isinstance(v, Attrs):
                return v.to_json()
            return v

        return {k: conv(self[k]) for k in sorted(self)}


class _once:  # noqa: N801 - used as a decorator, like functools.cached_property
    """A property computed on first access and kept in the instance's ``__dict__`` (which then
    shadows it): :func:`functools.cached_property` without its lock (Python < 3.12 takes one on
    every first access, and a graph's ops are thousands of first accesses)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        val = obj.__dict__[self.name] = self.fn(obj)
        return val


@dataclass(frozen=True)
class Op:
    """One operator: a kind from the semantics registry, its tensors, attributes and group path.

    ``group`` is a dotted path such as ``"layers.3.attn"`` used for breakdowns. FLOPs (a multiply-add
    counts 2), compulsory bytes and parameter counts come from the registry and are cached.
    """

    name: str
    kind: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    attrs: Attrs = field(default_factory=Attrs)
    group: str = ""

    @_once
    def _sem(self) -> Any:
        return _registry().semantics_of(self.kind, where=f"op {self.name!r}")

    @_once
    def flops(self) -> int:
        """Floating-point operations (FMA = 2)."""
        return int(self._sem.flops(self))

    @_once
    def macs(self) -> int:
        """Multiply-accumulates performed in contractions (matmul, conv, attention, RNN gates)."""
        return int(self._sem.macs(self))

    @_once
    def _bytes(self) -> tuple[int, int]:
        r, w = self._sem.bytes_rw(self)
        return int(r), int(w)

    @property
    def bytes_read(self) -> int:
        """Compulsory bytes read (each input once; views and gathers count what is touched)."""
        return self._bytes[0]

    @property
    def bytes_written(self) -> int:
        """Compulsory bytes written (each output once; in-place appends count the new entries)."""
        return self._bytes[1]

    @_once
    def params(self) -> int:
        """Parameter elements held by this op's weight inputs."""
        return int(self._sem.params(self))

    @property
    def category(self) -> str:
        """Coarse class: contraction, attention, normalization, elementwise, memory, ..."""
        return self._sem.category

    @property
    def dtype(self) -> DType:
        """The compute dtype (``attrs['compute_dtype']`` or the first input's dtype)."""
        cd = self.attrs.get("compute_dtype")
        if cd:
            return DType(cd)
        if self.inputs:
            return self.inputs[0].dtype
        return self.outputs[0].dtype if self.outputs else DType.FP32

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "group": self.group,
            "inputs": [t.name for t in self.inputs],
            "outputs": [t.name for t in self.outputs],
            "attrs": self.attrs.to_json(),
        }




class OpGraph:
    """A validated, immutable DAG of ops, in deterministic topological order.

    Parameters
    ----------
    name
        Graph name (usually the model name).
    ops
        Ops in any order; insertion order is kept when it is already topological.
    meta
        Free-form JSON-able description (model, batch, phase...), kept verbatim.
    inferred
        Names of ops whose output shapes were produced by the semantics registry's inference for
        exactly these inputs and attributes (by :class:`GraphBuilder` or a graph transform); they
        are not inferred a second time. Every other op is re-inferred and checked.
    """

    __slots__ = ("name", "ops", "meta", "tensors", "_producer", "_consumers", "_nx", "_cache", "_by_name")

    def __init__(self, name: str, ops: Sequence[Op], meta: Mapping[str, Any] | None = None, *,
                 inferred: Collection[str] = frozenset()) -> None:
        self.name = name
        self.meta = Attrs(meta or {})
        self._cache: dict[str, Any] = {}
        problems: list[str] = []
        by_name: dict[str, Op] = {}
        tensors: dict[str, TensorSpec] = {}
        producer: dict[str, str] = {}
        consumers: dict[str, list[str]] = {}
        early: set[str] = set()  # tensors consumed before (or by) their producer: the order is not topological
        topological = True
        for op in ops:
            opname = op.name
            if opname in by_name:
                problems.append(f"op {opname!r}: duplicate op name; got a second op of kind {op.kind!r}; expected unique names")
                continue
            by_name[opname] = op
            for t in (*op.inputs, *op.outputs):
                prev = tensors.setdefault(t.name, t)
                if prev is not t and prev != t:
                    problems.append(
                        f"op {opname!r}: tensor {t.name!r} redefined; got {t.shape} {t.dtype.value} {t.role.value}; "
                        f"expected {prev.shape} {prev.dtype.value} {prev.role.value} as declared before"
                    )
            for t in op.inputs:
                tn = t.name
                users = consumers.get(tn)
                if users is None:
                    consumers[tn] = [opname]
                else:
                    users.append(opname)
                if tn not in producer:
                    early.add(tn)
            for t in op.outputs:
                tn = t.name
                if tn in producer:
                    problems.append(
                        f"op {opname!r}: tensor {tn!r} is already produced by op {producer[tn]!r}; "
                        "expected one producer per tensor"
                    )
                else:
                    producer[tn] = opname
                    if tn in early:
                        topological = False
        if problems:
            raise GraphError(f"graph {name!r}: " + "; ".join(problems) if len(problems) == 1 else
                             f"graph {name!r}: {len(problems)} problems:\n  " + "\n  ".join(problems))
        # shape re-inference through the semantics registry
        check_op = _registry().check_op
        for op in by_name.values():
            if op.name not in inferred:
                check_op(op)
        # topological order: keep insertion order if valid (no networkx graph is needed then: it is
        # built on first use by nx_graph / predecessors), else a stable sort
        order = list(by_name.values())
        self._producer = producer
        self._nx: nx.DiGraph | None = None
        if not topological:
            pos = {op.name: i for i, op in enumerate(order)}
            g = self._dag(order)
            import networkx as nx

            try:
                names = list(nx.lexicographical_topological_sort(g, key=lambda n: pos[n]))
            except nx.NetworkXUnfeasible:
                cyc = nx.find_cycle(g)
                path = " -> ".join([u for u, _ in cyc] + [cyc[0][0]])
                raise GraphError(f"graph {name!r}: cycle through ops {path}; expected a DAG") from None
            order = [by_name[n] for n in names]
        self.ops: tuple[Op, ...] = tuple(order)
        self.tensors = tensors
        self._consumers = consumers  # lists, never changed after this
        self._by_name = by_name

    def _dag(self, order: Sequence[Op] | None = None) -> nx.DiGraph:
        """The op-level dependency graph (ops in ``order``, default the graph's), kept once built."""
        if self._nx is not None:
            return self._nx
        import networkx as nx

        ops = self.ops if order is None else order
        g = nx.DiGraph()
        g.add_nodes_from(op.name for op in ops)
        for op in ops:
            for t in op.inputs:
                p = self._producer.get(t.name)
                if p is not None:
                    if p == op.name:
                        raise GraphError(f"op {op.name!r}: consumes its own output {t.name!r}; expected a DAG")
                    g.add_edge(p, op.name)
        self._nx = g
        return g

    # --- structure ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __repr__(self) -> str:
        return f"OpGraph({self.name!r}, ops={len(self.ops)}, params={self.params:,}, flops={self.flops:.4g})"

    def op(self, name: str) -> Op:
        try:
            return self._by_name[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r}: no op {name!r}{did_you_mean(name, self._by_name)}") from None

    @property
    def nx_graph(self) -> nx.DiGraph:
        """The op-level dependency graph (a read-only view)."""
        return self._dag().copy(as_view=True)

    def producer(self, tensor: str) -> Op | None:
        p = self._producer.get(tensor)
        return self._by_name[p] if p else None

    def consumers(self, tensor: str) -> tuple[Op, ...]:
        return tuple(self._by_name[c] for c in self._consumers.get(tensor, ()))

    def consumer_names(self, tensor: str) -> tuple[str, ...]:
        """Names of the ops reading ``tensor``, as :meth:`consumers` orders them (no op objects gathered)."""
        return tuple(self._consumers.get(tensor, ()))

    def predecessors(self, op: str) -> list[str]:
        return list(self._dag().predecessors(op))

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """Tensors no op produces (graph inputs, weights, caches), in first-use order."""
        return tuple(t for t in self.tensors.values() if t.name not in self._producer)

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        """Produced tensors no op consumes."""
        return tuple(t for t in self.tensors.values() if t.name in self._producer and t.name not in self._consumers)

    # --- totals (cached; the graph is immutable) ---------------------------------------------
    def memo(self, key: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, computed on the first call for ``key`` and kept with the graph (which never
        changes): for derived facts such as totals and digests."""
        try:
            return self._cache[key]
        except KeyError:
            val = self._cache[key] = fn()
            return val

    _memo = memo

    @property
    def flops(self) -> int:
        return self._memo("flops", lambda: sum(op.flops for op in self.ops))

    @property
    def macs(self) -> int:
        return self._memo("macs", lambda: sum(op.macs for op in self.ops))

    @property
    def params(self) -> int:
        """Parameters: elements of distinct weight tensors (tied weights counted once)."""
        return self._memo(
            "params", lambda: sum(t.numel for t in self.tensors.values() if t.role is Role.WEIGHT and t.name not in self._producer)
        )

    @property
    def weight_bytes(self) -> int:
        return self._memo(
            "weight_bytes",
            lambda: sum(t.nbytes for t in self.tensors.values() if t.role is Role.WEIGHT and t.name not in self._producer),
        )

    def role_bytes(self, role: Role) -> int:
        """Bytes of distinct tensors with ``role`` (e.g. the KV cache, optimizer state)."""
        return self._memo("role_bytes", self._role_bytes).get(role, 0)

    def _role_bytes(self) -> dict[Role, int]:
        out: dict[Role, int] = {}  # every role in one pass over the tensors (integer sums: exact)
        for t in self.tensors.values():
            out[t.role] = out.get(t.role, 0) + t.nbytes
        return out

    # --- serialisation -----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (:data:`GRAPH_FORMAT` version :data:`GRAPH_VERSION`): tensors listed once,
        ops referring to them by name; :func:`workloads.serialize.graph_from_json` reads it back."""
        return {
            "format": GRAPH_FORMAT,
            "version": GRAPH_VERSION,
            "name": self.name,
            "meta": self.meta.to_json(),
            "tensors": [t.to_json() for t in self.tensors.values()],
            "ops": [op.to_json() for op in self.ops],
        }


class GraphBuilder:
    """Incremental construction of an :class:`OpGraph` with shape inference at each op.

    Parameters
    ----------
    name
        Graph name.
    dtype
        Default dtype of new activations and weights.
    """

    def __init__(self, name: str, dtype: str | DType = DType.FP32) -> None:
        self.name = name
        self.dtype = parse_dtype(dtype)
        self._ops: list[Op] = []
        self._names: set[str] = set()
        self._tensors: dict[str, TensorSpec] = {}
        self._group: list[str] = []
        self._counter: dict[str, int] = {}
        self._inferred: set[str] = set()  # ops made by op(): their shapes come from the registry already
        self._semantics: dict[str, Any] = {}  # op kind -> its registry entry

    # --- groups and names ----------------------------------------------------------------------
    @contextmanager
    def group(self, name: str) -> Iterator[None]:
        """Nest ops under ``name`` (dotted, e.g. ``layers.3`` then ``attn`` -> ``layers.3.attn``)."""
        self._group.append(name)
        try:
            yield
        finally:
            self._group.pop()

    @property
    def current_group(self) -> str:
        return ".".join(self._group)

    def _unique(self, base: str) -> str:
        if base not in self._names:
            self._names.add(base)
            return base
        n = self._counter.get(base, 1)
        while f"{base}_{n}" in self._names:
            n += 1
        self._counter[base] = n + 1
        name = f"{base}_{n}"
        self._names.add(name)
        return name

    def _qualify(self, name: str) -> str:
        g = self.current_group
        return f"{g}.{name}" if g else name

    # --- tensors -------------------------------------------------------------------------------
    def tensor(
        self, name: str, shape: Sequence[int], dtype: str | DType | None = None, role: Role | str = Role.ACTIVATION
    ) -> TensorSpec:
        """Declare a graph input tensor (no producer). Names are used verbatim."""
        shp = tuple(int(s) for s in shape)
        if any(s < 0 for s in shp):
            raise GraphError(f"tensor {name!r}: negative dimension; got shape {shp}; expected sizes >= 0")
        t = TensorSpec(name, shp, parse_dtype(dtype) if dtype is not None else self.dtype, Role(role))
        prev = self._tensors.get(name)
        if prev is not None and prev != t:
            raise GraphError(f"tensor {name!r}: redeclared; got {t}; expected {prev}")
        self._tensors[name] = t
        return t

    def input(self, name: str, shape: Sequence[int], dtype: str | DType | None = None) -> TensorSpec:
        return self.tensor(name, shape, dtype, Role.ACTIVATION)

    def weight(self, name: str, shape: Sequence[int], dtype: str | DType | None = None) -> TensorSpec:
        return self.tensor(name, shape, dtype, Role.WEIGHT)

    # --- ops -----------------------------------------------------------------------------------
    def op(
        self,
        kind: str,
        inputs: Sequence[TensorSpec],
        name: str | None = None,
        *,
        out_dtype: str | DType | None = None,
        out_roles: Sequence[Role | str] | None = None,
        out_names: Sequence[str] | None = None,
        **attrs: Any,
    ) -> Any:
        """Add an op; returns its output tensor (or a tuple when it has several).

        Output shapes come from the semantics registry; dtypes default to the inferred ones
        (usually the first input's). ``name`` is qualified by the current group.
        """
        group = ".".join(self._group)
        base = name or kind
        opname = self._unique(f"{group}.{base}" if group else base)
        sem = self._semantics.get(kind)
        if sem is None:
            sem = self._semantics[kind] = _registry().semantics_of(kind, where=f"op {opname!r}")
        a = Attrs(attrs)
        try:
            outs = sem.infer(tuple(inputs), a)
        except GraphError as exc:
            raise GraphError(f"op {opname!r} ({kind}): {exc}") from None
        odt = parse_dtype(out_dtype) if out_dtype is not None else None
        specs = []
        for i, (shape, dt) in enumerate(outs):
            role = Role(out_roles[i]) if out_roles else Role.ACTIVATION
            if out_names:
                tname = out_names[i]
                if tname in self._tensors:
                    raise GraphError(f"op {opname!r} ({kind}): output name {tname!r} already names a tensor; "
                                     "expected a new name")
            else:
                tname = opname if len(outs) == 1 else f"{opname}:{i}"
                while tname in self._tensors:  # e.g. an op named like a weight: keep both, rename the output
                    tname += ":out"
            specs.append(TensorSpec(tname, tuple(map(int, shape)), odt or dt or self.dtype, role))
        op = Op(opname, kind, tuple(inputs), tuple(specs), a, group)
        self._ops.append(op)
        self._inferred.add(opname)
        for t in specs:
            self._tensors[t.name] = t
        return specs[0] if len(specs) == 1 else tuple(specs)

    def add(self, op: Op) -> Op:
        """Append an already-built op (used by importers and graph transforms)."""
        self._names.add(op.name)
        self._ops.append(op)
        return op

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(self._ops)

    def build(self, meta: Mapping[str, Any] | None = None) -> OpGraph:
        """Validate and freeze (ops added with :meth:`add` have their shapes re-inferred and checked)."""
        return OpGraph(self.name, self._ops, meta, inferred=self._inferred)
