"""Fusion as compilers build kernels: library contractions without epilogues (torch.compile's
default modes), reductions and concatenations inside generated kernels, horizontal fusion over a
shared read; the same kernels in the analytical engine, the vectorized sweeps and the stack profiles."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hwmodels"))
from gpu_devices import h100  # noqa: E402

from simulator import EvalOptions, evaluate  # noqa: E402
from simulator.engines.analytical import LIBRARY_KERNEL_KINDS  # noqa: E402
from simulator.engines.vectorized import evaluate_variants  # noqa: E402
from simulator.hardware import load_hardware  # noqa: E402
from workloads.frameworks import get_profile  # noqa: E402
from workloads.ir import GraphBuilder  # noqa: E402
from workloads.resolve import load_workload  # noqa: E402

INDUCTOR = EvalOptions(fusion=True, epilogue_fusion=False)
TENSORRT = EvalOptions(fusion=True)


def conv_bn_relu():
    b = GraphBuilder("cbr", dtype="fp16")
    x = b.input("x", (8, 64, 56, 56))
    w = b.weight("w", (64, 64, 3, 3))
    y = b.op("conv2d", [x, w], name="conv", stride=1, padding=1)
    y = b.op("batchnorm", [y, b.weight("bn_w", (64,)), b.weight("bn_b", (64,))], name="bn")
    b.op("elementwise", [y], name="relu", op="relu")
    return b.build()


def test_library_contractions_take_an_epilogue_only_when_the_stack_fuses_into_them():
    g = conv_bn_relu()
    trt = evaluate(g, h100(), TENSORRT)
    assert trt.op("bn").fused_into == "conv" and trt.op("relu").fused_into == "bn"
    assert trt.totals.kernels == 1
    ind = evaluate(g, h100(), INDUCTOR)
    # cuDNN writes the convolution's output; one generated kernel reads it back for the norm and the ReLU
    assert ind.op("bn").fused_into == "" and ind.op("bn").kernels == 1
    relu = ind.op("relu")
    assert relu.fused_into == "bn" and relu.kernels == 0
    assert relu.dram_bytes == 0.0  # the norm's output is read by the ReLU only: its store becomes the ReLU's
    assert ind.totals.kernels == 2
    assert ind.latency_s > trt.latency_s
    assert {"matmul", "conv2d", "attention"} <= LIBRARY_KERNEL_KINDS


def rmsnorm_and_rope(n: int = 4096, d: int = 128):
    b = GraphBuilder("norm-rope", dtype="bf16")
    x = b.input("x", (n, d))
    cos = b.input("cos", (n, d))
    with b.group("norm"):
        x32 = b.op("elementwise", [x], name="to_fp32", op="cast", out_dtype="fp32")
        sq = b.op("elementwise", [x32], name="pow", op="square")
        ms = b.op("reduction", [sq], name="mean", op="mean", axes=(-1,), keepdims=True)
        rs = b.op("elementwise", [ms], name="rsqrt", op="rsqrt")
        y = b.op("elementwise", [x32, rs], name="normalize", op="mul")
        y = b.op("elementwise", [y], name="to_dtype", op="cast", out_dtype="bf16")
    with b.group("rope"):
        y1, y2 = b.op("split", [y], name="halves", axis=-1, sizes=(d // 2, d // 2))
        neg = b.op("elementwise", [y2], name="neg", op="neg")
        rot = b.op("concat", [neg, y1], name="rotate", axis=-1)
        a = b.op("elementwise", [y, cos], name="mul_cos", op="mul")
        b.op("elementwise", [a, rot], name="add", op="add")
    return b.build()


def test_reductions_and_concats_join_a_generated_kernel():
    g = rmsnorm_and_rope()
    r = evaluate(g, h100(), INDUCTOR)
    # one kernel: the cast launches it; the square, the mean, the normalisation, RoPE's negation,
    # concatenation and products all join it (vertically or over the shared read of y)
    assert r.totals.kernels == 1
    assert r.op("norm.mean").fused_into == "norm.pow" and r.op("rope.rotate").fused_into == "rope.neg"
    assert r.op("rope.mul_cos").fused_into == "rope.rotate"
    x = g.op("norm.to_fp32").inputs[0]
    cos = g.op("rope.mul_cos").inputs[1]
    # mul_cos holds y (made in the kernel) and reads cos; its output is new (y has other readers)
    mc = r.op("rope.mul_cos")
    assert mc.dram_bytes == pytest.approx(cos.nbytes + g.op("rope.mul_cos").outputs[0].nbytes)
    # before: the chain rule fused only single-reader chains; every fork started a kernel
    chained = evaluate(g, h100(), EvalOptions(fusion=False))
    assert chained.totals.kernels == len([op for op in g if op.kind != "split"])
    assert r.latency_s < chained.latency_s
    assert r.op("norm.to_fp32").dram_bytes == pytest.approx(x.nbytes + g.op("norm.to_fp32").outputs[0].nbytes)


def test_a_reduction_never_joins_a_library_kernel():
    b = GraphBuilder("mm-mean", dtype="bf16")
    x = b.input("x", (512, 1024))
    w = b.weight("w", (1024, 1024))
    y = b.op("matmul", [x, w], name="mm")
    b.op("reduction", [y], name="mean", op="mean", axes=(-1,), keepdims=True)
    r = evaluate(b.build(), h100(), TENSORRT)
    assert r.op("mean").fused_into == "" and r.totals.kernels == 2


@pytest.mark.parametrize("opts", [INDUCTOR, TENSORRT])
def test_vectorized_sweeps_build_the_same_kernels(opts):
    from hwmodels.paths import with_overrides

    g = load_workload("llama-2-7b", phase="decode", batch=1, context=208, dtype="bf16", framework="compile")
    dev = load_hardware("h100-sxm5-80gb")
    res = evaluate_variants(g, dev, {"memory.hbm.read_bandwidth_bytes_per_s": [2e12, 3.35e12]}, opts, per_op=True)
    for i in range(len(res)):
        rep = evaluate(g, with_overrides(dev, res.variant(i)), opts)
        assert res.latency_s[i] == pytest.approx(rep.latency_s, rel=1e-9)
        np.testing.assert_allclose(res.op_time_s[:, i], [r.time_s for r in rep.records], rtol=1e-9, atol=0)
    assert res.latency_s[0] > res.latency_s[1]


def test_compile_profile_runs_the_inductor_kernels_of_a_decoder_layer():
    prof = get_profile("compile")
    assert prof.cost_options()["epilogue_fusion"] is False and get_profile("tensorrt").epilogue_fusion
    g = load_workload("llama-2-7b", phase="decode", batch=1, context=208, dtype="bf16", framework="compile")
    cost = prof.cost_options()
    r = evaluate(g, h100(), EvalOptions(fusion=cost["fusion"], epilogue_fusion=False))
    layer = [o for o in r.records if o.name.startswith("layers.1.") and o.kernels > 0]
    # q, k, v, out, gate, up, down (cuBLAS), attention, the two cache writes, the head transpose,
    # one RoPE kernel each for q and k, the SiLU-and-product, and the two residual adds, each with
    # the RMSNorm after it (unfused, the graph issues 41 kernels per layer)
    assert len(layer) == 16
    eager = evaluate(g, h100(), EvalOptions(fusion=False))
    assert len([o for o in eager.records if o.name.startswith("layers.1.") and o.kernels > 0]) == 41
    assert sum(1 for o in layer if o.kind == "matmul") == 7


def test_sweep_and_realtime_options_carry_the_epilogue_switch():
    from simulator.realtime.scenario import _OPTION_KEYS
    from simulator.sweep.execute import _eval_options, _options_identity
    from simulator.sweep.experiment import OPTION_KEYS

    assert "epilogue_fusion" in OPTION_KEYS and "epilogue_fusion" in _OPTION_KEYS
    assert _eval_options({"fusion": True, "epilogue_fusion": False}).epilogue_fusion is False
    assert _eval_options({"fusion": True}).epilogue_fusion is True
    # points stored before the switch existed keep their identity; the switched-off points differ
    assert "epilogue_fusion" not in _options_identity({"fusion": True})
    assert _options_identity({"fusion": True, "epilogue_fusion": False})["epilogue_fusion"] is False
    assert "gemv_generated" in OPTION_KEYS and "gemv_generated" in _OPTION_KEYS
    assert "gemv_generated" not in _options_identity({"fusion": True})
    assert _eval_options({"fusion": True, "gemv_generated": True}).gemv_generated is True
    # the engines' all-reduce kernel (added later): NCCL, the default, keeps stored points' identity
    assert "all_reduce_kernel" in OPTION_KEYS and "all_reduce_kernel" not in _options_identity({"fusion": True})
    assert _options_identity({"fusion": True, "all_reduce_kernel": "vllm-custom"})["all_reduce_kernel"] == "vllm-custom"


def _predict_json(capsys, argv):
    import json

    from simulator.cli import main

    rc = main(["predict", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_cli_compile_modes_cost_as_the_measurement_rows_do(capsys):
    from simulator.calibration.frameworks_validation import (
        compiled_call_host_s,
        load_framework_rows,
        predict_framework_row,
    )

    ms, parsed = load_framework_rows()
    row = {m.id: (m, p, o) for m, (p, o) in zip(ms, parsed, strict=True)}
    m = row["fw-050"][0]  # ResNet-50, batch 1, TF32, A100 40 GB, reduce-overhead
    base = ["resnet50", "--batch", "1", "--dtype", "fp32", "--tf32", "--hardware", m.device, "--framework", "compile"]
    rc, ro = _predict_json(capsys, [*base, "--compile-mode", "reduce-overhead"])
    assert rc == 0
    # the validation row also carries the program's per-call host time (its harness times call by call)
    m_, prof, opts = row["fw-050"]
    kernels = predict_framework_row(m_, prof, opts) - compiled_call_host_s(m_, prof, opts.get("mode"))
    assert ro["totals"]["latency_s"] == pytest.approx(kernels, rel=1e-12)
    _, default = _predict_json(capsys, base)
    _, tuned = _predict_json(capsys, [*base, "--compile-mode", "max-autotune"])
    # graph replay drops the per-kernel Python launches; Triton templates take the norm and activation
    assert ro["totals"]["latency_s"] < default["totals"]["latency_s"]
    assert tuned["totals"]["kernels"] < ro["totals"]["kernels"] == default["totals"]["kernels"]


def test_cli_compile_mode_needs_the_compile_stack(capsys):
    from simulator.cli import main

    assert main(["predict", "resnet18", "--hardware", "t4", "--framework", "eager",
                 "--compile-mode", "reduce-overhead"]) == 2
    err = capsys.readouterr().err
    msg = "--compile-mode reduce-overhead: a torch.compile mode; got --framework eager; expected --framework compile"
    assert msg in err and err.count("\n") == 1


def test_one_row_matmuls_are_generated_kernels_under_coordinate_descent_tuning():
    from simulator.engines.analytical import is_gemv

    def mlp(rows: int):
        b = GraphBuilder("gemv", dtype="bf16")
        x = b.input("x", (1, rows, 4096))
        g = b.op("matmul", [x, b.weight("wg", (4096, 11008))], name="gate")
        b.op("elementwise", [g], name="act", op="silu")
        return b.build()

    one, four = mlp(1), mlp(4)
    assert is_gemv(one.op("gate")) and not is_gemv(four.op("gate"))
    gemv = EvalOptions(fusion=True, epilogue_fusion=False, gemv_generated=True)
    # Inductor decomposes mm with one row into a product and a sum: a generated kernel the SiLU joins
    assert evaluate(one, h100(), gemv).op("act").fused_into == "gate"
    assert evaluate(one, h100(), INDUCTOR).op("act").fused_into == ""
    # four rows stay a cuBLAS call
    assert evaluate(four, h100(), gemv).op("act").fused_into == ""


def test_serving_stacks_name_whether_their_gemms_take_epilogues():
    from simulator.calibration.predict import gemm_epilogues, gemv_generated, run_options

    # TensorRT fuses; vLLM, SGLang, FasterTransformer, torch.compile call cuBLAS and fuse separately
    assert gemm_epilogues("TensorRT-LLM v0.9 engine") and gemm_epilogues("DeepSpeed-Inference")
    for text in ("vLLM 0.6 benchmark_latency", "SGLang bench_one_batch", "FasterTransformer GPT",
                 "torch.compile default mode", "gpt-fast generate.py"):
        assert not gemm_epilogues(text), text
    assert gemm_epilogues("cuBLAS GEMM timed with CUDA events")  # no stack named: a kernel row
    assert gemv_generated("gpt-fast generate.py") and gemv_generated("torchao generate.py")
    assert not gemv_generated("vLLM")
    opts, _ = run_options({"source": "pytorch-labs/gpt-fast README", "notes": "torch.compile", "dtype": "bf16"})
    assert opts.fusion and not opts.epilogue_fusion and opts.gemv_generated


def test_cli_coordinate_descent_tuning(capsys):
    base = ["llama-2-7b", "--phase", "decode", "--batch", "1", "--context", "208", "--dtype", "bf16",
            "--hardware", "mi210", "--framework", "compile"]
    _, plain = _predict_json(capsys, base)
    _, tuned = _predict_json(capsys, [*base, "--coordinate-descent-tuning"])
    assert tuned["totals"]["kernels"] < plain["totals"]["kernels"]
    assert tuned["totals"]["latency_s"] < plain["totals"]["latency_s"]  # fewer Python launches
    from simulator.cli import main

    assert main(["predict", "gpt2", "--hardware", "t4", "--coordinate-descent-tuning"]) == 2
    err = capsys.readouterr().err
    assert "--coordinate-descent-tuning: an Inductor setting; got no --framework" in err and err.count("\n") == 1


def test_discrete_event_engine_runs_the_same_kernels_on_one_stream():
    from simulator.engines.discrete_event import simulate

    g = load_workload("llama-2-7b", phase="decode", batch=1, context=208, dtype="bf16", framework="compile")
    dev = h100()
    for opts in (EvalOptions(fusion=True, epilogue_fusion=False, eager_framework=True),
                 EvalOptions(fusion=True, epilogue_fusion=False, gemv_generated=True, cuda_graphs=True)):
        ref = evaluate(g, dev, opts)
        des = simulate(g, dev, opts)
        assert des.latency_s == pytest.approx(ref.latency_s, rel=1e-12)
        assert des.totals.kernels == ref.totals.kernels
