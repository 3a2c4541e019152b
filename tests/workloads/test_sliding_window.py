"""Sliding-window (local) causal attention: the banded pair count of the attention op forward and
backward (hand-computed small cases), the local:global layer patterns of Gemma 3 and gpt-oss, the
local layers' decode KV caches, and the two zoo entries' parameter counts (hand-computed from their
configs and checked against the published totals)."""

from __future__ import annotations

import pytest

from workloads.ir import GraphBuilder, GraphError, Role
from workloads.semantics import attention_pairs, banded_block_pairs
from workloads.training import training_graph
from workloads.zoo import build_model
from workloads.zoo.transformer import TransformerConfig, build, zoo_config


def _attention_graph(sq: int, skv: int, window: int, *, heads: int = 2, d: int = 4):
    b = GraphBuilder("swa", dtype="bf16")
    q = b.input("q", (1, heads, sq, d))
    k = b.input("k", (1, heads, skv, d))
    v = b.input("v", (1, heads, skv, d))
    attrs = {"window": window} if window else {}
    b.op("attention", [q, k, v], name="core", causal=True, **attrs)
    return b.build()


def test_banded_pairs_by_hand() -> None:
    # 6 queries over 6 keys, window 3: each query sees min(pos + 1, 3) keys: 1 + 2 + 3 + 3 + 3 + 3
    assert attention_pairs(6, 6, True, 3) == 15
    # decode: one query at position 9 of 10 keys, window 4: 4 keys
    assert attention_pairs(1, 10, True, 4) == 4
    # a chunk of 3 queries at positions 5, 6, 7 of 8 keys, window 4: 4 each
    assert attention_pairs(3, 8, True, 4) == 12
    # window 0, or one at least the sequence: plain causal (6 * 7 / 2)
    assert attention_pairs(6, 6, True, 0) == attention_pairs(6, 6, True, 6) == attention_pairs(6, 6, True) == 21


def test_attention_op_flops_forward_and_backward() -> None:
    (op,) = [o for o in _attention_graph(6, 6, 3).ops if o.kind == "attention"]
    # 15 pairs x 2 heads x (QK^T 4 + PV 4) MACs = 240 MACs
    assert op.macs == 240 and op.flops == 480
    cfg = TransformerConfig("tiny-swa", vocab=16, d_model=8, layers=2, heads=2, d_ff=16, mlp="swiglu", norm="rmsnorm",
                            pos="rope", sliding_window=3, global_every=2)
    tg = training_graph(build(cfg, phase="train", batch=1, seq=6), optimizer="sgd")
    bwd = [o for o in tg.ops if o.kind == "attention_bwd"]
    assert sorted(o.attrs.get("window", 0) for o in bwd) == [0, 3]  # layer 0 local, layer 1 global
    local = [o for o in bwd if o.attrs.get("window")][0]
    # five contractions: 15 pairs x 2 heads x (3 x 4 + 2 x 4) = 600 MACs (the global layer: 21 pairs)
    assert local.macs == 600 and local.flops == 1200
    assert [o for o in bwd if not o.attrs.get("window")][0].macs == 21 * 2 * 20


def test_window_zero_is_full_causal_attention() -> None:
    full = [o for o in _attention_graph(64, 64, 0).ops if o.kind == "attention"][0]
    assert full.macs == 2 * (64 * 65 // 2) * 8 and "window" not in full.attrs


def test_block_sparse_pairs_by_hand() -> None:
    # 8 queries over 8 keys, window 3, blocks of 2 query rows and 2 keys: rows (0,1) keys from 0: 1 + 2;
    # rows (2,3): band starts at key 0: 3 + 4; rows (4,5): band from key 2, block start 2: 3 + 4;
    # rows (6,7): band from key 4: 3 + 4 -> 24 (exact band: 1 + 2 + 3 x 6 = 21)
    assert banded_block_pairs(8, 8, 3, 2, 2) == 24
    # blocks of 4: rows 4..7 start at key block 0 (band from key 2): 5 + 6 + 7 + 8; rows 0..3: 10
    assert banded_block_pairs(8, 8, 3, 4, 4) == 36
    assert banded_block_pairs(8, 8, 0, 4, 4) == 36  # no window: causal


def test_bad_windows_are_refused() -> None:
    b = GraphBuilder("bad", dtype="bf16")
    q, k, v = (b.input(n, (1, 2, 8, 4)) for n in "qkv")
    with pytest.raises(GraphError, match="a sliding window needs a causal mask"):
        b.op("attention", [q, k, v], name="core", causal=False, window=4)
    with pytest.raises(GraphError, match="window: got -1; expected an integer >= 0"):
        b.op("attention", [q, k, v], name="core", causal=True, window=-1)
    with pytest.raises(ValueError, match="sliding_window: got 1024 on an encoder"):
        TransformerConfig("enc", vocab=10, d_model=8, layers=1, heads=2, d_ff=8, encoder_only=True, sliding_window=1024)
    with pytest.raises(ValueError, match="context parallelism of sliding-window attention is not modelled"):
        build_model("gemma3-12b", phase="train", seq=64, batch=1, cp=2)


def test_layer_patterns() -> None:
    gemma = zoo_config("gemma3-12b")
    assert [i for i in range(48) if gemma.layer_window(i) == 0] == [5, 11, 17, 23, 29, 35, 41, 47]  # 5 local : 1 global
    assert {gemma.layer_window(i) for i in range(48)} == {0, 1024}
    oss = zoo_config("gpt-oss-120b")
    assert [oss.layer_window(i) for i in range(4)] == [128, 0, 128, 0]  # sliding on even layers, full on odd
    g = build_model("gemma3-12b", seq=4096, batch=1)
    att = [o for o in g.ops if o.kind == "attention"]
    assert [o.attrs.get("window", 0) for o in att[:6]] == [1024] * 5 + [0]
    # local layer: 1024 x 1025 / 2 + 3072 x 1024 pairs per head; 16 heads x (256 + 256) MACs per pair
    assert att[0].flops == 2 * 16 * 512 * (1024 * 1025 // 2 + 3072 * 1024) == 60_137_930_752
    assert att[5].flops == 2 * 16 * 512 * (4096 * 4097 // 2) == 137_472_507_904


def test_local_layers_cache_only_their_window() -> None:
    g = build_model("gpt-oss-120b", phase="decode", context=4096, batch=2)
    att = [o for o in g.ops if o.kind == "attention"]
    assert att[0].inputs[1].shape == (2, 8, 129, 64) and att[1].inputs[1].shape == (2, 8, 4097, 64)
    assert att[0].flops == 2 * 2 * 64 * 128 * 128  # batch 2 x 64 heads x 128 keys x (64 + 64) MACs
    # 18 local layers hold 128 positions, 18 global layers 4096: K and V, 8 KV heads of 64, bf16, batch 2
    want = 2 * 8 * 64 * (18 * 128 + 18 * 4096) * 2 * 2
    assert g.role_bytes(Role.KV_CACHE) == zoo_config("gpt-oss-120b").kv_cache_bytes(2, 4096) == want


def test_gemma3_12b_parameters() -> None:
    d, hd, f = 3840, 256, 15360
    attn = d * 16 * hd + 2 * d * 8 * hd + 16 * hd * d + 2 * hd  # q, k, v, o; the q and k head norms
    per_layer = attn + 3 * d * f + 4 * d  # GeGLU gate, up, down; pre- and post-norms of both blocks
    emb = 262144 * d  # tied with the LM head
    g = build_model("gemma3-12b", seq=8, batch=1)
    assert g.params == emb + 48 * per_layer + d == 11_765_788_416
    # Gemma 3 Technical Report (arXiv 2503.19786) Table 1, 12B: 10,759M non-embedding parameters
    assert round((g.params - emb) / 1e6) == 10_759


def test_gpt_oss_120b_parameters(moe_counts) -> None:
    d = 2880
    attn = d * 4096 + 4096 + 2 * (d * 512 + 512) + 4096 * d + d + 2 * d  # q, k, v with biases; o with bias; 2 norms
    expert = 3 * d * 2880
    total, active = moe_counts("gpt-oss-120b")
    emb = 2 * 201088 * d  # untied embedding and LM head
    assert total == emb + 36 * (attn + d * 128 + 128 * expert) + d == 116_789_336_640
    assert active == emb + 36 * (attn + d * 128 + 4 * expert) + d
    # model card (arXiv 2508.10925, Table 1): 116.83B total (the 39.8M expert biases and the sinks not
    # represented here), 5.13B active counted without the input embedding table
    assert total == pytest.approx(116.83e9, rel=1e-3)
    assert active - 201088 * d == pytest.approx(5.13e9, rel=2e-3)


def test_attention_micro_workload_takes_a_window() -> None:
    from workloads.resolve import load_workload

    g = load_workload("attention:b=1,h=2,s=6,d=4,causal=1,window=3")
    assert [o.flops for o in g.ops if o.kind == "attention"] == [480]  # the hand count above
    bwd = load_workload("attention:b=1,h=2,s=6,d=4,causal=1,window=3,bwd=1")
    assert [o.flops for o in bwd.ops if o.kind == "attention_bwd"] == [1200]
