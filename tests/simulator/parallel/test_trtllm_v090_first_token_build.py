"""TensorRT-LLM v0.9.0 first-token rows on the plan path: the engine the page's trtllm-build makes (perf-overview.md,
'Benchmarking per Model', 'Llama2-70b'): two gate/up GEMMs, GEMM tactics timed at the context profile's opt shape."""

from __future__ import annotations

import csv
import re

import pytest

_TP4 = ("multi-150", "multi-151", "multi-152", "multi-154")
_TP8 = ("multi-153", "multi-155")


def _rows(*ids: str) -> dict[str, dict[str, str]]:
    from simulator.parallel.validation import DEFAULT_MULTI_DATASET

    with open(DEFAULT_MULTI_DATASET, newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f) if r["id"] in ids}


def test_tp4_rows_quote_the_build_and_the_opt_shape_it_gives() -> None:
    """The page prints one Llama2-70b build, mapped to TP 4: the rows at TP 4 quote it, and the tactic tokens they
    state are the context profile's opt shape of exactly those flags: no GEMM plugin and the paged KV cache disabled
    make two profiles (GenerationMixin.has_ctx_gen_opt_profiles), the context one's num_tokens opt
    (max_batch_size x max_input_len + 1) // 2; no fused MLP."""
    from simulator.calibration.predict import gated_mlp_unfused, gemm_tactic_tokens

    rows = _rows(*_TP4)
    assert len(rows) == 4
    for rid, r in rows.items():
        assert "TensorRT-LLM v0.9.0" in r["framework"] and r["phase"] == "prefill" and r["tp"] == "4", rid
        build = r["notes"].split("Engine build stated")[1]
        assert "mapping world_size 4, tp_size 4, pp_size 1" in build, rid
        cmd = re.search(r"trtllm-build (.*?)(?:;| without)", build).group(1)
        batch = int(re.search(r"--max_batch_size (\d+)", cmd).group(1))
        assert (batch, int(re.search(r"--max_input_len (\d+)", cmd).group(1))) == (64, 2048), rid
        inp = int(re.search(r"--max_input_len (\d+)", cmd).group(1))
        assert "--paged_kv_cache disable" in cmd, rid
        for absent in ("--use_fused_mlp", "--gemm_plugin", "--max_num_tokens", "--multiple_profiles"):
            assert absent not in cmd, (rid, absent)
        assert gemm_tactic_tokens(r["notes"]) == (batch * inp + 1) // 2 == 65536, rid
        assert gated_mlp_unfused(r["notes"]), rid


def test_tp8_rows_state_that_their_build_is_not_printed() -> None:
    from simulator.parallel.validation import _engine_build

    rows = _rows(*_TP8)
    for rid, r in rows.items():
        assert r["tp"] == "8" and "Engine build not stated for this row" in r["notes"], rid
        assert _engine_build(r) == {}, rid


def test_a100_first_token_row_runs_the_stated_engine() -> None:
    """multi-154 (A100 fp16, TP 4, 128 tokens) is the prefill with both switches; each rank's QKV GEMM at 128 rows
    runs the tile the model picks for the same GEMM at 65536 rows, and the two gate/up GEMMs partition the fused one
    (each rank: N = 2 x 28672 / 4 / 2 = 7168 per part, the weights' bytes unchanged)."""
    from dataclasses import replace

    from simulator.calibration.predict import run_options
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.parallel.validation import _predict_row
    from workloads.parallel import ParallelPlan

    row = _rows("multi-154")["multi-154"]
    got = _predict_row(row)
    text = f"{row['source']} {row['notes']} {row['framework']}"
    opts, _ = run_options({"source": text, "notes": "", "metric_reported": "", "dtype": "fp16",
                           "framework": row["framework"]})
    opts = replace(opts, fusion=True, cuda_graphs=False, eager_framework=False)
    hw, plan = load_hardware("dgx-a100"), ParallelPlan(tp=4)
    kw = dict(phase="prefill", batch=1, dtype="fp16")
    built = evaluate_plan("llama-2-70b", hw, plan, opts, seq=128, split_gate_up=True, gemm_tactic_tokens=65536,
                          **kw)
    assert got.predicted == pytest.approx(built.latency_s, rel=1e-12)
    plain = evaluate_plan("llama-2-70b", hw, plan, opts, seq=128, **kw)
    # the GEMMs of TensorRT-LLM's tactic-profiling row count: 65,536 rows as 512 prompts of 128 tokens (one prompt of
    # 65,536 is beyond Llama 2's context of 4096 and refused)
    at_opt = evaluate_plan("llama-2-70b", hw, plan, opts, seq=128, **{**kw, "batch": 512})

    def rec(res, name):
        return next(x for x in res.reports[0].records if x.name == name)

    assert rec(built, "layers.0.attn.qkv").tile == rec(at_opt, "layers.0.attn.qkv").tile
    assert rec(plain, "layers.0.attn.qkv").tile != rec(at_opt, "layers.0.attn.qkv").tile  # the 128-row pick differs
    parts = [rec(built, f"layers.0.mlp.gate_up.part{i}") for i in (0, 1)]
    fused = rec(plain, "layers.0.mlp.gate_up")
    assert sum(p.flops for p in parts) == pytest.approx(fused.flops, rel=1e-12)
    assert parts[0].flops == pytest.approx(2 * 128 * 8192 * 7168, rel=1e-12)
    assert built.stages[0].weights_bytes == pytest.approx(plain.stages[0].weights_bytes, rel=1e-12)
    assert built.latency_s > plain.latency_s


def test_throughput_row_at_the_build_limits_runs_the_build_in_its_context_pass() -> None:
    """multi-145 (A100 fp16, TP 4, batch 64, 2048 / 2048) is the page's own Llama2-70b throughput command
    ("64:2048,2048", mpirun -n 4) on the single-setting build, at its max_batch_size / max_input_len /
    max_output_len: its notes quote the build, and the whole request's context pass is the prefill with both switches
    (the decode steps unchanged)."""
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import ParallelPlan, evaluate_plan
    from simulator.parallel.validation import _built_context, _engine_build

    r = _rows("multi-145")["multi-145"]
    assert r["phase"] == "e2e" and (r["tp"], r["batch"], r["input_len"], r["output_len"]) == ("4", "64", "2048", "2048")
    assert "in_out_sizes \"64:2048,2048\"" in r["notes"] and "--max_batch_size 64 --max_input_len 2048" in r["notes"]
    assert _engine_build(r) == {"gemm_tactic_tokens": 65536, "split_gate_up": True}

    class _Res:  # a request's extra: 10 ms context pass, 1 s in all
        extra = {"ttft_s": 0.010, "e2e_latency_s": 1.0}

    seen = {}

    def prefill(**build):  # noqa: ANN003, ANN202
        seen.update(build)
        return type("P", (), {"latency_s": 0.012})()

    x = _built_context(r, _Res(), prefill)
    assert seen == {"gemm_tactic_tokens": 65536, "split_gate_up": True}
    assert x["ttft_s"] == 0.012 and x["e2e_latency_s"] == pytest.approx(1.002, rel=1e-12)
    hw = load_hardware("dgx-a100")
    plan = ParallelPlan(tp=4, pp=1, dp=1)
    plain = evaluate_plan("llama-2-70b", hw, plan, phase="prefill", seq=2048, batch=64, dtype="fp16").latency_s
    built = evaluate_plan("llama-2-70b", hw, plan, phase="prefill", seq=2048, batch=64, dtype="fp16",
                          **_engine_build(r)).latency_s
    assert built != plain  # the switches reach the context pass
