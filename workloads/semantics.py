"""Per-kind op semantics: shape inference, FLOPs (multiply-add = 2), compulsory bytes and parameters.

Counting conventions (documented, not hardware factors):

* Contractions count ``2 * M * N * K`` FLOPs; bias adds count one FLOP per output element.
* Fused attention counts its two contractions only (``2 * d`` per query-key pair for QK^T and
  ``2 * d_v`` for PV), the convention of the FlashAttention papers' TFLOP/s figures; a causal mask
  keeps only the pairs at or below the diagonal (aligned to the end of the key sequence); a causal
  sliding window of ``W`` tokens (attribute ``window``, 0: none) keeps ``min(pos + 1, W)`` keys per
  query at position ``pos`` (Mistral / Gemma 2-3 / GPT-OSS local layers: key ``j`` is seen when
  ``pos - W < j <= pos``).
* Vector ops count per element: see ``ELEMENTWISE_FLOPS`` and the constants below. These are op
  counts, not hardware costs; the hardware models decide how fast each op class runs.
* Bytes are compulsory traffic: every input read once and every output written once, except views
  (reshape, split, slice: zero), gathers (embedding: the rows touched), in-place cache appends (only
  the new entries) and MoE expert weights (only the active experts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nodeperf.suggest import did_you_mean
from workloads.dtypes import DType
from workloads.ir import GraphError, Op, Role, TensorSpec, UnsupportedOpError

__all__ = [
    "KindInfo",
    "register",
    "semantics_of",
    "check_op",
    "kinds",
    "gemm_dims",
    "conv_dims",
    "conv_params",
    "attention_pairs",
    "attention_window",
    "banded_block_pairs",
    "band_block_start",
    "ELEMENTWISE_FLOPS",
    "DROPOUT_MASK_BYTES",
    "dropout_mask_bytes",
]

Shape = tuple[int, ...]
Out = list[tuple[Shape, DType | None]]

#: FLOPs per output element of elementwise ops (forward). Transcendentals count as 1 op each.
ELEMENTWISE_FLOPS: dict[str, int] = {
    "add": 1, "sub": 1, "mul": 1, "div": 1, "max": 1, "min": 1, "pow": 1, "where": 1,
    "neg": 1, "abs": 1, "relu": 1, "relu6": 2, "leaky_relu": 2, "exp": 1, "log": 1, "sqrt": 1,
    "rsqrt": 1, "reciprocal": 1, "square": 1, "erf": 1, "sin": 1, "cos": 1,
    "sigmoid": 3,  # exp, add, reciprocal
    "tanh": 1,
    "silu": 4,  # sigmoid (3) + mul
    "swish": 4,
    "hardswish": 4,
    "hardsigmoid": 3,
    "gelu": 8,  # tanh approximation: ~8 ops per element
    "quick_gelu": 5,
    "softplus": 3,
    "rope": 3,  # x*cos + rotate(x)*sin
    "scale": 1,
    "cast": 0, "copy": 0, "identity": 0, "dropout": 1,
    "mask": 1,
    "clip": 2,
    "ge": 1, "le": 1, "logical_and": 1,  # comparisons and a logical and: a bool mask (clamp_backward)
}
#: Backward elementwise FLOPs per element (dy -> dx), same spirit.
ELEMENTWISE_BWD_FLOPS: dict[str, int] = {k: max(1, 2 * v) for k, v in ELEMENTWISE_FLOPS.items()}
SOFTMAX_FLOPS = 5  # max, subtract, exp, sum, divide
LAYERNORM_FLOPS = 8  # mean, subtract, square, sum, rsqrt-normalise, scale, shift
RMSNORM_FLOPS = 4  # square, sum, normalise, scale
BATCHNORM_FLOPS = 2  # inference: folded scale and shift
BATCHNORM_TRAIN_FLOPS = 8
LSTM_POINTWISE_FLOPS = 20  # per hidden unit per step: 2 bias adds x4 gates, 3 sigmoid, 2 tanh, c/h update
GRU_POINTWISE_FLOPS = 16
OPTIMIZER_FLOPS = {"sgd": 2, "sgd_momentum": 4, "adam": 12, "adamw": 14, "lamb": 18}


@dataclass(frozen=True)
class KindInfo:
    """Semantics of one op kind."""

    kind: str
    category: str
    infer: Callable[[tuple[TensorSpec, ...], Any], Out]
    flops: Callable[[Op], int]
    macs: Callable[[Op], int]
    bytes_rw: Callable[[Op], tuple[int, int]]
    params: Callable[[Op], int]
    doc: str = ""


_REGISTRY: dict[str, KindInfo] = {}


def _default_bytes(op: Op) -> tuple[int, int]:
    return sum(t.nbytes for t in op.inputs), sum(t.nbytes for t in op.outputs)


def _view_bytes(op: Op) -> tuple[int, int]:
    return 0, 0


def _default_params(op: Op) -> int:
    return sum(t.numel for t in op.inputs if t.role is Role.WEIGHT)


def _zero(op: Op) -> int:
    return 0


def register(
    kind: str,
    category: str,
    infer: Callable[..., Out],
    flops: Callable[[Op], int] = _zero,
    *,
    macs: Callable[[Op], int] = _zero,
    bytes_rw: Callable[[Op], tuple[int, int]] = _default_bytes,
    params: Callable[[Op], int] = _default_params,
    doc: str = "",
) -> KindInfo:
    """Register (or replace) the semantics of ``kind``."""
    info = KindInfo(kind, category, infer, flops, macs, bytes_rw, params, doc)
    _REGISTRY[kind] = info
    return info


def kinds() -> list[str]:
    return sorted(_REGISTRY)


def semantics_of(kind: str, where: str = "op") -> KindInfo:
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise UnsupportedOpError(
            f"{where}: unknown op kind; got {kind!r}; expected a registered kind{did_you_mean(kind, _REGISTRY)}") from None


def check_op(op: Op) -> None:
    """Re-infer ``op``'s output shapes and compare with the declared ones; GraphError on mismatch."""
    sem = semantics_of(op.kind, where=f"op {op.name!r}")
    try:
        outs = sem.infer(op.inputs, op.attrs)
    except GraphError as exc:
        raise GraphError(f"op {op.name!r} ({op.kind}): {exc}") from None
    if len(outs) != len(op.outputs):
        raise GraphError(
            f"op {op.name!r} ({op.kind}): wrong number of outputs; got {len(op.outputs)}; expected {len(outs)}"
        )
    for (shape, _), t in zip(outs, op.outputs, strict=True):
        if tuple(shape) != t.shape:
            raise GraphError(
                f"op {op.name!r} ({op.kind}): output {t.name!r} shape mismatch; got {t.shape}; expected {tuple(shape)}"
            )


# ------------------------------------------------------------------------------------------------
# helpers


def _need(inputs: Sequence[TensorSpec], lo: int, hi: int | None = None) -> None:
    hi = lo if hi is None else hi
    if not lo <= len(inputs) <= hi:
        exp = str(lo) if lo == hi else f"{lo}..{hi}"
        raise GraphError(f"wrong number of inputs; got {len(inputs)}; expected {exp}")


def _rank(t: TensorSpec, *ranks: int) -> None:
    if len(t.shape) not in ranks:
        raise GraphError(
            f"input {t.name!r} has rank {len(t.shape)}; got shape {t.shape}; expected rank {' or '.join(map(str, ranks))}"
        )


def _pair(v: Any, n: int = 2) -> tuple[int, ...]:
    if isinstance(v, int | float):
        return (int(v),) * n
    t = tuple(int(x) for x in v)
    if len(t) == 1:
        return t * n
    return t


def broadcast(*shapes: Shape) -> Shape:
    """NumPy broadcasting of shapes; GraphError naming both when incompatible."""
    nd = max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        dims = {s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0} - {1}
        if len(dims) > 1:
            raise GraphError(f"shapes do not broadcast; got {', '.join(map(str, shapes))}; expected equal or 1 per axis")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _axis(ax: int, rank: int) -> int:
    a = ax + rank if ax < 0 else ax
    if not 0 <= a < rank:
        raise GraphError(f"axis out of range; got {ax}; expected -{rank}..{rank - 1}")
    return a


# ------------------------------------------------------------------------------------------------
# contractions


def gemm_dims(op: Op) -> tuple[int, int, int, int]:
    """(batch, m, n, k) of a matmul as a GEMM: a 2-D weight folds leading dims into m."""
    a, b = op.inputs[0], op.inputs[1]
    ta, tb = bool(op.attrs.get("transpose_a", False)), bool(op.attrs.get("transpose_b", False))
    k = a.shape[-2] if ta else a.shape[-1]
    n = b.shape[-2] if tb else b.shape[-1]
    out = op.outputs[0].shape
    if len(b.shape) == 2 and not ta:
        m = math.prod(a.shape[:-1])
        return 1, m, n, k
    if len(a.shape) == 1:  # a vector against a batch of matrices: one row per batch entry
        return math.prod(out[:-1]), 1, n, k
    m = out[-2]
    return math.prod(out[:-2]), m, n, k


def _infer_matmul(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2, 3)
    a, b = inputs[0], inputs[1]
    if len(a.shape) < 1 or len(b.shape) < 2:
        raise GraphError(f"matmul needs a rank >= 1 and b rank >= 2; got {a.shape} and {b.shape}; expected (...,M,K) @ (...,K,N)")
    ta, tb = bool(attrs.get("transpose_a", False)), bool(attrs.get("transpose_b", False))
    ash = a.shape if len(a.shape) >= 2 else (1,) + a.shape
    m, k = (ash[-1], ash[-2]) if ta else (ash[-2], ash[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if tb else (b.shape[-2], b.shape[-1])
    if k != kb:
        raise GraphError(f"contraction dims differ; got a {a.shape} (K={k}) and b {b.shape} (K={kb}); expected equal K")
    batch = broadcast(ash[:-2], b.shape[:-2])
    out = (*batch, m, n) if len(a.shape) >= 2 else (*batch, n)
    if len(inputs) == 3:
        broadcast(inputs[2].shape, out)
    return [(out, a.dtype)]


def _flops_matmul(op: Op) -> int:
    bt, m, n, k = gemm_dims(op)
    bias = op.outputs[0].numel if len(op.inputs) == 3 else 0
    return 2 * bt * m * n * k + bias


def _macs_matmul(op: Op) -> int:
    bt, m, n, k = gemm_dims(op)
    return bt * m * n * k


register("matmul", "contraction", _infer_matmul, _flops_matmul, macs=_macs_matmul,
         doc="a (...,M,K) @ b (K,N) or (...,K,N) [+ bias]; attrs transpose_a, transpose_b")


def _infer_grouped(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    x, w = inputs
    _rank(x, 3)
    _rank(w, 3)
    if x.shape[0] != w.shape[0] or x.shape[2] != w.shape[1]:
        raise GraphError(f"grouped matmul shapes; got x {x.shape} and w {w.shape}; expected (E,C,K) and (E,K,N)")
    tokens = int(attrs.get("tokens", x.shape[0] * x.shape[1]))
    active = int(attrs.get("experts_active", x.shape[0]))
    if not 0 < tokens <= x.shape[0] * x.shape[1] or not 0 < active <= x.shape[0]:
        raise GraphError(f"tokens={tokens}, experts_active={active}; expected 0 < tokens <= E*C and 0 < experts_active <= E")
    return [((x.shape[0], x.shape[1], w.shape[2]), x.dtype)]


def _grouped_tok(op: Op) -> tuple[int, int, int, int, int]:
    x, w = op.inputs
    e, c, k = x.shape
    n = w.shape[2]
    return int(op.attrs.get("tokens", e * c)), int(op.attrs.get("experts_active", e)), k, n, e


def _bytes_grouped(op: Op) -> tuple[int, int]:
    tokens, active, k, n, e = _grouped_tok(op)
    x, w = op.inputs
    return (tokens * k * x.dtype.bits + active * k * n * w.dtype.bits + 7) // 8, (tokens * n * op.outputs[0].dtype.bits + 7) // 8


def _macs_grouped(op: Op) -> int:
    tokens, _, k, n, _ = _grouped_tok(op)
    return tokens * k * n


register(
    "grouped_matmul", "contraction", _infer_grouped, lambda op: 2 * _macs_grouped(op), macs=_macs_grouped,
    bytes_rw=_bytes_grouped,
    doc="MoE experts: x (E,C,K) @ w (E,K,N); attrs tokens (rows actually routed), experts_active",
)


def conv_out(size: int, k: int, s: int, p0: int, p1: int, d: int) -> int:
    return (size + p0 + p1 - d * (k - 1) - 1) // s + 1


def conv_params(attrs: Any, nd: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    """``(stride, dilation, padding, groups)`` of a convolution's attrs over ``nd`` spatial dims; padding
    holds ``2 * nd`` values (begin and end per dim; one value per dim is used for both)."""
    stride = _pair(attrs.get("stride", 1), nd)
    dil = _pair(attrs.get("dilation", 1), nd)
    pad = _pair(attrs.get("padding", 0), nd)
    if len(pad) == nd:
        pad = pad + pad  # (begin..., end...)
    groups = int(attrs.get("groups", 1))
    return stride, dil, pad, groups


def _infer_conv(nd: int) -> Callable[..., Out]:
    def infer(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
        _need(inputs, 2, 3)
        x, w = inputs[0], inputs[1]
        _rank(x, nd + 2)
        _rank(w, nd + 2)
        stride, dil, pad, groups = conv_params(attrs, nd)
        if min(stride) < 1 or min(dil) < 1 or min(pad) < 0 or groups < 1:
            raise GraphError(f"stride {stride}, dilation {dil}, padding {pad}, groups {groups}; expected positive stride/dilation/groups, padding >= 0")
        c, k = x.shape[1], w.shape[0]
        if c % groups or k % groups or w.shape[1] != c // groups:
            raise GraphError(f"channels: input {c}, weight {w.shape}, groups {groups}; expected weight (K, C/groups, ...) with C and K divisible by groups")
        spatial = []
        for i in range(nd):
            o = conv_out(x.shape[2 + i], w.shape[2 + i], stride[i], pad[i], pad[nd + i], dil[i])
            if o < 1:
                raise GraphError(
                    f"filter larger than its (padded) input on spatial axis {i}; got input {x.shape[2 + i]} + padding "
                    f"{pad[i] + pad[nd + i]} and filter {w.shape[2 + i]} (dilation {dil[i]}); expected filter <= input"
                )
            spatial.append(o)
        if len(inputs) == 3 and inputs[2].shape != (k,):
            raise GraphError(f"bias shape; got {inputs[2].shape}; expected ({k},)")
        return [((x.shape[0], k, *spatial), x.dtype)]

    return infer


def conv_dims(op: Op) -> dict[str, int]:
    """Implicit-GEMM view of a conv: M = N*P*Q, N = K, K = C/g*R*S per group; plus raw dims."""
    if op.kind.endswith("bwd_data"):  # dy, w -> dx
        x_shape, w, y_shape = op.outputs[0].shape, op.inputs[1], op.inputs[0].shape
    elif op.kind.endswith("bwd_weight"):  # x, dy -> dw
        x_shape, w, y_shape = op.inputs[0].shape, op.outputs[0], op.inputs[1].shape
    else:  # x, w [, bias] -> y
        x_shape, w, y_shape = op.inputs[0].shape, op.inputs[1], op.outputs[0].shape
    groups = int(op.attrs.get("groups", 1))
    out_pix = math.prod(y_shape[2:])
    filt = math.prod(w.shape[2:])
    return {
        "n": x_shape[0], "c": x_shape[1], "k": y_shape[1], "groups": groups,
        "out_pixels": out_pix, "filter_size": filt,
        "gemm_m": x_shape[0] * out_pix, "gemm_n": y_shape[1] // groups, "gemm_k": (x_shape[1] // groups) * filt,
    }


def _macs_conv(op: Op) -> int:
    d = conv_dims(op)
    return d["groups"] * d["gemm_m"] * d["gemm_n"] * d["gemm_k"]


def _flops_conv(op: Op) -> int:
    bias = op.outputs[0].numel if len(op.inputs) == 3 and not op.kind.endswith(("bwd_data", "bwd_weight")) else 0
    return 2 * _macs_conv(op) + bias


register("conv2d", "contraction", _infer_conv(2), _flops_conv, macs=_macs_conv,
         doc="x (N,C,H,W) * w (K,C/g,R,S) [+ bias (K,)]; attrs stride, padding (2 or 4), dilation, groups")
register("conv1d", "contraction", _infer_conv(1), _flops_conv, macs=_macs_conv,
         doc="x (N,C,L) * w (K,C/g,R) [+ bias]; attrs stride, padding, dilation, groups")


def _check_conv_bwd(x: TensorSpec, w: TensorSpec, dy: TensorSpec, attrs: Any) -> None:
    """The forward conv of ``x`` and ``w`` must give ``dy``'s shape (else the counts would be wrong)."""
    (y, _), = _infer_conv(len(x.shape) - 2)((x, w), attrs)
    if tuple(y) != dy.shape:
        raise GraphError(f"gradient {dy.name!r} has shape {dy.shape}; expected {tuple(y)}, the forward conv's output "
                         f"for input {x.shape} and weight {w.shape}")


def _infer_conv_bwd_data(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    dy, w = inputs
    shape = tuple(int(s) for s in attrs["input_shape"])
    _check_conv_bwd(TensorSpec("input_shape", shape, dy.dtype), w, dy, attrs)
    return [(shape, dy.dtype)]


def _infer_conv_bwd_weight(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    x, dy = inputs
    shape = tuple(int(s) for s in attrs["weight_shape"])
    _check_conv_bwd(x, TensorSpec("weight_shape", shape, x.dtype), dy, attrs)
    return [(shape, x.dtype)]


register("conv2d_bwd_data", "contraction", _infer_conv_bwd_data, _flops_conv, macs=_macs_conv, params=_zero,
         doc="dy (N,K,P,Q), w -> dx; attrs input_shape + the forward conv attrs")
register("conv2d_bwd_weight", "contraction", _infer_conv_bwd_weight, _flops_conv, macs=_macs_conv, params=_zero,
         doc="x, dy -> dw; attrs weight_shape + the forward conv attrs")
register("conv1d_bwd_data", "contraction", _infer_conv_bwd_data, _flops_conv, macs=_macs_conv, params=_zero)
register("conv1d_bwd_weight", "contraction", _infer_conv_bwd_weight, _flops_conv, macs=_macs_conv, params=_zero)


# ------------------------------------------------------------------------------------------------
# attention


def _causal_prefix(n: int, window: int) -> int:
    """Pairs of the first ``n`` positions of a causal (windowed when ``window`` > 0) mask: sum of min(p + 1, W)."""
    if n <= 0:
        return 0
    if window <= 0 or n <= window:
        return n * (n + 1) // 2
    return window * (window + 1) // 2 + (n - window) * window


def attention_pairs(sq: int, skv: int, causal: bool, window: int = 0) -> int:
    """Query-key pairs computed per (batch, head): all, or those at/below the end-aligned diagonal
    (query ``i`` at position ``i + skv - sq``), and within ``window`` keys of it when ``window`` > 0."""
    if not causal:
        return sq * skv
    if window <= 0:
        if sq <= skv:
            return sq * (skv - sq) + sq * (sq + 1) // 2
        return skv * (skv + 1) // 2
    return _causal_prefix(skv, window) - _causal_prefix(skv - sq, window)


def banded_block_pairs(sq: int, skv: int, window: int, block_q: int, block_kv: int) -> int:
    """Query-key pairs a block-sparse flash kernel computes per (batch, head) under a causal window.

    Queries go in blocks of ``block_q`` rows; a block skips the key blocks of ``block_kv`` keys that lie
    wholly before the band of its first row, so each row computes the keys from the start of the first
    visited key block up to its own position (the diagonal counted exactly, as for a causal mask).
    With ``window`` 0 (or one at least ``skv``) this is :func:`attention_pairs`'s causal count.
    """
    if window <= 0 or window >= skv:
        return attention_pairs(sq, skv, True)
    total = 0
    for m in range(0, sq, max(1, block_q)):
        p0 = max(0, m + skv - sq)
        p1 = min(m + block_q, sq) - 1 + skv - sq  # position of the block's last row
        if p1 < p0:
            continue
        lo = band_block_start(p0, window, block_kv)
        total += (p1 + 1) * (p1 + 2) // 2 - p0 * (p0 + 1) // 2 - (p1 - p0 + 1) * lo
    return total


def band_block_start(pos: int, window: int, block_kv: int) -> int:
    """The first key of the key block (of ``block_kv`` keys) that holds the first key of the causal window of
    ``window`` keys seen by the query at position ``pos``: where a block-sparse kernel's query block starting
    at ``pos`` begins computing; 0 without a window (``window`` <= 0) or when the window reaches key 0.

    >>> band_block_start(3000, 1024, 512), band_block_start(3000, 0, 512), band_block_start(800, 1024, 512)
    (1536, 0, 0)
    """
    if window <= 0:
        return 0
    return (max(0, pos - window + 1) // block_kv) * block_kv


def attention_window(op: Op) -> int:
    """An attention op's causal sliding window in tokens (0: full attention)."""
    return int(op.attrs.get("window", 0) or 0)


def _infer_attention(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 3, 4)
    q, k, v = inputs[:3]
    for t in (q, k, v):
        _rank(t, 4)
    b, hq, sq, d = q.shape
    bk, hk, skv, dk = k.shape
    if (bk, hk, skv) != v.shape[:3] or bk != b or dk != d:
        raise GraphError(f"q {q.shape}, k {k.shape}, v {v.shape}; expected q (B,Hq,Sq,D), k (B,Hkv,Skv,D), v (B,Hkv,Skv,Dv)")
    if hq % hk:
        raise GraphError(f"query heads {hq} not a multiple of key/value heads {hk}; expected Hq % Hkv == 0 (GQA/MQA)")
    _check_window(attrs)
    return [((b, hq, sq, v.shape[3]), q.dtype)]


def _check_window(attrs: Any) -> None:
    w = attrs.get("window", 0) or 0
    if isinstance(w, bool) or not isinstance(w, int) or w < 0:
        raise GraphError(f"window: got {w!r}; expected an integer >= 0 (tokens; 0: full attention)")
    if w and not attrs.get("causal", False):
        raise GraphError(f"window {w}: a sliding window needs a causal mask; expected causal=True or window 0")


def _attn_dims(op: Op) -> tuple[int, int, int, int, int, int]:
    q, k, v = op.inputs[:3]
    return q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]


def _macs_attention(op: Op) -> int:
    b, h, sq, skv, d, dv = _attn_dims(op)
    return b * h * attention_pairs(sq, skv, bool(op.attrs.get("causal", False)), attention_window(op)) * (d + dv)


register("attention", "attention", _infer_attention, lambda op: 2 * _macs_attention(op), macs=_macs_attention,
         doc="fused (flash-style) attention: q (B,Hq,Sq,D), k/v (B,Hkv,Skv,D[v]) [, mask]; attrs causal, window (causal sliding window in tokens, 0: none)")


def _infer_attention_bwd(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 5, 6)
    q, k, v = inputs[:3]
    _check_window(attrs)
    outs: Out = [(q.shape, q.dtype), (k.shape, k.dtype), (v.shape, v.dtype)]
    if attrs.get("has_bias") and len(inputs) == 6:  # additive score bias (T5 relative bias): its gradient too
        outs.append((inputs[5].shape, inputs[5].dtype))
    return outs


def _macs_attention_bwd(op: Op) -> int:
    # five contractions per pair: S = QK^T recomputed, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
    b, h, sq, skv, d, dv = _attn_dims(op)
    return b * h * attention_pairs(sq, skv, bool(op.attrs.get("causal", False)), attention_window(op)) * (3 * d + 2 * dv)


register("attention_bwd", "attention", _infer_attention_bwd, lambda op: 2 * _macs_attention_bwd(op),
         macs=_macs_attention_bwd, params=_zero,
         doc="flash-style attention backward: q, k, v, o, do [, lse or bias] -> dq, dk, dv [, dbias when attrs has_bias]")


# ------------------------------------------------------------------------------------------------
# vector ops


def _same_as_first(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    if not inputs:
        raise GraphError("no inputs; expected at least one")
    return [(inputs[0].shape, inputs[0].dtype)]


def _check_elementwise_fn(fn: Any) -> None:
    if fn not in ELEMENTWISE_FLOPS:
        raise GraphError(f"unknown elementwise op; got {fn!r}; expected one of {', '.join(sorted(ELEMENTWISE_FLOPS))}"
                         + did_you_mean(str(fn), ELEMENTWISE_FLOPS))


def _infer_elementwise(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1, 3)
    _check_elementwise_fn(attrs.get("op"))
    shape = broadcast(*(t.shape for t in inputs))
    dt = next((t.dtype for t in inputs if t.role is not Role.WEIGHT), inputs[0].dtype)
    return [(shape, dt)]


#: Bytes per element of the mask a training dropout kernel writes beside its output and its backward reads
#: beside the gradient: PyTorch's ``native_dropout`` (``aten/src/ATen/native/cuda/Dropout.cu``:
#: ``fused_dropout_kernel`` stores one byte of keep-mask per element, ``masked_scale_kernel`` reads it back in
#: ``native_dropout_backward``); TorchScript's fused dropout (Megatron-LM's ``bias_dropout_add_fused_train``,
#: ``torch/csrc/jit/runtime/symbolic_script.cpp``: ``mask = torch.rand_like(input) < p1m``) saves a bool mask too.
DROPOUT_MASK_BYTES = 1


def dropout_mask_bytes(op: Op) -> int:
    """Mask bytes of a training dropout op: written by the forward (``attrs training``), read by its
    ``elementwise_bwd``; 0 for any other op and for a dropout that runs at inference (a copy, no mask)."""
    if op.attrs.get("op") != "dropout":
        return 0
    if op.kind == "elementwise_bwd" or op.attrs.get("training"):
        return DROPOUT_MASK_BYTES * op.outputs[0].numel
    return 0


def _bytes_elementwise(op: Op) -> tuple[int, int]:
    r, w = _default_bytes(op)
    m = dropout_mask_bytes(op)
    return (r + m, w) if op.kind == "elementwise_bwd" else (r, w + m)


register("elementwise", "elementwise", _infer_elementwise,
         lambda op: ELEMENTWISE_FLOPS[op.attrs["op"]] * op.outputs[0].numel, bytes_rw=_bytes_elementwise,
         doc="unary/binary/ternary broadcasting op; attrs op (add, mul, relu, gelu, silu, ...); a dropout with "
             "attrs training writes its mask (DROPOUT_MASK_BYTES per element); access (optional: 'outer_axis', "
             "a kernel that reads its input along the outer axis, priced at the device's "
             "efficiency.outer_axis_stream_fraction of the streaming rate)")


def _infer_elementwise_bwd(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1, 3)
    _check_elementwise_fn(attrs.get("op", "add"))
    if "shape" in attrs:  # dy broadcast back to the input's shape (a reduction's gradient)
        return [(tuple(attrs["shape"]), inputs[0].dtype)]
    return [(inputs[0].shape, inputs[0].dtype)]


register("elementwise_bwd", "elementwise", _infer_elementwise_bwd,
         lambda op: ELEMENTWISE_BWD_FLOPS[op.attrs.get("op", "add")] * op.outputs[0].numel, params=_zero,
         bytes_rw=_bytes_elementwise,
         doc="dy [, x or y] -> dx of an elementwise op; attrs op (dropout: reads its forward's mask too), shape "
             "(optional: dy broadcast to it)")


def _infer_softmax(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    _axis(int(attrs.get("axis", -1)), len(inputs[0].shape))
    return [(inputs[0].shape, inputs[0].dtype)]


register("softmax", "normalization", _infer_softmax, lambda op: SOFTMAX_FLOPS * op.inputs[0].numel,
         doc="softmax along attrs axis (default -1)")
register("softmax_bwd", "normalization", lambda i, a: [(i[0].shape, i[0].dtype)],
         lambda op: 4 * op.inputs[0].numel, params=_zero, doc="y, dy -> dx")


def _infer_norm(n_weights: int) -> Callable[..., Out]:
    def infer(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
        _need(inputs, 1, 1 + n_weights)
        x = inputs[0]
        for w in inputs[1:]:
            if w.numel != x.shape[-1]:
                raise GraphError(f"scale/shift {w.name!r} has {w.numel} elements; got {w.shape}; expected {x.shape[-1]} (last axis)")
        return [(x.shape, x.dtype)]

    return infer


register("layernorm", "normalization", _infer_norm(2), lambda op: LAYERNORM_FLOPS * op.inputs[0].numel,
         doc="x, [gamma, beta] over the last axis")
register("rmsnorm", "normalization", _infer_norm(1), lambda op: RMSNORM_FLOPS * op.inputs[0].numel,
         doc="x, [gamma] over the last axis")


def _infer_batchnorm(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1, 3)
    x = inputs[0]
    for w in inputs[1:]:
        if w.numel != x.shape[1]:
            raise GraphError(f"batchnorm {w.name!r} has {w.numel} elements; expected {x.shape[1]} (channels)")
    return [(x.shape, x.dtype)]


register("batchnorm", "normalization", _infer_batchnorm,
         lambda op: (BATCHNORM_TRAIN_FLOPS if op.attrs.get("training") else BATCHNORM_FLOPS) * op.inputs[0].numel,
         doc="x (N,C,...), [scale, shift]; running statistics folded in at inference; attrs training")


def _infer_groupnorm(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1, 3)
    x = inputs[0]
    if len(x.shape) < 2:
        raise GraphError(f"groupnorm input {x.name!r} has shape {x.shape}; expected (N, C, ...)")
    groups = int(attrs.get("groups", 32))
    if groups < 1 or x.shape[1] % groups:
        raise GraphError(f"groupnorm of {x.shape[1]} channels in {groups} groups; expected groups >= 1 dividing C")
    for w in inputs[1:]:
        if w.numel != x.shape[1]:
            raise GraphError(f"groupnorm {w.name!r} has {w.numel} elements; expected {x.shape[1]} (channels)")
    return [(x.shape, x.dtype)]


register("groupnorm", "normalization", _infer_groupnorm, lambda op: LAYERNORM_FLOPS * op.inputs[0].numel,
         doc="x (N,C,...), [gamma, beta] (C,): statistics over each of attrs groups (C/groups channels x spatial)")


def _infer_norm_bwd(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2, 4)
    dy, x = inputs[0], inputs[1]
    outs: Out = [(x.shape, dy.dtype)]
    if len(inputs) > 2:  # dgamma [, dbeta] take the scale's shape
        w = inputs[2]
        outs += [(w.shape, w.dtype)] * (2 if attrs.get("has_bias", True) else 1)
    return outs


for _k, _f in (("layernorm_bwd", 2 * LAYERNORM_FLOPS), ("groupnorm_bwd", 2 * LAYERNORM_FLOPS),
               ("rmsnorm_bwd", 2 * RMSNORM_FLOPS),
               ("batchnorm_bwd", 2 * BATCHNORM_TRAIN_FLOPS)):
    register(_k, "normalization", _infer_norm_bwd, (lambda f: lambda op: f * op.inputs[0].numel)(_f), params=_zero,
             doc="dy, x [, gamma] -> dx [, dgamma, dbeta]; attrs has_bias")


def _infer_reduction(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    x = inputs[0]
    axes = attrs.get("axes", tuple(range(len(x.shape))))
    axes = {_axis(int(a), len(x.shape)) for a in (axes if isinstance(axes, tuple) else (axes,))}
    keep = bool(attrs.get("keepdims", False))
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keep else tuple(
        s for i, s in enumerate(x.shape) if i not in axes)
    return [(shape or (1,), x.dtype)]


register("reduction", "reduction", _infer_reduction,
         lambda op: int(op.attrs.get("flops_per_element", 1)) * op.inputs[0].numel,
         doc="sum/mean/max over attrs axes; attrs op, keepdims, flops_per_element (FLOPs per input "
             "element, default 1: a plain sum), access (optional: 'outer_axis', as elementwise), operands "
             "(optional: 'register-chain', the FLOPs are a dependent FMA chain on register operands)")


def _infer_pool(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    x = inputs[0]
    _rank(x, 4)
    if "output_size" in attrs:  # adaptive pooling
        oh, ow = _pair(attrs["output_size"])
        return [((x.shape[0], x.shape[1], oh, ow), x.dtype)]
    kr, ks = _pair(attrs["kernel"])
    sr, ss = _pair(attrs.get("stride", (kr, ks)))
    pad = _pair(attrs.get("padding", 0))
    if len(pad) == 2:
        pad = pad + pad
    if min(kr, ks, sr, ss) < 1 or min(pad) < 0:
        raise GraphError(f"kernel {(kr, ks)}, stride {(sr, ss)}, padding {pad}; expected kernel and stride >= 1, "
                         "padding >= 0")
    ceil = bool(attrs.get("ceil_mode", False))
    out = []
    for size, k, s, p0, p1 in ((x.shape[2], kr, sr, pad[0], pad[2]), (x.shape[3], ks, ss, pad[1], pad[3])):
        span = size + p0 + p1 - k
        if span < 0:
            raise GraphError(f"pooling window {k} larger than padded input {size + p0 + p1}; expected window <= input")
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= size + p0:
            o -= 1
        out.append(o)
    return [((x.shape[0], x.shape[1], *out), x.dtype)]


def _pool_window(op: Op) -> int:
    x, y = op.inputs[0], op.outputs[0]
    if "output_size" in op.attrs:
        return max(1, x.numel // y.numel)
    kr, ks = _pair(op.attrs["kernel"])
    return kr * ks


register("pool2d", "reduction", _infer_pool, lambda op: op.outputs[0].numel * _pool_window(op),
         doc="max/avg pooling; attrs mode, kernel, stride, padding, ceil_mode, or output_size (adaptive)")
register("pool2d_bwd", "reduction", lambda i, a: [(tuple(a["input_shape"]), i[0].dtype)],
         lambda op: op.inputs[0].numel * max(1, _pool_window_bwd(op)), params=_zero)


def _pool_window_bwd(op: Op) -> int:
    if "kernel" in op.attrs:
        kr, ks = _pair(op.attrs["kernel"])
        return kr * ks
    return 1


def _infer_resize(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    x = inputs[0]
    scale = _pair(attrs.get("scale", 2), len(x.shape) - 2)
    if len(scale) != len(x.shape) - 2 or any(f < 1 for f in scale):
        raise GraphError(f"scale {scale} for input {x.shape}; expected one integer >= 1 per spatial axis")
    return [((x.shape[0], x.shape[1], *(s * f for s, f in zip(x.shape[2:], scale, strict=True))), x.dtype)]


register("resize", "memory", _infer_resize, lambda op: 0, doc="nearest upsampling by integer attrs scale")


# ------------------------------------------------------------------------------------------------
# embeddings and data movement


def _infer_embedding(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    ids, table = inputs
    _rank(table, 2)
    if ids.dtype.is_float:
        raise GraphError(f"embedding ids {ids.name!r} are {ids.dtype.value}; expected an integer dtype")
    bag = attrs.get("bag")  # pooled lookup (DLRM): sum over the last ids axis
    shape = ids.shape[:-1] if bag else ids.shape
    return [((*shape, table.shape[1]), table.dtype)]


def _bytes_embedding(op: Op) -> tuple[int, int]:
    ids, table = op.inputs
    rows = ids.numel
    return ids.nbytes + (rows * table.shape[1] * table.dtype.bits + 7) // 8, op.outputs[0].nbytes


register("embedding", "memory", _infer_embedding,
         lambda op: op.inputs[0].numel * op.inputs[1].shape[1] if op.attrs.get("bag") else 0,
         bytes_rw=_bytes_embedding, doc="ids (int, ...) gather rows of table (V,D); attrs bag=sum pools the last ids axis")
def _infer_embedding_bwd(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    table = tuple(int(s) for s in attrs["table_shape"])
    rows = attrs.get("sparse_rows")
    return [((int(rows), table[1]) if rows else table, inputs[0].dtype)]


def _bytes_embedding_bwd(op: Op) -> tuple[int, int]:
    dy, g = op.inputs[0], op.outputs[0]
    if op.attrs.get("sparse_rows"):  # the touched rows only (torch sparse=True gradients)
        return dy.nbytes, g.nbytes
    return dy.nbytes * 2, g.nbytes + dy.nbytes  # dense: zero-filled table gradient, then scatter-add


register("embedding_bwd", "memory", _infer_embedding_bwd, lambda op: op.inputs[0].numel, params=_zero,
         bytes_rw=_bytes_embedding_bwd,
         doc="dy -> table gradient by scatter-add; attrs table_shape, sparse_rows (rows of a sparse gradient)")


def _infer_concat(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    if not inputs:
        raise GraphError("concat of nothing; expected >= 1 input")
    r = len(inputs[0].shape)
    ax = _axis(int(attrs.get("axis", 0)), r)
    for t in inputs[1:]:
        if len(t.shape) != r or any(a != b for i, (a, b) in enumerate(zip(t.shape, inputs[0].shape, strict=True)) if i != ax):
            raise GraphError(f"concat along axis {ax}; got {inputs[0].shape} and {t.shape}; expected equal other dims")
    shape = list(inputs[0].shape)
    shape[ax] = sum(t.shape[ax] for t in inputs)
    return [(tuple(shape), inputs[0].dtype)]


register("concat", "memory", _infer_concat, doc="concatenate along attrs axis (data moves)")


def _infer_split(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    x = inputs[0]
    ax = _axis(int(attrs.get("axis", 0)), len(x.shape))
    sizes = attrs["sizes"]
    if sum(sizes) != x.shape[ax] or min(sizes) < 1:
        raise GraphError(f"split sizes {tuple(sizes)} along axis {ax} of {x.shape}; expected positive sizes summing to {x.shape[ax]}")
    outs: Out = []
    for s in sizes:
        shp = list(x.shape)
        shp[ax] = int(s)
        outs.append((tuple(shp), x.dtype))
    return outs


register("split", "memory", _infer_split, bytes_rw=_view_bytes, doc="views along attrs axis with attrs sizes")


def _infer_slice(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    x = inputs[0]
    shape = tuple(int(s) for s in attrs["shape"])
    if len(shape) != len(x.shape) or any(a > b or a < 0 for a, b in zip(shape, x.shape, strict=True)):
        raise GraphError(f"slice shape {shape} of {x.shape}; expected same rank and each dim <= the input's")
    return [(shape, x.dtype)]


register("slice", "memory", _infer_slice, bytes_rw=_view_bytes, doc="a view of attrs shape")


def _infer_transpose(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    x = inputs[0]
    perm = tuple(attrs.get("perm", tuple(reversed(range(len(x.shape))))))
    if sorted(perm) != list(range(len(x.shape))):
        raise GraphError(f"perm {perm} for shape {x.shape}; expected a permutation of 0..{len(x.shape) - 1}")
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


register("transpose", "memory", _infer_transpose, doc="permute axes (data moves)")


def _infer_reshape(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    x = inputs[0]
    shape = [int(s) for s in attrs["shape"]]
    if shape.count(-1) > 1:
        raise GraphError(f"reshape to {tuple(shape)}; expected at most one -1")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0 or x.numel % rest:
            raise GraphError(f"reshape {x.shape} to {tuple(shape)}; expected sizes dividing {x.numel}")
        shape[shape.index(-1)] = x.numel // rest
    if math.prod(shape) != x.numel:
        raise GraphError(f"reshape {x.shape} ({x.numel} elements) to {tuple(shape)}; expected the same element count")
    return [(tuple(shape), x.dtype)]


register("reshape", "memory", _infer_reshape, bytes_rw=_view_bytes, doc="a view with attrs shape (one -1 allowed)")


def _infer_expand(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1)
    x = inputs[0]
    shape = tuple(int(s) for s in attrs["shape"])
    if broadcast(x.shape, shape) != shape:
        raise GraphError(f"expand {x.shape} to {shape}; expected a target the input broadcasts to")
    return [(shape, x.dtype)]


register("expand", "memory", _infer_expand,
         doc="broadcast x to attrs shape, materialised (the input read once, the output written once)")


def _infer_kv_append(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1, 2)
    new = inputs[-1]
    _rank(new, 4)
    if len(inputs) == 1:
        return [(new.shape, new.dtype)]
    cache = inputs[0]
    if cache.shape[:2] != new.shape[:2] or cache.shape[3] != new.shape[3]:
        raise GraphError(f"cache {cache.shape} and new entries {new.shape}; expected (B,H,L,D) and (B,H,T,D)")
    return [((cache.shape[0], cache.shape[1], cache.shape[2] + new.shape[2], cache.shape[3]), cache.dtype)]


register("kv_append", "memory", _infer_kv_append,
         bytes_rw=lambda op: (op.inputs[-1].nbytes, op.inputs[-1].nbytes), params=_zero,
         doc="[cache (B,H,L,D),] new (B,H,T,D) -> cache (B,H,L+T,D) updated in place (only new entries move)")


# ------------------------------------------------------------------------------------------------
# recurrent cells and layers


def _infer_rnn(gates: int, cell: bool) -> Callable[..., Out]:
    def infer(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
        if cell:
            _need(inputs, 4 if gates == 4 else 3, 6)
            x, h = inputs[0], inputs[1]
            _rank(x, 2)
            ws = inputs[3:] if gates == 4 else inputs[2:]
            w_ih = ws[0]
            hid = h.shape[1]
            if w_ih.shape != (gates * hid, x.shape[1]):
                raise GraphError(f"w_ih {w_ih.shape}; expected ({gates * hid}, {x.shape[1]})")
            outs: Out = [((x.shape[0], hid), x.dtype)]
            if gates == 4:
                outs.append(((x.shape[0], hid), x.dtype))
            return outs
        _need(inputs, 3, 4)
        x, w_ih, w_hh = inputs[:3]
        _rank(x, 3)
        hid = int(attrs["hidden"])
        dirs = 2 if attrs.get("bidirectional") else 1
        if w_ih.shape != (dirs, gates * hid, x.shape[2]) or w_hh.shape != (dirs, gates * hid, hid):
            raise GraphError(
                f"weights {w_ih.shape}, {w_hh.shape}; expected ({dirs}, {gates * hid}, {x.shape[2]}) and ({dirs}, {gates * hid}, {hid})")
        t, b = x.shape[0], x.shape[1]
        outs = [((t, b, dirs * hid), x.dtype), ((dirs, b, hid), x.dtype)]
        if gates == 4:
            outs.append(((dirs, b, hid), x.dtype))
        return outs

    return infer


def _rnn_dims(op: Op, gates: int) -> tuple[int, int, int, int, int]:
    if op.kind.endswith("_cell"):
        x, h = op.inputs[0], op.inputs[1]
        return 1, x.shape[0], x.shape[1], h.shape[1], 1
    x = op.inputs[0]
    dirs = 2 if op.attrs.get("bidirectional") else 1
    return x.shape[0], x.shape[1], x.shape[2], int(op.attrs["hidden"]), dirs


def _rnn_macs(gates: int) -> Callable[[Op], int]:
    def f(op: Op) -> int:
        t, b, i, h, d = _rnn_dims(op, gates)
        return t * d * b * gates * h * (i + h)

    return f


def _rnn_flops(gates: int, pointwise: int) -> Callable[[Op], int]:
    def f(op: Op) -> int:
        t, b, i, h, d = _rnn_dims(op, gates)
        return t * d * b * (2 * gates * h * (i + h) + pointwise * h)

    return f


register("lstm_cell", "recurrent", _infer_rnn(4, True), _rnn_flops(4, LSTM_POINTWISE_FLOPS), macs=_rnn_macs(4),
         doc="x (B,I), h (B,H), c (B,H), w_ih (4H,I), w_hh (4H,H) [, b_ih, b_hh] -> h', c'")
register("gru_cell", "recurrent", _infer_rnn(3, True), _rnn_flops(3, GRU_POINTWISE_FLOPS), macs=_rnn_macs(3),
         doc="x (B,I), h (B,H), w_ih (3H,I), w_hh (3H,H) [, b_ih, b_hh] -> h'")
register("lstm", "recurrent", _infer_rnn(4, False), _rnn_flops(4, LSTM_POINTWISE_FLOPS), macs=_rnn_macs(4),
         doc="x (T,B,I), w_ih (D,4H,I), w_hh (D,4H,H) [, b (D,8H)] -> y (T,B,DH), h_n, c_n; attrs hidden, bidirectional")
register("gru", "recurrent", _infer_rnn(3, False), _rnn_flops(3, GRU_POINTWISE_FLOPS), macs=_rnn_macs(3),
         doc="x (T,B,I), w_ih (D,3H,I), w_hh (D,3H,H) [, b] -> y, h_n; attrs hidden, bidirectional")
register("rnn_bwd", "recurrent", lambda i, a: [(t.shape, t.dtype) for t in i[1:]],
         lambda op: 2 * int(op.attrs["fwd_flops"]), macs=lambda op: 2 * int(op.attrs["fwd_macs"]), params=_zero,
         doc="backward of an LSTM/GRU layer: dy and the forward inputs -> their gradients; attrs fwd_flops, fwd_macs")


# ------------------------------------------------------------------------------------------------
# mixture of experts


def _infer_router(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    x, w = inputs
    _rank(x, 2)
    if w.shape[0] != x.shape[1]:
        raise GraphError(f"router weight {w.shape} for tokens {x.shape}; expected ({x.shape[1]}, E)")
    k = int(attrs.get("top_k", 1))
    if not 1 <= k <= w.shape[1]:
        raise GraphError(f"top_k {k}; expected 1..{w.shape[1]} experts")
    return [((x.shape[0], k), x.dtype), ((x.shape[0], k), DType.INT32)]


register("moe_router", "moe", _infer_router,
         lambda op: 2 * op.inputs[0].numel * op.inputs[1].shape[1] + (SOFTMAX_FLOPS + 1) * op.inputs[0].shape[0] * op.inputs[1].shape[1],
         macs=lambda op: op.inputs[0].numel * op.inputs[1].shape[1],
         doc="tokens (T,D) @ gate (D,E), softmax and top-k -> weights (T,k), indices (T,k); attrs top_k")


def _infer_dispatch(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    x, idx = inputs
    e, c = int(attrs["experts"]), int(attrs["capacity"])
    if e < 1 or c < 1:
        raise GraphError(f"experts {e}, capacity {c}; expected positive")
    return [((e, c, x.shape[1]), x.dtype)]


def _routed(op: Op) -> int:
    return int(op.attrs.get("tokens", op.inputs[1].numel))


register("moe_dispatch", "moe", _infer_dispatch,
         bytes_rw=lambda op: (op.inputs[0].nbytes + op.inputs[1].nbytes,
                              (_routed(op) * op.inputs[0].shape[1] * op.inputs[0].dtype.bits + 7) // 8),
         doc="tokens (T,D), indices (T,k) -> expert buffers (E,C,D); attrs experts, capacity, tokens, "
             "host_sync (optional: the host waits here for the token counts, a synchronisation point), "
             "host_ops (optional: framework ops the dispatcher issues before the wait beside this op's "
             "kernels, a non-negative integer, priced in the host-sync intervals)")


def _infer_combine(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 3)
    y, wts, idx = inputs
    return [((wts.shape[0], y.shape[2]), y.dtype)]


register("moe_combine", "moe", _infer_combine,
         lambda op: 2 * op.inputs[1].numel * op.inputs[0].shape[2],
         bytes_rw=lambda op: ((_routed(op) * op.inputs[0].shape[2] * op.inputs[0].dtype.bits + 7) // 8
                              + op.inputs[1].nbytes + op.inputs[2].nbytes, op.outputs[0].nbytes),
         doc="expert outputs (E,C,D), weights (T,k), indices (T,k) -> tokens (T,D)")


def _infer_router_bwd(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 3)
    x, w, dwts = inputs
    return [(x.shape, x.dtype), (w.shape, w.dtype)]


def _router_bwd_macs(op: Op) -> int:
    x, w = op.inputs[0], op.inputs[1]
    return 2 * x.numel * w.shape[1]  # dx = dlogits @ gate^T and dgate = x^T @ dlogits


register("moe_router_bwd", "moe", _infer_router_bwd,
         lambda op: 2 * _router_bwd_macs(op) + 4 * op.inputs[0].shape[0] * op.inputs[1].shape[1],
         macs=_router_bwd_macs, params=_zero,
         doc="tokens (T,D), gate (D,E), dweights (T,k) -> dtokens, dgate (softmax backward + two GEMMs)")


def _infer_dispatch_bwd(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    dbuf, idx = inputs
    return [((idx.shape[0], dbuf.shape[2]), dbuf.dtype)]


register("moe_dispatch_bwd", "moe", _infer_dispatch_bwd,
         lambda op: _routed(op) * op.inputs[0].shape[2], params=_zero,
         bytes_rw=lambda op: ((_routed(op) * op.inputs[0].shape[2] * op.inputs[0].dtype.bits + 7) // 8
                              + op.inputs[1].nbytes, op.outputs[0].nbytes),
         doc="expert-buffer gradients (E,C,D), indices (T,k) -> token gradients (T,D) (gather and sum k rows)")


def _infer_combine_bwd(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 4)
    dy, y, wts, idx = inputs
    return [(y.shape, dy.dtype), (wts.shape, wts.dtype)]


register("moe_combine_bwd", "moe", _infer_combine_bwd,
         lambda op: 3 * _routed(op) * op.inputs[0].shape[1], params=_zero,
         bytes_rw=lambda op: (op.inputs[0].nbytes + (_routed(op) * op.inputs[1].shape[2] * op.inputs[1].dtype.bits + 7) // 8
                              + op.inputs[2].nbytes + op.inputs[3].nbytes,
                              (_routed(op) * op.inputs[1].shape[2] * op.inputs[1].dtype.bits + 7) // 8 + op.inputs[2].nbytes),
         doc="dy (T,D), expert outputs (E,C,D), weights (T,k), indices (T,k) -> dexpert outputs, dweights; attrs tokens")


def _infer_grouped_bwd_data(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    dy, w = inputs
    _rank(dy, 3)
    _rank(w, 3)
    if dy.shape[0] != w.shape[0] or dy.shape[2] != w.shape[2]:
        raise GraphError(f"grouped matmul backward shapes; got dy {dy.shape} and w {w.shape}; expected (E,C,N) and (E,K,N)")
    return [((dy.shape[0], dy.shape[1], w.shape[1]), dy.dtype)]


def _infer_grouped_bwd_weight(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    x, dy = inputs
    _rank(x, 3)
    _rank(dy, 3)
    if x.shape[:2] != dy.shape[:2]:
        raise GraphError(f"grouped matmul backward shapes; got x {x.shape} and dy {dy.shape}; expected (E,C,K) and (E,C,N)")
    return [((x.shape[0], x.shape[2], dy.shape[2]), dy.dtype)]


def _grouped_bwd(op: Op) -> tuple[int, int, int, int]:
    """(tokens, experts_active, K, N) of a grouped-matmul backward op."""
    a, b = op.inputs
    e, c = a.shape[0], a.shape[1]
    if op.kind == "grouped_matmul_bwd_data":
        k, n = b.shape[1], b.shape[2]
    else:
        k, n = a.shape[2], b.shape[2]
    return int(op.attrs.get("tokens", e * c)), int(op.attrs.get("experts_active", e)), k, n


def _macs_grouped_bwd(op: Op) -> int:
    tokens, _, k, n = _grouped_bwd(op)
    return tokens * k * n


def _bytes_grouped_bwd(op: Op) -> tuple[int, int]:
    tokens, active, k, n = _grouped_bwd(op)
    a, b = op.inputs
    bits_o = op.outputs[0].dtype.bits
    if op.kind == "grouped_matmul_bwd_data":  # read dy rows and active experts' weights, write dx rows
        return (tokens * n * a.dtype.bits + active * k * n * b.dtype.bits + 7) // 8, (tokens * k * bits_o + 7) // 8
    return (tokens * (k * a.dtype.bits + n * b.dtype.bits) + 7) // 8, (active * k * n * bits_o + 7) // 8


for _k, _inf in (("grouped_matmul_bwd_data", _infer_grouped_bwd_data),
                 ("grouped_matmul_bwd_weight", _infer_grouped_bwd_weight)):
    register(_k, "contraction", _inf,
             lambda op: 2 * _macs_grouped_bwd(op), macs=_macs_grouped_bwd,
             bytes_rw=_bytes_grouped_bwd, params=_zero,
             doc="MoE experts backward: dy (E,C,N), w (E,K,N) -> dx (E,C,K) [bwd_data]; x (E,C,K), dy (E,C,N) -> dw "
                 "(E,K,N) [bwd_weight]; attrs tokens, experts_active as in the forward op")


# ------------------------------------------------------------------------------------------------
# collectives (costed by simulator/lowering/collectives.py over the system's fabrics) and misc


def _infer_collective(kind: str) -> Callable[..., Out]:
    def infer(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
        n = int(attrs.get("group_size", 1))
        if n < 1:
            raise GraphError(f"group_size {n}; expected >= 1")
        if kind == "recv":
            _need(inputs, 0)
            return [(tuple(attrs["shape"]), DType(attrs.get("dtype", "fp32")))]
        _need(inputs, 1)
        x = inputs[0]
        if kind == "send":
            return []
        shape = list(x.shape)
        ax = _axis(int(attrs.get("axis", 0)), len(shape))
        if kind == "all_gather":
            shape[ax] *= n
        elif kind == "reduce_scatter":
            if shape[ax] % n:
                raise GraphError(f"reduce_scatter of {x.shape} over {n} along axis {ax}; expected divisible")
            shape[ax] //= n
        return [(tuple(shape), x.dtype)]

    return infer


for _k in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send", "recv"):
    register(_k, "collective", _infer_collective(_k),
             (lambda op: op.inputs[0].numel) if _k in ("all_reduce", "reduce_scatter") else _zero,
             params=_zero, doc="collective over group_size devices (stride: rank distance; axis for "
                               "gather/scatter; size_bytes and devices for the micro-workloads; host_ops_after "
                               "(optional): framework ops issued after it, beside its kernels, a non-negative "
                               "integer priced in the host-sync intervals)")


def _infer_loss(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 1, 2)
    return [((1,), inputs[0].dtype)]


register("cross_entropy", "normalization", _infer_loss, lambda op: (SOFTMAX_FLOPS + 1) * op.inputs[0].numel,
         doc="logits (N,V) [, labels] -> scalar loss")
register("cross_entropy_bwd", "normalization", lambda i, a: [(i[0].shape, i[0].dtype)],
         lambda op: 2 * op.inputs[0].numel, params=_zero, doc="logits -> dlogits")


MSE_LOSS_FLOPS = 3  # subtract, square, accumulate


def _infer_mse(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2)
    if inputs[0].shape != inputs[1].shape:
        raise GraphError(f"mse_loss of {inputs[0].shape} against {inputs[1].shape}; expected equal shapes")
    return [((1,), inputs[0].dtype)]


register("mse_loss", "normalization", _infer_mse, lambda op: MSE_LOSS_FLOPS * op.inputs[0].numel,
         doc="prediction, target (same shape) -> scalar mean squared error")
register("mse_loss_bwd", "normalization", lambda i, a: [(i[0].shape, i[0].dtype)],
         lambda op: 2 * op.inputs[0].numel, params=_zero, doc="prediction, target -> dprediction")


def _infer_optimizer(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    _need(inputs, 2, 6)
    alg = attrs.get("algorithm", "adamw")
    if alg not in OPTIMIZER_FLOPS:
        raise GraphError(f"unknown optimizer; got {alg!r}; expected one of {', '.join(OPTIMIZER_FLOPS)}")
    return [(inputs[0].shape, inputs[0].dtype)]


def _updated_fraction(op: Op) -> float:
    """Share of the parameter updated: 1, or sparse_rows / rows for a sparse (embedding) gradient."""
    rows = op.attrs.get("sparse_rows")
    return int(rows) / op.inputs[0].shape[0] if rows else 1.0


def _bytes_optimizer(op: Op) -> tuple[int, int]:
    # reads the parameter, its gradient and every state tensor; writes the parameter and the states; plus the
    # bytes per parameter of a framework's passes beside the update (attrs pass_read_bytes / pass_write_bytes:
    # workloads.frameworks.megatron_optimizer_passes)
    f = _updated_fraction(op)
    w, g = op.inputs[0], op.inputs[1]
    states = sum(t.nbytes for t in op.inputs[2:])
    n = f * w.numel
    return (int(f * (w.nbytes + states) + n * float(op.attrs.get("pass_read_bytes", 0))) + g.nbytes,
            int(f * (op.outputs[0].nbytes + states) + n * float(op.attrs.get("pass_write_bytes", 0))))


register("optimizer_update", "optimizer", _infer_optimizer,
         lambda op: int(OPTIMIZER_FLOPS[op.attrs.get("algorithm", "adamw")] * op.inputs[0].numel * _updated_fraction(op)),
         params=_zero, bytes_rw=_bytes_optimizer,
         doc="param, grad [, master, m, v] -> updated param (states updated in place); attrs algorithm "
             "(sgd, sgd_momentum, adam, adamw), sparse_rows (rows of a sparse embedding gradient), "
             "pass_read_bytes / pass_write_bytes (per parameter, a framework's passes beside the update)")


def _infer_generic(inputs: tuple[TensorSpec, ...], attrs: Any) -> Out:
    shapes = attrs.get("output_shapes", ())
    dts = attrs.get("output_dtypes", ())
    return [(tuple(s), DType(d) if d else None) for s, d in zip(shapes, dts or (None,) * len(shapes), strict=True)]


register("generic", "generic", _infer_generic,
         doc="an operator without semantics (imported with strict=False): costed by its tensor bytes; attrs op_type")

