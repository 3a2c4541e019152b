"""MXFP4 MoE experts (GPT-OSS's published checkpoints): storage, what is quantised, pricing per device, the
checkpoint default of predict / serve, and the bad inputs."""

from __future__ import annotations

import argparse

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from simulator.cli import main
from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from workloads.dtypes import DType
from workloads.precision import apply_precision
from workloads.resolve import load_workload

GIB = 2.0 ** 30


@pytest.fixture(scope="module")
def oss120():
    return load_workload("gpt-oss-120b", phase="decode", context=1024)


@pytest.fixture(scope="module")
def oss120_mx(oss120):
    return apply_precision(oss120, weight_dtype="mxfp4")


def _weight_bytes(g) -> int:
    ws = {t.name: t for op in g.ops for t in op.inputs if t.role == "weight"}
    return sum(t.nbytes for t in ws.values())


def test_mx_dtypes_widths():
    # OCP MX v1.0: E2M1 elements, an E8M0 scale per block of 32: 4 + 8 / 32 = 4.25 bits a weight
    assert DType.FP4_E2M1.bits == 4 and DType.FP8_E8M0.bits == 8
    assert DType("fp4_e2m1").is_float


def test_gpt_oss_120b_weight_bytes_by_hand(oss120, oss120_mx):
    # experts: 36 layers x 128 experts x (2880 x 5760 gate/up + 2880 x 2880 down)
    experts = 36 * 128 * (2880 * 5760 + 2880 * 2880)
    assert experts == 114_661_785_600
    meta = oss120_mx.meta["precision"]
    assert meta["scheme"] == "mxfp4" and meta["quantized_params"] == experts and meta["quantized_weights"] == 72
    assert meta["group_size"] == 32 and meta["scale_dtype"] == "fp8_e8m0" and meta["activation_dtype"] == "bf16"
    total = 116_789_336_640  # the graph's parameters (116.83B published: + expert biases, router bias, sinks)
    assert _weight_bytes(oss120) == 2 * total
    mx = experts // 2 + experts // 32  # 4-bit elements + one byte per 32
    rest = 2 * (total - experts)  # attention, router, embeddings, LM head in bf16
    assert mx + rest == 65_169_175_680
    assert _weight_bytes(oss120_mx) == mx + rest
    # the model card's checkpoint, 60.8 GiB; the expert biases (36 x 128 x 8640 bf16) are not graph tensors here
    assert (mx + rest + 2 * 36 * 128 * 8640) / GIB == pytest.approx(60.8, abs=0.05)
    # the attention and the router stay bf16 (modules_to_not_convert)
    kept = set(meta["kept_16bit"])
    assert "layers.0.attn.qkv.weight" in kept and "lm_head.weight" in kept


def test_gpt_oss_20b_matches_the_published_index_size():
    g = apply_precision(load_workload("gpt-oss-20b", phase="decode", context=64), weight_dtype="mxfp4")
    # openai/gpt-oss-20b model.safetensors.index.json metadata total_size, less the expert biases
    # (24 x 32 x 8640 bf16), the router biases (24 x 32 bf16) and the attention sinks (24 x 64 bf16)
    published = 13_761_264_768
    assert _weight_bytes(g) == published - 2 * 24 * (32 * 8640 + 32 + 64)


def test_decode_step_weight_traffic_by_hand(oss120_mx):
    # batch 1: 4 of 128 experts run; each gate/up expert is 2880 x 5760 E2M1 (0.5 B) with 2880/32 x 5760 scales
    hw = load_hardware("h100-sxm5-80gb")
    rec = {r.name: r for r in evaluate(oss120_mx, hw, EvalOptions()).records}["layers.0.moe.experts_in"]
    per_expert = 2880 * 5760 // 2 + (2880 // 32) * 5760
    assert per_expert == 8_812_800
    assert rec.kind == "quant_grouped_matmul" and rec.rule == "quant-grouped-gemm"
    assert 4 * per_expert <= rec.dram_bytes <= 4 * per_expert * 1.01
    base = {r.name: r for r in evaluate(load_workload("gpt-oss-120b", phase="decode", context=1024), hw,
                                        EvalOptions()).records}["layers.0.moe.experts_in"]
    # the bf16 experts read 2 B a weight: the traffic ratio is 2 / 0.53125
    assert base.dram_bytes / rec.dram_bytes == pytest.approx(2 / 0.53125, rel=0.01)


@pytest.mark.parametrize("device", ["h100-sxm5-80gb", "b200"])
def test_hopper_and_blackwell_run_the_bf16_mma(oss120_mx, device):
    # vLLM's default MXFP4 MoE backends take bf16 activations (Triton / FlashInfer SM90 on Hopper,
    # SM100_FI_MXFP4_BF16 on Blackwell): the weights are converted to bf16 and multiplied at the bf16 rate
    rec = {r.name: r for r in evaluate(oss120_mx, load_hardware(device), EvalOptions()).records}[
        "layers.0.moe.experts_out"]
    assert rec.matrix_dtype == "bf16" and "fp4_e2m1 weights dequantised in registers" in rec.notes


def test_blackwell_weight_only_gemm_prices():
    # a weight-only GEMM on B200 had no tile at the mixed operand width for some shapes and refused the op
    g = load_workload("llama-2-7b", phase="decode", context=64, weight_dtype="int4")
    rep = evaluate(g, load_hardware("b200"), EvalOptions())
    assert rep.totals.latency_s > 0 and not any(r.fallback for r in rep.records)


def test_bad_inputs(oss120):
    with pytest.raises(ValueError, match="MoE experts only.*got a model without experts"):
        apply_precision(load_workload("llama-2-7b", phase="decode", context=64), weight_dtype="mxfp4")
    with pytest.raises(ValueError, match="one E8M0 scale per 32 weights.*got --group-size 64"):
        apply_precision(oss120, weight_dtype="mxfp4", group_size=64)
    fp16 = load_workload("gpt-oss-120b", phase="decode", context=64, dtype="fp16")
    with pytest.raises(ValueError, match="activations are fp16; expected bf16"):
        apply_precision(fp16, weight_dtype="mxfp4")


def test_zoo_checkpoint_table_is_checked():
    from workloads.zoo.transformer import _checkpoint

    assert _checkpoint({"weight_dtype": "mxfp4", "source": "x"}, "w") == ("mxfp4", "x")
    with pytest.raises(ValueError, match="w.weight_dtype: unsupported dtype; got 'mxfp3'"):
        _checkpoint({"weight_dtype": "mxfp3", "source": "x"}, "w")
    with pytest.raises(ValueError, match="^w: got"):
        _checkpoint({"weight_dtype": "mxfp4"}, "w")


def test_checkpoint_default_is_inference_only():
    from simulator.cli.common import checkpoint_weights

    def ns(**kw):
        return argparse.Namespace(**{"model": "gpt-oss-120b", "weight_dtype": None, "dtype": None, **kw})

    a = ns()
    assert "mxfp4" in checkpoint_weights(a, inference=True) and a.weight_dtype == "mxfp4"
    a = ns()
    assert checkpoint_weights(a, inference=False) == "" and a.weight_dtype is None  # training stays bf16
    a = ns(weight_dtype="bf16")
    assert checkpoint_weights(a, inference=True) == "" and a.weight_dtype is None
    a = ns(dtype="fp16")  # the MXFP4 kernels take bf16: another dtype keeps the 16-bit weights
    assert checkpoint_weights(a, inference=True) == "" and a.weight_dtype is None
    a = ns(model="llama-2-7b")
    assert checkpoint_weights(a, inference=True) == "" and a.weight_dtype is None


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_predict_prices_the_checkpoint_by_default(capsys):
    args = ("predict", "gpt-oss-120b", "--hardware", "h100-sxm5-80gb", "--phase", "decode", "--context", "1024")
    rc, out, err = _run(capsys, *args)
    assert rc == 0 and "--weight-dtype mxfp4" in err and "weights 60.69" in out
    rc, out, err = _run(capsys, *args, "--weight-dtype", "bf16")
    assert rc == 0 and "note:" not in err and "weights 217.54" in out


def test_cli_bad_input_is_one_line_exit_2(capsys):
    rc, out, err = _run(capsys, "predict", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--phase", "decode",
                        "--weight-dtype", "mxfp4")
    assert rc == 2 and err.count("\n") == 1 and "MoE experts only" in err
