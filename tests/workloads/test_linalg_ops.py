"""Dense linear-algebra op kinds: hand-computed FLOP counts (GvL 4th ed.), shapes, batching, bad attributes, Shampoo/SOAP graphs."""

from __future__ import annotations

import pytest

from workloads.ir import GraphBuilder, GraphError
from workloads.linalg import cholesky_flops, eigh_flops, orgqr_flops, qr_flops, svd_flops
from workloads.micro import build_micro, parse_micro
from workloads.second_order import second_order_graph
from workloads.training import training_graph
from workloads.zoo.transformer import TransformerConfig, train_forward


def _op(kind, shape, dtype="fp32", **attrs):
    b = GraphBuilder("t", dtype=dtype)
    a = b.input("a", shape)
    b.op(kind, [a], name=kind, **attrs)
    return b.build().ops[0]


def test_closed_form_counts_by_hand():
    assert cholesky_flops(3) == 9  # 27/3
    assert cholesky_flops(1000) == 333_333_333  # 1e9/3 rounded
    assert qr_flops(6, 3) == 2 * 6 * 9 - 2 * 27 // 3  # 2mn^2 - 2n^3/3 = 108 - 18 = 90
    assert qr_flops(3, 6) == 90  # m < n: 2 m^2 n - 2 m^3/3
    assert orgqr_flops(6, 6, 3) == 4 * (36 * 3 - 6 * 9 + 9)  # 4 (m^2 k - m k^2 + k^3/3) = 252
    assert orgqr_flops(6, 3, 3) == 2 * 6 * 9 - 18  # thin Q: 2mk^2 - 2k^3/3
    assert eigh_flops(3, False) == 36  # 4 * 27 / 3
    assert eigh_flops(3, True) == 36 + 36 + 54  # + 4n^3/3 + 2n^3
    assert svd_flops(6, 3, "none") == 4 * 6 * 9 - 36  # 4mn^2 - 4n^3/3 = 180
    assert svd_flops(6, 3, "reduced") == 14 * 54 + 8 * 27  # 972
    assert svd_flops(6, 3, "full") == 4 * 36 * 3 + 8 * 54 + 9 * 27  # 432 + 432 + 243 = 1107
    assert svd_flops(3, 6, "reduced") == svd_flops(6, 3, "reduced")  # A^T


def test_ops_shapes_and_batched_flops():
    op = _op("svd", (4, 6, 3))
    assert [t.shape for t in op.outputs] == [(4, 6, 3), (4, 3), (4, 3, 3)]
    assert op.flops == 4 * 972 and op.macs == op.flops // 2
    assert [t.shape for t in _op("svd", (6, 3), vectors="full").outputs] == [(6, 6), (3,), (3, 3)]
    assert [t.shape for t in _op("svd", (6, 3), vectors="none").outputs] == [(3,)]
    q = _op("qr", (6, 3))
    assert [t.shape for t in q.outputs] == [(6, 3), (3, 3)] and q.flops == 90 + 90
    assert [t.shape for t in _op("qr", (6, 3), mode="complete").outputs] == [(6, 6), (6, 3)]
    assert _op("qr", (6, 3), mode="complete").flops == 90 + 252
    assert _op("qr", (6, 3), mode="r").flops == 90
    e = _op("eigh", (2, 3, 3), "fp64")
    assert [t.shape for t in e.outputs] == [(2, 3), (2, 3, 3)] and e.flops == 2 * 126
    assert _op("eigh", (3, 3), vectors=False).flops == 36
    assert _op("cholesky", (1000, 1000)).flops == 333_333_333
    r = _op("matrix_inverse_root", (3, 3), p=4)
    assert r.flops == 126 + 9 + 54  # eigh with vectors + scale + Q D Q^T
    nw = _op("matrix_inverse_root", (3, 3), p=4, method="newton", iterations=10)
    assert nw.flops == 10 * (5 * 54 + 18)
    # every=k: the per-step share
    assert _op("cholesky", (1000, 1000), every=10).flops == 33_333_333
    # compulsory bytes: input read, outputs written
    assert op.bytes_read == 4 * 18 * 4 and op.bytes_written == 4 * (18 + 3 + 9) * 4


def test_triangular_solve():
    b = GraphBuilder("t", dtype="fp32")
    t = b.input("t", (5, 5))
    rhs = b.input("b", (5, 7))
    b.op("triangular_solve", [t, rhs])
    op = b.build().ops[0]
    assert op.outputs[0].shape == (5, 7) and op.flops == 25 * 7
    b2 = GraphBuilder("t", dtype="fp32")
    with pytest.raises(GraphError, match="right-hand side"):
        b2.op("triangular_solve", [b2.input("t", (5, 5)), b2.input("b", (4, 7))])


@pytest.mark.parametrize("kind,shape,attrs,match", [
    ("cholesky", (3, 4), {}, "not square"),
    ("eigh", (3,), {}, "not a matrix"),
    ("qr", (4, 3), {"mode": "economic"}, "expected one of reduced, complete, r"),
    ("svd", (4, 3), {"vectors": "some"}, "expected one of none, reduced, full"),
    ("eigh", (3, 3), {"vectors": 2}, "expected true or false"),
    ("matrix_inverse_root", (3, 3), {}, "p: missing"),
    ("matrix_inverse_root", (3, 3), {"p": 0}, "expected a positive integer"),
    ("matrix_inverse_root", (3, 3), {"p": 2, "method": "newton"}, "iterations: missing"),
    ("matrix_inverse_root", (3, 3), {"p": 2, "iterations": 3}, "only with method 'newton'"),
    ("cholesky", (3, 3), {"every": 0}, "every; got 0"),
])
def test_bad_attributes_are_located(kind, shape, attrs, match):
    b = GraphBuilder("t", dtype="fp32")
    with pytest.raises(GraphError, match=match) as ei:
        b.op(kind, [b.input("a", shape)], name="x", **attrs)
    assert f"op 'x' ({kind})" in str(ei.value)


def test_low_precision_refused():
    b = GraphBuilder("t", dtype="bf16")
    with pytest.raises(GraphError, match="expected fp32 or fp64"):
        b.op("svd", [b.input("a", (4, 4))])


def test_micro_workloads():
    assert parse_micro("svd:m=64,n=32") == ("svd", {"m": 64, "n": 32, "b": 1, "vectors": 1})
    g = build_micro("svd:m=64,n=32,b=3", "fp32")
    (op,) = g.ops
    assert op.kind == "svd" and op.inputs[0].shape == (3, 64, 32) and op.flops == 3 * svd_flops(64, 32, "reduced")
    assert build_micro("eigh:n=16,vectors=0", "fp64").ops[0].flops == eigh_flops(16, False)
    assert build_micro("cholesky:n=30", "fp32").ops[0].flops == cholesky_flops(30)
    assert build_micro("qr:m=8,n=4", "fp32").ops[0].flops == qr_flops(8, 4) + orgqr_flops(8, 4, 4)
    for bad, match in (("svd:m=0,n=4", "m; got '0'"), ("eigh:n=8,vectors=2", "vectors; got '2'"),
                       ("qr:m=4", "missing n"), ("cholesky:n=8", "expected fp32 or fp64")):
        with pytest.raises(ValueError, match=match) as ei:
            build_micro(bad)
        assert "\n" not in str(ei.value)


TINY = TransformerConfig("tiny", vocab=512, d_model=128, layers=1, heads=4, d_ff=256, max_positions=64,
                         tied_embeddings=False)


@pytest.fixture(scope="module")
def tiny_step():
    return training_graph(train_forward(TINY, batch=1, seq_len=16, dtype="fp32"))


def test_shampoo_appends_grams_roots_and_preconditioning(tiny_step):
    g = second_order_graph(tiny_step, "shampoo", every=10, block=256)
    mats = [op for op in tiny_step if op.kind == "optimizer_update" and len(op.inputs[0].shape) >= 2]
    roots = [op for op in g if op.kind == "matrix_inverse_root"]
    assert len(roots) == 2 * len(mats) and g.meta["preconditioned_weights"] == len(mats)
    assert all(op.attrs["every"] == 10 and op.attrs["p"] == 4 for op in roots)
    # sides above the block (the 512-row embedding, the 512-column head) are split: every root is <= 256
    assert all(op.inputs[0].shape[-1] <= 256 for op in roots)
    blocked = [op for op in roots if len(op.inputs[0].shape) == 3]
    assert blocked and all(op.inputs[0].shape[0] == 2 for op in blocked)  # 512 / 256 = 2 blocks
    added = [op for op in g if op.name not in {o.name for o in tiny_step}]
    assert sum(op.kind == "matmul" for op in added) == 4 * len(mats)  # 2 Gram + 2 preconditioning GEMMs
    gram = next(op for op in added if op.name.endswith("gram_l") and op.inputs[0].shape == (128, 128))
    assert gram.flops == 2 * 128**3 and gram.outputs[0].dtype.value == "fp32"
    root = next(op for op in roots if op.inputs[0].shape == (128, 128))
    assert root.flops == round((eigh_flops(128, True) + 128 * 128 + 2 * 128**3) / 10)


def test_soap_and_errors(tiny_step):
    g = second_order_graph(tiny_step, "soap", every=5)
    assert sum(op.kind == "eigh" for op in g) == 2 * g.meta["preconditioned_weights"]
    with pytest.raises(GraphError, match="did you mean 'soap'"):
        second_order_graph(tiny_step, "soup")
    with pytest.raises(GraphError, match="every; got 0"):
        second_order_graph(tiny_step, every=0)
    with pytest.raises(GraphError, match=r"root_l' \(matrix_inverse_root\): attribute iterations: missing"):
        second_order_graph(tiny_step, root_method="newton")
    with pytest.raises(GraphError, match="no optimizer_update ops"):
        second_order_graph(train_forward(TINY, batch=1, seq_len=16, dtype="fp32"))
