"""torchao Float8Linear as torchtitan runs it: the cast after a tensor-wide amax is a kernel of its own, rowwise
scales along each GEMM's contraction axis and post-scales its backward GEMMs, the backward GEMMs run without
fast accumulation, and tensorwise tensor parallelism casts the sequence shard and all-gathers fp8."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext
from simulator.lowering.gpu import _gemm
from workloads.dtypes import DType
from workloads.ir import Attrs, Op, OpGraph, Role, TensorSpec
from workloads.parallel import ParallelPlan, plan_graphs
from workloads.precision import fp8_linears
from workloads.zoo.transformer import zoo_config

CFG = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)


def _graph(recipe: str, plan: ParallelPlan | None = None) -> OpGraph:
    return plan_graphs(CFG, plan or ParallelPlan(), train=True, seq=256, fp8_linears=recipe)[0].graph


def _op(g: OpGraph, name: str) -> Op:
    return next(op for op in g.ops if op.name == name)


def test_tensorwise_cast_reads_its_grid_wide_amax() -> None:
    g = _graph("tensorwise")
    amax, cast = _op(g, "layers.0.mlp.down.amax_0"), _op(g, "layers.0.mlp.down.cast_0")
    assert amax.attrs["grid_reduction"] is True and amax.outputs[0].shape == (1,)
    assert [t.name for t in cast.inputs] == [amax.inputs[0].name, amax.outputs[0].name]


def test_cast_after_a_grid_wide_amax_is_its_own_kernel() -> None:
    # x (4096 x 4096 bf16, 32 MiB) -> amax -> cast to fp8: with fusion on, the cast still reads x (32 MiB)
    # and writes 16 MiB, as torchao's roofline counts kernel 3; only the 4-byte amax comes from the first kernel
    x = TensorSpec("x", (4096, 4096), DType.BF16, Role.ACTIVATION)
    a = TensorSpec("a", (1,), DType.FP32, Role.ACTIVATION)
    q = TensorSpec("q", (4096, 4096), DType.FP8_E4M3, Role.ACTIVATION)
    for grid, read in ((True, 2 * 4096 * 4096 + 4), (False, 0.0)):
        attrs = {"op": "max", "axes": (0, 1), "keepdims": False} | ({"grid_reduction": True} if grid else {})
        g = OpGraph("amax-cast", [Op("amax", "reduction", (x,), (a,), Attrs(attrs)),
                                  Op("cast", "elementwise", (x, a), (q,), Attrs({"op": "cast"}))])
        rec = {r.name: r for r in evaluate(g, load_hardware("h100-sxm5-80gb"), EvalOptions(fusion=True)).records}
        assert rec["cast"].dram_bytes == pytest.approx(read + 4096 * 4096)
        assert (rec["cast"].rule == "fused-epilogue") is (not grid)


def test_rowwise_scales_along_the_contraction_axis_and_post_scales_backward_gemms() -> None:
    g = _graph("rowwise")
    # forward x (1, 256, 14336) @ W (14336, 4096): x per row (last axis), W per column (axis 0, outer)
    assert _op(g, "layers.0.mlp.down.amax_0").attrs["axes"] == (2,)
    w = _op(g, "layers.0.mlp.down.amax_1")
    assert w.attrs["axes"] == (0,) and w.attrs["grid_reduction"] is True and w.outputs[0].shape == (1, 4096)
    # weight gradient: both operands (M x K, M x N) contract over the tokens M (axis 0)
    assert _op(g, "layers.0.mlp.down.bwd_b.amax_0").attrs["axes"] == (0,)
    assert _op(g, "layers.0.mlp.down.bwd_b.amax_1").attrs["axes"] == (0,)
    post = _op(g, "layers.0.mlp.down.bwd_b.post_scale")
    gemm = _op(g, "layers.0.mlp.down.bwd_b")
    assert post.inputs[0] is gemm.outputs[0] or post.inputs[0].name == gemm.outputs[0].name
    assert post.outputs[0].shape == (14336, 4096) and [t.shape for t in post.inputs[1:]] == [(14336, 1), (4096,)]
    assert not any(op.name.endswith("down.post_scale") for op in g.ops)  # forward: fast-accum CUTLASS rowwise


def test_backward_gemms_run_without_fast_accumulation() -> None:
    g = _graph("tensorwise")
    acc = {op.name: op.attrs.get("fp8_accumulation") for op in g.ops if op.attrs.get("compute_dtype")}
    assert acc["layers.0.mlp.down"] is None
    assert acc["layers.0.mlp.down.bwd_a"] == acc["layers.0.mlp.down.bwd_b"] == "split"
    assert all(v is None for v in {op.name: op.attrs.get("fp8_accumulation")
                                   for op in _graph("mxfp8").ops if op.attrs.get("compute_dtype")}.values())


def test_split_accumulation_adds_the_fp32_promotions() -> None:
    # 8192 x 8192 x 8192 fp8: 8192^2 x 64 promotions (one FP32 add per output per 128 K), one FP32 lane slot each
    dev = load_hardware("h100-sxm5-80gb")
    a = TensorSpec("a", (8192, 8192), DType.FP8_E4M3, Role.ACTIVATION)
    b = TensorSpec("b", (8192, 8192), DType.FP8_E4M3, Role.ACTIVATION)
    y = TensorSpec("y", (8192, 8192), DType.BF16, Role.ACTIVATION)
    ctx = LoweringContext(dev, EvalOptions())
    fast = _gemm(Op("mm", "matmul", (a, b), (y,), Attrs({})), ctx)
    split = _gemm(Op("mm", "matmul", (a, b), (y,), Attrs({"fp8_accumulation": "split"})), ctx)
    assert dev.efficiency.fp8_promotion_interval == 128  # catalog: DeepSeek-V3's N_C, assumed for cuBLASLt
    adds = 8192.0 * 8192 * 8192 / 128
    p = ctx.params("fp32")
    assert split.compute_s - fast.compute_s == pytest.approx(adds / (p.vector_flops_per_s / 2 * p.vector_fraction))  # one FADD issue slot each
    assert split.vector_flops - fast.vector_flops == pytest.approx(adds)


def test_promotion_interval_is_the_device_field() -> None:
    # efficiency.fp8_promotion_interval is a spec field calibration may refit: half the interval, twice the adds
    from hwmodels.paths import with_overrides

    a = TensorSpec("a", (4096, 4096), DType.FP8_E4M3, Role.ACTIVATION)
    b = TensorSpec("b", (4096, 4096), DType.FP8_E4M3, Role.ACTIVATION)
    y = TensorSpec("y", (4096, 4096), DType.BF16, Role.ACTIVATION)
    op = Op("mm", "matmul", (a, b), (y,), Attrs({"fp8_accumulation": "split"}))
    dev = load_hardware("h100-sxm5-80gb")
    at = {n: _gemm(op, LoweringContext(with_overrides(dev, {"efficiency.fp8_promotion_interval": n}), EvalOptions()))
          for n in (64, 128)}
    base = _gemm(Op("mm", "matmul", (a, b), (y,), Attrs({})), LoweringContext(dev, EvalOptions()))
    assert at[64].vector_flops - base.vector_flops == pytest.approx(4096.0 ** 2 * 64)
    assert at[128].vector_flops - base.vector_flops == pytest.approx(4096.0 ** 2 * 32)


def test_promotion_interval_sweeps_match_point_by_point() -> None:
    # a sweep over efficiency.fp8_promotion_interval runs vectorised (an array field) and gives each point's
    # own evaluation
    import numpy as np

    from hwmodels.paths import with_overrides
    from simulator.engines.vectorized import evaluate_variants

    a = TensorSpec("a", (4096, 4096), DType.FP8_E4M3, Role.ACTIVATION)
    b = TensorSpec("b", (4096, 4096), DType.FP8_E4M3, Role.ACTIVATION)
    y = TensorSpec("y", (4096, 4096), DType.BF16, Role.ACTIVATION)
    g = OpGraph("g", [Op("mm", "matmul", (a, b), (y,), Attrs({"fp8_accumulation": "split",
                                                             "compute_dtype": "fp8_e4m3"}))], {})
    dev = load_hardware("h100-sxm5-80gb")
    swept = evaluate_variants(g, dev, {"efficiency.fp8_promotion_interval": np.array([64.0, 128.0])}, EvalOptions())
    each = [evaluate(g, with_overrides(dev, {"efficiency.fp8_promotion_interval": n}), EvalOptions()).latency_s
            for n in (64, 128)]
    assert list(swept.latency_s) == pytest.approx(each, rel=1e-12)
    assert each[0] > each[1]


def test_tensorwise_tensor_parallelism_gathers_fp8() -> None:
    plan = ParallelPlan(tp=2, sequence_parallel=True)
    g = _graph("tensorwise", plan)
    gather = _op(g, "layers.0.attn.sp_gather")
    assert gather.outputs[0].dtype is DType.FP8_E4M3 and gather.inputs[0].shape == (1, 128, 4096)
    assert _op(g, "layers.0.attn.sp_gather.amax_group").kind == "all_reduce"
    cast = _op(g, "layers.0.attn.sp_gather.cast_shard")
    assert cast.outputs[0].shape == (1, 128, 4096)  # the shard, not the gathered (1, 256, 4096)
    assert _op(g, "layers.0.attn.qkv").inputs[0] == gather.outputs[0]
    assert not any(op.name == "layers.0.attn.qkv.cast_0" for op in g.ops)
    # the weight-gradient GEMM reads a K-major copy of the gathered fp8 input
    copy = next(op for op in g.ops if op.name.startswith("layers.0.attn.qkv.bwd_b.k_major_"))
    assert copy.attrs["op"] == "copy" and copy.inputs[0].dtype is DType.FP8_E4M3
    # rowwise keeps 16-bit tensor parallelism (torchtitan: float8 TP is tensorwise only)
    assert _op(_graph("rowwise", plan), "layers.0.attn.sp_gather").outputs[0].dtype is DType.BF16


def test_fp8_linears_refuses_unknown_recipes_with_a_suggestion() -> None:
    g = plan_graphs(CFG, ParallelPlan(), train=True, seq=256)[0].graph
    with pytest.raises(ValueError, match="did you mean 'tensorwise'"):
        fp8_linears(g, "tensorwize")


def test_compiled_runs_cast_a_shared_input_once() -> None:
    # q, k and v read the normed input: under --compile one amax and one cast feed the three GEMMs
    # (AOTAutograd CSE); eager FSDP2 casts it per linear
    def casts(framework: str) -> tuple[int, set[str]]:
        g = plan_graphs(CFG, ParallelPlan(), train=True, seq=256, fp8_linears="tensorwise", recompute="selective-op",
                        framework=framework)[0].graph
        fwd = [op for op in g.ops if op.name.startswith("layers.0.attn.qkv.part") and ".bwd_" not in op.name
               and "@recompute" not in op.name]
        n = sum(op.name.endswith(".cast_0") for op in fwd)
        return n, {op.inputs[0].name for op in fwd if op.kind == "matmul"}
    n, read = casts("fsdp2-compile")
    assert n == 1 and len(read) == 1
    n, read = casts("fsdp2")
    assert n == 3 and len(read) == 3


def _tp_all_reduces(recipe: str, layer: str = "layers.0.") -> dict[str, tuple[int, tuple[int, ...]]]:
    """The amax all-reduces a TP 2 + SP plan adds to ``layer`` (name -> (group, amax shape))."""
    g = _graph(recipe, ParallelPlan(tp=2, sequence_parallel=True))
    return {op.name[len(layer):]: (op.attrs["group_size"], op.inputs[0].shape) for op in g.ops
            if op.kind == "all_reduce" and op.name.startswith(layer) and "_tp" in op.name}


def test_tensorwise_tensor_parallelism_all_reduces_every_sharded_amax() -> None:
    # torchao's tensor_to_amax on a DTensor shard is Partial(max); amax_to_scale's clamp all-reduces it over TP
    got = _tp_all_reduces("tensorwise")
    assert set(got.values()) == {(2, (1,))}
    lins = ("attn.qkv", "attn.out", "mlp.gate_up", "mlp.down")
    # every weight cast (column- and row-parallel alike), once in the forward; the input-gradient GEMM reads the
    # saved fp8 weight (matmul_with_hp_or_float8_args saves the Float8Tensor weight_hp_t): 4
    weights = {f"{lin}.amax_1_tp" for lin in lins}
    # a row-parallel linear's input (sharded on its last axis), cast once in the forward: 2
    inputs = {"attn.out.amax_0_tp", "mlp.down.amax_0_tp"}
    # a column-parallel linear's output gradient (sharded on its last axis), cast once in the backward: 2
    grads = {"attn.qkv.bwd_a.amax_0_tp", "mlp.gate_up.bwd_a.amax_0_tp"}
    # nothing else: the gathered fp8 inputs and row-parallel output gradients are replicated (their own amax_group)
    assert set(got) == weights | inputs | grads and len(got) == 8
    g = _graph("tensorwise", ParallelPlan(tp=2, sequence_parallel=True))
    ar, cast = _op(g, "layers.0.attn.out.amax_0_tp"), _op(g, "layers.0.attn.out.cast_0")
    assert ar.inputs[0] == _op(g, "layers.0.attn.out.amax_0").outputs[0] and ar.outputs[0] in cast.inputs


def test_tensorwise_tensor_parallelism_casts_each_sharded_activation_once() -> None:
    # Float8ColwiseParallel's NoopFwToFloat8BwDynamic casts a column-parallel output gradient once for both backward
    # GEMMs; Float8RowwiseParallel casts a row-parallel input once and the GEMM saves that fp8 tensor; the
    # weight-gradient GEMM reads either through preprocess_addmm's copy into _scaled_mm's layout
    g = _graph("tensorwise", ParallelPlan(tp=2, sequence_parallel=True))
    names = {op.name for op in g.ops}
    dy = _op(g, "layers.0.mlp.gate_up.bwd_a.cast_0").outputs[0]  # gate and up fused: 2 x 14336 / TP 2 columns
    assert dy.shape == (1, 256, 14336) and "layers.0.mlp.gate_up.bwd_b.cast_1" not in names
    copy = _op(g, "layers.0.mlp.gate_up.bwd_b.k_major_1")
    view = _op(g, copy.inputs[0].name + ".view")
    assert view.inputs[0] == dy and copy.outputs[0].shape == (256, 14336) and copy.attrs["op"] == "copy"
    x = _op(g, "layers.0.mlp.down.cast_0").outputs[0]
    assert "layers.0.mlp.down.bwd_b.cast_0" not in names
    assert _op(g, _op(g, "layers.0.mlp.down.bwd_b.k_major_0").inputs[0].name + ".view").inputs[0] == x
    # rowwise (plain tensor parallelism) casts per GEMM, as without it
    r = {op.name for op in _graph("rowwise", ParallelPlan(tp=2, sequence_parallel=True)).ops}
    assert {"layers.0.mlp.gate_up.bwd_b.cast_1", "layers.0.mlp.down.bwd_b.cast_0"} <= r


def test_a_recomputed_linear_casts_its_sharded_input_again() -> None:
    # the recomputed region re-runs Float8RowwiseParallel's cast (no cast is a saved op); the backward reads it
    g = plan_graphs(CFG, ParallelPlan(tp=2, sequence_parallel=True), train=True, seq=256, fp8_linears="tensorwise",
                    recompute="full")[0].graph
    rec = _op(g, "layers.0.attn.out@recompute.cast_0").outputs[0]
    assert _op(g, _op(g, "layers.0.attn.out.bwd_b.k_major_0").inputs[0].name + ".view").inputs[0] == rec


def test_rowwise_tensor_parallelism_all_reduces_only_amaxes_over_a_sharded_contraction_axis() -> None:
    # rowwise: one amax per row along the GEMM's contraction axis; only where that axis is the TP-sharded one
    got = _tp_all_reduces("rowwise")
    # forward: a row-parallel linear contracts over its sharded d_in: its weight per output column (4096 values),
    # its input per token (256)
    for lin in ("attn.out", "mlp.down"):
        assert got[f"{lin}.amax_1_tp"] == (2, (1, 4096)) and got[f"{lin}.amax_0_tp"] == (2, (1, 256, 1))
    # input gradient: contracts over d_out, sharded for a column-parallel linear (weight per d_in row, and the
    # output gradient per token)
    for lin in ("attn.qkv", "mlp.gate_up"):
        assert got[f"{lin}.bwd_a.amax_1_tp"] == (2, (4096, 1)) and got[f"{lin}.bwd_a.amax_0_tp"] == (2, (1, 256, 1))
    # nothing else: the weight gradient contracts over the tokens, a column-parallel forward over d_in (local)
    assert len(got) == 8
    # without tensor parallelism nothing is all-reduced
    assert not [op for op in _graph("rowwise").ops if op.kind == "all_reduce"]


def test_tensorwise_casts_the_weight_once_and_the_output_gradient_once_under_compile() -> None:
    # Float8Linear casts the weight before matmul_with_hp_or_float8_args, which saves that Float8Tensor: the
    # input-gradient GEMM reads it through preprocess_addmm's layout copy (b_data.t().contiguous().t()). The two
    # tensorwise casts of the output gradient in the backward are one computation, merged by AOTAutograd's CSE under
    # --compile; the weight-gradient GEMM reads its transpose through a_data.contiguous(). Per linear, counted by
    # hand: eager 2 forward casts + 1 (dy) for grad_input + 2 (x, dy) for grad_weight = 5; compiled 4
    def kernels(framework: str) -> tuple[set[str], OpGraph]:
        g = plan_graphs(CFG, ParallelPlan(), train=True, seq=256, fp8_linears="tensorwise", framework=framework)[0].graph
        return {op.name[len("layers.0.mlp.down"):] for op in g.ops if op.name.startswith("layers.0.mlp.down")
                and (".cast_" in op.name or ".k_major_" in op.name)}, g
    eager, _ = kernels("fsdp2")
    assert eager == {".cast_0", ".cast_1", ".bwd_a.cast_0", ".bwd_a.k_major_1", ".bwd_b.cast_0", ".bwd_b.cast_1"}
    compiled, g = kernels("fsdp2-compile")
    assert compiled == {".cast_0", ".cast_1", ".bwd_a.cast_0", ".bwd_a.k_major_1", ".bwd_b.cast_0",
                        ".bwd_b.k_major_1"}
    w = _op(g, "layers.0.mlp.down.cast_1").outputs[0]
    copy = _op(g, "layers.0.mlp.down.bwd_a.k_major_1")
    assert copy.inputs[0] == w and copy.outputs[0].dtype is DType.FP8_E4M3  # same shape: no view
    dy = _op(g, "layers.0.mlp.down.bwd_a.cast_0").outputs[0]
    assert _op(g, _op(g, "layers.0.mlp.down.bwd_b.k_major_1").inputs[0].name + ".view").inputs[0] == dy
    # rowwise scales the weight per column of each GEMM's view: still a cast per GEMM
    r = {op.name for op in _graph("rowwise").ops}
    assert {"layers.0.mlp.down.cast_1", "layers.0.mlp.down.bwd_a.cast_1"} <= r
