"""Execute an OpGraph with PyTorch (or NumPy for a subset) on random inputs, so any graph can be timed on a device.

:func:`compile_graph` turns a graph into a :class:`GraphRunner`: inputs, weights and caches are
allocated once with seeded random values; each call of the runner executes every op in topological
order with the framework's eager kernels and returns the graph outputs. Intermediate tensors are
released after their last consumer. No weights are downloaded: values are random, shapes and dtypes
are the graph's.

The torch backend is a registry by op kind, like the semantics registry of ``workloads.semantics``:
a builder decorated with :func:`torch_kernel` receives one op (:class:`TorchOp`) at compile time and
returns its step, a function of the op's input tensors; :data:`TORCH_KINDS` and
:data:`AUTOGRAD_KINDS` are read from the registrations. Adding an executable kind is adding one
builder.

An op kind without a framework equivalent (:data:`NOT_EXECUTABLE`: ``generic``, point-to-point
transfers, ``rnn_bwd``), a collective over more than one device, or an fp8 matmul raises
:class:`~workloads.ir.UnsupportedOpError` naming the op, at compile time.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from workloads.dtypes import DType
from workloads.ir import Op, OpGraph, TensorSpec, UnsupportedOpError

__all__ = ["GraphRunner", "compile_graph", "torch_available", "torch_kernel", "TorchOp", "TORCH_KINDS", "NUMPY_KINDS",
           "NOT_EXECUTABLE", "AUTOGRAD_KINDS"]

logger = logging.getLogger(__name__)


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class GraphRunner:
    """A compiled graph: call it to execute every op once; ``synchronize`` waits for the device."""

    graph: OpGraph
    backend: str
    device: str
    _steps: list[Callable[[dict[str, Any]], None]]
    _inputs: dict[str, Any]
    _outputs: tuple[str, ...]
    synchronize: Callable[[], None]

    @property
    def needs_autograd(self) -> bool:
        """Whether an op differentiates through ``torch.autograd`` (:data:`AUTOGRAD_KINDS`): then the graph
        cannot run in ``torch.inference_mode`` (use ``torch.no_grad``)."""
        return self.backend == "torch" and any(op.kind in AUTOGRAD_KINDS for op in self.graph.ops)

    def __call__(self) -> dict[str, Any]:
        env = dict(self._inputs)
        for step in self._steps:
            step(env)
        return {k: env[k] for k in self._outputs if k in env}


# ------------------------------------------------------------------------------------------------
# torch backend


_TORCH_DTYPES = {
    DType.FP64: "float64", DType.FP32: "float32", DType.TF32: "float32", DType.BF16: "bfloat16",
    DType.FP16: "float16", DType.FP8_E4M3: "float8_e4m3fn", DType.FP8_E5M2: "float8_e5m2",
    DType.INT64: "int64", DType.INT32: "int32", DType.INT8: "int8", DType.BOOL: "bool",
}


def _tdtype(torch: Any, dt: DType, where: str) -> Any:
    name = _TORCH_DTYPES.get(dt)
    if name is None or not hasattr(torch, name):
        raise UnsupportedOpError(f"{where}: dtype has no torch equivalent; got {dt.value!r}; expected one of "
                                 f"{', '.join(d.value for d in _TORCH_DTYPES)}")
    return getattr(torch, name)


def _elementwise_fns(torch: Any) -> dict[str, Callable[..., Any]]:
    F = torch.nn.functional
    return {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
        "max": torch.maximum, "min": torch.minimum, "pow": torch.pow,
        "where": lambda c, a=None, b=None: torch.where(c > 0, a if a is not None else c, b if b is not None else c),
        "neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "relu6": F.relu6,
        "leaky_relu": F.leaky_relu, "exp": torch.exp, "log": lambda x: torch.log(torch.abs(x) + 1),
        "sqrt": lambda x: torch.sqrt(torch.abs(x)), "rsqrt": lambda x: torch.rsqrt(torch.abs(x) + 1),
        "reciprocal": torch.reciprocal, "square": torch.square, "erf": torch.erf, "sigmoid": torch.sigmoid,
        "tanh": torch.tanh, "sin": torch.sin, "cos": torch.cos, "silu": F.silu, "swish": F.silu, "hardswish": F.hardswish,
        "hardsigmoid": F.hardsigmoid, "gelu": lambda x: F.gelu(x, approximate="tanh"),
        "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x), "softplus": F.softplus,
        "rope": lambda x, *r: x * x + torch.roll(x, 1, -1) * x, "scale": lambda x, *r: x * 0.5,
        "cast": lambda x, *r: x.clone(), "copy": lambda x, *r: x.clone(), "identity": lambda x, *r: x.clone(),
        "dropout": lambda x, *r: F.dropout(x, 0.1, training=True), "mask": lambda x, *r: x.masked_fill(x > 0, 0),
        "clip": lambda x, *r: torch.clamp(x, -1, 1),
        "ge": lambda x, *r: (x >= 0).to(x.dtype), "le": lambda x, *r: (x <= 0).to(x.dtype),
        "logical_and": lambda a, b=None, *r: torch.logical_and(a, a if b is None else b).to(a.dtype),
    }


def _pad4(attrs: Any, nd: int) -> tuple[tuple[int, ...], bool]:
    p = attrs.get("padding", 0)
    pads = (int(p),) * nd if isinstance(p, int | float) else tuple(int(x) for x in p)
    if len(pads) == 1:
        pads = pads * nd
    if len(pads) == nd:
        return pads, True
    begin, end = pads[:nd], pads[nd:]
    return pads, begin == end


def _conv_args(attrs: Any, nd: int) -> dict[str, Any]:
    def tup(v: Any) -> tuple[int, ...]:
        t = (int(v),) * nd if isinstance(v, int | float) else tuple(int(x) for x in v)
        return t * nd if len(t) == 1 else t

    pads, sym = _pad4(attrs, nd)
    return {"stride": tup(attrs.get("stride", 1)), "dilation": tup(attrs.get("dilation", 1)),
            "padding": pads[:nd] if sym else 0, "groups": int(attrs.get("groups", 1)),
            "_asym": None if sym else pads}


@dataclass(frozen=True)
class TorchOp:
    """What a torch kernel builder (:func:`torch_kernel`) sees of one op at compile time.

    Attributes
    ----------
    torch
        The imported torch module (imported lazily: the core never needs it).
    op
        The op to execute.
    device
        The device string the caller named (for messages), and ``dev`` its ``torch.device``.
    state
        A per-op dict for what the step must keep alive between calls (buffers, modules).
    out_dtypes
        Torch dtypes of the op's outputs.
    """

    torch: Any
    op: Op
    device: str
    dev: Any
    state: dict[str, Any]
    out_dtypes: tuple[Any, ...]

    @property
    def F(self) -> Any:  # noqa: N802 - torch's own name for torch.nn.functional
        return self.torch.nn.functional

    @property
    def attrs(self) -> Any:
        return self.op.attrs

    @property
    def where(self) -> str:
        return f"op {self.op.name!r} ({self.op.kind})"


#: A torch kernel builder: (TorchOp) -> step, a function (the op's input tensors, in order) ->
#: output tensor or tuple of output tensors. Raises UnsupportedOpError for an op it cannot run.
TorchKernel = Callable[[TorchOp], Callable[..., Any]]

_TORCH_KERNELS: dict[str, TorchKernel] = {}
_TORCH_AUTOGRAD: set[str] = set()


def torch_kernel(*kinds: str, autograd: bool = False) -> Callable[[TorchKernel], TorchKernel]:
    """Register the decorated builder as the torch kernel of op ``kinds``.

    ``autograd``: its step differentiates through ``torch.autograd`` (then the graph cannot run in
    inference mode; :data:`AUTOGRAD_KINDS`). Adding an executable op kind is adding one builder::

        @torch_kernel("softmax")
        def _softmax(t: TorchOp) -> Callable[..., Any]:
            ax = int(t.attrs.get("axis", -1))
            return lambda x: t.torch.softmax(x, ax)
    """
    def register(fn: TorchKernel) -> TorchKernel:
        for kind in kinds:
            if kind in _TORCH_KERNELS:
                raise ValueError(f"torch_kernel: kind {kind!r} registered twice; got {fn.__name__} after "
                                 f"{_TORCH_KERNELS[kind].__name__}; expected one builder per kind")
            _TORCH_KERNELS[kind] = fn
            if autograd:
                _TORCH_AUTOGRAD.add(kind)
        return fn

    return register


def _torch_step(torch: Any, op: Op, device: str, dev: Any, state: dict[str, Any]) -> Callable[..., Any]:
    """A function (input tensors) -> output tensor(s) for ``op``; UnsupportedOpError if none exists."""
    where = f"op {op.name!r} ({op.kind})"
    out_dt = tuple(_tdtype(torch, t.dtype, where) for t in op.outputs)
    build = _TORCH_KERNELS.get(op.kind)
    if build is None:
        why = NOT_EXECUTABLE.get(op.kind, "not implemented by the executor")
        raise UnsupportedOpError(f"{where}: cannot be executed ({why}); got op kind {op.kind!r}; expected one of the "
                                 "kinds in simulator.calibration.executor.TORCH_KINDS")
    return build(TorchOp(torch, op, device, dev, state, out_dt))


# --- contractions -------------------------------------------------------------------------------


@torch_kernel("matmul")
def _matmul(t: TorchOp) -> Callable[..., Any]:
    op, torch = t.op, t.torch
    if op.dtype in (DType.FP8_E4M3, DType.FP8_E5M2):
        raise UnsupportedOpError(f"{t.where}: fp8 matmul is not executable with eager torch on {t.device}; "
                                 "got dtype " + op.dtype.value + "; expected fp32, tf32, bf16 or fp16")
    ta, tb = bool(t.attrs.get("transpose_a")), bool(t.attrs.get("transpose_b"))

    def mm(x: Any, w: Any, bias: Any = None) -> Any:
        if ta:
            x = x.transpose(-1, -2)
        if tb:
            w = w.transpose(-1, -2)
        y = torch.matmul(x, w)
        return y + bias if bias is not None else y

    return mm


@torch_kernel("grouped_matmul")
def _grouped_matmul(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    return lambda x, w: torch.bmm(x, w)


@torch_kernel("grouped_matmul_bwd_data")
def _grouped_matmul_bwd_data(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    return lambda dy, w: torch.bmm(dy, w.transpose(1, 2))


@torch_kernel("grouped_matmul_bwd_weight")
def _grouped_matmul_bwd_weight(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    return lambda x, dy: torch.bmm(x.transpose(1, 2), dy)


@torch_kernel("conv1d", "conv2d")
def _conv(t: TorchOp) -> Callable[..., Any]:
    F = t.F
    nd = 1 if t.op.kind == "conv1d" else 2
    ca = _conv_args(t.attrs, nd)
    fn = F.conv1d if nd == 1 else F.conv2d
    asym = ca.pop("_asym")

    def conv(x: Any, w: Any, b: Any = None) -> Any:
        if asym is not None:  # (begin..., end...) -> F.pad's (last axis first) order
            pad = []
            for i in reversed(range(nd)):
                pad += [asym[i], asym[nd + i]]
            x = F.pad(x, pad)
        return fn(x, w, b, **ca)

    return conv


@torch_kernel("conv1d_bwd_data", "conv2d_bwd_data", "conv1d_bwd_weight", "conv2d_bwd_weight")
def _conv_bwd(t: TorchOp) -> Callable[..., Any]:
    k, a = t.op.kind, t.attrs
    nd = 1 if k.startswith("conv1d") else 2
    ca = _conv_args(a, nd)
    if ca.pop("_asym") is not None:
        raise UnsupportedOpError(f"{t.where}: asymmetric padding in a conv backward; got {a.get('padding')}; "
                                 "expected symmetric padding")
    g = t.torch.nn.grad
    if k.endswith("bwd_data"):
        shape = tuple(int(s) for s in a["input_shape"])
        fn = g.conv1d_input if nd == 1 else g.conv2d_input
        return lambda dy, w: fn(shape, w, dy, **ca)
    shape = tuple(int(s) for s in a["weight_shape"])
    fn = g.conv1d_weight if nd == 1 else g.conv2d_weight
    return lambda x, dy: fn(x, shape, dy, **ca)


def _sdpa(t: TorchOp) -> Callable[[Any, Any, Any], Any]:
    """Scaled dot-product attention of the op's shapes: GQA heads repeated, causal mask end-aligned."""
    torch, F, op = t.torch, t.F, t.op
    causal = bool(t.attrs.get("causal", False))
    q, kk = op.inputs[0], op.inputs[1]
    sq, skv = q.shape[2], kk.shape[2]
    rep = q.shape[1] // kk.shape[1]
    mask = None
    if causal and sq != skv:  # end-aligned diagonal, as in the semantics' pair count
        i = torch.arange(sq, device=t.dev)[:, None]
        j = torch.arange(skv, device=t.dev)[None, :]
        mask = j <= i + (skv - sq)

    def fwd(qq: Any, kt: Any, vt: Any) -> Any:
        if rep > 1:
            kt = kt.repeat_interleave(rep, dim=1)
            vt = vt.repeat_interleave(rep, dim=1)
        if mask is not None:
            return F.scaled_dot_product_attention(qq, kt, vt, attn_mask=mask)
        return F.scaled_dot_product_attention(qq, kt, vt, is_causal=causal)

    return fwd


@torch_kernel("attention")
def _attention(t: TorchOp) -> Callable[..., Any]:
    fwd = _sdpa(t)
    return lambda qq, kt, vt, m=None: fwd(qq, kt, vt)


@torch_kernel("attention_bwd", autograd=True)
def _attention_bwd(t: TorchOp) -> Callable[..., Any]:
    torch, fwd = t.torch, _sdpa(t)

    def bwd(qq: Any, kt: Any, vt: Any, o: Any, do: Any, lse: Any = None) -> Any:
        with torch.enable_grad():
            qq, kt, vt = (x.detach().requires_grad_(True) for x in (qq, kt, vt))
            y = fwd(qq, kt, vt)
            return tuple(torch.autograd.grad(y, (qq, kt, vt), do))

    return bwd


# --- elementwise, softmax, normalisations -------------------------------------------------------


@torch_kernel("elementwise")
def _elementwise(t: TorchOp) -> Callable[..., Any]:
    fns = _elementwise_fns(t.torch)
    f = fns.get(t.attrs["op"])
    if f is None:
        raise UnsupportedOpError(f"{t.where}: elementwise op has no torch equivalent here; got {t.attrs['op']!r}; "
                                 f"expected one of {', '.join(sorted(fns))}")
    return lambda *xs: f(*xs)


@torch_kernel("elementwise_bwd")
def _elementwise_bwd(t: TorchOp) -> Callable[..., Any]:
    return lambda dy, *rest: dy * (rest[0] if rest else dy)


@torch_kernel("softmax")
def _softmax(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    ax = int(t.attrs.get("axis", -1))
    return lambda x: torch.softmax(x, ax)


@torch_kernel("softmax_bwd")
def _softmax_bwd(t: TorchOp) -> Callable[..., Any]:
    return lambda y, dy: y * (dy - (dy * y).sum(-1, keepdim=True))


@torch_kernel("layernorm")
def _layernorm(t: TorchOp) -> Callable[..., Any]:
    F = t.F
    n = t.op.inputs[0].shape[-1]
    return lambda x, g=None, b=None: F.layer_norm(x, (n,), g, b)


@torch_kernel("rmsnorm")
def _rmsnorm(t: TorchOp) -> Callable[..., Any]:
    F = t.F
    n = t.op.inputs[0].shape[-1]
    return lambda x, g=None: F.rms_norm(x, (n,), g)


@torch_kernel("batchnorm")
def _batchnorm(t: TorchOp) -> Callable[..., Any]:
    torch, F, op, state = t.torch, t.F, t.op, t.state
    training = bool(t.attrs.get("training", False))
    c = op.inputs[0].shape[1]
    xdt = _tdtype(torch, op.inputs[0].dtype, t.where)
    state["rm"] = torch.zeros(c, device=t.dev, dtype=xdt)
    state["rv"] = torch.ones(c, device=t.dev, dtype=xdt)
    # batch statistics need more than one value per channel (batch 1 at a 1x1 map): then the
    # running statistics are used, which costs the same passes over the data
    train_ok = training and op.inputs[0].numel // c > 1
    return lambda x, s=None, b=None: F.batch_norm(x, state["rm"], state["rv"], s, b, training=train_ok)


@torch_kernel("layernorm_bwd", "rmsnorm_bwd", "batchnorm_bwd", autograd=True)
def _norm_bwd(t: TorchOp) -> Callable[..., Any]:
    torch, F, op = t.torch, t.F, t.op
    k = op.kind
    n = op.inputs[1].shape[-1]

    def norm_bwd(dy: Any, x: Any, g: Any = None, b: Any = None) -> Any:
        with torch.enable_grad():
            xx = x.detach().requires_grad_(True)
            gg = g.detach().requires_grad_(True) if g is not None else None
            if k == "batchnorm_bwd":
                c = xx.shape[1]
                few = xx.numel() // c <= 1
                y = F.batch_norm(xx, torch.zeros(c, dtype=xx.dtype, device=xx.device) if few else None,
                                 torch.ones(c, dtype=xx.dtype, device=xx.device) if few else None, gg, None,
                                 training=not few)
            elif k == "rmsnorm_bwd":
                y = F.rms_norm(xx, (n,), gg)
            else:
                y = F.layer_norm(xx, (n,), gg)
            wrt = (xx,) + ((gg,) if gg is not None else ())
            grads = torch.autograd.grad(y, wrt, dy)
        outs = list(grads)
        if gg is not None and len(op.outputs) == 3:
            keep = 1 if k == "batchnorm_bwd" else dy.dim() - 1
            outs.append(dy.sum(dim=tuple(d for d in range(dy.dim()) if d != keep)).reshape(g.shape))
        return tuple(outs) if len(outs) > 1 else outs[0]

    return norm_bwd


@torch_kernel("groupnorm")
def _groupnorm(t: TorchOp) -> Callable[..., Any]:
    F = t.F
    groups = int(t.attrs.get("groups", 1))
    return lambda x, g=None, b=None: F.group_norm(x, groups, g, b)


@torch_kernel("groupnorm_bwd", autograd=True)
def _groupnorm_bwd(t: TorchOp) -> Callable[..., Any]:
    torch, F, op = t.torch, t.F, t.op
    groups = int(t.attrs.get("groups", 1))

    def gn_bwd(dy: Any, x: Any, g: Any = None, b: Any = None) -> Any:
        with torch.enable_grad():
            xx = x.detach().requires_grad_(True)
            gg = g.detach().requires_grad_(True) if g is not None else None
            y = F.group_norm(xx, groups, gg)
            grads = torch.autograd.grad(y, (xx,) + ((gg,) if gg is not None else ()), dy)
        outs = list(grads)
        if gg is not None and len(op.outputs) == 3:
            outs.append(dy.sum(dim=[d for d in range(dy.dim()) if d != 1]).reshape(g.shape))
        return tuple(outs) if len(outs) > 1 else outs[0]

    return gn_bwd


# --- reductions, pooling, resizing, gathers -----------------------------------------------------


@torch_kernel("reduction")
def _reduction(t: TorchOp) -> Callable[..., Any]:
    torch, a = t.torch, t.attrs
    x = t.op.inputs[0]
    axes = a.get("axes", tuple(range(len(x.shape))))
    axes = tuple(int(v) for v in (axes if isinstance(axes, tuple) else (axes,)))
    keep = bool(a.get("keepdims", False))
    kind = a.get("op", "sum")
    shape = t.op.outputs[0].shape
    if kind == "max":
        return lambda x: torch.amax(x, dim=axes, keepdim=keep).reshape(shape)
    if kind == "mean":
        return lambda x: torch.mean(x, dim=axes, keepdim=keep).reshape(shape)
    return lambda x: torch.sum(x, dim=axes, keepdim=keep).reshape(shape)


@torch_kernel("pool2d")
def _pool2d(t: TorchOp) -> Callable[..., Any]:
    F, a = t.F, t.attrs
    if "output_size" in a:
        osz = tuple(int(v) for v in (a["output_size"] if isinstance(a["output_size"], tuple)
                                      else (a["output_size"],) * 2))
        afn = F.adaptive_max_pool2d if a.get("mode", "avg") == "max" else F.adaptive_avg_pool2d
        return lambda x: afn(x, osz)
    ker = a["kernel"]
    kw = {"kernel_size": ker, "stride": a.get("stride", ker), "ceil_mode": bool(a.get("ceil_mode", False))}
    pads, sym = _pad4(a, 2)
    if not sym:
        raise UnsupportedOpError(f"{t.where}: asymmetric pooling padding; got {pads}; expected symmetric padding")
    kw["padding"] = pads[:2]
    fn = F.max_pool2d if a.get("mode", "max") == "max" else F.avg_pool2d
    return lambda x: fn(x, **kw)


@torch_kernel("pool2d_bwd")
def _pool2d_bwd(t: TorchOp) -> Callable[..., Any]:
    F = t.F
    shape = tuple(int(s) for s in t.attrs["input_shape"])
    return lambda dy, *rest: F.interpolate(dy, size=shape[2:], mode="nearest").contiguous()


@torch_kernel("resize")
def _resize(t: TorchOp) -> Callable[..., Any]:
    F = t.F
    sc = t.attrs.get("scale", 2)
    factor = tuple(float(v) for v in sc) if isinstance(sc, tuple) else float(sc)
    return lambda x: F.interpolate(x, scale_factor=factor, mode="nearest")


@torch_kernel("embedding")
def _embedding(t: TorchOp) -> Callable[..., Any]:
    F = t.F
    if t.attrs.get("bag"):
        return lambda ids, table: F.embedding_bag(ids.reshape(-1, ids.shape[-1]).long(), table, mode="sum").reshape(
            *ids.shape[:-1], table.shape[1])
    return lambda ids, table: F.embedding(ids.long(), table)


@torch_kernel("embedding_bwd")
def _embedding_bwd(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    shape = tuple(int(s) for s in t.attrs["table_shape"])

    def emb_bwd(dy: Any, ids: Any = None) -> Any:
        out = torch.zeros(shape, dtype=dy.dtype, device=dy.device)
        idx = (ids.reshape(-1).long() if ids is not None
               else torch.arange(dy.numel() // shape[1], device=dy.device) % shape[0])
        return out.index_add_(0, idx, dy.reshape(-1, shape[1]))

    return emb_bwd


# --- layout ---------------------------------------------------------------------------------------


@torch_kernel("concat")
def _concat(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    ax = int(t.attrs.get("axis", 0))
    return lambda *xs: torch.cat(xs, ax)


@torch_kernel("split")
def _split(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    ax = int(t.attrs.get("axis", 0))
    sizes = [int(s) for s in t.attrs["sizes"]]
    return lambda x: tuple(torch.split(x, sizes, ax))


@torch_kernel("slice")
def _slice(t: TorchOp) -> Callable[..., Any]:
    shape = tuple(int(s) for s in t.attrs["shape"])
    return lambda x: x[tuple(slice(0, s) for s in shape)]


@torch_kernel("transpose")
def _transpose(t: TorchOp) -> Callable[..., Any]:
    x0 = t.op.inputs[0]
    perm = tuple(t.attrs.get("perm", tuple(reversed(range(len(x0.shape))))))
    return lambda x: x.permute(perm).contiguous()


@torch_kernel("reshape")
def _reshape(t: TorchOp) -> Callable[..., Any]:
    shape = t.op.outputs[0].shape
    return lambda x: x.reshape(shape)


@torch_kernel("expand")
def _expand(t: TorchOp) -> Callable[..., Any]:
    shape = t.op.outputs[0].shape
    return lambda x: x.expand(shape).contiguous()


@torch_kernel("kv_append")
def _kv_append(t: TorchOp) -> Callable[..., Any]:
    o = t.op.outputs[0]
    buf = t.torch.zeros(o.shape, dtype=t.out_dtypes[0], device=t.dev)
    t.state["buf"] = buf

    def append(*xs: Any) -> Any:
        new = xs[-1]
        n = new.shape[2]
        buf[:, :, buf.shape[2] - n:, :].copy_(new)  # only the new entries move
        return buf

    return append


# --- recurrent layers -----------------------------------------------------------------------------


@torch_kernel("lstm_cell", "gru_cell")
def _rnn_cell(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    if t.op.kind == "lstm_cell":
        return lambda x, h, c, wi, wh, bi=None, bh=None: tuple(torch.lstm_cell(x, (h, c), wi, wh, bi, bh))
    return lambda x, h, wi, wh, bi=None, bh=None: torch.gru_cell(x, h, wi, wh, bi, bh)


@torch_kernel("lstm", "gru")
def _rnn(t: TorchOp) -> Callable[..., Any]:
    torch, op, a = t.torch, t.op, t.attrs
    k = op.kind
    hid = int(a["hidden"])
    bidir = bool(a.get("bidirectional"))
    dirs = 2 if bidir else 1
    g = 4 if k == "lstm" else 3
    mod = (torch.nn.LSTM if k == "lstm" else torch.nn.GRU)(
        op.inputs[0].shape[2], hid, bidirectional=bidir, bias=len(op.inputs) == 4).to(t.dev, t.out_dtypes[0])
    mod.eval()
    t.state["mod"] = mod

    def rnn(x: Any, wi: Any, wh: Any, b: Any = None) -> Any:
        with torch.no_grad():
            for d in range(dirs):
                sfx = "_reverse" if d else ""
                getattr(mod, f"weight_ih_l0{sfx}").copy_(wi[d])
                getattr(mod, f"weight_hh_l0{sfx}").copy_(wh[d])
                if b is not None:
                    getattr(mod, f"bias_ih_l0{sfx}").copy_(b[d, : g * hid])
                    getattr(mod, f"bias_hh_l0{sfx}").copy_(b[d, g * hid:])
            y, hc = mod(x)
        return (y, *hc) if isinstance(hc, tuple) else (y, hc)

    return rnn


# --- mixture of experts ---------------------------------------------------------------------------


@torch_kernel("moe_router")
def _moe_router(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    top_k = int(t.attrs.get("top_k", 1))

    def router(x: Any, w: Any) -> Any:
        p = torch.softmax(torch.matmul(x, w).float(), -1)
        v, i = torch.topk(p, top_k, -1)
        return v.to(x.dtype), i.to(torch.int32)

    return router


@torch_kernel("moe_dispatch")
def _moe_dispatch(t: TorchOp) -> Callable[..., Any]:
    torch, a = t.torch, t.attrs
    e, c = int(a["experts"]), int(a["capacity"])
    routed = int(a.get("tokens", t.op.inputs[1].numel))

    def dispatch(x: Any, idx: Any) -> Any:
        rows = torch.arange(min(routed, e * c), device=x.device) % x.shape[0]
        out = torch.zeros((e * c, x.shape[1]), dtype=x.dtype, device=x.device)
        out[: rows.numel()] = x.index_select(0, rows)
        return out.reshape(e, c, x.shape[1])

    return dispatch


@torch_kernel("moe_combine")
def _moe_combine(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch

    def combine(y: Any, wts: Any, idx: Any) -> Any:
        flat = y.reshape(-1, y.shape[-1])
        sel = (idx.long().reshape(-1) * 0 + torch.arange(idx.numel(), device=y.device)) % flat.shape[0]
        g = flat.index_select(0, sel).reshape(*wts.shape, -1)
        return (g * wts.unsqueeze(-1)).sum(1)

    return combine


@torch_kernel("moe_dispatch_bwd")
def _moe_dispatch_bwd(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    t_rows, d = t.op.outputs[0].shape

    def dispatch_bwd(dbuf: Any, idx: Any) -> Any:
        flat = dbuf.reshape(-1, d)
        kk = idx.shape[-1] if idx.dim() > 1 else 1
        sel = torch.arange(t_rows * kk, device=flat.device) % flat.shape[0]
        return flat.index_select(0, sel).reshape(t_rows, kk, d).sum(1)

    return dispatch_bwd


@torch_kernel("moe_combine_bwd")
def _moe_combine_bwd(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch

    def combine_bwd(dy: Any, y: Any, wts: Any, idx: Any) -> Any:
        flat = y.reshape(-1, y.shape[-1])
        sel = torch.arange(wts.numel(), device=y.device) % flat.shape[0]
        g = flat.index_select(0, sel).reshape(*wts.shape, -1)
        dw = (g * dy.unsqueeze(1)).sum(-1)
        dbuf = torch.zeros_like(y).reshape(-1, y.shape[-1])
        dbuf.index_add_(0, sel, (dy.unsqueeze(1) * wts.unsqueeze(-1)).reshape(-1, y.shape[-1]))
        return dbuf.reshape(y.shape), dw.to(wts.dtype)

    return combine_bwd


@torch_kernel("moe_router_bwd")
def _moe_router_bwd(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch

    def router_bwd(x: Any, w: Any, dwts: Any) -> Any:
        dlogits = torch.zeros((x.shape[0], w.shape[1]), dtype=x.dtype, device=x.device)
        dlogits[:, : dwts.shape[1]] = dwts
        return torch.matmul(dlogits, w.t()), torch.matmul(x.t(), dlogits)

    return router_bwd


# --- collectives (one device), losses, optimizer ----------------------------------------------------


@torch_kernel("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
def _collective(t: TorchOp) -> Callable[..., Any]:
    key = "devices" if "devices" in t.attrs else "group_size"  # a collective micro-workload names devices
    n = int(t.attrs.get(key, 1))
    if n == 1:
        return lambda x: x.clone()
    what = "every device of the system" if n == 0 else f"{n} devices"
    raise UnsupportedOpError(f"{t.where}: a collective over {what} cannot run on one {t.device}; got {key} {n}; "
                             "expected group_size 1")


@torch_kernel("mse_loss")
def _mse_loss(t: TorchOp) -> Callable[..., Any]:
    F = t.F
    return lambda p, y: F.mse_loss(p.float(), y.float()).reshape(1).to(p.dtype)


@torch_kernel("mse_loss_bwd")
def _mse_loss_bwd(t: TorchOp) -> Callable[..., Any]:
    return lambda p, y: (p - y) * (2.0 / p.numel())


@torch_kernel("cross_entropy")
def _cross_entropy(t: TorchOp) -> Callable[..., Any]:
    torch, F = t.torch, t.F

    def ce(logits: Any, labels: Any = None) -> Any:
        n = logits.shape[0]
        lab = labels.long() % logits.shape[-1] if labels is not None else torch.zeros(n, dtype=torch.long, device=logits.device)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), lab.reshape(-1)).reshape(1).to(logits.dtype)

    return ce


@torch_kernel("cross_entropy_bwd")
def _cross_entropy_bwd(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    return lambda logits, *r: torch.softmax(logits.float(), -1).to(logits.dtype) - 1.0 / logits.shape[-1]


@torch_kernel("optimizer_update")
def _optimizer_update(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    alg = t.attrs.get("algorithm", "adamw")

    def update(p: Any, g: Any, *st: Any) -> Any:
        if alg == "sgd":
            return p - 0.01 * g
        if alg == "sgd_momentum":
            m = st[-1] if st else g
            return p - 0.01 * (0.9 * m + g)
        m = st[-2] if len(st) >= 2 else g
        v = st[-1] if len(st) >= 1 else g
        m2 = 0.9 * m + 0.1 * g
        v2 = 0.999 * v + 0.001 * g * g
        upd = m2 / (torch.sqrt(torch.abs(v2)) + 1e-8)
        if alg == "adamw":
            upd = upd + 0.01 * p
        return p - 1e-3 * upd

    return update


#: Op kinds no backend executes, on purpose, with the reason.
# --- dense linear algebra (torch.linalg; cuSOLVER / MAGMA on CUDA, LAPACK on the CPU) ----------------


def _spd(t: TorchOp, a: Any) -> Any:
    """A symmetric positive definite matrix made from the random input ``a`` (a Cholesky or an inverse root
    needs one), computed on the first call and cached for that input tensor, so timed repetitions after the
    warm-up run the solver alone."""
    key = ("spd", id(a))
    if key not in t.state:
        n = a.shape[-1]
        eye = t.torch.eye(n, dtype=a.dtype, device=a.device)
        t.state.clear()  # one cached matrix per op: a new input replaces it
        t.state[key] = a @ a.transpose(-1, -2) / n + eye
    return t.state[key]


@torch_kernel("cholesky")
def _cholesky(t: TorchOp) -> Callable[..., Any]:
    return lambda a: t.torch.linalg.cholesky(_spd(t, a))


@torch_kernel("qr")
def _qr(t: TorchOp) -> Callable[..., Any]:
    mode = str(t.attrs.get("mode", "reduced"))

    def qr(a: Any) -> Any:
        q, r = t.torch.linalg.qr(a, mode=mode)
        return r if mode == "r" else (q, r)

    return qr


@torch_kernel("svd")
def _svd(t: TorchOp) -> Callable[..., Any]:
    vec = str(t.attrs.get("vectors", "reduced"))
    if vec == "none":
        return lambda a: t.torch.linalg.svdvals(a)
    return lambda a: tuple(t.torch.linalg.svd(a, full_matrices=vec == "full"))


@torch_kernel("eigh")
def _eigh(t: TorchOp) -> Callable[..., Any]:
    if not bool(t.attrs.get("vectors", True)):
        return lambda a: t.torch.linalg.eigvalsh(a)  # reads one triangle: any square input is valid
    return lambda a: tuple(t.torch.linalg.eigh(a))


@torch_kernel("matrix_inverse_root")
def _inverse_root(t: TorchOp) -> Callable[..., Any]:
    torch = t.torch
    p = int(t.attrs["p"])
    if str(t.attrs.get("method", "eigh")) == "newton":
        iters = int(t.attrs["iterations"])

        def newton(a: Any) -> Any:  # coupled iteration for A^(-1/p) (Guo & Higham 2006), as Shampoo runs it
            a = _spd(t, a)
            n = a.shape[-1]
            eye = torch.eye(n, dtype=a.dtype, device=a.device)
            c = torch.linalg.matrix_norm(a, ord="fro", keepdim=True)
            x, m = eye / c ** (1.0 / p), a / c
            for _ in range(iters):
                t_ = ((p + 1) * eye - m) / p
                x = x @ t_
                m = torch.linalg.matrix_power(t_, p) @ m
            return x

        return newton

    def by_eigh(a: Any) -> Any:
        w, v = torch.linalg.eigh(_spd(t, a))
        return (v * w.clamp_min(torch.finfo(w.dtype).tiny).pow(-1.0 / p).unsqueeze(-2)) @ v.transpose(-1, -2)

    return by_eigh


@torch_kernel("triangular_solve")
def _trsm(t: TorchOp) -> Callable[..., Any]:
    lower = bool(t.attrs.get("lower", True))
    return lambda a, b: t.torch.linalg.solve_triangular(a, b, upper=not lower)


NOT_EXECUTABLE: dict[str, str] = {
    "quant_matmul": "weight-only quantised GEMMs (W4A16 / W8A16) run in kernel extensions outside PyTorch "
                    "(Marlin, AWQ, GPTQ); dequantising and calling torch.matmul would time a different kernel",
    "quant_grouped_matmul": "weight-only quantised expert GEMMs run in kernel extensions outside PyTorch "
                            "(Marlin MoE); dequantising and calling torch.matmul would time a different kernel",
    "generic": "an imported operator known only by its byte counts has no framework semantics",
    "send": "a point-to-point transfer needs a second device",
    "recv": "a point-to-point transfer needs a second device",
    "rnn_bwd": "no public torch function computes a recurrent layer's backward on its own (autograd does, inside the layer)",
}

#: Op kinds the torch backend executes (collectives only with group_size 1): the kinds registered
#: with :func:`torch_kernel`, in registration order.
TORCH_KINDS: tuple[str, ...] = tuple(_TORCH_KERNELS)

#: Op kinds whose torch step differentiates through ``torch.autograd`` (not allowed in inference mode).
AUTOGRAD_KINDS: frozenset[str] = frozenset(_TORCH_AUTOGRAD)


def _random_tensor(torch: Any, t: TensorSpec, dev: Any, gen: Any, where: str, int_high: int) -> Any:
    dt = _tdtype(torch, t.dtype, where)
    if t.dtype.is_float:
        x = torch.randn(t.shape, generator=gen, dtype=torch.float32).mul_(0.1)
        return x.to(device=dev, dtype=dt)
    if t.dtype is DType.BOOL:
        return (torch.rand(t.shape, generator=gen) > 0.5).to(dev)
    return torch.randint(0, max(1, int_high), t.shape, generator=gen, dtype=torch.int64).to(device=dev, dtype=dt)


def _int_bound(graph: OpGraph, t: TensorSpec) -> int:
    """Largest safe value + 1 for an integer input (indices into an embedding table, labels...)."""
    bound = 2**31 - 1
    for op in graph.consumers(t.name):
        if op.kind == "embedding" and op.inputs[0].name == t.name:
            bound = min(bound, op.inputs[1].shape[0])
        elif op.kind == "embedding_bwd":
            bound = min(bound, int(op.attrs["table_shape"][0]))
        elif op.kind == "cross_entropy":
            bound = min(bound, op.inputs[0].shape[-1])
        elif op.kind in ("moe_dispatch", "moe_combine"):
            bound = min(bound, int(op.attrs.get("experts", 1)) or 1)
    return bound if bound < 2**31 - 1 else 2


def _compile_torch(graph: OpGraph, device: str, seed: int) -> GraphRunner:
    import torch

    dev = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    last_use: dict[str, int] = {}
    for i, op in enumerate(graph.ops):
        for t in op.inputs:
            last_use[t.name] = i
    outputs = tuple(t.name for t in graph.outputs)
    inputs = {t.name: _random_tensor(torch, t, dev, gen, f"graph {graph.name!r}: input {t.name!r}", _int_bound(graph, t))
              for t in graph.inputs}
    steps: list[Callable[[dict[str, Any]], None]] = []
    for i, op in enumerate(graph.ops):
        state: dict[str, Any] = {}
        fn = _torch_step(torch, op, device, dev, state)
        in_names = tuple(t.name for t in op.inputs)
        out_names = tuple(t.name for t in op.outputs)
        drop = tuple(n for n in set(in_names) if last_use.get(n) == i and n not in inputs and n not in outputs)
        out_dts = tuple(_tdtype(torch, t.dtype, op.name) for t in op.outputs)

        def step(env: dict[str, Any], fn: Any = fn, ins: tuple[str, ...] = in_names, outs: tuple[str, ...] = out_names,
                 drop: tuple[str, ...] = drop, dts: tuple[Any, ...] = out_dts, _st: Any = state) -> None:
            res = fn(*(env[n] for n in ins))
            if not isinstance(res, tuple):
                res = (res,)
            for n, r, dt in zip(outs, res, dts, strict=False):
                env[n] = r if r.dtype == dt else r.to(dt)
            for n in drop:
                env.pop(n, None)

        steps.append(step)
    if dev.type == "cuda":
        def sync() -> None:
            torch.cuda.synchronize(dev)
    else:
        def sync() -> None:
            return None
    return GraphRunner(graph, "torch", device, steps, inputs, outputs, sync)


# ------------------------------------------------------------------------------------------------
# numpy backend (CPU, fp32/fp64 only; the kinds of the microbenchmark suite)


#: Op kinds the NumPy fallback executes.
NUMPY_KINDS: tuple[str, ...] = ("matmul", "elementwise", "softmax", "layernorm", "attention", "reshape", "transpose")


def _numpy_step(op: Op) -> Callable[..., Any]:
    where = f"op {op.name!r} ({op.kind})"
    k, a = op.kind, op.attrs
    if k == "matmul":
        ta, tb = bool(a.get("transpose_a")), bool(a.get("transpose_b"))

        def mm(x: Any, w: Any, b: Any = None) -> Any:
            y = np.matmul(np.swapaxes(x, -1, -2) if ta else x, np.swapaxes(w, -1, -2) if tb else w)
            return y + b if b is not None else y

        return mm
    if k == "elementwise":
        fns: dict[str, Callable[..., Any]] = {
            "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
            "min": np.minimum, "relu": lambda x: np.maximum(x, 0), "exp": np.exp, "tanh": np.tanh,
            "copy": np.copy, "identity": np.copy, "cast": np.copy, "neg": np.negative, "abs": np.abs,
            "square": np.square, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
            "gelu": lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3))),
            "silu": lambda x: x / (1 + np.exp(-x)),
        }
        f = fns.get(a["op"])
        if f is None:
            raise UnsupportedOpError(f"{where}: elementwise op {a['op']!r} has no NumPy fallback; expected one of "
                                     f"{', '.join(sorted(fns))} (install torch for the rest)")
        return f
    if k == "softmax":
        ax = int(a.get("axis", -1))

        def sm(x: Any) -> Any:
            e = np.exp(x - x.max(axis=ax, keepdims=True))
            return e / e.sum(axis=ax, keepdims=True)

        return sm
    if k == "layernorm":
        def ln(x: Any, g: Any = None, b: Any = None) -> Any:
            mu = x.mean(-1, keepdims=True)
            var = x.var(-1, keepdims=True)
            y = (x - mu) / np.sqrt(var + 1e-5)
            return y * g + b if g is not None and b is not None else y

        return ln
    if k == "attention":
        causal = bool(a.get("causal"))

        def attn(q: Any, kt: Any, v: Any, m: Any = None) -> Any:
            rep = q.shape[1] // kt.shape[1]
            if rep > 1:
                kt, v = np.repeat(kt, rep, axis=1), np.repeat(v, rep, axis=1)
            s = np.matmul(q, np.swapaxes(kt, -1, -2)) / math.sqrt(q.shape[-1])
            if causal:
                sq, skv = s.shape[-2], s.shape[-1]
                s = np.where(np.arange(skv)[None, :] <= np.arange(sq)[:, None] + (skv - sq), s, -np.inf)
            e = np.exp(s - s.max(-1, keepdims=True))
            return np.matmul(e / e.sum(-1, keepdims=True), v)

        return attn
    if k == "reshape":
        shape = op.outputs[0].shape
        return lambda x: x.reshape(shape)
    if k == "transpose":
        perm = tuple(a.get("perm", tuple(reversed(range(len(op.inputs[0].shape))))))
        return lambda x: np.ascontiguousarray(np.transpose(x, perm))
    raise UnsupportedOpError(f"{where}: no NumPy fallback for op kind {k!r}; expected one of {', '.join(NUMPY_KINDS)} "
                             "(install torch to execute every kind)")


_NP_DTYPES = {DType.FP64: np.float64, DType.FP32: np.float32, DType.TF32: np.float32}


def _compile_numpy(graph: OpGraph, seed: int) -> GraphRunner:
    rng = np.random.default_rng(seed)
    inputs: dict[str, Any] = {}
    for t in graph.inputs:
        dt = _NP_DTYPES.get(t.dtype)
        if dt is None:
            raise UnsupportedOpError(f"graph {graph.name!r}: input {t.name!r}: dtype {t.dtype.value!r} has no NumPy "
                                     "fallback; expected fp32 or fp64 (install torch for bf16/fp16)")
        inputs[t.name] = (rng.standard_normal(t.shape, dtype=np.float32) * 0.1).astype(dt)
    steps = []
    for op in graph.ops:
        fn = _numpy_step(op)
        ins = tuple(t.name for t in op.inputs)
        outs = tuple(t.name for t in op.outputs)

        def step(env: dict[str, Any], fn: Any = fn, ins: tuple[str, ...] = ins, outs: tuple[str, ...] = outs) -> None:
            res = fn(*(env[n] for n in ins))
            for n, r in zip(outs, res if isinstance(res, tuple) else (res,), strict=False):
                env[n] = r

        steps.append(step)
    return GraphRunner(graph, "numpy", "cpu", steps, inputs, tuple(t.name for t in graph.outputs), lambda: None)


def compile_graph(graph: OpGraph, *, device: str = "cpu", backend: str = "auto", seed: int = 0) -> GraphRunner:
    """Prepare ``graph`` for execution on ``device`` with random inputs (seeded).

    Parameters
    ----------
    graph
        Any OpGraph (micro-workload, zoo model, imported model).
    device
        A torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``); NumPy runs on ``"cpu"`` only.
    backend
        ``"torch"``, ``"numpy"`` or ``"auto"`` (torch when importable).
    seed
        Seed of the random inputs.

    Raises
    ------
    UnsupportedOpError
        An op (named) that the backend cannot execute.
    ValueError
        An unknown backend, or NumPy asked for a non-CPU device.
    """
    if backend == "auto":
        backend = "torch" if torch_available() else "numpy"
    if backend == "torch":
        return _compile_torch(graph, device, seed)
    if backend == "numpy":
        if device != "cpu":
            raise ValueError(f"executor: NumPy runs on the CPU only; got device {device!r}; expected 'cpu' "
                             "(install torch for accelerators)")
        return _compile_numpy(graph, seed)
    raise ValueError(f"executor: unknown backend; got {backend!r}; expected 'torch', 'numpy' or 'auto'")
