"""Import a PyTorch module into an OpGraph by tracing it to ATen operators on fake or meta tensors.

How the import works
--------------------
* The module is traced with :func:`torch.export.export` (non-strict); when that fails, with
  ``make_fx`` over :func:`torch.func.functional_call` (an FX trace at the ATen level). Either way
  tensors are fake or meta: no real compute runs, so a model built under ``torch.device("meta")``
  (e.g. from a ``transformers`` config, without weights) imports in seconds.
* Every ATen node is mapped to an IR kind (``aten.convolution``/``conv2d`` -> ``conv2d``,
  ``linear``/``addmm``/``mm``/``bmm``/``matmul`` -> ``matmul``, ``scaled_dot_product_attention`` ->
  ``attention``, ``layer_norm`` -> ``layernorm``, views -> ``reshape``/``slice``/``split``...).
  Output shapes come from the IR semantics and are checked against the traced shapes.
* Parameters become :attr:`~workloads.ir.Role.WEIGHT` tensors named by their module path; tied
  parameters (e.g. GPT-2's ``lm_head.weight`` and ``transformer.wte.weight``) are one tensor, so
  they are counted once. Transposed views of 2-D weights (``weight.t()``) set the matmul's
  transpose flag instead of becoming ops.
* Nodes that depend only on constants (``arange``, ``ones``, masks built from positions) are
  evaluated on the CPU when small and never become costed ops. A constant attention mask that is
  exactly causal becomes ``causal=True``; an all-true mask is dropped.
* An operator without a mapping is an :class:`~workloads.ir.UnsupportedOpError` naming the node;
  with ``strict=False`` it becomes a ``generic`` op costed by its tensor bytes, listed in a warning.

Example
-------
>>> import torch                                              # doctest: +SKIP
>>> from transformers import GPT2Config, GPT2LMHeadModel      # doctest: +SKIP
>>> with torch.device("meta"):                                # doctest: +SKIP
...     model = GPT2LMHeadModel(GPT2Config())
>>> ids = torch.zeros((1, 128), dtype=torch.long, device="meta")  # doctest: +SKIP
>>> g = import_module(model, (ids,), kwargs={"use_cache": False})  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeperf.suggest import did_you_mean
from workloads.dtypes import DType, parse_dtype
from workloads.importers.naming import unique_name
from workloads.ir import Attrs, GraphError, Op, OpGraph, Role, TensorSpec, UnsupportedOpError
from workloads.semantics import semantics_of

__all__ = ["import_module", "SUPPORTED_ATEN_OPS"]

log = logging.getLogger(__name__)

#: Constant subgraph results up to this many elements are evaluated (to recognise causal masks).
_EVAL_MAX_NUMEL = 1 << 24

_TORCH_DTYPES = {
    "float32": DType.FP32, "float64": DType.FP64, "float16": DType.FP16, "bfloat16": DType.BF16,
    "float8_e4m3fn": DType.FP8_E4M3, "float8_e4m3fnuz": DType.FP8_E4M3, "float8_e5m2": DType.FP8_E5M2,
    "float8_e5m2fnuz": DType.FP8_E5M2, "int64": DType.INT64, "int32": DType.INT32, "int8": DType.INT8,
    "uint8": DType.INT8, "bool": DType.BOOL, "uint32": DType.INT32, "uint64": DType.INT64,
}

_UNARY = {
    "relu": "relu", "gelu": "gelu", "silu": "silu", "tanh": "tanh", "sigmoid": "sigmoid", "exp": "exp", "log": "log",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "neg": "neg", "abs": "abs", "reciprocal": "reciprocal", "erf": "erf",
    "hardtanh": "clip", "relu6": "relu6", "hardswish": "hardswish", "hardsigmoid": "hardsigmoid",
    "leaky_relu": "leaky_relu", "softplus": "softplus", "clamp": "clip", "clamp_min": "clip", "clamp_max": "clip",
    "square": "square", "mish": "softplus",
}
_BINARY = {"add": "add", "sub": "sub", "rsub": "sub", "mul": "mul", "div": "div", "pow": "pow",
           "maximum": "max", "minimum": "min", "where": "where", "masked_fill": "where"}
_ALIASES = {"contiguous", "clone", "alias", "detach", "lift_fresh_copy", "dropout", "feature_dropout", "alpha_dropout",
            "native_dropout", "type_as", "_to_copy", "to", "_assert_tensor_metadata"}
_VIEWS = {"view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze", "view_as",
          "reshape_as", "expand", "expand_as", "broadcast_to", "t", "transpose", "permute", "numpy_T", "mT",
          "select", "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind", "cat", "concat", "stack"}
_SKIP = {"_assert_scalar", "_assert_async", "sym_constrain_range", "sym_constrain_range_for_size",
         "_assert_tensor_metadata", "sym_size", "sym_numel", "sym_stride", "scalar_tensor_assert"}
_SHAPE_ONLY = {"new_ones", "new_zeros", "new_full", "new_empty", "zeros_like", "ones_like", "full_like",
               "empty_like", "rand_like", "randn_like"}


@dataclass
class _TConst:
    """A value computed from constants only (arange, masks...): ``value`` is a CPU tensor or None."""

    name: str
    shape: tuple[int, ...]
    dtype: Any  # torch.dtype
    value: Any = None


@dataclass(frozen=True)
class _WView:
    """A parameter, possibly seen through a 2-D transpose (``weight.t()``)."""

    spec: TensorSpec
    transposed: bool = False


def _packet(target: Any) -> str:
    """'conv2d' for torch.ops.aten.conv2d.default; '' for non-ATen targets."""
    s = str(target)
    if s.startswith("aten."):
        return s.split(".")[1]
    return getattr(target, "__name__", s)


class _Importer:
    def __init__(self, module: Any, label: str, dtype: DType | None, strict: bool) -> None:
        import torch

        self.torch = torch
        self.module = module
        self.label = label
        self.dtype = dtype
        self.strict = strict
        self.env: dict[str, Any] = {}
        self.ops: list[Op] = []
        self.op_names: set[str] = set()
        self.consts: dict[str, TensorSpec] = {}
        self.generic: list[tuple[str, str]] = []
        self.canonical: dict[int, str] = {}
        for pname, p in module.named_parameters():
            self.canonical.setdefault(id(p), pname)
        self.weights: dict[str, TensorSpec] = {}

    # --- values -------------------------------------------------------------------------------------
    def ir_dtype(self, tdt: Any, where: str) -> DType:
        name = str(tdt).replace("torch.", "")
        dt = _TORCH_DTYPES.get(name)
        if dt is None:
            raise ValueError(f"{where}: dtype {name} has no IR dtype; expected one of {', '.join(sorted(_TORCH_DTYPES))}")
        return self.dtype if (self.dtype is not None and dt.is_float) else dt

    def weight(self, param: Any, fqn: str) -> _WView:
        name = self.canonical.get(id(param), fqn)
        spec = self.weights.get(name)
        if spec is None:
            spec = TensorSpec(name, tuple(int(s) for s in param.shape), self.ir_dtype(param.dtype, f"parameter {name!r}"),
                              Role.WEIGHT)
            self.weights[name] = spec
        return _WView(spec)

    def tensor(self, v: Any, where: str) -> TensorSpec:
        if isinstance(v, TensorSpec):
            return v
        if isinstance(v, _WView):
            if v.transposed:
                raise GraphError(f"{where}: a transposed weight {v.spec.name!r} used outside a matmul; expected "
                                 "weight.t() to feed linear/mm/addmm/matmul")
            return v.spec
        if isinstance(v, _TConst):
            t = self.consts.get(v.name)
            if t is None:
                t = TensorSpec(v.name, v.shape, self.ir_dtype(v.dtype, where), Role.ACTIVATION)
                self.consts[v.name] = t
            return t
        raise GraphError(f"{where}: expected a tensor argument; got {type(v).__name__} {v!r}")

    @staticmethod
    def shape_of(v: Any) -> tuple[int, ...]:
        if isinstance(v, _WView):
            s = v.spec.shape
            return (s[1], s[0]) if v.transposed else s
        return tuple(v.shape)

    def resolve(self, a: Any) -> Any:
        torch = self.torch
        if isinstance(a, torch.fx.Node):
            return self.env[a.name]
        if isinstance(a, list | tuple):
            return type(a)(self.resolve(x) for x in a)
        return a

    # --- emitting -------------------------------------------------------------------------------------
    def unique(self, name: str) -> str:
        return unique_name(name, self.op_names)

    def emit(self, node: Any, kind: str, inputs: Sequence[TensorSpec], *, out_names: Sequence[str] | None = None,
             vals: Sequence[Any] | None = None, suffix: str = "", **attrs: Any) -> list[TensorSpec]:
        """Add an op; output shapes from the IR semantics, checked against the traced ones (``vals``)."""
        where = f"{self.label}: node {node.name!r} ({node.target})"
        a = Attrs(attrs)
        try:
            outs = semantics_of(kind, where=where).infer(tuple(inputs), a)
        except GraphError as exc:
            raise GraphError(f"{where}: {exc}") from None
        names = list(out_names) if out_names else [node.name + suffix] if len(outs) == 1 else [
            f"{node.name}{suffix}:{i}" for i in range(len(outs))]
        specs = []
        for i, (shape, dt) in enumerate(outs):
            shape = tuple(int(s) for s in shape)
            val = vals[i] if vals is not None and i < len(vals) else None
            if val is not None and tuple(val.shape) != shape:
                raise GraphError(f"{where}: {kind} gives shape {shape} where the trace has {tuple(val.shape)}; "
                                 "expected equal (an importer mapping is wrong)")
            odt = self.ir_dtype(val.dtype, where) if val is not None else (dt or inputs[0].dtype)
            specs.append(TensorSpec(names[i], shape, odt, Role.ACTIVATION))
        self.ops.append(Op(self.unique(node.name + suffix), kind, tuple(inputs), tuple(specs), a, self.group(node)))
        return specs

    @staticmethod
    def group(node: Any) -> str:
        stack = node.meta.get("nn_module_stack")
        if not stack:
            return ""
        path = list(stack.values())[-1][0]
        return str(path).replace("L__self__.", "").replace("L__self__", "")

    # --- the walk ---------------------------------------------------------------------------------------
    def run(self, gm: Any, placeholders: Mapping[str, Any], meta: dict[str, Any]) -> OpGraph:
        torch = self.torch
        for node in gm.graph.nodes:
            where = f"{self.label}: node {node.name!r} ({node.target})"
            if node.op == "placeholder":
                self.env[node.name] = placeholders[node.name]
            elif node.op == "get_attr":
                obj = _getattr_path(gm, str(node.target))
                self.env[node.name] = self.from_object(obj, str(node.target), where)
            elif node.op == "call_function":
                self.call(node, where)
            elif node.op in ("call_module", "call_method"):
                raise UnsupportedOpError(f"{where}: {node.op} nodes; expected an ATen-level trace")
        del torch
        if self.generic:
            listed = ", ".join(f"{t} (node {n!r})" for t, n in self.generic)
            log.warning("%s: %d operator(s) without semantics costed by their tensor bytes only: %s",
                        self.label, len(self.generic), listed)
            meta["generic_ops"] = [f"{t}:{n}" for t, n in self.generic]
        return OpGraph(self.label, self.ops, meta)

    def from_object(self, obj: Any, fqn: str, where: str) -> Any:
        torch = self.torch
        if isinstance(obj, torch.nn.Parameter):
            return self.weight(obj, fqn)
        if isinstance(obj, torch.Tensor):
            value = None if obj.device.type == "meta" or obj.numel() > _EVAL_MAX_NUMEL else obj.detach().cpu()
            return _TConst(fqn, tuple(obj.shape), obj.dtype, value)
        return obj

    def is_const(self, node: Any, args: Any) -> bool:
        flat = _flatten(args)
        tensors = [x for x in flat if isinstance(x, TensorSpec | _WView | _TConst)]
        if _packet(node.target) in _SHAPE_ONLY:
            return not any(isinstance(x, _WView) for x in tensors[1:]) and all(
                isinstance(x, _TConst) for x in tensors[1:])
        return all(isinstance(x, _TConst) for x in tensors)

    def evaluate(self, node: Any, args: Any, kwargs: Any) -> Any:
        """Run a constant node on the CPU with real tensors; None when it cannot or should not."""
        torch = self.torch
        val = node.meta.get("val")
        if any(isinstance(v, torch.Tensor) and v.numel() > _EVAL_MAX_NUMEL for v in _flatten(val)):
            return None

        def real(x: Any) -> Any:
            if isinstance(x, _TConst):
                if x.value is None:
                    raise LookupError
                return x.value
            if isinstance(x, TensorSpec):  # shape-only argument of new_ones/zeros_like...
                return torch.empty(x.shape)
            if isinstance(x, torch.device):
                return torch.device("cpu")
            if isinstance(x, list | tuple):
                return type(x)(real(y) for y in x)
            return x

        try:
            r_args = real(args)
            r_kwargs = {k: real(v) for k, v in kwargs.items()}
            if "device" in r_kwargs:
                r_kwargs["device"] = torch.device("cpu")
            with torch.no_grad():
                return node.target(*r_args, **r_kwargs)
        except Exception as exc:  # a constant we cannot evaluate stays symbolic
            log.debug("%s: constant node %s not evaluated: %s", self.label, node.name, exc)
            return None

    def call(self, node: Any, where: str) -> None:
        torch = self.torch
        name = _packet(node.target)
        if node.target is operator.getitem:
            seq, idx = self.resolve(node.args[0]), node.args[1]
            self.env[node.name] = seq[idx] if seq is not None else None
            return
        base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
        if base in _SKIP:
            self.env[node.name] = None
            return
        args, kwargs = self.resolve(node.args), {k: self.resolve(v) for k, v in node.kwargs.items()}
        val = node.meta.get("val")
        if not str(node.target).startswith("aten."):
            if all(not isinstance(x, TensorSpec | _WView | _TConst) for x in _flatten(args)):
                self.env[node.name] = val  # symbolic-int arithmetic and friends: plain values
                return
        if self.is_const(node, (args, kwargs)) and (
                not isinstance(val, torch.Tensor | list | tuple) or base not in ("dropout",)):
            res = self.evaluate(node, args, kwargs)
            self.env[node.name] = _pack_const(torch, node.name, val, res)
            return
        handler = _HANDLERS.get(base)
        if handler is None:
            if self.strict:
                hint = did_you_mean(base, SUPPORTED_ATEN_OPS)
                raise UnsupportedOpError(f"{where}: unsupported operator; expected one of "
                                         f"{', '.join(SUPPORTED_ATEN_OPS)}{hint} (or strict=False to cost it by its "
                                         "tensor bytes)")
            self.env[node.name] = self.emit_generic(node, base, args, kwargs, val)
            return
        try:
            out = handler(self, node, base, args, kwargs, val)
        except (KeyError, IndexError, TypeError) as exc:
            raise GraphError(f"{where}: cannot map its arguments ({exc}); expected the ATen signature") from None
        self.env[node.name] = out

    def emit_generic(self, node: Any, base: str, args: Any, kwargs: Any, val: Any) -> Any:
        torch = self.torch
        where = f"{self.label}: node {node.name!r} ({node.target})"
        inputs = [self.tensor(x, where) for x in _flatten((args, kwargs)) if isinstance(x, TensorSpec | _WView | _TConst)]
        vals = [v for v in _flatten(val) if isinstance(v, torch.Tensor)]
        shapes = [tuple(int(s) for s in v.shape) for v in vals]
        dtypes = [self.ir_dtype(v.dtype, where).value for v in vals]
        outs = self.emit(node, "generic", inputs, vals=vals, op_type=str(node.target), output_shapes=shapes,
                         output_dtypes=dtypes)
        self.generic.append((str(node.target), node.name))
        return outs[0] if isinstance(val, torch.Tensor) else tuple(outs)


def _getattr_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, list | tuple):
        return [y for z in x for y in _flatten(z)]
    if isinstance(x, dict):
        return [y for z in x.values() for y in _flatten(z)]
    return [x]


def _pack_const(torch: Any, name: str, val: Any, res: Any) -> Any:
    if isinstance(val, torch.Tensor):
        value = res if isinstance(res, torch.Tensor) else None
        return _TConst(name, tuple(int(s) for s in val.shape), val.dtype, value)
    if isinstance(val, list | tuple):
        rs = list(res) if isinstance(res, list | tuple) else [None] * len(val)
        return type(val)(_pack_const(torch, f"{name}:{i}", v, r) for i, (v, r) in enumerate(zip(val, rs, strict=False)))
    return val


# ------------------------------------------------------------------------------------------------
# handlers: (importer, node, base name, resolved args, kwargs, traced value) -> env value


def _arg(args: Sequence[Any], kwargs: Mapping[str, Any], i: int, key: str, default: Any = None) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(key, default)


def _is_tensor(v: Any) -> bool:
    return isinstance(v, TensorSpec | _WView | _TConst)


def _mm_operand(imp: _Importer, v: Any, where: str) -> tuple[TensorSpec, bool]:
    if isinstance(v, _WView):
        return v.spec, v.transposed
    return imp.tensor(v, where), False


def _h_linear(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    where = f"{imp.label}: node {node.name!r}"
    x = imp.tensor(args[0], where)
    w, tw = _mm_operand(imp, args[1], where)
    b = _arg(args, kwargs, 2, "bias")
    inputs = [x, w] + ([imp.tensor(b, where)] if b is not None else [])
    return imp.emit(node, "matmul", inputs, vals=[val], transpose_b=not tw)[0]


def _h_matmul(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    where = f"{imp.label}: node {node.name!r}"
    if base in ("addmm", "baddbmm"):
        bias, a, b = args[0], args[1], args[2]
    else:
        bias, a, b = None, args[0], args[1]
    x, ta = _mm_operand(imp, a, where)
    w, tb = _mm_operand(imp, b, where)
    inputs = [x, w] + ([imp.tensor(bias, where)] if bias is not None else [])
    return imp.emit(node, "matmul", inputs, vals=[val], transpose_a=ta, transpose_b=tb)[0]


def _conv_padding(padding: Any, w_shape: Sequence[int], dil: Sequence[int]) -> tuple[int, ...]:
    nd = len(w_shape) - 2
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * (2 * nd)
        begin, end = [], []
        for k, d in zip(w_shape[2:], dil, strict=True):
            total = d * (k - 1)
            begin.append(total // 2)
            end.append(total - total // 2)
        return tuple(begin + end)
    p = [int(x) for x in (padding if isinstance(padding, list | tuple) else [padding] * nd)]
    if len(p) == 1:
        p = p * nd
    return tuple(p + p)


def _h_conv(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    where = f"{imp.label}: node {node.name!r} ({node.target})"
    x, w = imp.tensor(args[0], where), imp.tensor(args[1], where)
    b = _arg(args, kwargs, 2, "bias")
    nd = len(w.shape) - 2

    def tup(v: Any, default: int) -> tuple[int, ...]:
        if v is None:
            return (default,) * nd
        v = [int(y) for y in (v if isinstance(v, list | tuple) else [v])]
        return tuple(v * nd if len(v) == 1 else v)

    stride = tup(_arg(args, kwargs, 3, "stride"), 1)
    if base == "convolution":
        padding, dil = _arg(args, kwargs, 4, "padding", 0), tup(_arg(args, kwargs, 5, "dilation"), 1)
        if _arg(args, kwargs, 6, "transposed", False):
            raise UnsupportedOpError(f"{where}: transposed convolution; expected a forward convolution")
        groups = int(_arg(args, kwargs, 8, "groups", 1))
    else:
        padding, dil = _arg(args, kwargs, 4, "padding", 0), tup(_arg(args, kwargs, 5, "dilation"), 1)
        groups = int(_arg(args, kwargs, 6, "groups", 1))
    if nd not in (1, 2):
        raise UnsupportedOpError(f"{where}: {nd}-D convolution; expected 1-D or 2-D (conv1d, conv2d)")
    inputs = [x, w] + ([imp.tensor(b, where)] if b is not None else [])
    return imp.emit(node, f"conv{nd}d", inputs, vals=[val], stride=stride, padding=_conv_padding(padding, w.shape, dil),
                    dilation=dil, groups=groups)[0]


def _causal_mask(torch: Any, mask: Any, sq: int, skv: int) -> str:
    """'causal', 'all' or 'other' for a constant mask value (bool, or additive float)."""
    if mask is None:
        return "other"
    allowed = mask if mask.dtype == torch.bool else (mask == 0)
    if bool(allowed.all()):
        return "all"
    i = torch.arange(sq).view(sq, 1)
    j = torch.arange(skv).view(1, skv)
    causal = j <= i + (skv - sq)
    return "causal" if bool((allowed == causal).all()) else "other"


def _h_sdpa(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    torch = imp.torch
    where = f"{imp.label}: node {node.name!r}"
    q, k, v = (imp.tensor(t, where) for t in args[:3])
    if base == "scaled_dot_product_attention":
        mask = _arg(args, kwargs, 3, "attn_mask")
        causal = bool(_arg(args, kwargs, 5, "is_causal", False))
    else:  # _scaled_dot_product_*_attention*(q, k, v, dropout_p, is_causal, attn_mask=...)
        mask = kwargs.get("attn_mask")
        causal = bool(_arg(args, kwargs, 4, "is_causal", False))
    inputs = [q, k, v]
    if mask is not None:
        kind = _causal_mask(torch, mask.value, q.shape[2], k.shape[2]) if isinstance(mask, _TConst) else "other"
        if kind == "causal":
            causal = True
        elif kind == "other":
            inputs.append(imp.tensor(mask, where))
    out_val = val if isinstance(val, torch.Tensor) else val[0]
    y = imp.emit(node, "attention", inputs, vals=[out_val], causal=causal)[0]
    return y if isinstance(val, torch.Tensor) else (y,) + (None,) * (len(val) - 1)


def _h_layernorm(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    torch = imp.torch
    where = f"{imp.label}: node {node.name!r}"
    x = imp.tensor(args[0], where)
    ws = [imp.tensor(w, where) for w in (_arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 3, "bias"))
          if w is not None]
    out_val = val if isinstance(val, torch.Tensor) else val[0]
    nshape = [int(s) for s in args[1]]
    kind = "rmsnorm" if base in ("rms_norm", "_fused_rms_norm") else "layernorm"
    if kind == "rmsnorm":
        ws = ws[:1]
    if len(nshape) == 1:
        y = imp.emit(node, kind, [x, *ws], vals=[out_val])[0]
    else:
        lead = x.shape[: len(x.shape) - len(nshape)]
        x2 = imp.emit(node, "reshape", [x], suffix="/flatten", shape=(*lead, math.prod(nshape)))[0]
        y2 = imp.emit(node, kind, [x2, *ws], suffix="/norm")[0]
        y = imp.emit(node, "reshape", [y2], vals=[out_val], shape=x.shape)[0]
    return y if isinstance(val, torch.Tensor) else (y,) + (None,) * (len(val) - 1)


def _h_batchnorm(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    torch = imp.torch
    where = f"{imp.label}: node {node.name!r}"
    x = imp.tensor(args[0], where)
    ws = [imp.tensor(w, where) for w in args[1:3] if w is not None]
    if base == "_native_batch_norm_legit_no_training":
        training = False
    elif base == "_native_batch_norm_legit":
        training = bool(args[5] if len(args) > 5 and not _is_tensor(args[3]) else args[3] if not _is_tensor(args[3]) else args[5])
    else:
        training = bool(_arg(args, kwargs, 5, "training", False))
    out_val = val if isinstance(val, torch.Tensor) else val[0]
    y = imp.emit(node, "batchnorm", [x, *ws], vals=[out_val], training=training)[0]
    return y if isinstance(val, torch.Tensor) else (y,) + (None,) * (len(val) - 1)


def _elementwise_out(imp: _Importer, node: Any, fn: str, tensors: list[TensorSpec], val: Any) -> Any:
    return imp.emit(node, "elementwise", tensors, vals=[val], op=fn)[0]


def _h_unary(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    where = f"{imp.label}: node {node.name!r}"
    return _elementwise_out(imp, node, _UNARY[base], [imp.tensor(args[0], where)], val)


def _h_binary(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    torch = imp.torch
    where = f"{imp.label}: node {node.name!r}"
    operands = [a for a in list(args) + list(kwargs.values()) if _is_tensor(a)]
    # constants with one element are scalars: folded into the op
    tensors = [imp.tensor(a, where) for a in operands if not (isinstance(a, _TConst) and math.prod(a.shape) == 1)]
    if not tensors:
        tensors = [imp.tensor(operands[0], where)]
    out_shape = tuple(val.shape)
    if base in ("where", "masked_fill"):
        tensors = tensors[:3]
    y = _elementwise_out(imp, node, _BINARY[base], tensors, val) if _broadcasts(tensors, out_shape) else None
    if y is None:  # e.g. add(x_small, scalar-tensor) broadcast up by a constant: keep the constant
        tensors = [imp.tensor(a, where) for a in operands]
        y = _elementwise_out(imp, node, _BINARY[base], tensors, val)
    del torch
    return y


def _broadcasts(tensors: Sequence[TensorSpec], out_shape: tuple[int, ...]) -> bool:
    from workloads.semantics import broadcast

    try:
        return broadcast(*(t.shape for t in tensors)) == out_shape
    except GraphError:
        return False


def _h_alias(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    torch = imp.torch
    x = args[0]
    if base in ("_to_copy", "to", "type_as") and isinstance(val, torch.Tensor) and isinstance(x, TensorSpec):
        where = f"{imp.label}: node {node.name!r}"
        dt = imp.ir_dtype(val.dtype, where)
        if dt != x.dtype:
            return imp.emit(node, "elementwise", [x], vals=[val], op="cast")[0]
    if base == "native_dropout":
        return (x, None)
    return x


def _h_view(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    torch = imp.torch
    where = f"{imp.label}: node {node.name!r} ({node.target})"
    x = args[0]
    if base in ("cat", "concat", "stack"):
        parts = [imp.tensor(t, where) for t in x if _is_tensor(t)]
        dim = int(_arg(args, kwargs, 1, "dim", 0))
        if base == "stack":
            rank = len(parts[0].shape) + 1
            d = dim % rank
            parts = [imp.emit(node, "reshape", [p], suffix=f"/unsqueeze{i}", shape=(*p.shape[:d], 1, *p.shape[d:]))[0]
                     for i, p in enumerate(parts)]
            dim = d
        parts = [p for p in parts if p.shape[dim % len(p.shape)] > 0] or parts
        if len(parts) == 1:
            return parts[0]
        return imp.emit(node, "concat", parts, vals=[val], axis=dim)[0]
    if isinstance(x, _WView):
        if base in ("t", "numpy_T", "mT") or (base == "transpose" and len(x.spec.shape) == 2) or (
                base == "permute" and [int(p) % 2 for p in args[1]] == [1, 0]):
            return _WView(x.spec, not x.transposed)
        if isinstance(val, torch.Tensor) and tuple(val.shape) == imp.shape_of(x):
            return x
    xs = imp.tensor(x, where)
    if base in ("split", "split_with_sizes", "chunk", "unbind"):
        vals = list(val)
        if base == "unbind":
            dim = int(_arg(args, kwargs, 1, "dim", 0)) % len(xs.shape)
            sizes = [1] * len(vals)
        else:
            dim = int(_arg(args, kwargs, 2, "dim", 0)) % len(xs.shape)
            sizes = [int(v.shape[dim]) for v in vals]
        if len(sizes) == 1 and base != "unbind":
            return (xs,)
        parts = imp.emit(node, "split", [xs], axis=dim, sizes=tuple(sizes))
        if base == "unbind":
            return tuple(imp.emit(node, "reshape", [p], suffix=f"/squeeze{i}", vals=[v], shape=tuple(v.shape))[0]
                         for i, (p, v) in enumerate(zip(parts, vals, strict=True)))
        return tuple(parts)
    shape = tuple(int(s) for s in val.shape)
    if base in ("t", "numpy_T", "mT", "transpose", "permute"):
        r = len(xs.shape)
        if base == "permute":
            perm = tuple(int(p) % r for p in args[1])
        else:
            perm_l = list(range(r))
            d0, d1 = (0, 1) if base == "t" or r < 2 else (r - 2, r - 1) if base == "mT" else (
                int(args[1]) % r, int(args[2]) % r)
            perm_l[d0], perm_l[d1] = perm_l[d1], perm_l[d0]
            perm = tuple(perm_l)
        if perm == tuple(range(r)):
            return xs
        return imp.emit(node, "transpose", [xs], vals=[val], perm=perm)[0]
    if shape == xs.shape:
        return xs
    if base in ("select", "slice", "narrow"):
        if base == "select":
            dim = int(args[1]) % len(xs.shape)
            mid = tuple(1 if i == dim else s for i, s in enumerate(xs.shape))
            y = imp.emit(node, "slice", [xs], suffix="/slice", shape=mid)[0]
            return imp.emit(node, "reshape", [y], vals=[val], shape=shape)[0]
        return imp.emit(node, "slice", [xs], vals=[val], shape=shape)[0]
    if math.prod(shape) == xs.numel:
        return imp.emit(node, "reshape", [xs], vals=[val], shape=shape)[0]
    return imp.emit(node, "expand", [xs], vals=[val], shape=shape)[0]


def _h_softmax(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    where = f"{imp.label}: node {node.name!r}"
    return imp.emit(node, "softmax", [imp.tensor(args[0], where)], vals=[val], axis=int(_arg(args, kwargs, 1, "dim", -1)))[0]


def _h_embedding(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    where = f"{imp.label}: node {node.name!r}"
    table, ids = imp.tensor(args[0], where), imp.tensor(args[1], where)
    return imp.emit(node, "embedding", [ids, table], vals=[val])[0]


def _h_pool(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    torch = imp.torch
    where = f"{imp.label}: node {node.name!r} ({node.target})"
    x = imp.tensor(args[0], where)
    out_val = val if isinstance(val, torch.Tensor) else val[0]
    mode = "max" if "max" in base else "avg"
    if len(x.shape) != 4:
        raise UnsupportedOpError(f"{where}: pooling of a rank-{len(x.shape)} tensor; expected (N,C,H,W)")
    if "adaptive" in base:
        y = imp.emit(node, "pool2d", [x], vals=[out_val], mode=mode, output_size=tuple(int(s) for s in out_val.shape[2:]))[0]
    else:
        def pair(v: Any, default: Any) -> tuple[int, int]:
            if v is None or (isinstance(v, list | tuple) and not v):
                v = default
            v = [int(y) for y in (v if isinstance(v, list | tuple) else [v])]
            return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])

        kernel = pair(args[1], None)
        stride = pair(_arg(args, kwargs, 2, "stride"), kernel)
        pad = pair(_arg(args, kwargs, 3, "padding"), 0)
        ceil_pos = 5 if mode == "max" else 4
        if mode == "max" and pair(_arg(args, kwargs, 4, "dilation"), 1) != (1, 1):
            raise UnsupportedOpError(f"{where}: dilated pooling; expected dilation 1")
        y = imp.emit(node, "pool2d", [x], vals=[out_val], mode=mode, kernel=kernel, stride=stride, padding=pad + pad,
                     ceil_mode=bool(_arg(args, kwargs, ceil_pos, "ceil_mode", False)))[0]
    return y if isinstance(val, torch.Tensor) else (y,) + (None,) * (len(val) - 1)


def _h_reduce(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    torch = imp.torch
    where = f"{imp.label}: node {node.name!r}"
    x = imp.tensor(args[0], where)
    dims = _arg(args, kwargs, 1, "dim")
    if isinstance(dims, torch.dtype):
        dims = None
    if dims is None or (isinstance(dims, list | tuple) and not dims):
        axes = tuple(range(len(x.shape)))
    else:
        axes = tuple(int(d) for d in (dims if isinstance(dims, list | tuple) else [dims]))
    keep = bool(_arg(args, kwargs, 2, "keepdim", False))
    out_val = val if isinstance(val, torch.Tensor) else val[0]
    op = {"amax": "max", "amin": "min"}.get(base, base)
    y = imp.emit(node, "reduction", [x], vals=[out_val] if len(out_val.shape) else None, op=op, axes=axes,
                 keepdims=keep)[0]
    return y if isinstance(val, torch.Tensor) else (y,) + (None,) * (len(val) - 1)


def _h_rnn(imp: _Importer, node: Any, base: str, args: Sequence[Any], kwargs: Mapping[str, Any], val: Any) -> Any:
    """aten.lstm/gru.input(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)."""
    where = f"{imp.label}: node {node.name!r} ({node.target})"
    x = imp.tensor(args[0], where)
    params = list(args[2])
    has_b, layers, bidir, batch_first = bool(args[3]), int(args[4]), bool(args[7]), bool(args[8])
    gates = 4 if base == "lstm" else 3
    dirs = 2 if bidir else 1
    per = 4 if has_b else 2
    if batch_first:
        x = imp.emit(node, "transpose", [x], suffix="/time_major", perm=(1, 0, 2))[0]
    hiddens, cells = [], []
    for layer in range(layers):
        ps = [params[(layer * dirs + d) * per:(layer * dirs + d + 1) * per] for d in range(dirs)]
        specs = [[imp.tensor(p, where) for p in group] for group in ps]
        hid = specs[0][1].shape[1]

        def stacked(i: int, shape: tuple[int, ...], _specs: list[list[TensorSpec]] = specs) -> TensorSpec:
            nm = "|".join(s[i].name for s in _specs)
            return TensorSpec(nm, (dirs, *shape), _specs[0][i].dtype, Role.WEIGHT)

        inputs = [x, stacked(0, specs[0][0].shape), stacked(1, specs[0][1].shape)]
        if has_b:
            nm = "|".join(f"{s[2].name}+{s[3].name}" for s in specs)
            inputs.append(TensorSpec(nm, (dirs, 2 * gates * hid), specs[0][2].dtype, Role.WEIGHT))
        outs = imp.emit(node, base, inputs, suffix=f"/l{layer}", hidden=hid, bidirectional=bidir)
        x = outs[0]
        hiddens.append(outs[1])
        if base == "lstm":
            cells.append(outs[2])
    y = imp.emit(node, "transpose", [x], suffix="/batch_major", perm=(1, 0, 2))[0] if batch_first else x
    h = hiddens[0] if layers == 1 else imp.emit(node, "concat", hiddens, suffix="/h_n", axis=0)[0]
    if base == "gru":
        return (y, h)
    c = cells[0] if layers == 1 else imp.emit(node, "concat", cells, suffix="/c_n", axis=0)[0]
    return (y, h, c)


_Handler = Callable[[_Importer, Any, str, Sequence[Any], Mapping[str, Any], Any], Any]
_HANDLERS: dict[str, _Handler] = {
    "linear": _h_linear, "addmm": _h_matmul, "mm": _h_matmul, "bmm": _h_matmul, "matmul": _h_matmul,
    "baddbmm": _h_matmul,
    "conv1d": _h_conv, "conv2d": _h_conv, "convolution": _h_conv,
    "scaled_dot_product_attention": _h_sdpa, "_scaled_dot_product_flash_attention_for_cpu": _h_sdpa,
    "_scaled_dot_product_efficient_attention": _h_sdpa, "_scaled_dot_product_flash_attention": _h_sdpa,
    "layer_norm": _h_layernorm, "native_layer_norm": _h_layernorm, "rms_norm": _h_layernorm,
    "batch_norm": _h_batchnorm, "native_batch_norm": _h_batchnorm, "_native_batch_norm_legit": _h_batchnorm,
    "_native_batch_norm_legit_no_training": _h_batchnorm,
    "softmax": _h_softmax, "_softmax": _h_softmax, "_safe_softmax": _h_softmax, "log_softmax": _h_softmax, "_log_softmax": _h_softmax,
    "embedding": _h_embedding,
    "max_pool2d": _h_pool, "max_pool2d_with_indices": _h_pool, "avg_pool2d": _h_pool,
    "adaptive_avg_pool2d": _h_pool, "_adaptive_avg_pool2d": _h_pool, "adaptive_max_pool2d": _h_pool,
    "mean": _h_reduce, "sum": _h_reduce, "amax": _h_reduce, "amin": _h_reduce, "max": _h_reduce, "min": _h_reduce,
    "lstm": _h_rnn, "gru": _h_rnn,
    **{k: _h_unary for k in _UNARY}, **{k: _h_binary for k in _BINARY},
    **{k: _h_alias for k in _ALIASES}, **{k: _h_view for k in _VIEWS},
}

#: ATen operator packets the importer maps (others: UnsupportedOpError, or generic with strict=False).
SUPPORTED_ATEN_OPS: list[str] = sorted(_HANDLERS)


# ------------------------------------------------------------------------------------------------
# tracing


def _example_args(torch: Any, example_inputs: Any, device: Any) -> tuple[Any, ...]:
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    elif isinstance(example_inputs, torch.Size) or (
            isinstance(example_inputs, list | tuple) and example_inputs and all(isinstance(s, int) for s in example_inputs)):
        example_inputs = (tuple(example_inputs),)
    out = []
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            out.append(x.to(device) if device is not None and x.device != device else x)
        elif isinstance(x, torch.Size | list | tuple) and all(isinstance(s, int) for s in x):
            out.append(torch.empty(tuple(x), device=device or "meta"))
        else:
            out.append(x)
    return tuple(out)


def _trace_export(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    ep = torch.export.export(module, args, kwargs=kwargs, strict=False)
    gm = ep.graph_module
    sig = ep.graph_signature
    user_vals = [*args, *kwargs.values()]
    user_flat = [x for x in torch.utils._pytree.tree_leaves(user_vals)]
    holders: dict[str, Any] = {}
    user_i = 0
    for spec in sig.input_specs:
        arg = spec.arg
        nm = getattr(arg, "name", None)
        kind = spec.kind.name
        if kind == "PARAMETER":
            holders[nm] = ("param", spec.target)
        elif kind == "BUFFER":
            holders[nm] = ("buffer", spec.target)
        elif kind in ("CONSTANT_TENSOR", "CUSTOM_OBJ"):
            holders[nm] = ("constant", ep.constants.get(spec.target))
        else:
            holders[nm] = ("user", user_flat[user_i] if user_i < len(user_flat) else None)
            user_i += 1
    return gm, holders


def _trace_fx(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from torch.func import functional_call
    from torch.fx.experimental.proxy_tensor import make_fx

    state = dict(module.named_parameters())
    state.update(dict(module.named_buffers()))
    gm = make_fx(lambda st, a, kw: functional_call(module, st, a, kw), tracing_mode="fake")(state, args, kwargs)
    leaves = torch.utils._pytree.tree_leaves((state, args, kwargs))
    names = list(state) + [None] * (len(leaves) - len(state))
    holders: dict[str, Any] = {}
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    params = dict(module.named_parameters())
    for node, leaf, nm in zip(phs, leaves, names, strict=False):
        if nm is None:
            holders[node.name] = ("user", leaf)
        elif nm in params:
            holders[node.name] = ("param", nm)
        else:
            holders[node.name] = ("buffer", nm)
    return gm, holders


def import_module(
    module: Any,
    example_inputs: Any,
    *,
    kwargs: Mapping[str, Any] | None = None,
    dtype: str | DType | None = None,
    strict: bool = True,
    name: str | None = None,
    method: str = "auto",
) -> OpGraph:
    """Import a ``torch.nn.Module`` as an :class:`OpGraph` without running real compute.

    Parameters
    ----------
    module
        The module, in eval mode for inference graphs. Build large models under
        ``torch.device("meta")`` so that no weights are allocated.
    example_inputs
        A tensor, a tuple of tensors, or input shapes (a tuple of ints, or a tuple of such tuples:
        float32 meta tensors). Tensors are moved to the meta device when the module is on it.
    kwargs
        Keyword arguments of ``forward`` (e.g. ``{"use_cache": False}``).
    dtype
        Storage and compute dtype of every floating-point tensor (default: the module's).
    strict
        An ATen operator without a mapping is an :class:`UnsupportedOpError` (True) or a
        ``generic`` op costed by its tensor bytes and listed in a warning (False).
    name
        Graph name (default: the module's class name).
    method
        ``"export"`` (torch.export), ``"fx"`` (make_fx over functional_call) or ``"auto"`` (export,
        then fx when export fails).

    Returns
    -------
    OpGraph
        ``meta`` holds ``source="torch"``, the trace method and the input shapes.
    """
    try:
        import torch
    except ModuleNotFoundError:
        raise ModuleNotFoundError("importing PyTorch modules needs torch; expected `pip install nodeperf[torch]`") from None
    if method not in ("auto", "export", "fx"):
        raise ValueError(f"import_module: method; got {method!r}; expected 'auto', 'export' or 'fx'")
    dt = parse_dtype(dtype, where="import_module: dtype") if dtype is not None else None
    label = name or type(module).__name__
    first = next(iter(module.parameters()), None)
    device = first.device if first is not None and first.device.type == "meta" else None
    args = _example_args(torch, example_inputs, device)
    kw = dict(kwargs or {})
    used = method
    if method in ("auto", "export"):
        try:
            gm, holders = _trace_export(torch, module, args, kw)
            used = "export"
        except Exception as exc:
            if method == "export":
                raise ValueError(f"{label}: torch.export failed ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                                 "expected a traceable module (try method='fx')") from None
            log.info("%s: torch.export failed (%s); tracing with make_fx", label, exc)
            used = "fx"
    if used == "fx":
        try:
            gm, holders = _trace_fx(torch, module, args, kw)
        except Exception as exc:
            raise ValueError(f"{label}: tracing failed ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                             "expected a module torch.export or make_fx can trace") from None
    imp = _Importer(module, label, dt, strict)
    placeholders: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        kind, ref = holders.get(node.name, ("user", None))
        val = node.meta.get("val")
        where = f"{label}: input {node.name!r}"
        if kind == "param":
            placeholders[node.name] = imp.weight(module.get_parameter(ref), ref)
        elif kind == "buffer":
            placeholders[node.name] = imp.from_object(_getattr_path(module, ref), ref, where)
        elif kind == "constant":
            placeholders[node.name] = imp.from_object(ref, node.name, where) if ref is not None else None
        elif isinstance(val, torch.Tensor):
            placeholders[node.name] = TensorSpec(node.name, tuple(int(s) for s in val.shape),
                                                 imp.ir_dtype(val.dtype, where), Role.ACTIVATION)
        else:
            placeholders[node.name] = ref if ref is not None else val
    meta: dict[str, Any] = {"model": label, "source": "torch", "trace": used,
                            "inputs": [list(a.shape) for a in args if isinstance(a, torch.Tensor)]}
    if dt is not None:
        meta["dtype"] = dt.value
    return imp.run(gm, placeholders, meta)
