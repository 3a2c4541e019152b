"""Micro-workloads for calibration and validation: one-op graphs named by a compact string.

Grammar: ``KIND:key=value,key=value`` with integer values (``dtype=`` also accepted), e.g.
``gemm:m=4096,n=4096,k=4096``, ``gemm:b=8,m=512,n=512,k=64``,
``attention:b=2,h=16,s=8192,d=128,causal=0[,kv_heads=..][,s_kv=..][,bwd=1]``,
``conv2d:n=32,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1``, ``copy:bytes=1073741824``,
``elementwise:numel=...,op=add``, ``softmax:rows=..,cols=..``, ``layernorm:rows=..,cols=..``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from nodeperf.suggest import did_you_mean
from workloads.dtypes import DType, parse_dtype
from workloads.ir import GraphBuilder, OpGraph
from workloads.semantics import ELEMENTWISE_FLOPS

__all__ = ["is_micro", "parse_micro", "build_micro", "MICRO_KINDS"]

# kind -> (required keys, optional keys with defaults)
MICRO_KINDS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "gemm": (("m", "n", "k"), {"b": 1, "transpose": 0}),
    "attention": (("b", "h", "s", "d"), {"causal": 0, "kv_heads": None, "s_kv": None, "bwd": 0}),
    "conv2d": (("n", "c", "h", "w", "k", "r", "s"), {"stride": 1, "pad": 0, "groups": 1, "dilation": 1}),
    "copy": (("bytes",), {}),
    "elementwise": (("numel",), {"op": "add"}),
    "softmax": (("rows", "cols"), {}),
    "layernorm": (("rows", "cols"), {}),
}
_STR_KEYS = {"op", "dtype"}
_ZERO_OK = frozenset({"pad", "causal", "transpose", "bwd"})  # integer keys that may be 0
_BINARY = frozenset({"add", "sub", "mul", "div", "max", "min", "pow"})


def is_micro(spec: str) -> bool:
    """True when ``spec`` looks like ``kind:key=value,...`` with a known micro kind."""
    head, sep, _ = spec.partition(":")
    return bool(sep) and head.strip().lower() in MICRO_KINDS


def parse_micro(spec: str) -> tuple[str, dict[str, Any]]:
    """Parse into (kind, params) with defaults filled; ValueError locating the bad key."""
    head, sep, body = spec.partition(":")
    kind = head.strip().lower()
    if not sep or kind not in MICRO_KINDS:
        raise ValueError(f"micro-workload {spec!r}: unknown kind; got {kind!r}; expected one of "
                         f"{', '.join(MICRO_KINDS)}{did_you_mean(kind, MICRO_KINDS)}")
    required, optional = MICRO_KINDS[kind]
    params: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in body.split(","))):
        key, eq, val = item.partition("=")
        key = key.strip().lower()
        allowed = list(required) + list(optional) + ["dtype"]
        if not eq or key not in allowed:
            raise ValueError(f"micro-workload {spec!r}: bad item {item!r}; expected key=value with key in "
                             f"{', '.join(allowed)}{did_you_mean(key, allowed)}")
        if key in params:
            raise ValueError(f"micro-workload {spec!r}: key {key!r} given twice; expected each key once")
        if key in _STR_KEYS:
            params[key] = val.strip()
            continue
        try:
            num = float(val)
        except ValueError:
            num = math.nan
        lowest = 0 if key in _ZERO_OK else 1
        if not math.isfinite(num) or num != int(num) or num < lowest:  # NaN and inf included
            raise ValueError(f"micro-workload {spec!r}: {key}; got {val.strip()!r}; expected "
                             + ("an integer >= 0" if lowest == 0 else "a positive integer"))
        params[key] = int(num)
    missing = [k for k in required if k not in params]
    if missing:
        raise ValueError(f"micro-workload {spec!r}: missing {', '.join(missing)}; expected {kind}:"
                         + ",".join(f"{k}=.." for k in required))
    for k, v in optional.items():
        params.setdefault(k, v)
    if kind == "elementwise" and params["op"] not in ELEMENTWISE_FLOPS:
        raise ValueError(f"micro-workload {spec!r}: op; got {params['op']!r}; expected an elementwise op"
                         f"{did_you_mean(params['op'], ELEMENTWISE_FLOPS)}")
    return kind, params


def _gemm(b: GraphBuilder, p: dict[str, Any]) -> None:
    t = p["transpose"]
    bt = p["b"]
    ashape = (p["k"], p["m"]) if t & 1 else (p["m"], p["k"])
    bshape = (p["n"], p["k"]) if t & 2 else (p["k"], p["n"])
    if bt > 1:
        ashape, bshape = (bt, *ashape), (bt, *bshape)
    a = b.input("a", ashape)
    w = b.input("b", bshape)
    b.op("matmul", [a, w], name="gemm", transpose_a=bool(t & 1), transpose_b=bool(t & 2))


def _attention(b: GraphBuilder, p: dict[str, Any]) -> None:
    hk = p["kv_heads"] or p["h"]
    skv = p["s_kv"] or p["s"]
    q = b.input("q", (p["b"], p["h"], p["s"], p["d"]))
    k = b.input("k", (p["b"], hk, skv, p["d"]))
    v = b.input("v", (p["b"], hk, skv, p["d"]))
    if p["bwd"]:
        o = b.input("o", (p["b"], p["h"], p["s"], p["d"]))
        do = b.input("do", (p["b"], p["h"], p["s"], p["d"]))
        b.op("attention_bwd", [q, k, v, o, do], name="attention_bwd", causal=bool(p["causal"]))
    else:
        b.op("attention", [q, k, v], name="attention", causal=bool(p["causal"]))


def _conv2d(b: GraphBuilder, p: dict[str, Any]) -> None:
    x = b.input("x", (p["n"], p["c"], p["h"], p["w"]))
    w = b.weight("w", (p["k"], p["c"] // p["groups"], p["r"], p["s"]))
    b.op("conv2d", [x, w], name="conv2d", stride=p["stride"], padding=p["pad"], groups=p["groups"],
         dilation=p["dilation"])


def _copy(b: GraphBuilder, p: dict[str, Any]) -> None:
    bits = b.dtype.bits
    if (p["bytes"] * 8) % bits:
        raise ValueError(f"micro-workload copy: bytes={p['bytes']} is not a whole number of {b.dtype.value} elements")
    x = b.input("x", (p["bytes"] * 8 // bits,))
    b.op("elementwise", [x], name="copy", op="copy")


def _elementwise(b: GraphBuilder, p: dict[str, Any]) -> None:
    binary = p["op"] in _BINARY
    xs = [b.input("x", (p["numel"],))] + ([b.input("y", (p["numel"],))] if binary else [])
    b.op("elementwise", xs, name=p["op"], op=p["op"])


def _rows_cols(kind: str) -> Callable[[GraphBuilder, dict[str, Any]], None]:
    def f(b: GraphBuilder, p: dict[str, Any]) -> None:
        x = b.input("x", (p["rows"], p["cols"]))
        if kind == "layernorm":
            g = b.weight("gamma", (p["cols"],))
            be = b.weight("beta", (p["cols"],))
            b.op("layernorm", [x, g, be], name="layernorm")
        else:
            b.op("softmax", [x], name="softmax", axis=-1)

    return f


_BUILDERS: dict[str, Callable[[GraphBuilder, dict[str, Any]], None]] = {
    "gemm": _gemm, "attention": _attention, "conv2d": _conv2d, "copy": _copy,
    "elementwise": _elementwise, "softmax": _rows_cols("softmax"), "layernorm": _rows_cols("layernorm"),
}


def build_micro(spec: str, dtype: str | DType | None = None) -> OpGraph:
    """The one-op graph for ``spec``; ``dtype=`` in the string wins over the argument (default bf16)."""
    kind, p = parse_micro(spec)
    dt = parse_dtype(p.get("dtype") or dtype or DType.BF16, where=f"micro-workload {spec!r}: dtype")
    b = GraphBuilder(spec, dtype=dt)
    _BUILDERS[kind](b, p)
    return b.build(meta={"model": spec, "micro": kind, "dtype": dt.value})
