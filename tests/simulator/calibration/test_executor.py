"""Graph executor: torch and NumPy backends compute the ops' real results; unsupported ops are located errors."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.calibration.executor import (
    AUTOGRAD_KINDS,
    NOT_EXECUTABLE,
    TORCH_KINDS,
    compile_graph,
)
from workloads.ir import GraphBuilder, UnsupportedOpError
from workloads.micro import build_micro
from workloads.semantics import kinds

torch = pytest.importorskip("torch")


def _np(x):  # noqa: ANN001, ANN202
    return x.float().numpy() if hasattr(x, "numpy") else np.asarray(x)


def test_gemm_matches_matmul_of_its_inputs() -> None:
    g = build_micro("gemm:m=16,n=8,k=32", dtype="fp32")
    r = compile_graph(g, backend="torch")
    out = r()["gemm"]
    a, b = r._inputs["a"], r._inputs["b"]
    np.testing.assert_allclose(_np(out), _np(a) @ _np(b), rtol=1e-5, atol=1e-6)
    assert tuple(out.shape) == g.op("gemm").outputs[0].shape


def test_numpy_backend_agrees_with_torch_on_softmax_and_layernorm() -> None:
    for spec in ("softmax:rows=4,cols=33", "layernorm:rows=5,cols=16", "attention:b=1,h=2,s=8,d=4,causal=1"):
        g = build_micro(spec, dtype="fp32")
        rt = compile_graph(g, backend="torch", seed=3)
        rn = compile_graph(g, backend="numpy", seed=3)
        rn._inputs.update({k: _np(v) for k, v in rt._inputs.items()})  # same inputs
        (yt,) = rt().values()
        (yn,) = rn().values()
        np.testing.assert_allclose(_np(yt), yn, rtol=1e-4, atol=1e-5)


def test_softmax_rows_sum_to_one_and_causal_attention_first_row() -> None:
    (y,) = compile_graph(build_micro("softmax:rows=3,cols=7", dtype="fp32"))().values()
    np.testing.assert_allclose(_np(y).sum(-1), np.ones(3), rtol=1e-6)
    g = build_micro("attention:b=1,h=1,s=4,d=2,causal=1", dtype="fp32")
    r = compile_graph(g)
    (o,) = r().values()
    # with a causal mask the first query sees only the first key: output row 0 equals v row 0
    np.testing.assert_allclose(_np(o)[0, 0, 0], _np(r._inputs["v"])[0, 0, 0], rtol=1e-6)


def test_conv_output_shape_and_value() -> None:
    g = build_micro("conv2d:n=1,c=2,h=5,w=5,k=3,r=3,s=3,pad=1", dtype="fp32")
    r = compile_graph(g)
    (y,) = r().values()
    assert tuple(y.shape) == (1, 3, 5, 5)
    x, w = _np(r._inputs["x"]), _np(r._inputs["w"])
    # centre pixel by hand
    ref = sum(x[0, c, 1 + i, 1 + j] * w[1, c, i, j] for c in range(2) for i in range(3) for j in range(3))
    assert _np(y)[0, 1, 2, 2] == pytest.approx(ref, rel=1e-5, abs=1e-6)


def test_generic_op_is_a_located_error() -> None:
    b = GraphBuilder("g", dtype="fp32")
    x = b.input("x", (4,))
    b.op("generic", [x], name="mystery", op_type="Foo", output_shapes=((4,),), output_dtypes=("fp32",))
    with pytest.raises(UnsupportedOpError, match="op 'mystery' \\(generic\\)"):
        compile_graph(b.build())


def test_numpy_fallback_rejects_conv_with_a_located_error() -> None:
    with pytest.raises(UnsupportedOpError, match="op 'conv2d' \\(conv2d\\).*NumPy"):
        compile_graph(build_micro("conv2d:n=1,c=2,h=5,w=5,k=3,r=3,s=3", dtype="fp32"), backend="numpy")


def test_every_semantic_kind_is_executable_or_declared_unsupported() -> None:
    unsupported = {"generic", "send", "recv", "rnn_bwd", "quant_matmul", "quant_grouped_matmul"}
    assert set(kinds()) - set(TORCH_KINDS) == unsupported


def test_zoo_network_runs_end_to_end() -> None:
    from workloads.resolve import load_workload

    g = load_workload("resnet18", batch=1, seq=32, phase="forward", dtype="fp32")
    out = compile_graph(g)()
    shapes = {t.name: t.shape for t in g.outputs}
    assert {k: tuple(v.shape) for k, v in out.items()} == shapes
    assert all(np.isfinite(_np(v)).all() for v in out.values())


def _one_op_graphs() -> dict[str, object]:
    """One op of every kind the zoo's small training/decode graphs hold, plus hand-built ops for the rest."""
    from workloads.resolve import load_workload

    ops: dict[str, object] = {}
    for model, kw in (("resnet18", {"batch": 1, "seq": 32, "train": True}), ("gpt2", {"batch": 1, "seq": 16, "train": True}),
                      ("switch-base", {"batch": 1, "seq": 16, "train": True}), ("gnmt", {"batch": 1, "seq": 8, "train": True}),
                      ("sd15-unet", {"batch": 1, "seq": 64, "train": True}),
                      ("gpt2", {"batch": 1, "seq": 1, "context": 8, "phase": "decode"}), ("dlrm", {"batch": 2, "train": True})):
        for op in load_workload(model, dtype="fp32", **kw):
            ops.setdefault(op.kind, op)
    b = GraphBuilder("hand", dtype="fp32")
    x1 = b.input("x1", (2, 4, 16))
    w1 = b.weight("w1", (6, 4, 3))
    y1 = b.op("conv1d", [x1, w1], padding=1)
    b.op("conv1d_bwd_data", [y1, w1], input_shape=(2, 4, 16), padding=1)
    b.op("conv1d_bwd_weight", [x1, y1], weight_shape=(6, 4, 3), padding=1)
    b.op("expand", [b.input("e", (1, 5))], shape=(3, 5))
    xs, h, c = b.input("xs", (3, 8)), b.input("h", (3, 4)), b.input("c", (3, 4))
    b.op("lstm_cell", [xs, h, c, b.weight("wi4", (16, 8)), b.weight("wh4", (16, 4))])
    b.op("gru_cell", [xs, h, b.weight("wi3", (12, 8)), b.weight("wh3", (12, 4))])
    b.op("gru", [b.input("seq", (5, 3, 8)), b.weight("gwi", (1, 12, 8)), b.weight("gwh", (1, 12, 4))], hidden=4)
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        b.op(kind, [b.input(f"c_{kind}", (4, 6))], group_size=1)
    sq, tall = b.input("la_sq", (2, 6, 6)), b.input("la_tall", (7, 5))
    b.op("cholesky", [sq])
    b.op("qr", [tall])
    b.op("svd", [tall])
    b.op("eigh", [sq])
    b.op("matrix_inverse_root", [sq], p=4)
    b.op("triangular_solve", [sq, b.input("la_rhs", (2, 6, 3))])
    for op in b.ops:
        ops.setdefault(op.kind, op)
    return ops


def test_every_torch_kind_executes_with_the_inferred_shapes_and_dtypes() -> None:
    """Each kind of TORCH_KINDS, alone in a graph, runs (in no-grad mode, as the harness does for
    backward kernels) and returns tensors of the shapes and dtypes the semantics infer."""
    from simulator.calibration.executor import _tdtype

    ops = _one_op_graphs()
    assert set(TORCH_KINDS) <= set(ops), sorted(set(TORCH_KINDS) - set(ops))
    for kind in TORCH_KINDS:
        op = ops[kind]
        b = GraphBuilder(kind)
        b.add(op)
        runner = compile_graph(b.build(), seed=0)
        with torch.no_grad():
            out = runner()
        for t in op.outputs:
            assert tuple(out[t.name].shape) == t.shape, (kind, t.name)
            assert out[t.name].dtype == _tdtype(torch, t.dtype, kind), (kind, t.name)
        assert runner.needs_autograd == (kind in AUTOGRAD_KINDS)


def test_kinds_not_executable_on_purpose_are_located_errors_with_their_reason() -> None:
    assert set(kinds()) == set(TORCH_KINDS) | set(NOT_EXECUTABLE)
    assert not set(TORCH_KINDS) & set(NOT_EXECUTABLE)
    b = GraphBuilder("p2p", dtype="fp32")
    b.op("send", [b.input("x", (4,))], name="tx", group_size=2)
    with pytest.raises(UnsupportedOpError, match=r"op 'tx' \(send\): cannot be executed \(a point-to-point transfer"):
        compile_graph(b.build())
    b = GraphBuilder("ar", dtype="fp32")
    b.op("all_reduce", [b.input("x", (4,))], name="sum8", group_size=8)
    with pytest.raises(UnsupportedOpError, match=r"op 'sum8' \(all_reduce\): .* got group_size 8"):
        compile_graph(b.build())


def test_every_elementwise_function_of_the_semantics_executes() -> None:
    from workloads.semantics import ELEMENTWISE_FLOPS

    for fn in sorted(ELEMENTWISE_FLOPS):
        (y,) = compile_graph(build_micro(f"elementwise:numel=64,op={fn}", dtype="fp32"))().values()
        assert tuple(y.shape) == (64,), fn
    x = torch.linspace(-1, 1, 8)
    b = GraphBuilder("trig", dtype="fp32")
    b.op("elementwise", [b.input("x", (8,))], name="s", op="sin")
    r = compile_graph(b.build())
    r._inputs["x"] = x
    np.testing.assert_allclose(_np(r()["s"]), np.sin(_np(x)), rtol=1e-6)


def test_exported_kind_lists_are_the_registry() -> None:
    """TORCH_KINDS and AUTOGRAD_KINDS are derived from the @torch_kernel registrations."""
    from simulator.calibration import executor

    assert TORCH_KINDS == tuple(executor._TORCH_KERNELS)
    assert len(set(TORCH_KINDS)) == len(TORCH_KINDS)
    assert AUTOGRAD_KINDS <= set(TORCH_KINDS)
    assert AUTOGRAD_KINDS == {"attention_bwd", "layernorm_bwd", "rmsnorm_bwd", "batchnorm_bwd", "groupnorm_bwd"}


def test_a_kind_registered_twice_is_an_error() -> None:
    from simulator.calibration.executor import torch_kernel

    with pytest.raises(ValueError, match=r"torch_kernel: kind 'softmax' registered twice; got _dup after _softmax"):
        @torch_kernel("softmax")
        def _dup(t):  # noqa: ANN001, ANN202
            return lambda x: x


def test_adding_a_kind_is_one_registered_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    """A builder sees the op (TorchOp) once at compile time and returns the step run on every call."""
    from simulator.calibration import executor

    others = {k: v for k, v in executor._TORCH_KERNELS.items() if k != "softmax"}
    monkeypatch.setattr(executor, "_TORCH_KERNELS", others)  # the module's registry is left as it is
    seen = []

    @executor.torch_kernel("softmax")
    def _doubled(t: executor.TorchOp):  # noqa: ANN202
        seen.append((t.op.name, t.where, t.out_dtypes, t.device))
        return lambda x: 2 * x

    r = compile_graph(build_micro("softmax:rows=2,cols=3", dtype="fp32"))
    (y,) = r().values()
    (x,) = r._inputs.values()
    np.testing.assert_allclose(_np(y), 2 * _np(x))
    assert seen == [("softmax", "op 'softmax' (softmax)", (torch.float32,), "cpu")]


def test_linear_algebra_kinds_compute_what_they_name() -> None:
    """cholesky and the inverse root run on an SPD matrix made from the random input; their results check out."""
    b = GraphBuilder("la", dtype="fp64")
    a = b.input("a", (8, 8))
    chol = b.op("cholesky", [a], name="chol")
    root = b.op("matrix_inverse_root", [a], name="root", p=2)
    newton = b.op("matrix_inverse_root", [a], name="newton", p=2, method="newton", iterations=30)
    r = compile_graph(b.build(), seed=0)
    out = r()
    x = r._inputs["a"]
    spd = x @ x.T / 8 + torch.eye(8, dtype=x.dtype)
    L = out[chol.name]
    np.testing.assert_allclose(_np(L @ L.T), _np(spd), rtol=1e-10, atol=1e-12)
    inv_sqrt = out[root.name]
    np.testing.assert_allclose(_np(inv_sqrt @ spd @ inv_sqrt), np.eye(8), atol=1e-9)
    np.testing.assert_allclose(_np(out[newton.name]), _np(inv_sqrt), atol=1e-8)
