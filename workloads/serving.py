"""Graphs a serving engine's iterations need beyond the transformer builder's phases: the attention of
a batch of sequences that each add ``query_tokens`` tokens to a KV cache already holding
``kv_tokens - query_tokens`` (a prefill chunk over earlier chunks, or decode steps).

A mixed iteration of continuous batching (prefill chunks and decode tokens of different contexts in
one forward pass) is, per layer, the token-wise work of all its tokens (projections, norms, MLP: what
:func:`workloads.zoo.transformer.build` emits for that many tokens) plus one attention per sequence
over its own context. This module builds the second part for one layer as one graph of one fused
``attention`` op (causal, queries aligned to the end of the keys, as chunked prefill computes them);
:mod:`simulator.serving.iteration` prices it with the engines and multiplies by the layers.

Example
-------
>>> from workloads.zoo.transformer import zoo_config
>>> g = attention_graph(zoo_config("llama-2-7b"), batch=1, query_tokens=512, kv_tokens=1024)
>>> [op.kind for op in g.ops], g.ops[0].inputs[0].shape, g.ops[0].inputs[1].shape
(['attention'], (1, 32, 512, 128), (1, 32, 1024, 128))
"""

from __future__ import annotations

from typing import Any

from workloads.dtypes import parse_dtype
from workloads.ir import GraphBuilder, OpGraph

__all__ = ["attention_graph", "graph_batch", "kv_bytes_per_token", "layer_windows", "sampler_graph",
           "window_kv_tokens", "SAMPLER_KERNELS"]

SAMPLER_KERNELS = ("to_fp32", "temperature", "softmax", "log_softmax", "gather_rows", "argmax")


def attention_graph(cfg: Any, *, batch: int, query_tokens: int, kv_tokens: int, tp: int = 1,
                    dtype: str = "bf16", kv_dtype: str | None = None, window: int = 0,
                    kv_tokens_max: int = 0) -> OpGraph:
    """One layer's attention on one tensor-parallel rank: ``batch`` sequences, each ``query_tokens``
    queries attending causally to ``kv_tokens`` keys and values (the queries are the last
    ``query_tokens`` of them). Heads as the builder splits them: ``heads // tp`` query heads and
    ``max(1, kv_heads // tp)`` KV heads per rank. ``window`` > 0: a local (sliding-window) layer's
    attention, each query seeing its last ``window`` keys (the op's ``window`` attribute, as the
    transformer builder emits it); the caller passes the keys such a layer's cache holds
    (:func:`window_kv_tokens`). ``kv_tokens_max`` > ``kv_tokens``: a decode batch of mixed contexts, ``kv_tokens``
    their mean and ``kv_tokens_max`` the longest (the op's ``kv_tokens_max`` attribute: the split-KV kernel's
    splits and heaviest CTA follow the longest, :func:`hwmodels.gpu.attention_grid`); 0: every sequence alike.

    Raises ``ValueError`` for non-positive sizes, a negative window or ``query_tokens > kv_tokens``.
    """
    for k, v in (("batch", batch), ("query_tokens", query_tokens), ("kv_tokens", kv_tokens), ("tp", tp)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"attention_graph: {k}: got {v!r}; expected a positive integer")
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"attention_graph: window: got {window!r}; expected a non-negative integer (0: global)")
    if query_tokens > kv_tokens:
        raise ValueError(f"attention_graph: query_tokens {query_tokens} > kv_tokens {kv_tokens}; expected the "
                         "queries to be among the keys")
    hq, hk, hd = cfg.heads // tp, max(1, cfg.n_kv_heads // tp), cfg.d_head
    b = GraphBuilder(f"{cfg.name}.attention", dtype=dtype)
    q = b.input("q", (batch, hq, query_tokens, hd))
    kvd = parse_dtype(kv_dtype).value if kv_dtype else None
    k = b.input("k_cache", (batch, hk, kv_tokens, hd), dtype=kvd)
    v = b.input("v_cache", (batch, hk, kv_tokens, hd), dtype=kvd)
    extra = {"kv_tokens_max": kv_tokens_max} if kv_tokens_max > kv_tokens else {}
    b.op("attention", [q, k, v], name="core", causal=True, **({"window": window} if window else {}), **extra)
    return b.build({"model": cfg.name, "batch": batch, "query_tokens": query_tokens, "kv_tokens": kv_tokens,
                    "tp": tp, "phase": "attention"})


def layer_windows(cfg: Any) -> dict[int, int]:
    """``{window: layers}`` of a model's attention layers: window 0 for global (full causal) layers, the
    sliding window of local ones (:meth:`workloads.zoo.transformer.TransformerConfig.layer_window`); a
    config without windows is ``{0: layers}``.

    >>> from workloads.zoo.transformer import zoo_config
    >>> layer_windows(zoo_config("gemma3-12b")), layer_windows(zoo_config("llama-2-7b"))
    ({1024: 40, 0: 8}, {0: 32})
    """
    per = getattr(cfg, "layer_window", None)
    if per is None or not getattr(cfg, "sliding_window", 0):
        return {0: int(cfg.layers)}
    out: dict[int, int] = {}
    for i in range(int(cfg.layers)):
        w = int(per(i))
        out[w] = out.get(w, 0) + 1
    return out


def window_kv_tokens(query_tokens: int, context: int, window: int) -> int:
    """Keys one attention of ``query_tokens`` new tokens after ``context`` earlier ones reads: all
    ``context + query_tokens`` on a global layer (``window`` 0); on a local layer the at most ``window``
    earlier positions its cache ring holds plus the new tokens (the builder's decode cache holds
    ``min(context, window)``).

    >>> window_kv_tokens(1, 5000, 0), window_kv_tokens(1, 5000, 1024), window_kv_tokens(512, 300, 1024)
    (5001, 1025, 812)
    """
    from workloads.zoo.transformer import window_context

    return window_context(context, window) + query_tokens


def kv_bytes_per_token(cfg: Any, *, tp: int = 1, pp: int = 1, dtype: str = "bf16") -> float:
    """KV-cache bytes one token occupies on one device under tensor parallelism ``tp`` and ``pp``
    pipeline stages: ``2 * layers / pp * max(1, kv_heads / tp) * head_dim * bytes`` (the worst stage
    holds ``ceil(layers / pp)`` layers)."""
    layers = -(-cfg.layers // pp)
    kv_heads = max(1, cfg.n_kv_heads // tp)
    return 2.0 * layers * kv_heads * cfg.d_head * parse_dtype(dtype).bits / 8.0


def sampler_graph(cfg: Any, *, n: int, kernels: tuple[str, ...], dtype: str = "bf16") -> OpGraph:
    """The sampler kernels a serving stack launches after the LM head over the ``n x vocab`` logits of the
    ``n`` sequences that sample (full vocabulary: tensor-parallel logits are gathered first), in the
    order given (names of :data:`SAMPLER_KERNELS`): ``to_fp32`` (cast of the 16-bit logits),
    ``temperature`` (in-place division by a per-row temperature), ``softmax`` / ``log_softmax`` (fp32
    row softmaxes), ``gather_rows`` (a row gather, a copy), ``argmax`` (a row max).

    Raises ``ValueError`` for a non-positive ``n`` or an unknown kernel name.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"sampler_graph: n: got {n!r}; expected a positive integer")
    bad = [k for k in kernels if k not in SAMPLER_KERNELS]
    if bad:
        raise ValueError(f"sampler_graph: kernel {bad[0]!r}; expected one of {', '.join(SAMPLER_KERNELS)}")
    b = GraphBuilder(f"{cfg.name}.sampler", dtype=dtype)
    x = b.input("logits", (n, cfg.vocab))
    for k in kernels:
        if k == "to_fp32":
            x = b.op("elementwise", [x], name=k, op="cast", out_dtype="fp32")
        elif k == "temperature":
            t = b.input("temperatures", (n, 1), dtype=x.dtype.value)
            x = b.op("elementwise", [x, t], name=k, op="div")
        elif k in ("softmax", "log_softmax"):
            b.op("softmax", [x], name=k, axis=-1)
        elif k == "gather_rows":
            x = b.op("elementwise", [x], name=k, op="copy")
        else:
            b.op("reduction", [x], name=k, op="max", axes=(-1,))
    return b.build({"model": cfg.name, "n": n, "phase": "sampler"})


def graph_batch(batch: int, sizes: tuple[int, ...]) -> int:
    """The batch a decode step of ``batch`` sequences replays: the smallest captured size ``>= batch``
    (``batch`` itself when ``sizes`` is empty or every size is smaller: the step then runs without a graph).

    >>> graph_batch(9, (1, 2, 4, 8, 16)), graph_batch(3, (1, 2, 4, 8)), graph_batch(40, (1, 2, 4, 8))
    (16, 4, 40)
    """
    return min((s for s in sizes if s >= batch), default=batch)
