"""GEMM tactics timed at an optimisation profile's opt shape (TensorRT-LLM v0.5 Llama engines: the context profile's
num_tokens opt is (max_input_len * max_batch_size + 1) // 2): workloads.frameworks.gemm_tactics_at, the lowering's
``tactic_m`` and the published rows' notes switch."""

from __future__ import annotations

import csv
import dataclasses
import re

import pytest

import hwmodels.gpu as gpu
from hwmodels.catalog import load_device
from simulator.calibration.predict import gemm_tactic_tokens
from simulator.calibration.validation import DEFAULT_DATASET
from simulator.engines.analytical import evaluate
from workloads.frameworks import gemm_tactics_at
from workloads.ir import OpGraph
from workloads.resolve import load_workload
from workloads.semantics import gemm_dims

# v0.5 (performance.md @ 138f96d) and v0.9.0 (perf-overview.md @ 6ad7cf1: two profiles, no gemm plugin, no paged KV)
_FIRST_TOKEN = {"pub-090", "pub-091", "pub-092", "pub-093", "pub-113", "pub-114"} | {f"pub-{i}" for i in range(165, 173)}


def _rows() -> dict[str, dict[str, str]]:
    with DEFAULT_DATASET.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_switch_reads_the_token_count():
    assert gemm_tactic_tokens("... linear layers. GEMM tactics timed at 65536 tokens: the same build ...") == 65536
    assert gemm_tactic_tokens("GEMM tactics timed at many tokens") == 0
    assert gemm_tactic_tokens("") == 0


def test_first_token_rows_state_the_context_profile_opt_of_their_build():
    rows = _rows()
    stated = {i for i, r in rows.items() if gemm_tactic_tokens(r["notes"])}
    assert stated == _FIRST_TOKEN  # the throughput rows of the same engine (pub-108..112) do not say it
    for i in sorted(stated):
        notes = rows[i]["notes"]
        batch = int(re.search(r"--max_batch_size (\d+)", notes).group(1))
        input_len = int(re.search(r"--max_input_len (\d+)", notes).group(1))
        # prepare_basic_inputs: num_tokens_range_ctx = [1, (max_input_len * max_batch_size + 1) // 2, ...]
        assert (batch, input_len) == (64, 2048)
        assert gemm_tactic_tokens(notes) == (input_len * batch + 1) // 2 == 65536
        if "perf-overview.md @ 6ad7cf1" in rows[i]["source"]:
            # trtllm-build 0.9.0: --paged_kv_cache disable and no --gemm_plugin make has_ctx_gen_opt_profiles true
            assert "--paged_kv_cache disable" in notes and "no --gemm_plugin" in notes
            assert "has_ctx_gen_opt_profiles is true" in notes
        else:
            assert "--use_gemm_plugin" in notes and "--paged_kv_cache" in notes  # both stated as not passed


def test_transform_marks_the_token_gemms_only():
    g = load_workload("llama-2-7b", batch=1, seq=128, phase="prefill", dtype="fp16", weight_dtype="fp8_e4m3",
                      kv_dtype="fp8_e4m3")
    t = gemm_tactics_at(g, 65536)
    assert [op.name for op in t.ops] == [op.name for op in g.ops]
    marked = {op.name for op in t.ops if op.attrs.get("tactic_m") == 65536}
    # per layer: qkv, out, gate_up (fused here), down -- all quant_matmul at M = 128 rows
    assert len(marked) == 32 * 4
    assert {"layers.0.attn.qkv", "layers.0.attn.out", "layers.0.mlp.gate_up", "layers.0.mlp.down"} <= marked
    # the LM head sees the last token only (one row): not marked
    head = [op for op in t.ops if op.kind in ("matmul", "quant_matmul") and op.name not in marked]
    assert len(head) == 1 and head[0].outputs[0].shape[-1] == 32000
    # nothing else changes: shapes, FLOPs and bytes
    assert sum(op.flops for op in t.ops) == sum(op.flops for op in g.ops)
    assert all(a.inputs == b.inputs and a.outputs == b.outputs for a, b in zip(g.ops, t.ops, strict=True))


def test_lm_head_at_batch_4_keeps_its_own_kernel():
    """At batch 4 the prefill's LM head has 4 rows (TensorRT-LLM v0.5 runs it after gather_last_token_logits, one
    row per sequence), not the step's 4 x 128 = 512 tokens: only the 32 x 4 token GEMMs are marked."""
    g = load_workload("llama-2-7b", batch=4, seq=128, phase="prefill", dtype="fp16")
    t = gemm_tactics_at(g, 65536)
    marked = [op for op in t.ops if op.attrs.get("tactic_m") == 65536]
    assert len(marked) == 32 * 4 and all(gemm_dims(op)[1] == 512 for op in marked)
    head = [op for op in t.ops if op.kind == "matmul" and op.outputs[0].shape[-1] == 32000]
    assert len(head) == 1 and gemm_dims(head[0])[1] == 4 and "tactic_m" not in head[0].attrs


def test_bad_token_count_is_a_located_error():
    g = load_workload("gpt2", batch=1, seq=16)
    with pytest.raises(ValueError, match="tokens must be positive; got 0"):
        gemm_tactics_at(g, 0)


def test_lowering_prices_the_kernel_picked_at_the_tactic_rows():
    """An H100 fp16 4096 x 4096 linear layer at M = 128 run with the kernel the model picks at M = 65536: the tile
    and split-K are that pick's, and the time is the model's time of that kernel at M = 128 (no faster than the
    model's own best at M = 128)."""
    dev = load_device("h100-sxm5-80gb")
    g = load_workload("llama-2-7b", batch=1, seq=128, phase="prefill", dtype="fp16")
    t = gemm_tactics_at(g, 65536)
    free = {r.name: r for r in evaluate(g, dev).records}
    tact = {r.name: r for r in evaluate(t, dev).records}
    from simulator.engines.options import EvalOptions
    from simulator.lowering.common import LoweringContext
    from simulator.lowering.gpu import _gemm_power

    p = gpu.gpu_params(dev, "fp16")
    # TensorRT times its tactics on the running board: the pick at 65536 rows is made under the power limit, as
    # the lowering's own choice is (hwmodels.gpu.GemmPower)
    power = _gemm_power(LoweringContext(dev, EvalOptions()), "fp16", p)
    cands = gpu.tile_candidates(dev.arch, matrix_unit=True, in_bytes=2.0)
    big = gpu.gemm(65536, 4096, 4096, p, cands, in_bytes=2.0, power=power)
    kept = tuple(c for c in cands if c.name == big.tile)
    at128 = gpu.gemm(128, 4096, 4096, p, kept, in_bytes=2.0, split_k=(int(big.split_k),), power=power)
    out = tact["layers.0.attn.out"]
    assert out.tile == big.tile and int(out.split_k) == int(big.split_k)
    assert free["layers.0.attn.out"].tile != big.tile  # the model's own pick at 128 rows differs
    assert float(out.compute_s) == pytest.approx(float(at128.compute_s), rel=1e-12)
    assert float(out.memory_s) == pytest.approx(float(at128.memory_s), rel=1e-12)
    assert out.time_s >= free["layers.0.attn.out"].time_s
    assert "kernel picked at M = 65536" in out.notes and "kernel picked" not in free["layers.0.attn.out"].notes
    # a tactic at the GEMM's own rows is the model's own pick: the same cost
    same = {r.name: r for r in evaluate(gemm_tactics_at(g, 128), dev).records}
    assert same["layers.0.attn.out"].time_s == free["layers.0.attn.out"].time_s


def test_published_rows_move_as_the_mechanism_says():
    """pub-090 (H100, 128 tokens) gets slower with the kernels of 65536 rows; pub-091 (2048 tokens) does not move:
    on the H100 the model picks the same fp8 kernel at 2048 rows as at 65536."""
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict
    from simulator.hardware import known_devices

    ms = {m.id: m for m in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}
    cache = GraphCache()
    dev = load_device("h100-sxm5-80gb")
    for rid, moves in (("pub-090", True), ("pub-091", False)):
        m = ms[rid]
        with_switch = default_predict(cache.get(m), dev, m)
        marked = cache.get(m)
        plain = OpGraph(marked.name, [_without_tactic(op) for op in marked.ops], dict(marked.meta))
        without = default_predict(plain, dev, m)
        assert (with_switch > without * 1.2) if moves else (with_switch == without)


def _without_tactic(op):
    from workloads.ir import Attrs, Op

    attrs = {k: v for k, v in op.attrs.items() if k != "tactic_m"}
    return Op(op.name, op.kind, op.inputs, op.outputs, Attrs(attrs), op.group)


def test_zero_tokens_in_a_row_is_a_located_error():
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache
    from simulator.hardware import known_devices

    m = next(x for x in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices()) if x.id == "pub-090")
    bad = dataclasses.replace(m, notes=m.notes.replace("timed at 65536 tokens", "timed at 0 tokens"))
    with pytest.raises(ValueError, match=r"published_gpu\.csv:\d+: notes: gemm_tactics_at: tokens must be positive; got 0"):
        GraphCache().get(bad)
