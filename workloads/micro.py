"""Micro-workloads for calibration and validation: one-op graphs named by a compact string.

Grammar: ``KIND:key=value,key=value`` (kind and keys case-insensitive, blanks around items ignored)
with decimal integer values, e.g.
``gemm:m=4096,n=4096,k=4096``, ``gemm:b=8,m=512,n=512,k=64``,
``attention:b=2,h=16,s=8192,d=128,causal=0[,kv_heads=..][,s_kv=..][,bwd=1][,kv_cache=1]``
(``kv_cache=1``: K and V are a decode step's cached keys and values, so ``--kv-dtype`` applies to them),
``conv2d:n=32,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1``, ``copy:bytes=1073741824``,
``elementwise:numel=...,op=add``, ``softmax:rows=..,cols=..``, ``layernorm:rows=..,cols=..``, the dense
solvers ``svd:m=..,n=..[,b=..][,vectors=0]``, ``eigh:n=..[,b=..][,vectors=0]``, ``cholesky:n=..[,b=..]``,
``qr:m=..,n=..[,b=..]`` (fp32 or fp64 only: ``workloads.linalg``), and the
collectives as nccl-tests runs them, ``allreduce:bytes=..[,n=..]`` (also ``allgather``,
``reducescatter``, ``alltoall``, ``broadcast``, ``sendrecv``): ``bytes`` is nccl-tests' size, ``n``
the devices (default: every device of the system predicted on).
``dtype=`` (a dtype name) is accepted by every kind and ``op=`` (an elementwise op) by elementwise.

Values are checked strictly: flags (``causal``, ``bwd``, ``kv_cache``) are ``0`` or ``1``; ``transpose`` is ``0``..``3``
(bit 1: A stored transposed as (k, m); bit 2: B stored as (n, k)); ``pad`` is ``>= 0``; every other
value is a positive integer written in decimal digits (no ``1e3``, ``1.0``, ``0x10`` or ``1_000``). Each
key appears once, no item is empty (``m=2,,n=2`` is an error), and sizes are bounded by
:data:`MAX_VALUE` per value and :data:`MAX_TENSOR_ELEMENTS` per tensor. Every problem of a string is
reported together, each naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nodeperf.suggest import did_you_mean, near_match
from workloads.dtypes import DType, parse_dtype
from workloads.ir import GraphBuilder, OpGraph, Role, format_problems
from workloads.semantics import ELEMENTWISE_FLOPS

__all__ = ["is_micro", "parse_micro", "build_micro", "MICRO_KINDS", "COLLECTIVE_MICRO", "MAX_VALUE",
           "MAX_TENSOR_ELEMENTS"]

# kind -> (required keys, optional keys with defaults)
MICRO_KINDS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "gemm": (("m", "n", "k"), {"b": 1, "transpose": 0}),
    "attention": (("b", "h", "s", "d"), {"causal": 0, "kv_heads": None, "s_kv": None, "bwd": 0, "kv_cache": 0,
                                             "window": 0}),
    "conv2d": (("n", "c", "h", "w", "k", "r", "s"), {"stride": 1, "pad": 0, "groups": 1, "dilation": 1}),
    "copy": (("bytes",), {}),
    "elementwise": (("numel",), {"op": "add"}),
    # a streaming kernel of stated arithmetic intensity (RRZE-HPC gpu-benches gpu-roofline): reads two
    # arrays of numel elements and does 2 + 2 x fmas FLOPs per pair (a subtraction, fmas dependent FMAs
    # and one add into a running sum); writes one value
    "roofline": (("numel",), {"fmas": 0}),
    "softmax": (("rows", "cols"), {}),
    "layernorm": (("rows", "cols"), {}),
    # dense linear algebra (fp32/fp64 only): b is a batch of independent matrices
    "svd": (("m", "n"), {"b": 1, "vectors": 1}),
    "eigh": (("n",), {"b": 1, "vectors": 1}),
    "cholesky": (("n",), {"b": 1}),
    "qr": (("m", "n"), {"b": 1}),
    # collectives as nccl-tests run them: bytes is nccl-tests' size (the whole buffer; for all-gather
    # and reduce-scatter n times one rank's shard), n the devices (default: all of the system)
    "allreduce": (("bytes",), {"n": None}),
    "allgather": (("bytes",), {"n": None}),
    "reducescatter": (("bytes",), {"n": None}),
    "alltoall": (("bytes",), {"n": None}),
    "broadcast": (("bytes",), {"n": None}),
    "sendrecv": (("bytes",), {"n": None}),
}
#: collective micro-workloads and the graph op that stands for each
COLLECTIVE_MICRO = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
                    "alltoall": "all_to_all", "broadcast": "broadcast", "sendrecv": "send"}
_STR_KEYS = {"op", "dtype"}
#: integer keys with a closed range of their own: key -> (lowest, highest, what the values mean)
_RANGED = {
    "causal": (0, 1, "0 or 1"),
    "bwd": (0, 1, "0 or 1"),
    "kv_cache": (0, 1, "0 or 1 (K and V are a KV cache)"),
    "window": (0, None, "an integer >= 0 (a causal sliding window in tokens, with causal=1; 0: none)"),
    "transpose": (0, 3, "0, 1 (A transposed), 2 (B transposed) or 3 (both)"),
    "pad": (0, None, "an integer >= 0"),
    "fmas": (0, None, "an integer >= 0"),
    "vectors": (0, 1, "0 (values only) or 1 (with vectors)"),
}
_BINARY = frozenset({"add", "sub", "mul", "div", "max", "min", "pow"})
_INT = re.compile(r"[+-]?[0-9]+")
_KIND_LIKE = re.compile(r"\s*[A-Za-z][A-Za-z0-9_]*\s*$")

#: Largest value of any one key (2**40, about 1.1e12: a 1 TiB copy, or a GEMM side a thousand times
#: any real one). Bounding each value keeps every derived count (FLOPs, bytes, energy) a finite float:
#: an unbounded ``m=10**30`` would give a prediction of ~1e90 FLOP, or inf, instead of an error.
MAX_VALUE = 2**40
#: Largest element count of any one tensor of the op (2**48, about 2.8e14 elements: over 500 TB in
#: bf16, more memory than any node has). With :data:`MAX_VALUE` it bounds a GEMM's FLOPs by 2**89.
MAX_TENSOR_ELEMENTS = 2**48


def is_micro(spec: str) -> bool:
    """True when ``spec`` is meant as a micro-workload: ``kind:...`` with a known kind, or ``word:key=...``.

    A misspelt kind (``gem:m=1,n=1,k=1``) counts as meant, so :func:`parse_micro` reports it with a near
    match instead of the string being looked up as a zoo name; ``.onnx``/``.json`` paths never do.
    """
    head, sep, body = spec.partition(":")
    if head.strip().lower() in MICRO_KINDS:  # "gemm" alone is meant too: its keys are reported missing
        return True
    if not sep:
        return False
    return (bool(_KIND_LIKE.match(head)) and "=" in body
            and not spec.strip().lower().endswith((".onnx", ".json")))


def _shown(value: str, limit: int = 40) -> str:
    """``value`` for a message, cut in the middle when longer than ``limit`` characters."""
    if len(value) <= limit:
        return repr(value)
    return repr(value[: limit // 2] + "..." + value[-8:]) + f" ({len(value)} characters)"


def _where(spec: str) -> str:
    return f"micro-workload {_shown(spec, 120)}"


def _int_problem(key: str, text: str) -> tuple[int | None, str | None]:
    """(value, None) or (None, located problem) for the text of integer key ``key``."""
    lo, hi, form = _RANGED.get(key, (1, None, "a positive integer"))
    if not _INT.fullmatch(text):
        return None, f"{key}; got {_shown(text)}; expected {form}"
    if len(text.lstrip("+-")) > len(str(MAX_VALUE)):  # refuse before building a huge int
        return None, f"{key}; got {_shown(text)}; expected {form} <= {MAX_VALUE} (2**40)"
    v = int(text)
    if v < lo or (hi is not None and v > hi):
        return None, f"{key}; got {_shown(text)}; expected {form}"
    if v > MAX_VALUE:
        return None, f"{key}; got {_shown(text)}; expected {form} <= {MAX_VALUE} (2**40)"
    return v, None


def parse_micro(spec: str) -> tuple[str, dict[str, Any]]:
    """Parse into (kind, params) with defaults filled.

    Raises
    ------
    ValueError
        Every problem of the string, each naming the key: ``micro-workload '<spec>': <key>; got <value>;
        expected <form>`` (one line), or a count line and one line per problem.
    """
    head, _, body = spec.partition(":")
    kind = head.strip().lower()
    where = _where(spec)
    if kind not in MICRO_KINDS:
        raise ValueError(f"{where}: unknown kind; got {kind!r}; expected one of "
                         f"{', '.join(MICRO_KINDS)}{did_you_mean(kind, MICRO_KINDS)}")
    required, optional = MICRO_KINDS[kind]
    allowed = list(required) + list(optional) + ["dtype"]
    params: dict[str, Any] = {}
    problems: list[str] = []
    meant: set[str] = set()  # keys that a bad item probably meant
    given: dict[str, str] = {}  # key -> its text, first time given
    items = body.split(",")
    if len(items) == 1 and not items[0].strip():
        items = []  # "gemm:" has no items (reported as missing keys below)
    for pos, raw in enumerate(items, 1):
        item = raw.strip()
        key, eq, val = item.partition("=")
        key, val = key.strip().lower(), val.strip()
        if not item:
            problems.append(f"{where}: item {pos}: empty item (a stray comma); got ''; expected key=value "
                            "items separated by single commas")
            continue
        if not eq and key in allowed:
            problems.append(f"{where}: {key}: no value; got {_shown(item)}; expected {key}=<value>")
            meant.add(key)
            continue
        if not eq or key not in allowed:
            near = near_match(key, allowed) if key not in allowed else [key]
            hint = f"; did you mean {near[0]!r}?" if near and key not in allowed else ""
            problems.append(f"{where}: bad item {_shown(item)}; expected key=value with key in "
                            f"{', '.join(allowed)}{hint}")
            meant.update(near)  # not reported again as missing
            continue
        if key in given:
            problems.append(f"{where}: key {key!r} given twice; got {key}={_shown(val)} after "
                            f"{key}={_shown(given[key])}; expected each key once")
            continue
        given[key] = val
        if key in _STR_KEYS:
            if not val:
                problems.append(f"{where}: {key}; got ''; expected "
                                + ("a dtype name" if key == "dtype" else "an elementwise op name"))
            params[key] = val
            continue
        v, problem = _int_problem(key, val)
        if problem:
            problems.append(f"{where}: {problem}")
            params[key] = None  # given (so not also reported missing), but invalid
        else:
            params[key] = v
    missing = [k for k in required if k not in params and k not in meant]
    if missing:
        problems.append(f"{where}: missing {', '.join(missing)}; got "
                        f"{', '.join(params) or 'no keys'}; expected {kind}:" + ",".join(f"{k}=.." for k in required))
    if kind == "elementwise" and params.get("op") and params["op"] not in ELEMENTWISE_FLOPS:
        problems.append(f"{where}: op; got {params['op']!r}; expected an elementwise op"
                        f"{did_you_mean(params['op'], ELEMENTWISE_FLOPS)}")
    if kind == "attention" and params.get("kv_cache") == 1 and params.get("bwd") == 1:
        problems.append(f"{where}: kv_cache; got kv_cache=1 with bwd=1; expected one of them (a KV cache is read "
                        "by inference attention, which has no backward)")
    if params.get("dtype"):
        try:
            parse_dtype(params["dtype"], where=f"{where}: dtype")
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError(format_problems(where, problems, "micro-workload"))
    for k, v in optional.items():
        params.setdefault(k, v)
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
    window = {"window": p["window"]} if p["window"] else {}
    q = b.input("q", (p["b"], p["h"], p["s"], p["d"]))
    if p["kv_cache"]:  # a decode step reading cached keys and values (--kv-dtype retypes them)
        k = b.tensor("k_cache", (p["b"], hk, skv, p["d"]), role=Role.KV_CACHE)
        v = b.tensor("v_cache", (p["b"], hk, skv, p["d"]), role=Role.KV_CACHE)
    else:
        k = b.input("k", (p["b"], hk, skv, p["d"]))
        v = b.input("v", (p["b"], hk, skv, p["d"]))
    if p["bwd"]:
        o = b.input("o", (p["b"], p["h"], p["s"], p["d"]))
        do = b.input("do", (p["b"], p["h"], p["s"], p["d"]))
        b.op("attention_bwd", [q, k, v, o, do], name="attention_bwd", causal=bool(p["causal"]), **window)
    else:
        b.op("attention", [q, k, v], name="attention", causal=bool(p["causal"]), **window)


def _conv2d(b: GraphBuilder, p: dict[str, Any]) -> None:
    x = b.input("x", (p["n"], p["c"], p["h"], p["w"]))
    w = b.weight("w", (p["k"], p["c"] // p["groups"], p["r"], p["s"]))
    b.op("conv2d", [x, w], name="conv2d", stride=p["stride"], padding=p["pad"], groups=p["groups"],
         dilation=p["dilation"])


def _copy(b: GraphBuilder, p: dict[str, Any]) -> None:
    bits = b.dtype.bits
    if (p["bytes"] * 8) % bits:
        raise ValueError(f"bytes: not a whole number of {b.dtype.value} elements; got {p['bytes']}; "
                         f"expected a multiple of {bits // 8 if bits >= 8 else 1} bytes")
    x = b.input("x", (p["bytes"] * 8 // bits,))
    b.op("elementwise", [x], name="copy", op="copy")


def _elementwise(b: GraphBuilder, p: dict[str, Any]) -> None:
    binary = p["op"] in _BINARY
    xs = [b.input("x", (p["numel"],))] + ([b.input("y", (p["numel"],))] if binary else [])
    b.op("elementwise", xs, name=p["op"], op=p["op"])


def _roofline(b: GraphBuilder, p: dict[str, Any]) -> None:
    # the two arrays as one (2, numel) input: the same bytes read; (1 + fmas) FLOPs per element read
    ab = b.input("ab", (2, p["numel"]))
    # the FLOPs are one dependent chain per element pair on register operands (v = a - b, then v = v * a - b
    # fmas times, sum += v; RRZE-HPC/gpu-benches gpu-roofline/main.cu testfun): operands = "register-chain"
    b.op("reduction", [ab], name="roofline", op="sum", axes=(0, 1), flops_per_element=1 + p["fmas"],
         operands="register-chain")


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


def _collective(kind: str) -> Callable[[GraphBuilder, dict[str, Any]], None]:
    def f(b: GraphBuilder, p: dict[str, Any]) -> None:
        bits = b.dtype.bits
        if (p["bytes"] * 8) % bits:
            raise ValueError(f"bytes: not a whole number of {b.dtype.value} elements; got {p['bytes']}; "
                             f"expected a multiple of {max(1, bits // 8)} bytes")
        n = p.get("n")
        if n is not None and n < 2:
            raise ValueError(f"n: a collective needs at least 2 devices; got {n}; expected 2 or more")
        if kind == "sendrecv" and n not in (None, 2):
            raise ValueError(f"n: a send/receive joins 2 devices; got {n}; expected n=2 or no n")
        x = b.input("x", (p["bytes"] * 8 // bits,))
        # the graph op keeps its buffer's shape; the lowering prices nccl-tests' size over `devices`
        b.op(COLLECTIVE_MICRO[kind], [x], name=kind, size_bytes=p["bytes"],
             devices=2 if kind == "sendrecv" else (n or 0))

    return f


def _linalg(kind: str) -> Callable[[GraphBuilder, dict[str, Any]], None]:
    def f(b: GraphBuilder, p: dict[str, Any]) -> None:
        lead = (p["b"],) if p["b"] > 1 else ()
        m, n = (p["m"], p["n"]) if "m" in p else (p["n"], p["n"])
        a = b.input("a", (*lead, m, n))
        attrs: dict[str, Any] = {}
        if kind == "svd":
            attrs["vectors"] = "reduced" if p["vectors"] else "none"
        elif kind == "eigh":
            attrs["vectors"] = bool(p["vectors"])
        b.op(kind, [a], name=kind, **attrs)

    return f


_BUILDERS: dict[str, Callable[[GraphBuilder, dict[str, Any]], None]] = {
    "gemm": _gemm, "attention": _attention, "conv2d": _conv2d, "copy": _copy,
    "elementwise": _elementwise, "roofline": _roofline, "softmax": _rows_cols("softmax"), "layernorm": _rows_cols("layernorm"),
    **{k: _collective(k) for k in COLLECTIVE_MICRO},
    **{k: _linalg(k) for k in ("svd", "eigh", "cholesky", "qr")},
}


def build_micro(spec: str, dtype: str | DType | None = None) -> OpGraph:
    """The one-op graph for ``spec``; ``dtype=`` in the string wins over the argument (default bf16).

    Raises
    ------
    ValueError
        A bad string (see :func:`parse_micro`), an empty or unknown dtype, a tensor of more than
        :data:`MAX_TENSOR_ELEMENTS` elements, or sizes the op's shape rules reject; located in ``spec``.
    """
    kind, p = parse_micro(spec)
    where = _where(spec)
    given = p.get("dtype")
    dt = parse_dtype(given if given is not None else (dtype if dtype is not None else DType.BF16),
                     where=f"{where}: dtype")
    b = GraphBuilder(spec, dtype=dt)
    try:
        _BUILDERS[kind](b, p)
    except ValueError as exc:
        msg = str(exc)
        raise type(exc)(msg if msg.startswith(where) else f"{where}: {msg}") from None
    for op in b.ops:
        for t in (*op.inputs, *op.outputs):
            if t.numel > MAX_TENSOR_ELEMENTS:
                dims = " x ".join(str(d) for d in t.shape)
                raise ValueError(f"{where}: tensor {t.name!r} too large; got {dims} = {t.numel:.3g} elements; "
                                 f"expected at most {MAX_TENSOR_ELEMENTS:.3g} (2**48) per tensor")
    meta: dict[str, Any] = {"model": spec, "micro": kind, "dtype": dt.value}
    if kind in COLLECTIVE_MICRO:
        meta.update({"collective": kind, "size_bytes": p["bytes"],
                     "devices": 2 if kind == "sendrecv" else (p.get("n") or 0)})
    return b.build(meta=meta)
