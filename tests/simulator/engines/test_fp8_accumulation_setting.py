"""``EvalOptions.fp8_accumulation``: the fp8 GEMMs no recipe marks accumulate fast (the default, and every stack's
unless its code states otherwise) or split (cuBLASLt ``FAST_ACCUM = 0``), the latter priced with the FP32
promotions of :func:`simulator.lowering.gpu.fp8_promotion` on Hopper and noted, not priced, elsewhere."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.engines.options import FP8_ACCUMULATIONS, EvalOptions, options_from_settings
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext
from simulator.lowering.gpu import _gemm, _quant_gemm
from workloads.dtypes import DType
from workloads.frameworks import get_profile
from workloads.ir import Attrs, Op, Role, TensorSpec

FAST, SPLIT = EvalOptions(), EvalOptions(fp8_accumulation="split")


def _mm(dtype: DType = DType.FP8_E4M3, attrs: dict | None = None, m: int = 2048, n: int = 8192, k: int = 4096) -> Op:
    a = TensorSpec("x", (m, k), dtype, Role.ACTIVATION)
    b = TensorSpec("w", (k, n), dtype, Role.WEIGHT)
    y = TensorSpec("y", (m, n), DType.BF16, Role.ACTIVATION)
    return Op("proj", "matmul", (a, b), (y,), Attrs(attrs or {}))


def test_split_adds_the_promotions_computed_by_hand_on_h100() -> None:
    dev = load_hardware("h100-sxm5-80gb")
    fast = _gemm(_mm(), LoweringContext(dev, FAST))
    split = _gemm(_mm(), LoweringContext(dev, SPLIT))
    # catalog figures: efficiency.fp8_promotion_interval 128 (DeepSeek-V3 N_C), vector_flops_per_s.fp32 66.9 TFLOP/s
    # (H100 SXM5 datasheet), [hopper] vector_peak_fraction 0.99
    assert dev.efficiency.fp8_promotion_interval == 128
    assert dev.compute.vector_flops_per_s["fp32"] == pytest.approx(66.9e12)
    assert dev.efficiency.vector_peak_fraction == pytest.approx(0.99)
    adds = 2048 * 8192 * (4096 // 128)  # one FP32 add per output element per 128 K elements: 536,870,912
    seconds = adds / (66.9e12 / 2 * 0.99)  # one FADD issue slot each (2 FLOPs per FMA slot): 16.21 us
    assert split.compute_s - fast.compute_s == pytest.approx(seconds, rel=1e-9)
    assert seconds == pytest.approx(16.21e-6, rel=1e-3)
    assert split.vector_flops - fast.vector_flops == pytest.approx(adds)
    assert "partial sums promoted to FP32" in split.notes and "promoted" not in fast.notes


def test_a_gemm_the_recipe_marks_is_split_under_either_setting_and_counted_once() -> None:
    dev = load_hardware("h100-sxm5-80gb")
    marked = _mm(attrs={"fp8_accumulation": "split"})
    under_fast = _gemm(marked, LoweringContext(dev, FAST))
    under_split = _gemm(marked, LoweringContext(dev, SPLIT))
    plain_split = _gemm(_mm(), LoweringContext(dev, SPLIT))
    assert under_fast.compute_s == under_split.compute_s == plain_split.compute_s


def test_only_fp8_gemms_take_the_setting() -> None:
    dev = load_hardware("h100-sxm5-80gb")
    bf16 = _mm(DType.BF16)
    assert _gemm(bf16, LoweringContext(dev, SPLIT)).compute_s == _gemm(bf16, LoweringContext(dev, FAST)).compute_s


def test_split_is_priced_on_every_hopper_and_ignored_with_a_note_elsewhere() -> None:
    h200 = load_hardware("h200-sxm-141gb")
    assert h200.arch == "hopper"
    assert _gemm(_mm(), LoweringContext(h200, SPLIT)).compute_s > _gemm(_mm(), LoweringContext(h200, FAST)).compute_s
    b200 = load_hardware("b200")
    assert b200.arch == "blackwell"
    fast, split = _gemm(_mm(), LoweringContext(b200, FAST)), _gemm(_mm(), LoweringContext(b200, SPLIT))
    assert split.compute_s == fast.compute_s and split.vector_flops == fast.vector_flops
    assert "fp8 split accumulation not priced: no promotion interval stated for blackwell" in split.notes


def test_w8a8_linears_take_the_promotions_too() -> None:
    from workloads.ir import OpGraph
    from workloads.precision import apply_precision

    dev = load_hardware("h100-sxm5-80gb")
    (q,) = apply_precision(OpGraph("g", [_mm(DType.BF16)]), weight_dtype="fp8").ops
    assert q.dtype == DType.FP8_E4M3
    fast, split = _quant_gemm(q, LoweringContext(dev, FAST)), _quant_gemm(q, LoweringContext(dev, SPLIT))
    adds = 2048 * 8192 * (4096 // 128)
    assert split.compute_s - fast.compute_s == pytest.approx(adds / (66.9e12 / 2 * 0.99), rel=1e-9)


def test_profiles_state_fast_or_nothing_and_price_fast() -> None:
    assert get_profile("trt-llm").fp8_gemm_accumulation == ""  # not stated: priced fast
    for name in ("trt-llm", "trt-llm-pytorch", "vllm", "eager", "compile"):
        assert get_profile(name).cost_options()["fp8_accumulation"] == "fast", name


def test_settings_and_options_refuse_unknown_values() -> None:
    assert FP8_ACCUMULATIONS == ("fast", "split")
    assert options_from_settings({"fp8_accumulation": "split"}).fp8_accumulation == "split"
    with pytest.raises(ValueError, match=r"options\.fp8_accumulation: unknown value; got 'splt'; expected one of "
                                         r"fast, split; did you mean 'split'\?"):
        options_from_settings({"fp8_accumulation": "splt"})
    with pytest.raises(ValueError, match=r"options\.fp8_accumulation: unknown accumulation; got 'Fast'.*'fast'"):
        EvalOptions(fp8_accumulation="Fast")


def test_sweep_identity_keeps_old_keys_and_splits_new_points() -> None:
    from simulator.sweep.execute import _options_identity

    assert "fp8_accumulation" not in _options_identity({})
    assert _options_identity({"fp8_accumulation": "split"})["fp8_accumulation"] == "split"
    assert dataclasses.replace(FAST, fp8_accumulation="split") != FAST  # EvalOptions is the cache key


def test_validation_rows_price_split_only_where_a_trtllm_row_states_the_fp8_gemm_plugin() -> None:
    from simulator.calibration.predict import run_options

    row = {"source": "trtllm-build --gemm_plugin fp8", "notes": "", "metric_reported": "", "dtype": "fp8",
           "framework": "TensorRT-LLM 0.12"}
    assert run_options(row)[0].fp8_accumulation == "split"
    assert run_options({**row, "source": "trtllm-build --use_fp8_context_fmha enable"})[0].fp8_accumulation == "fast"
    assert run_options({**row, "framework": "vLLM 0.6"})[0].fp8_accumulation == "fast"


def test_predict_flag_wins_over_the_profile() -> None:
    import argparse

    from simulator.cli.main import build_parser
    from simulator.cli.predict import eval_options

    parser = build_parser()
    base = ["predict", "llama-3-8b", "--hardware", "h100-sxm5-80gb", "--framework", "trt-llm-pytorch"]
    args: argparse.Namespace = parser.parse_args(base)
    assert eval_options(args).fp8_accumulation == "fast"
    args = parser.parse_args([*base, "--fp8-accumulation", "split"])
    assert eval_options(args).fp8_accumulation == "split"
    args = parser.parse_args(["predict", "llama-3-8b", "--hardware", "h100-sxm5-80gb", "--fp8-accumulation", "split"])
    assert eval_options(args).fp8_accumulation == "split"


def test_serve_config_setting_wins_over_the_profile_and_is_checked() -> None:
    from simulator.serving.config import ServeConfig, ServingError
    from simulator.serving.setup import _check_config, _options

    assert _options(ServeConfig(framework="trt-llm"), None)[0].fp8_accumulation == "fast"
    assert _options(ServeConfig(framework="trt-llm", fp8_accumulation="split"), None)[0].fp8_accumulation == "split"
    with pytest.raises(ServingError, match=r"fp8_accumulation: got 'fats'; expected one of fast, split or None; "
                                          r"did you mean 'fast'\?"):
        _check_config(ServeConfig(fp8_accumulation="fats"))
