"""Training-step derivation: 3x/4x FLOP ratios, exact contraction counts, optimizer-state bytes, tied gradients, CNNs, errors."""

from __future__ import annotations

import pytest

from workloads.analysis import peak_live_bytes
from workloads.ir import GraphBuilder, GraphError, Role, UnsupportedOpError
from workloads.training import training_graph
from workloads.zoo.transformer import TransformerConfig, train_forward

# a dense decoder whose cost is dominated by its layers (small vocabulary)
DENSE = TransformerConfig("dense", vocab=2048, d_model=512, layers=4, heads=8, d_ff=2048, max_positions=512,
                          tied_embeddings=False)
LLAMA_LIKE = TransformerConfig("llama_like", vocab=1024, d_model=256, layers=2, heads=8, kv_heads=2, d_ff=768,
                               mlp="swiglu", norm="rmsnorm", pos="rope", tied_embeddings=False, qkv_bias=False,
                               out_bias=False, mlp_bias=False)


def _macs(g, kind):
    return sum(op.macs for op in g if op.kind == kind)


@pytest.fixture(scope="module")
def dense_fwd():
    return train_forward(DENSE, batch=2, seq_len=256, dtype="bf16")


def test_dense_step_is_three_forwards(dense_fwd):
    step = training_graph(dense_fwd)
    fwd = dense_fwd
    # every contraction appears three times: forward, input gradient, weight gradient (exact)
    assert _macs(step, "matmul") == 3 * _macs(fwd, "matmul")
    # flash-style attention backward: 5 contractions per pair against the forward's 2 (exact)
    assert _macs(step, "attention_bwd") == 5 * _macs(fwd, "attention") // 2
    # hand formula: 6 N tokens (N: all matmul weights, embeddings excluded) plus attention
    tokens = 2 * 256
    n_matmul = 4 * (4 * 512 * 512 + 2 * 512 * 2048) + 512 * 2048  # layers + untied LM head
    attention_fwd = 4 * 2 * 8 * 64 * (256 * 257 // 2) * 4
    assert step.flops == pytest.approx(6 * n_matmul * tokens + 3.5 * attention_fwd, rel=0.02)
    assert step.flops == pytest.approx(3 * fwd.flops, rel=0.02)
    assert step.meta["phase"] == "train_step"


def test_full_recompute_is_four_forwards(dense_fwd):
    none = training_graph(dense_fwd)
    full = training_graph(dense_fwd, recompute="full")
    layer_flops = sum(op.flops for op in dense_fwd if op.group.startswith("layers."))
    assert full.flops == none.flops + layer_flops
    assert full.flops == pytest.approx(4 * dense_fwd.flops, rel=0.02)
    sel = training_graph(dense_fwd, recompute="selective")
    assert sel.flops == none.flops + sum(op.flops for op in dense_fwd if op.kind == "attention")
    # recomputation trades FLOPs for memory
    assert peak_live_bytes(full) < peak_live_bytes(sel) <= peak_live_bytes(none)


def test_selective_recompute_decomposed_attention():
    fwd = train_forward(LLAMA_LIKE, batch=1, seq_len=64, attention="decomposed")
    none = training_graph(fwd)
    sel = training_graph(fwd, recompute="selective")
    recomputed = [op for op in sel if op.name.endswith("@recompute")]
    assert sorted({op.name.split(".")[-1] for op in recomputed}) == [
        "mask@recompute", "pv@recompute", "qk@recompute", "scale@recompute", "softmax@recompute"]
    assert sel.flops - none.flops == sum(op.flops for op in recomputed)


@pytest.mark.parametrize(("optimizer", "mixed", "dtype", "state_per_param"), [
    ("adamw", True, "bf16", 12),   # fp32 master + exp_avg + exp_avg_sq
    ("adam", True, "fp16", 12),
    ("adamw", False, "fp32", 8),   # the two moments only
    ("sgd_momentum", True, "bf16", 8),
    ("sgd", True, "bf16", 4),      # master copy only
    ("sgd", False, "fp32", 0),
])
def test_optimizer_state_bytes(optimizer, mixed, dtype, state_per_param):
    fwd = train_forward(LLAMA_LIKE, batch=1, seq_len=32, dtype=dtype)
    step = training_graph(fwd, optimizer=optimizer, mixed_precision=mixed)
    n = fwd.params
    assert step.role_bytes(Role.OPTIMIZER_STATE) == state_per_param * n
    assert step.role_bytes(Role.GRADIENT) == fwd.weight_bytes  # one gradient per weight, in its dtype
    updates = [op for op in step if op.kind == "optimizer_update"]
    assert len(updates) == len([t for t in fwd.tensors.values() if t.role is Role.WEIGHT])
    from workloads.semantics import OPTIMIZER_FLOPS

    assert sum(op.flops for op in updates) == OPTIMIZER_FLOPS[optimizer] * n


def test_tied_embedding_gradients_are_accumulated():
    cfg = TransformerConfig("tied", vocab=500, d_model=64, layers=1, heads=4, d_ff=256, max_positions=64)
    step = training_graph(train_forward(cfg, batch=2, seq_len=16, dtype="bf16"))
    table = "embed.tokens.weight"
    acc = [op for op in step if op.kind == "elementwise" and op.outputs[0].name == f"grad:{table}"]
    assert len(acc) == 1 and acc[0].attrs["op"] == "add"
    kinds = {step.producer(t.name).kind for t in acc[0].inputs}
    assert kinds == {"embedding_bwd", "matmul"}
    grads = [t for t in step.tensors.values() if t.role is Role.GRADIENT]
    assert len(grads) == len({t.name for t in step.tensors.values() if t.role is Role.WEIGHT
                              and step.producer(t.name) is None})
    assert step.role_bytes(Role.GRADIENT) == step.weight_bytes


def test_moe_training_step():
    cfg = TransformerConfig("moe", vocab=256, d_model=128, layers=2, heads=4, d_ff=256, mlp="swiglu", norm="rmsnorm",
                            pos="rope", tied_embeddings=False, experts=4, top_k=2, capacity_factor=1.0)
    fwd = train_forward(cfg, batch=2, seq_len=32)
    step = training_graph(fwd)
    kinds = {op.kind for op in step}
    assert {"moe_router_bwd", "moe_dispatch_bwd", "moe_combine_bwd", "grouped_matmul_bwd_data",
            "grouped_matmul_bwd_weight"} <= kinds
    fwd_expert = sum(op.flops for op in fwd if op.kind == "grouped_matmul")
    bwd_expert = sum(op.flops for op in step if op.kind.startswith("grouped_matmul_bwd"))
    assert bwd_expert == 2 * fwd_expert == 2 * 2 * 2 * (64 * 2) * 128 * (2 * 256 + 256)


def _small_cnn():
    b = GraphBuilder("tiny_cnn", "fp32")
    x = b.input("images", (4, 3, 32, 32))
    w1 = b.weight("conv1.weight", (16, 3, 3, 3))
    b1 = b.weight("conv1.bias", (16,))
    y = b.op("conv2d", [x, w1, b1], name="conv1", padding=1)
    y = b.op("batchnorm", [y, b.weight("bn1.weight", (16,)), b.weight("bn1.bias", (16,))], name="bn1", training=True)
    y = b.op("elementwise", [y], name="relu1", op="relu")
    y = b.op("pool2d", [y], name="pool1", mode="max", kernel=2)
    y = b.op("conv2d", [y, b.weight("conv2.weight", (32, 16, 3, 3))], name="conv2", padding=1)
    y = b.op("elementwise", [y], name="relu2", op="relu")
    y = b.op("pool2d", [y], name="gap", mode="avg", output_size=1)
    y = b.op("reshape", [y], name="flatten", shape=(4, 32))
    y = b.op("matmul", [y, b.weight("fc.weight", (32, 10)), b.weight("fc.bias", (10,))], name="fc")
    b.op("cross_entropy", [y, b.input("labels", (4,), "int32")], name="loss")
    return b.build()


def test_cnn_training_step():
    fwd = _small_cnn()
    step = training_graph(fwd, optimizer="sgd_momentum", mixed_precision=False)
    names = {op.name for op in step}
    # the first conv reads data: its weight gradient is needed, its input gradient is not
    assert "conv1.bwd_weight" in names and "conv1.bwd_data" not in names
    assert {"conv2.bwd_data", "conv2.bwd_weight", "bn1.bwd", "pool1.bwd", "gap.bwd", "loss.bwd"} <= names
    conv1 = fwd.op("conv1").macs
    conv2 = fwd.op("conv2").macs
    assert _macs(step, "conv2d_bwd_weight") == conv1 + conv2
    assert _macs(step, "conv2d_bwd_data") == conv2
    assert step.op("conv1.bwd_weight").outputs[0].shape == (16, 3, 3, 3)
    assert step.op("pool1.bwd").outputs[0].shape == (4, 16, 32, 32)
    # SGD with momentum in fp32: one fp32 momentum per parameter
    assert step.role_bytes(Role.OPTIMIZER_STATE) == 4 * fwd.params


def test_unsupported_op_is_located():
    b = GraphBuilder("g", "fp32")
    x = b.input("x", (4, 8))
    y = b.op("matmul", [x, b.weight("w", (8, 8))], name="fc")
    y = b.op("generic", [y], name="custom_thing", op_type="MyOp", output_shapes=((4, 8),))
    b.op("cross_entropy", [y], name="loss")
    with pytest.raises(UnsupportedOpError, match=r"op 'custom_thing' \(generic\): no backward rule for kind 'generic'"):
        training_graph(b.build())


def test_errors_for_missing_loss_and_bad_options(dense_fwd):
    b = GraphBuilder("g", "fp32")
    b.op("matmul", [b.input("x", (2, 4)), b.weight("w", (4, 4))], name="fc")
    with pytest.raises(GraphError, match="no loss op"):
        training_graph(b.build())
    with pytest.raises(ValueError, match="did you mean 'adamw'"):
        training_graph(dense_fwd, optimizer="adamww")
    with pytest.raises(ValueError, match="recompute"):
        training_graph(dense_fwd, recompute="some")


def test_training_step_json_round_trip():
    import json

    from workloads.serialize import graph_from_json, graph_to_json

    step = training_graph(train_forward(LLAMA_LIKE, batch=1, seq_len=16), recompute="full")
    again = graph_from_json(json.loads(json.dumps(graph_to_json(step))))
    assert graph_to_json(again) == graph_to_json(step)
    assert again.flops == step.flops and again.role_bytes(Role.OPTIMIZER_STATE) == step.role_bytes(Role.OPTIMIZER_STATE)


def test_sparse_embedding_gradient_updates_touched_rows_only():
    """DLRM's tables use sparse gradients: the backward and the optimizer touch the looked-up rows only."""
    from workloads.ir import GraphBuilder
    from workloads.training import training_graph

    b = GraphBuilder("bag", "fp32")
    ids = b.input("ids", (4, 3), "int64")  # 4 samples x 3 lookups
    table = b.weight("table", (1000, 8))
    pooled = b.op("embedding", [ids, table], name="bag", bag=True, sparse=True)
    w = b.weight("fc.weight", (8, 2))
    logits = b.op("matmul", [pooled, w], name="fc")
    b.op("cross_entropy", [logits], name="loss")
    step = training_graph(b.build(meta={"phase": "train"}), optimizer="sgd", mixed_precision=False)
    bwd = next(op for op in step if op.kind == "embedding_bwd")
    assert bwd.outputs[0].shape == (12, 8)  # 12 looked-up rows of 8
    assert (bwd.bytes_read, bwd.bytes_written) == (4 * 8 * 4, 12 * 8 * 4)
    upd = next(op for op in step if op.kind == "optimizer_update" and op.inputs[0].name == "table")
    assert upd.attrs["sparse_rows"] == 12
    assert upd.flops == 2 * 12 * 8  # SGD: 2 FLOPs per updated element
    # read the touched rows of the parameter and the sparse gradient; write the touched rows
    assert (upd.bytes_read, upd.bytes_written) == (12 * 8 * 4 + 12 * 8 * 4, 12 * 8 * 4)


def test_optimizer_writes_its_state_in_place():
    """AdamW under mixed precision reads 16 B and writes 14 B per bf16 parameter (param, grad, master, m, v)."""
    from workloads.ir import GraphBuilder
    from workloads.training import training_graph

    b = GraphBuilder("lin", "bf16")
    x = b.input("x", (4, 16))
    w = b.weight("w", (16, 16))
    y = b.op("matmul", [x, w], name="fc")
    b.op("cross_entropy", [y], name="loss")
    step = training_graph(b.build(meta={"phase": "train"}), optimizer="adamw", mixed_precision=True)
    upd = next(op for op in step if op.kind == "optimizer_update")
    n = 16 * 16
    assert (upd.bytes_read, upd.bytes_written) == (16 * n, 14 * n)


def test_an_aten_fallback_gradient_is_one_too_for_unary_and_binary_ops():
    # an op the compiler leaves to ATen (workloads.frameworks aten_fallback): its gradient kernel is an ATen
    # kernel as well, whether it reads the other operand (mul), the input (gelu) or dy alone (scale)
    b = GraphBuilder("fallbacks", dtype="bf16")
    x = b.input("x", (4, 8))
    h = b.op("matmul", [x, b.weight("w", (8, 8))], name="fc")
    h = b.op("elementwise", [h], name="act", op="gelu", aten_fallback=True)
    h = b.op("elementwise", [h], name="halve", op="scale", aten_fallback=True)
    h = b.op("elementwise", [h, b.weight("gain", (8,))], name="gain_mul", op="mul", aten_fallback=True)
    h = b.op("elementwise", [h], name="plain", op="gelu")
    b.op("cross_entropy", [h, b.input("labels", (4,), "int32")], name="loss")
    step = training_graph(b.build(), optimizer="sgd", mixed_precision=False)
    marked = sorted(op.name for op in step if op.kind == "elementwise_bwd" and op.attrs.get("aten_fallback"))
    assert marked == ["act.bwd", "gain_mul.bwd_0", "gain_mul.bwd_1", "halve.bwd"]
    assert not step.op("plain.bwd").attrs.get("aten_fallback")
