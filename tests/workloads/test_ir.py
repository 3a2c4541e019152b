"""Graph IR: hand-computed FLOPs/bytes/params, validation errors, analyses and the JSON round trip."""

from __future__ import annotations

import dataclasses
import json

import pytest

from workloads.analysis import breakdown, critical_path, peak_live_bytes, totals
from workloads.dtypes import DType, parse_dtype
from workloads.ir import (
    Attrs,
    GraphBuilder,
    GraphError,
    Op,
    OpGraph,
    Role,
    TensorSpec,
    UnsupportedOpError,
)
from workloads.semantics import attention_pairs, conv_dims, gemm_dims
from workloads.serialize import graph_from_json, graph_to_json, load_graph, save_graph


def test_dtype_bits_and_parse():
    assert [DType(x).bits for x in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "int4")] == [
        64, 32, 32, 16, 16, 8, 8, 8, 4]
    assert parse_dtype("bfloat16") is DType.BF16
    with pytest.raises(ValueError, match="did you mean 'bf16'"):
        parse_dtype("bf61")


def test_int4_bytes_round_up():
    assert TensorSpec("w", (3,), DType.INT4, Role.WEIGHT).nbytes == 2


def test_matmul_flops_bytes_params_by_hand():
    b = GraphBuilder("g", "fp16")
    x = b.input("x", (4, 16, 32))  # folds to M = 64
    w = b.weight("w", (32, 8))
    bias = b.weight("b", (8,))
    y = b.op("matmul", [x, w, bias], name="fc")
    g = b.build()
    op = g.op("fc")
    assert y.shape == (4, 16, 8)
    assert gemm_dims(op) == (1, 64, 8, 32)
    assert op.flops == 2 * 64 * 8 * 32 + 64 * 8
    assert op.bytes_read == (4 * 16 * 32 + 32 * 8 + 8) * 2
    assert op.bytes_written == 4 * 16 * 8 * 2
    assert g.params == 32 * 8 + 8


def test_batched_matmul_with_transpose():
    b = GraphBuilder("g")
    q = b.input("q", (2, 3, 5, 7))
    k = b.input("k", (2, 3, 11, 7))
    s = b.op("matmul", [q, k], transpose_b=True)
    assert s.shape == (2, 3, 5, 11)
    op = b.ops[0]
    assert gemm_dims(op) == (6, 5, 11, 7)
    assert op.flops == 2 * 6 * 5 * 11 * 7


def test_conv2d_shapes_and_flops_by_hand():
    # ResNet stem: 3->64, 7x7, stride 2, pad 3 on 224x224 -> 112x112
    b = GraphBuilder("g")
    x = b.input("x", (2, 3, 224, 224))
    w = b.weight("w", (64, 3, 7, 7))
    y = b.op("conv2d", [x, w], stride=2, padding=3)
    assert y.shape == (2, 64, 112, 112)
    op = b.ops[0]
    assert op.macs == 2 * 64 * 112 * 112 * 3 * 7 * 7
    d = conv_dims(op)
    assert (d["gemm_m"], d["gemm_n"], d["gemm_k"]) == (2 * 112 * 112, 64, 147)
    # depthwise 3x3, groups=32, dilation 2
    b2 = GraphBuilder("dw")
    x2 = b2.input("x", (1, 32, 10, 10))
    w2 = b2.weight("w", (32, 1, 3, 3))
    y2 = b2.op("conv2d", [x2, w2], groups=32, padding=2, dilation=2)
    assert y2.shape == (1, 32, 10, 10)
    assert b2.ops[0].macs == 32 * 100 * 9


def test_attention_causal_pairs_and_gqa():
    assert attention_pairs(4, 4, causal=True) == 10
    assert attention_pairs(1, 4, causal=True) == 4  # decode sees the whole cache
    assert attention_pairs(2, 5, causal=True) == 2 * 3 + 3
    b = GraphBuilder("g", "bf16")
    q = b.input("q", (1, 8, 4, 16))
    k = b.input("k", (1, 2, 4, 16))
    v = b.input("v", (1, 2, 4, 16))
    o = b.op("attention", [q, k, v], causal=True)
    assert o.shape == (1, 8, 4, 16)
    assert b.ops[0].flops == 8 * 10 * (2 * 16 + 2 * 16)
    with pytest.raises(GraphError, match="not a multiple"):
        b.op("attention", [q, b.input("k3", (1, 3, 4, 16)), b.input("v3", (1, 3, 4, 16))])


def test_views_move_no_bytes_transpose_does():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3, 4))
    r = b.op("reshape", [x], shape=(6, -1))
    t = b.op("transpose", [r], perm=(1, 0))
    g = b.build()
    assert r.shape == (6, 4) and t.shape == (4, 6)
    assert (g.ops[0].bytes_read, g.ops[0].bytes_written) == (0, 0)
    assert (g.ops[1].bytes_read, g.ops[1].bytes_written) == (96, 96)
    assert g.flops == 0


def test_embedding_counts_gathered_rows_only():
    b = GraphBuilder("g", "fp16")
    ids = b.input("ids", (2, 3), dtype="int64")
    table = b.weight("emb", (50000, 8))
    b.op("embedding", [ids, table])
    g = b.build()
    assert g.ops[0].bytes_read == 6 * 8 + 6 * 8 * 2
    assert g.params == 400000


def test_kv_append_moves_only_new_entries():
    b = GraphBuilder("g", "bf16")
    cache = b.tensor("k_cache", (1, 2, 100, 8), role=Role.KV_CACHE)
    new = b.input("k_new", (1, 2, 1, 8))
    out = b.op("kv_append", [cache, new], out_roles=[Role.KV_CACHE])
    assert out.shape == (1, 2, 101, 8) and out.role is Role.KV_CACHE
    op = b.ops[0]
    assert (op.bytes_read, op.bytes_written) == (32, 32)


def test_duplicate_names_cycles_and_shape_errors_name_the_op():
    x = TensorSpec("x", (2, 2), DType.FP32)
    y = TensorSpec("y", (2, 2), DType.FP32)
    a = Op("a", "elementwise", (x,), (y,), Attrs({"op": "relu"}))
    with pytest.raises(GraphError, match="duplicate op name"):
        OpGraph("g", [a, a])
    # cycle: b consumes y produces z, c consumes z produces y2... make a real cycle x->y->x
    c1 = Op("c1", "elementwise", (x,), (y,), Attrs({"op": "relu"}))
    c2 = Op("c2", "elementwise", (y,), (x,), Attrs({"op": "relu"}))
    with pytest.raises(GraphError, match="cycle through ops"):
        OpGraph("g", [c1, c2])
    bad = Op("bad", "elementwise", (x,), (TensorSpec("z", (3, 2), DType.FP32),), Attrs({"op": "relu"}))
    with pytest.raises(GraphError, match=r"op 'bad' \(elementwise\): output 'z' shape mismatch; got \(3, 2\); expected \(2, 2\)"):
        OpGraph("g", [bad])
    with pytest.raises(UnsupportedOpError, match="did you mean 'matmul'"):
        OpGraph("g", [Op("m", "matmull", (x, y), (x,))])
    b = GraphBuilder("g")
    with pytest.raises(GraphError, match=r"op 'mm' \(matmul\): contraction dims differ"):
        b.op("matmul", [b.input("p", (2, 3)), b.input("q", (4, 5))], name="mm")


def test_ops_added_to_a_builder_are_still_checked():
    # ops made by GraphBuilder.op are not inferred twice; an op appended with add() is
    b = GraphBuilder("g")
    x = b.input("x", (2, 2))
    b.op("elementwise", [x], name="ok", op="relu")
    b.add(Op("bad", "elementwise", (x,), (TensorSpec("z", (3, 2), DType.FP32),), Attrs({"op": "relu"})))
    with pytest.raises(GraphError, match=r"op 'bad' \(elementwise\): output 'z' shape mismatch"):
        b.build()


def test_missing_attribute_is_a_located_graph_error():
    b = GraphBuilder("g")
    x = b.input("x", (4,))
    with pytest.raises(GraphError, match=r"op 'sp' \(split\): missing attribute 'sizes'"):
        b.op("split", [x], name="sp")
    # the same from a hand-built op (as a JSON file could hold): no KeyError
    op = Op("sp", "split", (x,), (TensorSpec("y", (4,), DType.FP32),), Attrs({"axis": 0}))
    with pytest.raises(GraphError, match=r"op 'sp' \(split\): missing attribute 'sizes'"):
        OpGraph("g", [op])


@pytest.mark.parametrize("kind, shape, attrs, message", [
    ("pool2d", (1, 1, 4, 4), {"kernel": 2, "stride": 0}, "expected kernel and stride >= 1"),
    ("pool2d", (1, 1, 4, 4), {"kernel": 0}, "expected kernel and stride >= 1"),
    ("resize", (1, 1, 4, 4), {"scale": 0}, "expected one integer >= 1 per spatial axis"),
    ("elementwise_bwd", (4,), {"op": "gleu"}, "did you mean 'gelu'"),
])
def test_bad_attributes_are_located_errors(kind, shape, attrs, message):
    b = GraphBuilder("g")
    with pytest.raises(GraphError, match=message):
        b.op(kind, [b.input("x", shape)], name="bad", **attrs)


def test_vector_times_batched_matrices_is_one_row_per_batch():
    b = GraphBuilder("g")
    y = b.op("matmul", [b.input("a", (7,)), b.input("w", (3, 7, 5))], name="mv")
    op = b.ops[0]
    assert y.shape == (3, 5)
    assert gemm_dims(op) == (3, 1, 5, 7)
    assert op.flops == 2 * 3 * 5 * 7


def test_conv_backward_shapes_must_match_the_forward_conv():
    b = GraphBuilder("g")
    dy = b.input("dy", (2, 8, 16, 16))
    w = b.weight("w", (8, 4, 3, 3))
    dx = b.op("conv2d_bwd_data", [dy, w], input_shape=(2, 4, 32, 32), stride=2, padding=1)
    assert dx.shape == (2, 4, 32, 32)
    assert b.ops[0].macs == 2 * 16 * 16 * 8 * 4 * 9  # the forward conv's MACs
    x = b.input("x", (2, 4, 32, 32))
    dw = b.op("conv2d_bwd_weight", [x, dy], weight_shape=(8, 4, 3, 3), stride=2, padding=1)
    assert dw.shape == (8, 4, 3, 3) and b.ops[1].macs == b.ops[0].macs
    with pytest.raises(GraphError, match=r"gradient 'dy' has shape \(2, 8, 16, 16\); expected \(2, 8, 32, 32\)"):
        b.op("conv2d_bwd_data", [dy, w], input_shape=(2, 4, 32, 32), padding=1)  # stride 1 gives 32x32
    with pytest.raises(GraphError, match="expected weight"):
        b.op("conv2d_bwd_weight", [x, dy], weight_shape=(8, 3, 3, 3), stride=2, padding=1)


def test_out_of_order_ops_are_sorted_topologically():
    b = GraphBuilder("g")
    x = b.input("x", (4,))
    y = b.op("elementwise", [x], name="first", op="relu")
    b.op("elementwise", [y], name="second", op="exp")
    ops = list(reversed(b.ops))
    g = OpGraph("g", ops)
    assert [op.name for op in g] == ["first", "second"]


def _chain():
    b = GraphBuilder("chain", "fp32")
    x = b.input("x", (256,))  # 1 KiB
    with b.group("block.0"):
        a = b.op("elementwise", [x], name="a", op="relu")  # 1 KiB
        c = b.op("elementwise", [a], name="c", op="exp")
    with b.group("block.1"):
        d = b.op("elementwise", [c, x], name="d", op="add")
    return b.build(meta={"model": "chain"}), d


def test_peak_live_bytes_by_hand():
    g, _ = _chain()
    # x lives to the end (used by d); at op c: x, a, c live = 3 KiB; at d: x, c, d = 3 KiB
    assert peak_live_bytes(g) == 3 * 1024
    assert peak_live_bytes(g, roles=(Role.WEIGHT,)) == 0


def test_breakdowns_and_critical_path():
    g, _ = _chain()
    by_group = breakdown(g, "group", depth=2)
    assert by_group["block.0"]["ops"] == 2 and by_group["block.1"]["flops"] == 256
    by_kind = breakdown(g, "kind")
    assert set(by_kind) == {"elementwise.relu", "elementwise.exp", "elementwise.add"}
    path, w = critical_path(g)
    assert path == ["block.0.a", "block.0.c", "block.1.d"] and w == 3 * 256
    t = totals(g)
    assert (t.ops, t.flops, t.params) == (3, 768, 0)


def test_json_round_trip_exact(tmp_path):
    g, _ = _chain()
    data = graph_to_json(g)
    g2 = graph_from_json(json.loads(json.dumps(data)))
    assert graph_to_json(g2) == data
    assert [op.attrs for op in g2] == [op.attrs for op in g]
    p = tmp_path / "g.json"
    save_graph(g, p)
    assert graph_to_json(load_graph(p)) == data
    p.write_text("{not json")
    with pytest.raises(GraphError, match=r"g.json:1:2: invalid JSON"):
        load_graph(p)


def test_attrs_are_immutable():
    g, _ = _chain()
    with pytest.raises(TypeError):
        g.ops[0].attrs["op"] = "gelu"


# --- the semantics registry is registered with the IR explicitly ------------------------------------------

def _mlp():
    b = GraphBuilder("mlp", dtype="bf16")
    x = b.input("x", (8, 1024))
    w = b.weight("fc.weight", (1024, 4096))
    b.op("matmul", [x, w], name="fc")
    return b.build()


def test_the_ir_uses_the_semantics_registered_with_it(monkeypatch):
    import workloads.ir as ir
    from workloads import semantics

    # import workloads registered workloads.semantics
    assert (ir._REGISTRY.semantics_of, ir._REGISTRY.check_op) == (semantics.semantics_of, semantics.check_op)
    assert _mlp().flops == 2 * 8 * 1024 * 4096
    # a registration of another table replaces it: here one that counts every matmul as 7 FLOPs
    seven = {"matmul": dataclasses.replace(semantics.semantics_of("matmul"), flops=lambda op: 7)}
    checked = []

    def semantics_of(kind, where="op"):
        try:
            return seven[kind]
        except KeyError:
            raise UnsupportedOpError(f"{where}: unknown op kind; got {kind!r}") from None

    monkeypatch.setattr(ir, "_REGISTRY", ir._Registry())
    ir.register_semantics(semantics_of, checked.append)
    g = _mlp()
    assert g.flops == 7
    b = GraphBuilder("g", dtype="bf16")
    with pytest.raises(UnsupportedOpError, match=r"op 'sm': unknown op kind; got 'softmax'"):
        b.op("softmax", [b.input("x", (2, 2))], name="sm")


def test_without_registered_semantics_the_ir_says_so(monkeypatch):
    import workloads.ir as ir

    monkeypatch.setattr(ir, "_REGISTRY", ir._Registry())
    with pytest.raises(RuntimeError, match=r"workloads\.ir: no op semantics registered; got none; expected "
                                           r"workloads\.ir\.register_semantics\(semantics_of, check_op\)"):
        _mlp()


def test_semantics_does_not_patch_the_ir_at_import():
    import ast
    from pathlib import Path

    import workloads.semantics as semantics

    tree = ast.parse(Path(semantics.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "workloads.ir" not in imported  # `import workloads.ir as _ir; _ir._REGISTRY... = ...` is gone
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "_REGISTRY"]
