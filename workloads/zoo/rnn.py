"""Zoo builder for GNMT, the stacked-LSTM encoder-decoder translation model with additive attention.

The layout is GNMT v2 as in the MLPerf/NVIDIA reference, with the layer count of the GNMT paper
(8 + 8): a bidirectional first encoder layer, residual connections from the third layer on,
normalized Bahdanau attention whose query is the first decoder layer's output and whose context is
concatenated to the input of every later decoder layer, shared embeddings and a linear classifier
over the vocabulary. Hyperparameters come from ``data/rnn.toml``.

The graph is the teacher-forced pass over a source and a target of ``seq`` tokens each (the work of
a training step's forward pass or of scoring a translation); beam-search decoding is not built.
Tensors are sequence-first ``(T, B, ...)`` as the reference runs its LSTMs.

Example
-------
>>> from workloads.zoo import build_model
>>> g = build_model("gnmt", batch=2, seq=8)
>>> g.op("decoder.classifier.classifier").outputs[0].shape
(8, 2, 32000)
>>> g.params
243967233
"""

from __future__ import annotations

from typing import Any

from workloads.ir import OpGraph, TensorSpec
from workloads.zoo import ModelEntry, load_data, register_model
from workloads.zoo._blocks import Net

__all__ = ["build_gnmt", "gnmt_param_count"]

_DATA = "rnn.toml"


def gnmt_param_count(layers: int, hidden: int, vocab: int, share_embedding: bool = True) -> int:
    """Closed-form parameter count of the GNMT v2 layout (PyTorch LSTM: two 4H bias vectors).

    Encoder: bidirectional layer ``2 * (4H(H + H) + 8H)``, second layer ``4H(2H + H) + 8H``, the other
    ``layers - 2`` layers ``4H(H + H) + 8H``. Decoder: attention LSTM ``4H(H + H) + 8H``, ``layers - 1``
    layers with input ``[x; context]`` ``4H(2H + H) + 8H``. Attention: ``2H^2`` (query and key
    projections, no bias) + ``H`` (score vector) + ``1`` (normalisation scalar) + ``H``
    (normalisation bias). Classifier ``HV + V``; embeddings ``VH`` (twice if not shared).
    """
    h = hidden
    uni = 4 * h * (h + h) + 8 * h
    wide = 4 * h * (2 * h + h) + 8 * h
    encoder = 2 * uni + wide + (layers - 2) * uni
    decoder = uni + (layers - 1) * wide
    attention = 2 * h * h + h + 1 + h
    classifier = h * vocab + vocab
    embeddings = vocab * h * (1 if share_embedding else 2)
    return encoder + decoder + attention + classifier + embeddings


def _lstm(net: Net, x: TensorSpec, hidden: int, *, bidirectional: bool = False, name: str) -> TensorSpec:
    d = 2 if bidirectional else 1
    i = x.shape[2]
    with net.group(name):
        w_ih = net.weight("weight_ih", (d, 4 * hidden, i))
        w_hh = net.weight("weight_hh", (d, 4 * hidden, hidden))
        bias = net.weight("bias", (d, 8 * hidden))  # b_ih and b_hh
    y, _h, _c = net.b.op("lstm", [x, w_ih, w_hh, bias], name=name, hidden=hidden, bidirectional=bidirectional)
    return y


def _attention(net: Net, query: TensorSpec, keys: TensorSpec) -> TensorSpec:
    """Normalized Bahdanau attention: score = (v / |v| * g) . tanh(W_q q + W_k k + b)."""
    t_q, b, h = query.shape
    t_k = keys.shape[0]
    q = net.b.op("transpose", [query], name="query_bt", perm=(1, 0, 2))
    k = net.b.op("transpose", [keys], name="keys_bt", perm=(1, 0, 2))
    pq = net.linear(q, h, bias=False, name="linear_q")
    pk = net.linear(k, h, bias=False, name="linear_k")
    pq = net.reshape(pq, (b, t_q, 1, h), name="query_expand")
    pk = net.reshape(pk, (b, 1, t_k, h), name="keys_expand")
    s = net.add(pq, pk, name="sum_qk")
    s = net.add(s, net.weight("normalize_bias", (h,)), name="add_bias")
    s = net.act(s, "tanh")
    v = net.weight("linear_att", (h, 1))
    norm = net.b.op("reduction", [v], name="linear_att_norm", op="l2norm")
    v = net.binary("div", v, norm, name="linear_att_unit")
    v = net.binary("mul", v, net.weight("normalize_scalar", (1,)), name="linear_att_scaled")
    scores = net.reshape(net.b.op("matmul", [s, v], name="score"), (b, t_q, t_k), name="scores")
    probs = net.b.op("softmax", [scores], name="softmax", axis=-1)
    ctx = net.b.op("matmul", [probs, k], name="context")  # (B, Tq, H)
    return net.b.op("transpose", [ctx], name="context_tb", perm=(1, 0, 2))


def build_gnmt(name: str, *, batch: int, seq: int, phase: str, dtype: str, layers: int | None = None,
               **_: Any) -> OpGraph:
    """GNMT v2 with ``layers`` LSTM layers in the encoder and in the decoder.

    ``layers`` defaults to the paper's 8 (``data/rnn.toml``); 4 gives the MLPerf reference's depth.
    """
    cfg = load_data(_DATA)[name]
    layers = int(cfg["layers"]) if layers is None else int(layers)
    hidden, vocab = int(cfg["hidden"]), int(cfg["vocab"])
    res_from = int(cfg["residual_from_layer"])
    if layers < 2:
        raise ValueError(f"model {name!r}: layers: too few; got {layers}; expected >= 2")
    net = Net(name, dtype=dtype, phase=phase)
    src = net.input("src_tokens", (seq, batch), "int64")
    tgt = net.input("tgt_tokens", (seq, batch), "int64")
    shared = bool(cfg["share_embedding"])
    table_shape = (vocab, hidden)
    emb_shared = net.weight("embedder.weight", table_shape) if shared else None

    with net.group("encoder"):
        table = emb_shared or net.weight("embedder.weight", table_shape)
        x = net.b.op("embedding", [src, table], name="embedder")
        x = _lstm(net, net.dropout(x), hidden, bidirectional=True, name="rnn_layers.0")
        x = _lstm(net, net.dropout(x), hidden, name="rnn_layers.1")
        for i in range(2, layers):
            y = _lstm(net, net.dropout(x), hidden, name=f"rnn_layers.{i}")
            x = net.add(y, x, name=f"residual.{i}") if i >= res_from else y
        context = x

    with net.group("decoder"):
        table = emb_shared or net.weight("embedder.weight", table_shape)
        x = net.b.op("embedding", [tgt, table], name="embedder")
        x = _lstm(net, x, hidden, name="att_rnn.rnn")
        with net.group("att_rnn.attn"):
            attn = _attention(net, x, context)
        for i in range(1, layers):
            inp = net.concat([net.dropout(x), attn], axis=2, name=f"concat.{i}")
            y = _lstm(net, inp, hidden, name=f"rnn_layers.{i - 1}")
            x = net.add(y, x, name=f"residual.{i}") if i >= res_from else y
        logits = net.linear(x, vocab, name="classifier.classifier")

    meta = {"model": name, "batch": batch, "seq": seq, "layers": layers}
    if net.train:
        flat = net.reshape(logits, (seq * batch, vocab), name="logits_flat")
        net.classification_loss(flat)
    return net.build(**meta)


register_model(ModelEntry(
    name="gnmt", family="rnn", description=load_data(_DATA)["gnmt"]["description"],
    source=load_data(_DATA)["gnmt"]["source"], builder=build_gnmt,
    defaults={"batch": int(load_data(_DATA)["gnmt"]["batch"]), "seq": int(load_data(_DATA)["gnmt"]["seq"]),
              "dtype": "fp32", "phase": "forward"},
    phases=("forward", "train"),
))
