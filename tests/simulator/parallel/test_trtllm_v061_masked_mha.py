"""TensorRT-LLM before its grouped-query generation kernels: decode attention one CTA per query head.

v0.5 and v0.6 run the generation phase as masked multi-head attention, one thread block per sequence and query
head (``hwmodels.gpu.MASKED_MHA_SOURCE``); the grouped-query (XQA) kernels came after v0.6
(``simulator.calibration.predict.TRTLLM_PRE_XQA_SOURCE``). With Llama-2-70B's 8 query heads per K/V head every K/V
head is read by 8 CTAs, which L2 serves (the group's CTAs are adjacent in launch order). The rows of the v0.6.1
throughput table (multi-123..129) run so; the v0.9.0 rows keep the grouped read.
"""

from __future__ import annotations

import csv

import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device


def test_masked_mha_reads_each_kv_head_once_per_query_head_from_l2() -> None:
    """multi-124's middle step on one H100 (TP 4: 16 query and 2 K/V heads; 480 sequences of 1,152 cached tokens;
    fp8 cache, fp16 queries), by hand."""
    p = gpu.gpu_params(load_device("h100-sxm5-80gb"), "fp16")
    e = gpu.masked_mha_decode(480, 16, 2, 1152, 128, 128, p, q_bytes=2.0, kv_bytes=1.0)
    cache = 480 * 2 * 1152 * 256 * 1  # 283,115,520 bytes of K and V
    qo = 480 * 16 * 256 * 2  # the queries read and the outputs written
    assert e.dram_bytes == qo + cache == 287_047_680
    assert e.l2_bytes == qo + 8 * cache == 2_268_856_320
    # L2-bound at the catalog's plain-load L2 read rate (MT4G, 4529 GiB/s): 466.6 us, plus one DRAM latency
    assert e.bound_term == "l2"
    assert e.memory_s == pytest.approx(2_268_856_320 / (4529 * 2**30), rel=1e-9)
    assert e.time_s == pytest.approx(466.56e-6 + e.latency_s, rel=1e-4)
    # the products on the CUDA cores: 2 x 480 x 16 x 1152 x 256 FLOP at 0.99 of 66.9 TFLOP/s
    assert e.compute_s == pytest.approx(2 * 480 * 16 * 1152 * 256 / (66.9e12 * 0.99), rel=1e-9)
    assert dict(e.details)["kv_reads"] == 8 and dict(e.details)["ctas"] == 480 * 16


def test_without_grouped_heads_the_cache_is_read_once() -> None:
    p = gpu.gpu_params(load_device("h100-sxm5-80gb"), "fp16")
    e = gpu.masked_mha_decode(480, 16, 16, 1152, 128, 128, p)
    assert e.dram_bytes == e.l2_bytes == 480 * 16 * (1152 + 1) * 256 * 2
    assert e.bound_term == "dram"


@pytest.mark.parametrize(("framework", "expected"), [
    ("TensorRT-LLM v0.6.1 (gptSessionBenchmark, static batching)", "per-query-head"),
    ("TensorRT-LLM v0.5 (gptSessionBenchmark, static batching)", "per-query-head"),
    ("TensorRT-LLM v0.9.0 (gptSessionBenchmark, static batching)", "grouped"),
    ("TensorRT-LLM (PyTorch backend, trtllm-bench throughput)", "grouped"),
    ("vLLM v0.6.1", "grouped"),
    ("TensorRT-LLM v0.60", "grouped"),  # not a v0.6 release
    ("TensorRT-LLM v0.55.0", "grouped"),
    ("TensorRT-LLM v0.5.0-rc", "per-query-head"),
    ("", "grouped"),
])
def test_the_release_in_the_stack_column_decides(framework: str, expected: str) -> None:
    from simulator.calibration.predict import run_options

    opts, _ = run_options({"source": "", "notes": "", "metric_reported": "", "dtype": "fp16", "framework": framework})
    assert opts.decode_attention == expected


def test_sweep_identity_keeps_old_keys_for_the_default() -> None:
    from simulator.sweep.execute import _options_identity

    assert "decode_attention" not in _options_identity({})
    assert _options_identity({"decode_attention": "per-query-head"})["decode_attention"] == "per-query-head"


def test_decode_attention_option_is_checked() -> None:
    from simulator.engines.analytical import EvalOptions

    with pytest.raises(ValueError, match=r"options.decode_attention: unknown decode attention kernel; got "
                                         r"'per-query'; expected one of grouped, per-query-head"):
        EvalOptions(decode_attention="per-query")


def test_a_decode_graph_lowers_to_the_masked_kernel_under_the_option() -> None:
    """One Llama-2-70B decode step on an H100 at TP 4: the attention op is the masked kernel, 8x its grouped L2
    traffic in K/V; every other op is unchanged."""
    from simulator.engines.analytical import EvalOptions
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan

    hw, plan = load_hardware("dgx-h100"), ParallelPlan(tp=4)

    def step(mode: str):  # noqa: ANN202
        res = evaluate_plan("llama-2-70b", hw, plan, EvalOptions(fusion=True, decode_attention=mode), phase="decode",
                            context=1152, batch=480, dtype="fp16", weight_dtype="fp8", kv_dtype="fp8")
        return {r.name: r for r in res.reports[0].records}

    grouped, masked = step("grouped"), step("per-query-head")
    attn = [n for n, r in masked.items() if r.kind == "attention"]
    assert attn and all(masked[n].rule == "masked-mha" and grouped[n].rule == "flash-attention" for n in attn)
    n = attn[0]
    assert masked[n].dram_bytes == pytest.approx(grouped[n].dram_bytes, rel=1e-6)
    assert masked[n].time_s > 4.0 * grouped[n].time_s  # 8 reads at 4.86 TB/s against 1 at 0.751 x 3.35 TB/s
    assert {k: r.time_s for k, r in masked.items() if k not in attn} == \
        {k: r.time_s for k, r in grouped.items() if k not in attn}


def _row(rid: str) -> dict[str, str]:
    from simulator.parallel.validation import DEFAULT_MULTI_DATASET

    return next(r for r in csv.DictReader(DEFAULT_MULTI_DATASET.open(encoding="utf-8")) if r["id"] == rid)


@pytest.mark.parametrize(("rid", "low", "high"), [
    ("multi-124", 0.0, 20.0),    # H100 fp8, TP 4, batch 480, 128 / 2048: +100.0% when read once per KV head
    ("multi-126", 0.0, 21.0),    # H100 fp8, TP 2, batch 64, 2048 / 2048: +94.5%; +16.6% -> +20.4% with the Hopper triad (0.946)
    ("multi-128", -15.0, 0.0),   # A100 fp16, TP 4, batch 240, 128 / 2048: +62.2%
])
def test_v061_decode_heavy_rows(rid: str, low: float, high: float) -> None:
    from simulator.parallel.validation import _predict_row

    r = _predict_row(_row(rid))
    assert low < r.signed_error < high, (rid, r.predicted, r.measured)


def test_v090_rows_keep_the_grouped_read() -> None:
    """multi-139 (v0.9.0, H100 fp8, TP 4, batch 512, 128 / 2048) is priced with one read per KV head: +12.7% when that was
    added (+13.6% before the change below), and +16.2% since a GEMM's last wave that leaves SMs idle loads L2 at one SM's own intake
    (efficiency.l2_tile_sm_port_ratio)."""
    from simulator.parallel.validation import _predict_row

    r = _predict_row(_row("multi-139"))
    assert r.signed_error == pytest.approx(16.2, abs=0.1)
