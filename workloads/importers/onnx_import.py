"""Import an ONNX model into an OpGraph: operators mapped to IR kinds, shape computations folded, weights found.

How the import works
--------------------
* Graph inputs get concrete shapes: a symbolic leading (batch) axis is bound to ``batch`` (default 1),
  other symbolic axes to the sizes named in ``dims``.
* Nodes are visited in file order (ONNX requires topological order). Every tensor is either an IR
  tensor (:class:`~workloads.ir.TensorSpec`) or an import-time constant (initializers, ``Constant``
  nodes and anything computed only from constants). Shape-computation subgraphs (``Shape ->
  Gather -> Concat -> Reshape``, masks built from ``Range``) are evaluated with numpy and never
  become costed ops.
* Float initializers with more than one element are parameters: they become
  :attr:`~workloads.ir.Role.WEIGHT` tensors named after the initializer (counted once however often
  they are used). Batch-norm running statistics are folded into the ``batchnorm`` op (inference),
  so they are not parameters, as in PyTorch. A bias that is a computed all-zero constant (the
  exporter's stand-in for "no bias") is dropped.
* Layout operators on weights (``Transpose``, ``Reshape``, ``Cast``...) are folded; a transposed 2-D
  weight feeding ``MatMul``/``Gemm`` keeps the original initializer with the transpose flag.
* An operator without a mapping is an :class:`~workloads.ir.UnsupportedOpError` naming the node;
  with ``strict=False`` it becomes a ``generic`` op costed by its tensor bytes and is listed in a
  warning.

Example
-------
>>> from workloads.importers.onnx_import import import_onnx   # doctest: +SKIP
>>> g = import_onnx("resnet50.onnx", batch=8, dtype="bf16")  # doctest: +SKIP
"""

from __future__ import annotations

import ast
import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nodeperf.suggest import did_you_mean
from workloads.dtypes import DType, parse_dtype
from workloads.importers.naming import unique_name
from workloads.ir import (
    Attrs,
    GraphError,
    Op,
    OpGraph,
    Role,
    TensorSpec,
    UnsupportedOpError,
    format_problems,
)
from workloads.semantics import semantics_of

__all__ = ["import_onnx", "SUPPORTED_OPS", "CONSTANT_ONLY_OPS", "MIN_OPSET", "max_opset"]

log = logging.getLogger(__name__)

#: Checker and protobuf size limit: larger models are checked from their file instead.
_PROTO_LIMIT_BYTES = 2**31 - 1
#: Constants up to this many elements are passed by value to ONNX shape inference (generic ops).
_INFER_CONST_MAX_NUMEL = 1 << 20
#: Oldest default-domain opset imported. Opset 7 introduced numpy-style (multidirectional)
#: broadcasting, which every elementwise mapping here assumes; older files use the ``broadcast``/
#: ``axis`` attributes and BatchNormalization's ``spatial``/``is_test``, which are not read. Changes
#: since (Slice inputs at 10, Split/Squeeze/Unsqueeze axes as inputs at 13, Reduce* axes at 18,
#: Softmax's axis default at 13) are all handled. The newest supported opset is :func:`max_opset`.
MIN_OPSET = 7


def max_opset() -> int:
    """Newest default-domain opset supported: the newest the installed onnx package knows.

    Operator schemas of newer opsets are unknown to the ONNX checker and shape inference (used for
    generic ops), so a file that declares one is refused rather than imported under guessed semantics.
    """
    import onnx.defs

    return int(onnx.defs.onnx_opset_version())

# ONNX TensorProto element type (by name) -> IR dtype
_ONNX_DTYPES: dict[str, DType] = {
    "FLOAT": DType.FP32, "DOUBLE": DType.FP64, "FLOAT16": DType.FP16, "BFLOAT16": DType.BF16,
    "FLOAT8E4M3FN": DType.FP8_E4M3, "FLOAT8E4M3FNUZ": DType.FP8_E4M3, "FLOAT8E5M2": DType.FP8_E5M2,
    "FLOAT8E5M2FNUZ": DType.FP8_E5M2, "INT64": DType.INT64, "UINT64": DType.INT64, "INT32": DType.INT32,
    "UINT32": DType.INT32, "INT8": DType.INT8, "UINT8": DType.INT8, "INT4": DType.INT4, "UINT4": DType.INT4,
    "BOOL": DType.BOOL,
}
# the ONNX element type written for an IR dtype (single-node shape inference of generic ops)
_IR_TO_ONNX = {
    DType.FP32: "FLOAT", DType.TF32: "FLOAT", DType.FP64: "DOUBLE", DType.FP16: "FLOAT16", DType.BF16: "BFLOAT16",
    DType.FP8_E4M3: "FLOAT8E4M3FN", DType.FP8_E5M2: "FLOAT8E5M2", DType.INT64: "INT64", DType.INT32: "INT32",
    DType.INT8: "INT8", DType.INT4: "INT4", DType.BOOL: "BOOL",
}

# elementwise ONNX operators -> IR elementwise op names
_ELEMENTWISE = {
    "Relu": "relu", "Gelu": "gelu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sqrt": "sqrt",
    "Pow": "pow", "Exp": "exp", "Log": "log", "Div": "div", "Sub": "sub", "Add": "add", "Mul": "mul",
    "Neg": "neg", "Abs": "abs", "Reciprocal": "reciprocal", "Max": "max", "Min": "min", "Where": "where",
    "Cast": "cast", "CastLike": "cast", "LeakyRelu": "leaky_relu", "Clip": "clip", "HardSigmoid": "hardsigmoid",
    "HardSwish": "hardswish", "Softplus": "softplus",
}
# predicates and logic on run-time tensors: one "mask" op per element, boolean output
_PREDICATES = frozenset({"IsNaN", "IsInf", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And",
                         "Or", "Xor"})
# ops folded on weights too: they only change layout or type, so the result is still the parameter
_LAYOUT = frozenset({"Identity", "Dropout", "Cast", "CastLike", "Transpose", "Reshape", "Squeeze", "Unsqueeze",
                     "Flatten"})


@dataclass
class _Const:
    """An import-time constant: an initializer, a ``Constant`` node or a folded computation."""

    name: str
    shape: tuple[int, ...]
    np_dtype: np.dtype
    _value: np.ndarray | None = None
    proto: Any = None  # TensorProto, loaded on demand
    origin: str | None = None  # initializer whose data this is (layout ops folded)
    transposed: bool = False  # a 2-D transpose of ``origin``

    @property
    def value(self) -> np.ndarray:
        if self._value is None:
            from onnx import numpy_helper

            self._value = numpy_helper.to_array(self.proto)
        return self._value

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_float(self) -> bool:
        return np.issubdtype(self.np_dtype, np.floating) or str(self.np_dtype) in ("bfloat16", "float8_e4m3fn",
                                                                                 "float8_e5m2")

    @property
    def weight_like(self) -> bool:
        """Parameter data: a float initializer (possibly re-laid-out) with more than one element."""
        return self.origin is not None and self.is_float and self.numel > 1


_Value = TensorSpec | _Const


def _const_of(name: str, arr: np.ndarray, origin: str | None = None, transposed: bool = False) -> _Const:
    arr = np.asarray(arr)
    return _Const(name, tuple(int(s) for s in arr.shape), arr.dtype, arr, None, origin, transposed)


# ------------------------------------------------------------------------------------------------
# numpy evaluation of constant subgraphs


def _ints(v: Any) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _axes_arg(ins: Sequence[Any], attrs: Mapping[str, Any], pos: int = 1) -> list[int] | None:
    if len(ins) > pos and ins[pos] is not None:
        return _ints(ins[pos])
    a = attrs.get("axes")
    return None if a is None else [int(x) for x in a]


def _reshape_target(shape: Sequence[int], target: Sequence[int], allowzero: bool) -> list[int]:
    out = [int(s) for s in target]
    if not allowzero:
        out = [shape[i] if s == 0 else s for i, s in enumerate(out)]
    if -1 in out:
        rest = math.prod(s for s in out if s != -1)
        out[out.index(-1)] = math.prod(shape) // rest if rest else 0
    return out


def _squeeze_shape(shape: Sequence[int], axes: Sequence[int] | None) -> list[int]:
    if axes is None:
        return [s for s in shape if s != 1]
    ax = {a + len(shape) if a < 0 else a for a in axes}
    return [s for i, s in enumerate(shape) if i not in ax]


def _unsqueeze_shape(shape: Sequence[int], axes: Sequence[int]) -> list[int]:
    rank = len(shape) + len(axes)
    ax = sorted(a + rank if a < 0 else a for a in axes)
    out = list(shape)
    for a in ax:
        out.insert(a, 1)
    return out


def _slice_spec(shape: Sequence[int], starts: Sequence[int], ends: Sequence[int], axes: Sequence[int] | None,
                steps: Sequence[int] | None) -> list[slice]:
    sl = [slice(None)] * len(shape)
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = a + len(shape) if a < 0 else a
        big = 2**62
        sl[a] = slice(max(min(s, big), -big), max(min(e, big), -big), st)
    return sl


def _slice_args(ins: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[list[int], list[int], Any, Any]:
    if len(ins) >= 3:  # opset >= 10: inputs
        starts, ends = _ints(ins[1]), _ints(ins[2])
        axes = _ints(ins[3]) if len(ins) > 3 and ins[3] is not None else None
        steps = _ints(ins[4]) if len(ins) > 4 and ins[4] is not None else None
        return starts, ends, axes, steps
    return list(attrs["starts"]), list(attrs["ends"]), attrs.get("axes"), None


def _split_sizes(dim: int, ins: Sequence[Any], attrs: Mapping[str, Any], n_out: int) -> list[int]:
    if len(ins) > 1 and ins[1] is not None:
        return _ints(ins[1])
    if "split" in attrs:
        return [int(s) for s in attrs["split"]]
    n = int(attrs.get("num_outputs", n_out))
    step = -(-dim // n)
    return [min(step, dim - i * step) for i in range(n)]


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[[list[Any], dict[str, Any]], list[np.ndarray]]:
    def f(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        axes = _axes_arg(ins, attrs)
        keep = bool(attrs.get("keepdims", 1))
        if axes is None or (not axes and not attrs.get("noop_with_empty_axes", 0)):
            return [np.asarray(fn(ins[0], axis=None, keepdims=keep))]
        if not axes:
            return [ins[0]]
        return [np.asarray(fn(ins[0], axis=tuple(axes), keepdims=keep))]

    return f


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)
    return a / b


def _np_of(to: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(int(to)))


_EVAL: dict[str, Callable[[list[Any], dict[str, Any]], list[np.ndarray]]] = {
    "Identity": lambda i, a: [i[0]],
    "Dropout": lambda i, a: [i[0]],
    "Cast": lambda i, a: [i[0].astype(_np_of(a["to"]))],
    "CastLike": lambda i, a: [i[0].astype(i[1].dtype)],
    "Reshape": lambda i, a: [i[0].reshape(_reshape_target(i[0].shape, _ints(i[1]), bool(a.get("allowzero", 0))))],
    "Transpose": lambda i, a: [np.transpose(i[0], a.get("perm"))],
    "Squeeze": lambda i, a: [i[0].reshape(_squeeze_shape(i[0].shape, _axes_arg(i, a)))],
    "Unsqueeze": lambda i, a: [i[0].reshape(_unsqueeze_shape(i[0].shape, _axes_arg(i, a) or []))],
    "Flatten": lambda i, a: [i[0].reshape(math.prod(i[0].shape[: int(a.get("axis", 1)) % max(1, i[0].ndim + 1)]), -1)],
    "Concat": lambda i, a: [np.concatenate([x for x in i if x is not None], axis=int(a["axis"]))],
    "Gather": lambda i, a: [np.take(i[0], i[1], axis=int(a.get("axis", 0)))],
    "Slice": lambda i, a: [i[0][tuple(_slice_spec(i[0].shape, *_slice_args(i, a)))]],
    "Split": lambda i, a: list(np.split(i[0], np.cumsum(_split_sizes(i[0].shape[int(a.get("axis", 0))], i, a,
                                                                     int(a.get("num_outputs", 0)) or 1))[:-1],
                                        axis=int(a.get("axis", 0)))),
    "Expand": lambda i, a: [np.broadcast_to(i[0], np.broadcast_shapes(i[0].shape, tuple(_ints(i[1])))).copy()],
    "Tile": lambda i, a: [np.tile(i[0], _ints(i[1]))],
    "Range": lambda i, a: [np.arange(i[0].item(), i[1].item(), i[2].item()).astype(i[0].dtype)],
    "ConstantOfShape": lambda i, a: [np.full(_ints(i[0]), a["value"].reshape(-1)[0] if "value" in a else 0.0,
                                             dtype=a["value"].dtype if "value" in a else np.float32)],
    "Add": lambda i, a: [i[0] + i[1]],
    "Sub": lambda i, a: [i[0] - i[1]],
    "Mul": lambda i, a: [i[0] * i[1]],
    "Div": lambda i, a: [_div(i[0], i[1])],
    "Mod": lambda i, a: [np.fmod(i[0], i[1]) if a.get("fmod") else np.mod(i[0], i[1])],
    "Pow": lambda i, a: [np.power(i[0], i[1]).astype(i[0].dtype)],
    "Neg": lambda i, a: [-i[0]],
    "Abs": lambda i, a: [np.abs(i[0])],
    "Sqrt": lambda i, a: [np.sqrt(i[0])],
    "Exp": lambda i, a: [np.exp(i[0])],
    "Log": lambda i, a: [np.log(i[0])],
    "Floor": lambda i, a: [np.floor(i[0])],
    "Ceil": lambda i, a: [np.ceil(i[0])],
    "Reciprocal": lambda i, a: [1.0 / i[0]],
    "Sign": lambda i, a: [np.sign(i[0])],
    "Max": lambda i, a: [functools.reduce(np.maximum, [x for x in i if x is not None])],
    "Min": lambda i, a: [functools.reduce(np.minimum, [x for x in i if x is not None])],
    "Equal": lambda i, a: [np.equal(i[0], i[1])],
    "Less": lambda i, a: [np.less(i[0], i[1])],
    "LessOrEqual": lambda i, a: [np.less_equal(i[0], i[1])],
    "Greater": lambda i, a: [np.greater(i[0], i[1])],
    "GreaterOrEqual": lambda i, a: [np.greater_equal(i[0], i[1])],
    "Not": lambda i, a: [np.logical_not(i[0])],
    "And": lambda i, a: [np.logical_and(i[0], i[1])],
    "Or": lambda i, a: [np.logical_or(i[0], i[1])],
    "Xor": lambda i, a: [np.logical_xor(i[0], i[1])],
    "Where": lambda i, a: [np.where(i[0], i[1], i[2])],
    "Trilu": lambda i, a: [(np.triu if a.get("upper", 1) else np.tril)(i[0], int(i[1]) if len(i) > 1 and i[1] is not None else 0)],
    "ReduceSum": _reduce(np.sum),
    "ReduceProd": _reduce(np.prod),
    "ReduceMax": _reduce(np.max),
    "ReduceMin": _reduce(np.min),
    "ReduceMean": _reduce(np.mean),
    "Relu": lambda i, a: [np.maximum(i[0], 0).astype(i[0].dtype)],
    "CumSum": lambda i, a: [_cumsum(i[0], int(np.asarray(i[1]).reshape(-1)[0]), bool(a.get("exclusive", 0)),
                                    bool(a.get("reverse", 0)))],
    "GatherND": lambda i, a: [_gather_nd(i[0], i[1], int(a.get("batch_dims", 0)))],
    "IsNaN": lambda i, a: [np.isnan(i[0])],
    "IsInf": lambda i, a: [np.isinf(i[0])],
}


def _cumsum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    y = np.flip(x, axis) if reverse else x
    out = np.cumsum(y, axis=axis).astype(x.dtype)
    if exclusive:
        out = out - y
    return np.flip(out, axis) if reverse else out


def _gather_nd(data: np.ndarray, idx: np.ndarray, batch_dims: int) -> np.ndarray:
    if batch_dims:
        return np.stack([_gather_nd(d, i, batch_dims - 1) for d, i in zip(data, idx, strict=True)])
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    rows = [data[tuple(int(v) for v in r)] for r in flat]
    return np.asarray(rows, dtype=data.dtype).reshape(*idx.shape[:-1], *data.shape[k:])


# ------------------------------------------------------------------------------------------------
# loading and validation


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def _load(path_or_model: Any) -> tuple[Any, str]:
    """(ModelProto, label for messages) from a path or a ModelProto; ValueError when malformed."""
    import onnx

    if isinstance(path_or_model, onnx.ModelProto):
        model, label, path = path_or_model, (path_or_model.graph.name or "<onnx model>"), None
    else:
        path = Path(path_or_model)
        label = str(path)
        if path.is_dir():
            raise ValueError(f"{label}: a directory; got a folder named like a model; expected an ONNX file")
        if not path.is_file():
            raise FileNotFoundError(f"{label}: no such ONNX file")
        if path.stat().st_size == 0:
            raise ValueError(f"{label}: empty file; got 0 bytes; expected an ONNX ModelProto (a file written by "
                             "torch.onnx.export or onnx.save)")
        try:
            model = onnx.load(str(path))
        except Exception as exc:  # protobuf DecodeError and friends
            raise ValueError(f"{label}: not an ONNX model; got bytes that do not parse as one ({_first_line(exc)}); "
                             "expected an ONNX ModelProto (a file written by torch.onnx.export or onnx.save)") from None
    _check_opset(model, label)
    try:
        if model.ByteSize() <= _PROTO_LIMIT_BYTES:
            onnx.checker.check_model(model)
        elif path is not None:
            onnx.checker.check_model(str(path))
    except Exception as exc:
        raise ValueError(f"{label}: invalid ONNX model; got {_first_line(exc)!r} from the ONNX checker; expected a "
                         "model the checker accepts") from None
    if not model.graph.node:
        raise ValueError(f"{label}: ONNX graph {model.graph.name!r} has no nodes; expected at least one operator")
    if model.functions:
        from onnx import inliner

        model = inliner.inline_local_functions(model)
    return model, label


def _check_opset(model: Any, label: str) -> None:
    """Refuse a default-domain opset outside ``MIN_OPSET..max_opset()`` (a located ValueError)."""
    hi = max_opset()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and not MIN_OPSET <= int(o.version) <= hi:
            raise ValueError(f"{label}: opset_import: unsupported ONNX opset; got {int(o.version)}; expected "
                             f"{MIN_OPSET}..{hi} (convert with onnx.version_converter.convert_version)")


def _group_of(node: Any) -> str:
    """A dotted module path for breakdowns, from exporter metadata or a '/'-separated node name."""
    parts: list[str] = []
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            try:
                parts = [str(x) for x in ast.literal_eval(p.value)][:-1]
            except (ValueError, SyntaxError):
                parts = []
            break
    else:
        if node.name.startswith("/"):
            parts = node.name.strip("/").split("/")[:-1]
    parts = [x for x in parts if x]
    out = [x for i, x in enumerate(parts) if not (i + 1 < len(parts) and parts[i + 1].startswith(x + "."))]
    return ".".join(out)


# ------------------------------------------------------------------------------------------------
# the importer


class _Importer:
    def __init__(self, model: Any, label: str, batch: int | None, dtype: DType | None, strict: bool,
                 dims: Mapping[str, int]) -> None:
        self.model = model
        self.label = label
        self.batch = batch
        self.dtype = dtype
        self.strict = strict
        self.dims = dict(dims)
        self.env: dict[str, _Value] = {}
        self.ops: list[Op] = []
        self.op_names: set[str] = set()
        self.tensors: dict[str, TensorSpec] = {}
        self.generic: list[tuple[str, str]] = []
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        self.bound_batch = batch or 1

    # --- dtypes --------------------------------------------------------------------------------
    def ir_dtype(self, elem: int, where: str) -> DType:
        from onnx import TensorProto

        name = TensorProto.DataType.Name(int(elem)) if int(elem) in TensorProto.DataType.values() else str(elem)
        dt = _ONNX_DTYPES.get(name)
        if dt is None:
            raise ValueError(f"{where}: element type {name} has no IR dtype; expected one of {', '.join(sorted(_ONNX_DTYPES))}")
        return self.dtype if (self.dtype is not None and dt.is_float) else dt

    def np_to_ir(self, dt: np.dtype, where: str) -> DType:
        from onnx import helper

        return self.ir_dtype(helper.np_dtype_to_tensor_dtype(np.dtype(dt)), where)

    # --- inputs --------------------------------------------------------------------------------
    def bind_inputs(self) -> None:
        g = self.model.graph
        problems: list[str] = []
        for init in g.initializer:
            if any(int(d) < 0 for d in init.dims):
                problems.append(f"initializer {init.name!r}: negative size; got dims {tuple(int(d) for d in init.dims)}; "
                                "expected sizes >= 0")
                continue
            np_dt = _np_of(init.data_type)
            self.env[init.name] = _Const(init.name, tuple(int(d) for d in init.dims), np_dt, None, init, init.name)
        for vi in g.input:
            if vi.name in self.env:
                continue  # old-style models also list initializers as inputs
            where = f"{self.label}: input {vi.name!r}"
            if not vi.type.HasField("tensor_type"):
                raise ValueError(f"{where}: not a tensor; expected tensor inputs only")
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                raise ValueError(f"{where}: no shape; expected a ranked tensor")
            shape: list[int] = []
            for i, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    size = int(d.dim_value)
                    if size < 1:
                        problems.append(f"input {vi.name!r} axis {i}: {'zero' if size == 0 else 'negative'} size; "
                                        f"got {size}; expected a positive size")
                        size = 1
                    elif i == 0 and self.batch is not None and size != self.batch:
                        problems.append(f"input {vi.name!r} has a fixed batch dimension {size}; got batch={self.batch}; "
                                        "expected a model exported with a dynamic batch axis (or no batch)")
                elif d.dim_param and d.dim_param in self.dims:
                    size = int(self.dims[d.dim_param])
                elif i == 0:
                    size = self.bound_batch
                    if d.dim_param:
                        self.dims.setdefault(d.dim_param, size)
                else:
                    problems.append(f"input {vi.name!r} axis {i} is symbolic ({d.dim_param or 'unnamed'}); "
                                    f"expected its size through dims={{{d.dim_param or 'name'!r}: N}}")
                    size = 1
                shape.append(size)
            t = TensorSpec(vi.name, tuple(shape), self.ir_dtype(tt.elem_type, where), Role.ACTIVATION)
            self.env[vi.name] = t
        if problems:
            raise ValueError(format_problems(self.label, [f"{self.label}: {p}" for p in problems], "ONNX model"))

    # --- tensors from values ---------------------------------------------------------------------
    def tensor(self, v: _Value, where: str) -> TensorSpec:
        """The IR tensor for ``v``: weights for parameter data, graph inputs for other constants."""
        if isinstance(v, TensorSpec):
            return v
        name = v.origin if (v.origin and not v.transposed and self.origin_shape(v.origin) == v.shape) else v.name
        t = self.tensors.get(name)
        if t is None:
            role = Role.WEIGHT if v.weight_like else Role.ACTIVATION
            t = TensorSpec(name, v.shape, self.np_to_ir(v.np_dtype, where), role)
            self.tensors[name] = t
        return t

    def origin_shape(self, origin: str) -> tuple[int, ...] | None:
        c = self.env.get(origin)
        return c.shape if isinstance(c, _Const) else None

    def weight_view(self, v: _Value, where: str) -> tuple[TensorSpec, bool]:
        """(tensor, transposed): a folded 2-D transpose of an initializer uses the initializer itself."""
        if isinstance(v, _Const) and v.transposed and v.origin and isinstance(self.env.get(v.origin), _Const):
            return self.tensor(self.env[v.origin], where), True  # type: ignore[arg-type]
        return self.tensor(v, where), False

    # --- emitting ops ----------------------------------------------------------------------------
    def unique(self, name: str) -> str:
        return unique_name(name, self.op_names)

    def emit(self, name: str, group: str, kind: str, inputs: Sequence[TensorSpec], out_names: Sequence[str],
             out_dtypes: Sequence[DType | None] | None = None, **attrs: Any) -> list[TensorSpec]:
        a = Attrs(attrs)
        outs = semantics_of(kind, where=f"op {name!r}").infer(tuple(inputs), a)
        specs = []
        for i, (shape, dt) in enumerate(outs):
            odt = out_dtypes[i] if out_dtypes and out_dtypes[i] is not None else (dt or inputs[0].dtype)
            specs.append(TensorSpec(out_names[i], tuple(int(s) for s in shape), odt, Role.ACTIVATION))
        self.ops.append(Op(self.unique(name), kind, tuple(inputs), tuple(specs), a, group))
        for s in specs:
            self.env[s.name] = s
        return specs

    # --- the walk --------------------------------------------------------------------------------
    def run(self) -> OpGraph:
        from onnx import helper

        self.bind_inputs()
        for idx, node in enumerate(self.model.graph.node):
            name = node.name or f"{node.op_type}_{idx}"
            where = f"{self.label}: node {name!r} ({node.op_type})"
            ins: list[_Value | None] = []
            for i in node.input:
                if not i:
                    ins.append(None)
                elif i not in self.env:
                    raise ValueError(f"{where}: input {i!r} is not produced by an earlier node, an initializer or a "
                                     "graph input; expected a topologically sorted graph")
                else:
                    ins.append(self.env[i])
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
            try:
                self.visit(node, name, where, ins, attrs)
            except GraphError as exc:
                raise GraphError(f"{where}: {exc}") from None
        meta = {"model": Path(self.label).stem if self.label.endswith(".onnx") else self.label, "source": "onnx",
                "batch": self.bound_batch, "opset": self.opset}
        if self.dtype is not None:
            meta["dtype"] = self.dtype.value
        if self.model.producer_name:
            meta["producer"] = self.model.producer_name
        if self.generic:
            listed = ", ".join(f"{t} (node {n!r})" for t, n in self.generic)
            log.warning("%s: %d operator(s) without semantics costed by their tensor bytes only: %s",
                        self.label, len(self.generic), listed)
            meta["generic_ops"] = [f"{t}:{n}" for t, n in self.generic]
        name = meta["model"] if self.label.endswith(".onnx") else (self.model.graph.name or meta["model"])
        return OpGraph(name, self.ops, meta)

    def visit(self, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
        op_type = node.op_type
        outs = list(node.output)
        if node.domain not in ("", "ai.onnx"):
            self.unknown(node, name, where, ins, attrs)
            return
        if op_type == "Constant":
            self.env[outs[0]] = _const_of(outs[0], _constant_value(attrs, where))
            return
        if op_type in ("Shape", "Size"):
            x = ins[0]
            assert x is not None
            shape = x.shape
            if op_type == "Size":
                val = np.asarray(math.prod(shape), dtype=np.int64)
            else:
                r = len(shape)
                start, end = int(attrs.get("start", 0)), int(attrs.get("end", r))
                val = np.asarray(shape[slice(start, end)], dtype=np.int64)
            self.env[outs[0]] = _const_of(outs[0], val)
            return
        present = [i for i in ins if i is not None]
        if (present and op_type in _EVAL and all(isinstance(i, _Const) for i in present)
                and (op_type in _LAYOUT or not any(i.weight_like for i in present))):  # type: ignore[union-attr]
            self.fold(node, where, ins, attrs)
            return
        if op_type == "SequenceAt":
            seq = ins[0]
            if not isinstance(seq, list):
                raise ValueError(f"{where}: input is not a sequence; expected the output of SplitToSequence")
            self.alias(outs[0], seq[int(self.const_ints(ins[1], where, "the position")[0])])
            return
        handler = _HANDLERS.get(op_type)
        if handler is None:
            self.unknown(node, name, where, ins, attrs)
            return
        handler(self, node, name, where, ins, attrs)

    def fold(self, node: Any, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
        vals = [i.value if isinstance(i, _Const) else None for i in ins]
        try:
            res = _EVAL[node.op_type](vals, attrs)
        except Exception as exc:
            raise ValueError(f"{where}: cannot evaluate on constant inputs ({_first_line(exc)}); expected valid "
                             "shape-computation operands") from None
        src = ins[0] if isinstance(ins[0], _Const) else None
        for out, val in zip(node.output, res, strict=False):
            if not out:
                continue
            origin, transposed = None, False
            if node.op_type in _LAYOUT and src is not None and src.origin is not None:
                origin = src.origin
                base = self.origin_shape(origin)
                if node.op_type == "Transpose" and len(src.shape) == 2 and tuple(attrs.get("perm", (1, 0))) == (1, 0):
                    transposed = not src.transposed
                    if not transposed and np.shape(val) != base:
                        origin = None
                elif src.transposed and node.op_type not in ("Identity", "Dropout", "Cast", "CastLike"):
                    origin = None
                else:
                    transposed = src.transposed
            self.env[out] = _const_of(out, val, origin, transposed)

    def unknown(self, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
        if self.strict and node.op_type in CONSTANT_ONLY_OPS and node.domain in ("", "ai.onnx"):
            raise UnsupportedOpError(
                f"{where}: operator supported on import-time constants only (shape and mask computations); got "
                "run-time inputs; expected constant operands (or strict=False / --no-strict to cost it by its "
                "tensor bytes)")
        if self.strict:
            hint = did_you_mean(node.op_type, SUPPORTED_OPS)
            dom = f" in domain {node.domain!r}" if node.domain not in ("", "ai.onnx") else ""
            raise UnsupportedOpError(
                f"{where}: unsupported operator{dom}; expected one of {', '.join(SUPPORTED_OPS)}{hint} "
                "(or strict=False / --no-strict to cost it by its tensor bytes)")
        self.emit_generic(node, name, where, ins)

    def emit_generic(self, node: Any, name: str, where: str, ins: list[_Value | None]) -> None:
        inputs = [self.tensor(i, where) for i in ins if i is not None]
        shapes, dtypes = self.infer_outputs(node, where, ins)
        outs = [o for o in node.output if o]
        op = Op(self.unique(name), "generic", tuple(inputs),
                tuple(TensorSpec(o, s, d, Role.ACTIVATION) for o, s, d in zip(outs, shapes, dtypes, strict=True)),
                Attrs({"op_type": node.op_type, "domain": node.domain, "output_shapes": shapes,
                       "output_dtypes": [d.value for d in dtypes]}),
                _group_of(node))
        self.ops.append(op)
        for t in op.outputs:
            self.env[t.name] = t
        self.generic.append((node.op_type, name))

    def infer_outputs(self, node: Any, where: str, ins: list[_Value | None]) -> tuple[list[tuple[int, ...]], list[DType]]:
        """Output shapes of an operator without semantics: exporter value_info, else ONNX inference on the node."""
        import onnx
        from onnx import helper, numpy_helper

        outs = [o for o in node.output if o]
        known: dict[str, Any] = {vi.name: vi for vi in (*self.model.graph.value_info, *self.model.graph.output)}
        res: dict[str, tuple[tuple[int, ...], DType]] = {}

        def take(vi: Any) -> None:
            tt = vi.type.tensor_type
            shape = []
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    shape.append(int(d.dim_value))
                elif d.dim_param in self.dims:
                    shape.append(int(self.dims[d.dim_param]))
                else:
                    return
            if tt.HasField("shape") and tt.elem_type:
                res[vi.name] = (tuple(shape), self.ir_dtype(tt.elem_type, where))

        for o in outs:
            if o in known:
                take(known[o])
        if len(res) < len(outs):
            vis, inits = [], []
            for i in ins:
                if i is None:
                    continue
                if isinstance(i, _Const) and i.numel <= _INFER_CONST_MAX_NUMEL:
                    inits.append(numpy_helper.from_array(np.asarray(i.value), i.name))
                else:
                    t = self.tensor(i, where) if isinstance(i, _Const) else i
                    elem = getattr(onnx.TensorProto, _IR_TO_ONNX[t.dtype])
                    vis.append(helper.make_tensor_value_info(i.name, elem, list(i.shape)))
            g = helper.make_graph([node], "single", vis, [helper.make_empty_tensor_value_info(o) for o in outs], inits)
            m = helper.make_model(g, opset_imports=list(self.model.opset_import))
            m.ir_version = self.model.ir_version
            try:
                inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
                for vi in (*inferred.graph.output, *inferred.graph.value_info):
                    if vi.name in outs and vi.name not in res:
                        take(vi)
            except Exception as exc:  # inference of exotic/custom ops may fail: reported below
                log.debug("%s: shape inference failed: %s", where, _first_line(exc))
        missing = [o for o in outs if o not in res]
        if missing:
            raise ValueError(f"{where}: output {missing[0]!r} has no static shape; expected shapes from the file's "
                             "value_info or ONNX shape inference to cost it by its bytes")
        return [res[o][0] for o in outs], [res[o][1] for o in outs]

    # --- helpers for handlers -----------------------------------------------------------------------
    def const_ints(self, v: _Value | None, where: str, what: str) -> list[int]:
        if isinstance(v, _Const):
            return _ints(v.value)
        raise ValueError(f"{where}: {what} is computed at run time; expected a constant (a static graph; bind "
                         "symbolic sizes with batch=/dims=)")

    def alias(self, out: str, v: _Value) -> None:
        if out:
            self.env[out] = v


# ------------------------------------------------------------------------------------------------
# operator handlers


def _constant_value(attrs: Mapping[str, Any], where: str) -> np.ndarray:
    from onnx import numpy_helper

    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    if "value_float" in attrs:
        return np.asarray(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.asarray(attrs["value_floats"], dtype=np.float32)
    if "value_int" in attrs:
        return np.asarray(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.asarray(attrs["value_ints"], dtype=np.int64)
    raise ValueError(f"{where}: constant of kind {sorted(attrs)}; expected value, value_float(s) or value_int(s)")


def _zero_bias(v: _Value | None) -> bool:
    """A computed (non-initializer) all-zero constant: an exporter's stand-in for "no bias"."""
    return isinstance(v, _Const) and v.origin is None and v.numel <= (1 << 20) and not np.any(v.value)


def _h_elementwise(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None],
                   attrs: dict[str, Any]) -> None:
    op_type = node.op_type
    present = [i for i in ins if i is not None]
    tensors = [i for i in present if not (isinstance(i, _Const) and i.numel == 1)]
    if not tensors:
        tensors = present[:1]
    if op_type == "Cast":
        out_dt: DType | None = imp.ir_dtype(attrs["to"], where)
    elif op_type == "CastLike":
        out_dt = present[1].dtype if isinstance(present[1], TensorSpec) else imp.np_to_ir(present[1].np_dtype, where)
        tensors = present[:1]
    elif op_type == "Where":
        src = ins[1]
        out_dt = src.dtype if isinstance(src, TensorSpec) else imp.np_to_ir(src.np_dtype, where)  # type: ignore[union-attr]
    else:
        specs = [imp.tensor(i, where) for i in present]
        floats = [t for t in specs if t.dtype.is_float]
        out_dt = (floats or specs)[0].dtype
    x = tensors[0]
    x_dt = x.dtype if isinstance(x, TensorSpec) else imp.np_to_ir(x.np_dtype, where)
    if op_type in ("Cast", "CastLike") and out_dt == x_dt:
        imp.alias(node.output[0], x)
        return
    specs = [imp.tensor(i, where) for i in tensors]
    if len(specs) > 3:  # variadic Max/Min/Sum: a chain of binary ops
        acc = specs[0]
        for k, t in enumerate(specs[1:], 1):
            last = k == len(specs) - 1
            acc = imp.emit(name, _group_of(node), "elementwise", [acc, t],
                           [node.output[0] if last else f"{node.output[0]}::{k}"], [out_dt],
                           op=_ELEMENTWISE[op_type])[0]
        return
    imp.emit(name, _group_of(node), "elementwise", specs, [node.output[0]], [out_dt], op=_ELEMENTWISE[op_type])


def _h_predicate(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None],
                 attrs: dict[str, Any]) -> None:
    present = [i for i in ins if i is not None]
    tensors = [i for i in present if not (isinstance(i, _Const) and i.numel == 1)] or present[:1]
    imp.emit(name, _group_of(node), "elementwise", [imp.tensor(i, where) for i in tensors], [node.output[0]],
             [DType.BOOL], op="mask")


def _h_alias(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = ins[0]
    assert x is not None
    imp.alias(node.output[0], x)
    if len(node.output) > 1 and node.output[1]:
        raise ValueError(f"{where}: the dropout mask output {node.output[1]!r} is used; expected inference graphs "
                         "without it")


def _auto_pads(auto_pad: str, spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
               dil: Sequence[int]) -> list[int]:
    nd = len(spatial)
    if auto_pad == "VALID":
        return [0] * (2 * nd)
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, stride, dil, strict=True):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        lo = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        begin.append(lo)
        end.append(total - lo)
    return begin + end


def _window_attrs(x_shape: Sequence[int], kernel: Sequence[int], attrs: Mapping[str, Any]) -> tuple[list[int], list[int], list[int]]:
    nd = len(kernel)
    stride = [int(s) for s in attrs.get("strides", [1] * nd)]
    dil = [int(d) for d in attrs.get("dilations", [1] * nd)]
    auto = attrs.get("auto_pad", "NOTSET")
    if auto not in ("NOTSET", ""):
        pads = _auto_pads(auto, x_shape[2:], kernel, stride, dil)
    else:
        pads = [int(p) for p in attrs.get("pads", [0] * (2 * nd))]
    return stride, dil, pads


def _h_conv(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x, w = imp.tensor(ins[0], where), imp.tensor(ins[1], where)  # type: ignore[arg-type]
    nd = len(w.shape) - 2
    if nd not in (1, 2):
        raise UnsupportedOpError(f"{where}: {nd}-D convolution; expected 1-D or 2-D (conv1d, conv2d)")
    kernel = [int(k) for k in attrs.get("kernel_shape", w.shape[2:])]
    stride, dil, pads = _window_attrs(x.shape, kernel, attrs)
    inputs = [x, w]
    b = ins[2] if len(ins) > 2 else None
    if b is not None and not _zero_bias(b):
        inputs.append(imp.tensor(b, where))
    imp.emit(name, _group_of(node), f"conv{nd}d", inputs, [node.output[0]], stride=tuple(stride),
             padding=tuple(pads), dilation=tuple(dil), groups=int(attrs.get("group", 1)))


def _h_gemm(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    a, ta = imp.weight_view(ins[0], where)  # type: ignore[arg-type]
    b, tb = imp.weight_view(ins[1], where)  # type: ignore[arg-type]
    ta ^= bool(attrs.get("transA", 0))
    tb ^= bool(attrs.get("transB", 0))
    inputs = [a, b]
    c = ins[2] if len(ins) > 2 else None
    if c is not None and not _zero_bias(c) and float(attrs.get("beta", 1.0)) != 0.0:
        inputs.append(imp.tensor(c, where))
    imp.emit(name, _group_of(node), "matmul", inputs, [node.output[0]], transpose_a=ta, transpose_b=tb)


def _h_matmul(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    a = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    b, tb = imp.weight_view(ins[1], where)  # type: ignore[arg-type]
    group = _group_of(node)
    out = node.output[0]
    if len(b.shape) == 1:  # (..., K) @ (K,) -> (...,)
        y = imp.emit(name, group, "matmul",
                     [a, imp.emit(f"{name}/as_matrix", group, "reshape", [b], [f"{out}::b"], shape=(b.shape[0], 1))[0]],
                     [f"{out}::mat"])[0]
        imp.emit(f"{name}/squeeze", group, "reshape", [y], [out], shape=y.shape[:-1])
        return
    imp.emit(name, group, "matmul", [a, b], [out], transpose_b=tb)


def _h_batchnorm(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    inputs = [imp.tensor(i, where) for i in ins[:3] if i is not None]
    training = bool(attrs.get("training_mode", 0))
    imp.emit(name, _group_of(node), "batchnorm", inputs, [node.output[0]], training=training)


def _h_layernorm(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    ws = [imp.tensor(i, where) for i in ins[1:3] if i is not None]
    if any(o for o in node.output[1:]):
        raise UnsupportedOpError(f"{where}: mean/inv-std-dev outputs are used; expected only Y (inference)")
    axis = int(attrs.get("axis", -1)) % len(x.shape)
    group = _group_of(node)
    if axis == len(x.shape) - 1:
        imp.emit(name, group, "layernorm", [x, *ws], [node.output[0]])
        return
    flat = (*x.shape[:axis], math.prod(x.shape[axis:]))
    x2 = imp.emit(f"{name}/flatten", group, "reshape", [x], [f"{node.output[0]}::in"], shape=flat)[0]
    y2 = imp.emit(name, group, "layernorm", [x2, *ws], [f"{node.output[0]}::out"])[0]
    imp.emit(f"{name}/unflatten", group, "reshape", [y2], [node.output[0]], shape=x.shape)


def _h_softmax(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    axis = int(attrs.get("axis", -1 if imp.opset >= 13 else 1))
    imp.emit(name, _group_of(node), "softmax", [x], [node.output[0]], axis=axis)


def _h_pool(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    if len(x.shape) != 4:
        raise UnsupportedOpError(f"{where}: pooling over {len(x.shape) - 2} spatial axes; expected 2-D (N,C,H,W)")
    if len(node.output) > 1 and node.output[1]:
        raise UnsupportedOpError(f"{where}: the indices output is used; expected only Y")
    mode = "max" if "Max" in node.op_type else "avg"
    group = _group_of(node)
    if node.op_type.startswith("Global"):
        imp.emit(name, group, "pool2d", [x], [node.output[0]], mode=mode, output_size=(1, 1))
        return
    kernel = [int(k) for k in attrs["kernel_shape"]]
    stride, dil, pads = _window_attrs(x.shape, kernel, attrs)
    if any(d != 1 for d in dil):
        raise UnsupportedOpError(f"{where}: dilated pooling; got dilations {tuple(dil)}; expected 1")
    imp.emit(name, group, "pool2d", [x], [node.output[0]], mode=mode, kernel=tuple(kernel), stride=tuple(stride),
             padding=tuple(pads), ceil_mode=bool(attrs.get("ceil_mode", 0)))


def _h_reduce(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    if len(ins) > 1 and ins[1] is not None:
        axes: list[int] | None = imp.const_ints(ins[1], where, "axes")
    else:
        axes = [int(a) for a in attrs["axes"]] if "axes" in attrs else None
    if not axes:
        if axes is not None and attrs.get("noop_with_empty_axes", 0):
            imp.alias(node.output[0], x)
            return
        axes = list(range(len(x.shape)))
    op = node.op_type[len("Reduce"):].lower()
    imp.emit(name, _group_of(node), "reduction", [x], [node.output[0]], op=op, axes=tuple(axes),
             keepdims=bool(attrs.get("keepdims", 1)))


def _h_reshape_like(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    op_type = node.op_type
    if op_type == "Reshape":
        shape = _reshape_target(x.shape, imp.const_ints(ins[1], where, "the target shape"), bool(attrs.get("allowzero", 0)))
    elif op_type == "Flatten":
        axis = int(attrs.get("axis", 1)) % (len(x.shape) + 1)
        shape = [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])]
    elif op_type == "Squeeze":
        axes = imp.const_ints(ins[1], where, "axes") if len(ins) > 1 and ins[1] is not None else attrs.get("axes")
        shape = _squeeze_shape(x.shape, axes)
    else:  # Unsqueeze
        axes = imp.const_ints(ins[1], where, "axes") if len(ins) > 1 and ins[1] is not None else list(attrs["axes"])
        shape = _unsqueeze_shape(x.shape, axes)
    if tuple(shape) == x.shape:
        imp.alias(node.output[0], x)
        return
    imp.emit(name, _group_of(node), "reshape", [x], [node.output[0]], shape=tuple(shape))


def _h_transpose(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    perm = tuple(int(p) for p in attrs.get("perm", reversed(range(len(x.shape)))))
    if perm == tuple(range(len(x.shape))):
        imp.alias(node.output[0], x)
        return
    imp.emit(name, _group_of(node), "transpose", [x], [node.output[0]], perm=perm)


def _h_concat(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    axis = int(attrs["axis"])
    parts = [imp.tensor(i, where) for i in ins if i is not None]
    rank = len(parts[0].shape)
    ax = axis % rank
    nonempty = [t for t in parts if t.shape[ax] > 0]
    if len(nonempty) == 1:
        imp.alias(node.output[0], nonempty[0])
        return
    imp.emit(name, _group_of(node), "concat", nonempty or parts, [node.output[0]], axis=axis)


def _h_split(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    axis = int(attrs.get("axis", 0)) % len(x.shape)
    split_in = [ins[0], _const_of("split", np.asarray(imp.const_ints(ins[1], where, "split sizes")))] \
        if len(ins) > 1 and ins[1] is not None else [ins[0]]
    sizes = _split_sizes(x.shape[axis], [None if not isinstance(v, _Const) else v.value for v in split_in], attrs,
                         len(node.output))
    outs = [o or f"{name}:{k}" for k, o in enumerate(node.output)]
    if len(sizes) == 1:
        imp.alias(outs[0], x)
        return
    imp.emit(name, _group_of(node), "split", [x], outs, axis=axis, sizes=tuple(sizes))


def _h_split_to_sequence(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None],
                         attrs: dict[str, Any]) -> None:
    x = ins[0]
    assert x is not None
    axis = int(attrs.get("axis", 0)) % len(x.shape)
    dim = x.shape[axis]
    keep = True
    if len(ins) > 1 and ins[1] is not None:
        split = imp.const_ints(ins[1], where, "split sizes")
        if isinstance(ins[1], _Const) and not ins[1].shape:  # a scalar: chunks of that size
            sizes = [min(split[0], dim - i) for i in range(0, dim, split[0])]
        else:
            sizes = split
    else:
        sizes, keep = [1] * dim, bool(attrs.get("keepdims", 1))
    parts: list[_Value] = []
    if isinstance(x, _Const) and not x.weight_like:
        for k, arr in enumerate(np.split(x.value, np.cumsum(sizes)[:-1], axis=axis)):
            parts.append(_const_of(f"{node.output[0]}[{k}]", arr if keep else np.squeeze(arr, axis)))
    else:
        xs = imp.tensor(x, where)
        group = _group_of(node)
        pieces = imp.emit(name, group, "split", [xs], [f"{node.output[0]}[{k}]" for k in range(len(sizes))],
                          axis=axis, sizes=tuple(sizes)) if len(sizes) > 1 else [xs]
        for k, p in enumerate(pieces):
            if not keep:
                p = imp.emit(f"{name}/squeeze{k}", group, "reshape", [p], [f"{node.output[0]}[{k}]::sq"],
                             shape=tuple(s for i, s in enumerate(p.shape) if i != axis))[0]
            parts.append(p)
    imp.env[node.output[0]] = parts  # type: ignore[assignment]


def _h_slice(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    vals = [ins[0]] + [np.asarray(imp.const_ints(v, where, "slice bounds")) if v is not None else None for v in ins[1:]]
    sl = _slice_spec(x.shape, *_slice_args(vals, attrs))
    shape = tuple(len(range(*s.indices(d))) for s, d in zip(sl, x.shape, strict=True))
    if shape == x.shape:
        imp.alias(node.output[0], x)
        return
    imp.emit(name, _group_of(node), "slice", [x], [node.output[0]], shape=shape)


def _h_gather(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    data, idx = ins[0], ins[1]
    assert data is not None and idx is not None
    axis = int(attrs.get("axis", 0)) % len(data.shape)
    group = _group_of(node)
    out = node.output[0]
    if axis == 0 and len(data.shape) == 2 and (isinstance(data, _Const) and data.weight_like or isinstance(idx, TensorSpec)):
        # rows of a table: an embedding lookup (parameters when the table is an initializer)
        imp.emit(name, group, "embedding", [imp.tensor(idx, where), imp.tensor(data, where)], [out])
        return
    if isinstance(idx, _Const):
        x = imp.tensor(data, where)
        n = idx.numel
        final = (*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])
        mid = (*x.shape[:axis], n, *x.shape[axis + 1:])
        if mid == final:
            imp.emit(name, group, "slice", [x], [out], shape=mid)
            return
        y = imp.emit(name, group, "slice", [x], [f"{out}::rows"], shape=mid)[0]
        imp.emit(f"{name}/reshape", group, "reshape", [y], [out], shape=final)
        return
    if imp.strict:
        raise UnsupportedOpError(f"{where}: gather of computed indices along axis {axis} of a rank-{len(data.shape)} "
                                 "tensor; expected rows of a 2-D table, or constant indices (strict=False costs it by bytes)")
    imp.emit_generic(node, name, where, ins)


def _h_expand(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    target = tuple(int(s) for s in np.broadcast_shapes(x.shape, tuple(imp.const_ints(ins[1], where, "the target shape"))))
    if target == x.shape:
        imp.alias(node.output[0], x)
        return
    imp.emit(name, _group_of(node), "expand", [x], [node.output[0]], shape=target)


def _h_rnn(imp: _Importer, node: Any, name: str, where: str, ins: list[_Value | None], attrs: dict[str, Any]) -> None:
    kind = node.op_type.lower()
    if int(attrs.get("layout", 0)) != 0:
        raise UnsupportedOpError(f"{where}: layout={attrs['layout']}; expected layout 0 (sequence first)")
    x = imp.tensor(ins[0], where)  # type: ignore[arg-type]
    w, r = imp.tensor(ins[1], where), imp.tensor(ins[2], where)  # type: ignore[arg-type]
    inputs = [x, w, r]
    if len(ins) > 3 and ins[3] is not None:
        inputs.append(imp.tensor(ins[3], where))
    direction = attrs.get("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = int(attrs["hidden_size"])
    outs = list(node.output) + [""] * (3 - len(node.output))
    ir_outs = [f"{name}:y", outs[1] or f"{name}:h"] + ([outs[2] or f"{name}:c"] if kind == "lstm" else [])
    group = _group_of(node)
    y = imp.emit(name, group, kind, inputs, ir_outs, hidden=hidden, bidirectional=dirs == 2,
                 direction=direction)[0]
    if outs[0]:  # ONNX Y is (T, D, B, H)
        t, b = x.shape[0], x.shape[1]
        imp.emit(f"{name}/y", group, "reshape", [y], [outs[0]], shape=(t, dirs, b, hidden))


_Handler = Callable[[_Importer, Any, str, str, list, dict], None]
_HANDLERS: dict[str, _Handler] = {
    **{k: _h_elementwise for k in _ELEMENTWISE}, **{k: _h_predicate for k in _PREDICATES},
    "Identity": _h_alias, "Dropout": _h_alias,
    "Conv": _h_conv, "Gemm": _h_gemm, "MatMul": _h_matmul,
    "BatchNormalization": _h_batchnorm, "LayerNormalization": _h_layernorm,
    "Softmax": _h_softmax, "LogSoftmax": _h_softmax,
    "MaxPool": _h_pool, "AveragePool": _h_pool, "GlobalAveragePool": _h_pool, "GlobalMaxPool": _h_pool,
    "ReduceMean": _h_reduce, "ReduceSum": _h_reduce, "ReduceMax": _h_reduce, "ReduceMin": _h_reduce,
    "Reshape": _h_reshape_like, "Flatten": _h_reshape_like, "Squeeze": _h_reshape_like, "Unsqueeze": _h_reshape_like,
    "Transpose": _h_transpose, "Concat": _h_concat, "Split": _h_split, "Slice": _h_slice, "Gather": _h_gather,
    "Expand": _h_expand, "LSTM": _h_rnn, "GRU": _h_rnn, "SplitToSequence": _h_split_to_sequence,
}

#: ONNX operator types the importer maps (others: UnsupportedOpError, or generic with strict=False).
SUPPORTED_OPS: list[str] = sorted({*_HANDLERS, "Constant", "Shape", "Size", "SequenceAt"})
#: ONNX operator types evaluated only on import-time constants (shape and mask computations).
CONSTANT_ONLY_OPS: list[str] = sorted(set(_EVAL) - set(SUPPORTED_OPS))


def import_onnx(
    path_or_model: str | Path | Any,
    *,
    batch: int | None = None,
    dtype: str | DType | None = None,
    strict: bool = True,
    dims: Mapping[str, int] | None = None,
) -> OpGraph:
    """Import an ONNX model (a file path or an ``onnx.ModelProto``) as an :class:`OpGraph`.

    Parameters
    ----------
    path_or_model
        Path to a ``.onnx`` file, or a loaded ``onnx.ModelProto``.
    batch
        Size bound to a symbolic leading axis of the graph inputs (default 1). A model exported
        with a fixed batch axis of another size is an error (its reshape constants embed the size).
    dtype
        Storage and compute dtype of every floating-point tensor (default: the file's types).
    strict
        An operator without a mapping is an :class:`UnsupportedOpError` (True) or a ``generic`` op
        costed by its tensor bytes and listed in a warning (False).
    dims
        Sizes of other symbolic input axes, by their ``dim_param`` name (e.g. ``{"seq": 128}``).

    Returns
    -------
    OpGraph
        The validated graph; ``meta`` holds ``source="onnx"``, ``batch``, ``opset`` and, with
        ``strict=False``, the ``generic_ops`` it contains.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        The file is not a valid ONNX model, or a shape is dynamic; one line naming the file.
    UnsupportedOpError
        ``strict=True`` and a node has an unmapped operator; the message names node and op type.
    """
    try:
        import onnx  # noqa: F401
    except ModuleNotFoundError:
        raise ModuleNotFoundError("importing ONNX models needs the onnx package; expected `pip install nodeperf[onnx]`") from None
    if batch is not None and (not isinstance(batch, int) or batch < 1):
        raise ValueError(f"import_onnx: batch must be a positive integer; got {batch!r}")
    dt = parse_dtype(dtype, where="import_onnx: dtype") if dtype is not None else None
    model, label = _load(path_or_model)
    return _Importer(model, label, batch, dt, strict, dims or {}).run()
