"""A sequence-parallel all-gather that feeds a quantised GEMM reaches it through the operand's amax and cast:
the tensor-parallel overlap pairs the two across those ops (AQT int8 under MaxText's continuation fusion)."""

from __future__ import annotations

import pytest

from simulator.parallel.stacks import _without_operand_quantisation, tp_overlap_hidden

#: forward: gather -> the GEMM's four operand ops (amax and cast of the activation and of the weight) -> GEMM;
#: backward: GEMM -> reduce-scatter
RECS = [("l.sp_gather", "all_gather", 4.0), ("l.qkv.amax_0", "reduction", 0.1), ("l.qkv.cast_0", "elementwise", 0.1),
        ("l.qkv.amax_1", "reduction", 0.2), ("l.qkv.cast_1", "elementwise", 0.1), ("l.qkv", "matmul", 10.0),
        ("l.attn.bwd", "attention_bwd", 1.0), ("l.qkv.bwd_a.noise_0", "expand", 0.3), ("l.qkv.bwd_a.amax_0", "reduction", 0.1),
        ("l.qkv.bwd_a.cast_0", "elementwise", 0.1), ("l.qkv.bwd_a", "matmul", 2.0),
        ("l.sp_gather.bwd", "reduce_scatter", 4.0)]


def test_quantisation_ops_are_the_gemms_own_not_ops_between() -> None:
    kinds, fwd = _without_operand_quantisation(RECS, 6)
    assert fwd == 2 and kinds == [("all_gather", 4.0), ("matmul", 10.0), ("attention_bwd", 1.0), ("matmul", 2.0),
                                  ("reduce_scatter", 4.0)]
    # tp 4: the gather hides 4 x 3/4 = 3 s behind the 10 s GEMM; the reduce-scatter 2 s behind the 2 s one
    assert tp_overlap_hidden(kinds, fwd, 4) == (3.0, 2.0)


def test_without_the_pairing_across_them_the_window_misses_the_gemm() -> None:
    # the GEMM sits five ops after the gather: outside the four-op window, nothing hidden in the forward
    assert tp_overlap_hidden([(k, t) for _, k, t in RECS], 6, 4) == (0.0, 2.0)


def test_gpt3_int8_on_v5p_hides_its_gathers_as_bf16_does() -> None:
    # train-135 (GPT-3 175B, v5p-1024, TP 8 x FSDP 64, AQT int8, continuation fusion): the gathers hide behind the
    # int8 GEMMs, about as much as behind the bf16 ones (3.87 s), less where an int8 GEMM is shorter than its gather
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.parallel.training_validation import (
        _plan,
        load_training_rows,
        row_options,
        stated_recipe,
    )

    row = next(r for r in load_training_rows() if r.id == "train-135")
    hidden = {}
    for fp8 in ("int8", None):
        recipe = {**stated_recipe(row), "fp8_linears": fp8}
        res = evaluate_plan(row["model"], load_hardware("tpu-v5p-1024"), _plan(row, 64),
                            row_options(row, recipe["framework"]), train=True, seq=2048, dtype="bf16", **recipe)
        hidden[fp8] = res.breakdown["tp_comm_hidden_s"]
    assert hidden[None] == pytest.approx(3.87, abs=0.01)
    assert 3.5 < hidden["int8"] < hidden[None]
