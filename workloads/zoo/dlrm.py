"""Zoo builder for DLRM, the recommendation model of embedding-bag lookups, MLPs and a dot interaction.

The configuration is MLPerf's Criteo Terabyte one (``data/dlrm.toml``): 13 dense features through a
bottom MLP 13-512-256-128, 26 pooled embedding lookups of dim 128, the pairwise dot products of the
27 resulting vectors (strictly lower triangle: 351 values) concatenated with the dense vector (479
features), and a top MLP 1024-1024-512-256-1 ending in a sigmoid. ``seq`` is the number of lookups
per table per sample (1 for Criteo Terabyte; larger values model multi-hot features, summed).

Parameters are dominated by the tables: 187,767,399 rows x 128 = 24,034,227,072, plus 2,368,897
MLP parameters.

Example
-------
>>> from workloads.zoo import build_model
>>> g = build_model("dlrm", batch=4)
>>> g.params
24036595969
"""

from __future__ import annotations

from typing import Any

from workloads.ir import OpGraph, TensorSpec
from workloads.zoo import ModelEntry, load_data, register_model
from workloads.zoo._blocks import Net

__all__ = ["build_dlrm"]

_DATA = "dlrm.toml"


def _mlp(net: Net, x: TensorSpec, widths: list[int], *, last_act: str) -> TensorSpec:
    for i, w in enumerate(widths):
        x = net.linear(x, int(w), name=str(i))
        x = net.act(x, last_act if i == len(widths) - 1 else "relu")
    return x


def build_dlrm(name: str, *, batch: int, seq: int, phase: str, dtype: str, **_: Any) -> OpGraph:
    """DLRM with dot interaction (no self-interaction) in the MLPerf Criteo Terabyte configuration."""
    cfg = load_data(_DATA)[name]
    dim = int(cfg["embedding_dim"])
    rows = [int(r) for r in cfg["table_rows"]]
    bottom = [int(w) for w in cfg["bottom_mlp"]]
    if bottom[-1] != dim:
        raise ValueError(f"{_DATA}:{name}.bottom_mlp: last width {bottom[-1]} must equal embedding_dim {dim}")
    net = Net(name, dtype=dtype, phase=phase)
    dense = net.input("dense_features", (batch, int(cfg["dense_features"])))
    with net.group("bot_l"):
        x = _mlp(net, dense, bottom, last_act="relu")
    pooled = []
    for k, n in enumerate(rows):
        with net.group(f"emb_l.{k}"):
            ids = net.input(f"sparse_ids.{k}", (batch, seq), "int64")
            pooled.append(net.b.op("embedding", [ids, net.weight("weight", (n, dim))], name="bag", bag=True,
                                  sparse=True))
    with net.group("interact"):
        feats = 1 + len(rows)
        t = net.reshape(net.concat([x, *pooled], axis=1, name="cat_features"), (batch, feats, dim), name="stack")
        z = net.b.op("matmul", [t, t], name="dot", transpose_b=True)  # (B, F, F), all pairs
        pairs = feats * (feats - 1) // 2
        # the strictly-lower triangle, gathered by index in the reference (a few hundred values per sample)
        tri = net.b.op("slice", [net.reshape(z, (batch, feats * feats), name="flat")], name="tril",
                       shape=(batch, pairs))
        r = net.concat([x, tri], axis=1, name="concat")
    with net.group("top_l"):
        top = [int(w) for w in cfg["top_mlp"]]
        for i, w in enumerate(top[:-1]):
            r = net.act(net.linear(r, w, name=str(i)), "relu")
        logits = net.linear(r, top[-1], name=str(len(top) - 1))
        net.act(logits, "sigmoid")
    if net.train:
        net.classification_loss(logits, binary=True)  # binary cross-entropy on the click logit
    return net.build(model=name, batch=batch, lookups_per_table=seq)


_cfg = load_data(_DATA)["dlrm"]
register_model(ModelEntry(
    name="dlrm", family="recommendation", description=_cfg["description"], source=_cfg["source"],
    builder=build_dlrm,
    defaults={"batch": int(_cfg["batch"]), "seq": int(_cfg["lookups_per_table"]), "dtype": "fp32",
              "phase": "forward"},
    phases=("forward", "train"),
))
