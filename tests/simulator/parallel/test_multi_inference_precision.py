"""Serving precision under a parallel plan (fp8 weights and KV cache, as TensorRT-LLM's fp8 engines run them) and
the multi-device inference rows it makes predictable."""

from __future__ import annotations

import csv

import pytest

from hwmodels.catalog import load_system
from simulator.parallel.compose import evaluate_plan, generate_request
from workloads.parallel import ParallelPlan, PlanError

# Llama-2-70B (80 layers, hidden 8192, 64 query / 8 KV heads of 128, SwiGLU 28672): the linear layers'
# weights of one layer, and the output channels one device of TP 2 holds: the column-parallel q/k/v and gate/up
# split theirs, the row-parallel o and down keep all of theirs (their K is split)
_LAYERS, _D, _KV, _FF = 80, 8192, 1024, 28672
_LINEAR_PER_LAYER = _D * (_D + 2 * _KV) + _D * _D + 3 * _D * _FF
_OUT_CHANNELS_PER_DEVICE = (_D + 2 * _KV) // 2 + _D + 2 * _FF // 2 + _D


def test_fp8_weights_and_kv_cache_under_tensor_parallelism() -> None:
    """fp8 (e4m3) linear weights with one fp32 scale per output channel and an fp8 KV cache, each split over TP 2:
    the device holds half the linear layers' bytes less (plus the scales) and half the cache."""
    h100 = load_system("dgx-h100")
    plan = ParallelPlan(tp=2)
    kw = dict(phase="decode", context=1000, batch=64, dtype="fp16")
    base = evaluate_plan("llama-2-70b", h100, plan, **kw).stages[0]
    q = evaluate_plan("llama-2-70b", h100, plan, weight_dtype="fp8", kv_dtype="fp8", **kw).stages[0]
    saved = _LAYERS * _LINEAR_PER_LAYER // 2  # one byte per weight of this device's half
    scales = 4 * _LAYERS * _OUT_CHANNELS_PER_DEVICE  # fp32
    assert base.weights_bytes - q.weights_bytes == pytest.approx(saved - scales, rel=1e-12)
    kv16 = 2 * _LAYERS * (_KV // 2) * 1000 * 64 * 2  # K and V, 4 of 8 KV heads here, 1000 positions, 2 bytes
    assert base.kv_cache_bytes == pytest.approx(kv16, rel=1e-12)
    assert q.kv_cache_bytes == pytest.approx(kv16 / 2, rel=1e-12)


def test_generate_request_carries_the_precision_to_every_step() -> None:
    h100 = load_system("dgx-h100")
    plan = ParallelPlan(tp=2)
    req = generate_request("llama-2-70b", h100, plan, input_len=128, output_len=3, batch=8, dtype="fp16",
                           weight_dtype="fp8", kv_dtype="fp8", samples=2)
    pre = evaluate_plan("llama-2-70b", h100, plan, phase="prefill", seq=128, batch=8, dtype="fp16",
                        weight_dtype="fp8", kv_dtype="fp8")
    steps = [evaluate_plan("llama-2-70b", h100, plan, phase="decode", context=c, batch=8, dtype="fp16",
                           weight_dtype="fp8", kv_dtype="fp8").latency_s for c in (128, 129)]
    assert req.extra["ttft_s"] == pytest.approx(pre.latency_s, rel=1e-12)
    assert req.extra["e2e_latency_s"] == pytest.approx(pre.latency_s + sum(steps), rel=1e-12)


def test_serving_precision_refused_for_a_training_step() -> None:
    plan = ParallelPlan(tp=8, microbatch=1, global_batch=8)
    with pytest.raises(PlanError, match="weight_dtype/kv_dtype: serving precision"):
        evaluate_plan("llama-2-70b", load_system("dgx-h100"), plan, train=True, seq=2048, weight_dtype="fp8")


def _rows() -> dict[str, dict[str, str]]:
    from simulator.parallel.validation import DEFAULT_MULTI_DATASET

    with open(DEFAULT_MULTI_DATASET, newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def test_fp8_rows_take_the_precision_their_notes_state() -> None:
    """The v0.6.1 page builds with --enable_fp8 --fp8_kv_cache and the v0.9.0 page writes quant_algo FP8 and
    kv_cache_quant_algo FP8 into each checkpoint config; the H200 launch blog (v0.5.0) prints only 'FP8'."""
    from simulator.parallel.validation import _serving_precision

    rows = _rows()
    both = {"weight_dtype": "fp8", "kv_dtype": "fp8"}
    assert _serving_precision(rows["multi-123"]) == (both, "")  # v0.6.1
    assert _serving_precision(rows["multi-150"]) == (both, "")  # v0.9.0
    assert _serving_precision(rows["multi-127"]) == ({}, "")  # fp16
    quant, why = _serving_precision(rows["multi-158"])
    assert quant == {} and "does not state what was quantised" in why
    quant, why = _serving_precision(dict(rows["multi-123"], dtype="int8"))
    assert quant == {} and "'int8'" in why


def test_fp8_row_predicted_as_its_engine_runs() -> None:
    """multi-150 (TensorRT-LLM v0.9.0, Llama-2-70B on 4 H200s, 128-token first token, fp8) is the prefill of the
    fp8 engine with fp16 activations, kernels launched one by one, the gate and up projections as two GEMMs and the
    GEMM tactics timed at 65536 tokens (the row's notes quote the page's trtllm-build)."""
    from dataclasses import replace

    from simulator.calibration.predict import run_options
    from simulator.parallel.validation import _predict_row

    row = _rows()["multi-150"]
    got = _predict_row(row)
    assert got.skipped == "" and got.system == "hgx-h200"
    text = f"{row['source']} {row['notes']} {row['framework']}"
    opts, _ = run_options({"source": text, "notes": "", "metric_reported": "", "dtype": "fp16",
                           "framework": row["framework"]})
    opts = replace(opts, fusion=True, cuda_graphs=False, eager_framework=False)
    assert opts.fp8_activation_scale == "static"  # TensorRT-LLM's FP8Linear: a calibrated activation scale
    step = evaluate_plan("llama-2-70b", load_system("hgx-h200"), ParallelPlan(tp=4), opts, phase="prefill", seq=128,
                         batch=1, dtype="fp16", weight_dtype="fp8", kv_dtype="fp8", split_gate_up=True,
                         gemm_tactic_tokens=65536)
    assert got.predicted == pytest.approx(step.latency_s, rel=1e-12)
    sixteen = _predict_row(dict(row, dtype="fp16")).predicted
    assert sixteen is not None and got.predicted < sixteen  # half the weight bytes at 128 tokens
    # by hand: each of the 4 devices holds a quarter of every linear layer's weights, one byte each in fp8 instead
    # of two, plus one fp32 scale per output channel it holds (q/k/v and gate/up split theirs, o and down not)
    fp16 = evaluate_plan("llama-2-70b", load_system("hgx-h200"), ParallelPlan(tp=4), opts, phase="prefill", seq=128,
                         batch=1, dtype="fp16")
    out_channels = (_D + 2 * _KV) // 4 + _D + 2 * _FF // 4 + _D
    saved = _LAYERS * _LINEAR_PER_LAYER // 4 - 4 * _LAYERS * out_channels
    assert fp16.stages[0].weights_bytes - step.stages[0].weights_bytes == pytest.approx(saved, rel=1e-12)
    assert saved == 17_102_110_720  # 80 x 855,638,016 / 4 bytes less 80 x 4 x 33,280 bytes (15.9 GiB)


def test_training_tokens_per_device_is_the_iteration_over_its_tokens() -> None:
    """A training row's tokens/s per GPU: the global batch's tokens over the predicted iteration, per device
    (multi-028: GPT-3 175B on 64 A100s, global batch 64 x 2048 tokens, TP 8 x PP 8 x DP 1)."""
    from simulator.parallel.validation import _predict_row

    row = _rows()["multi-028"]
    it = _predict_row(row).predicted
    tok = _predict_row(dict(row, metric="tokens_per_s_per_device")).predicted
    assert it is not None and tok is not None
    n, gb, seq = int(row["n_devices"]), int(row["global_batch"]), int(row["seq"])
    assert (n, gb, seq) == (64, 64, 2048)
    assert tok == pytest.approx(gb * seq / it / n, rel=1e-12)


def test_training_tokens_per_device_rows_name_their_blocker() -> None:
    """The 25 training rows published as tokens/s per GPU are compared since the metric is; each left out says
    what its source does not state (NeMo 24.07 and Megatron-Bridge tables: no recomputation; llm-foundry: MPT
    models outside the zoo) instead of 'not compared yet'."""
    from simulator.parallel.validation import _predict_row

    rows = [r for r in _rows().values() if r["category"] == "train" and r["metric"] == "tokens_per_s_per_device"]
    assert len(rows) == 25
    reasons = [_predict_row(r).skipped for r in rows]
    assert not any("not compared" in why for why in reasons)
    assert reasons.count("recomputation not stated") == 12


@pytest.mark.parametrize(("kw", "words"), [
    ({"weight_dtype": "fp9"}, ("llama-2-70b", "--weight-dtype", "'fp9'", "did you mean 'fp8'")),
    ({"kv_dtype": "int3"}, ("llama-2-70b", "--kv-dtype", "'int3'", "expected one of fp8")),
])
def test_bad_serving_precision_is_a_located_plan_error(kw: dict[str, str], words: tuple[str, ...]) -> None:
    with pytest.raises(PlanError) as e:
        evaluate_plan("llama-2-70b", load_system("dgx-h100"), ParallelPlan(tp=2), phase="decode", context=100,
                      batch=1, dtype="fp16", **kw)
    assert all(w in str(e.value) for w in words), str(e.value)
